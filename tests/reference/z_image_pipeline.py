#!/usr/bin/env python3
"""Reference for the whole Z-Image text-to-image pipeline (engines/denoise/image_pipeline):
writes a tiny random Z-Image directory in diffusers' layout and the images diffusers'
ZImagePipeline.__call__ makes from it with injected initial noise, which
tests/parity/z_image_pipeline_test.cpp matches pixel for pixel.

The directory (the components' generators, imported, write their parts):
    model_index.json          _class_name ZImagePipeline (z_image_transformer.MODEL_INDEX)
    scheduler/                Z-Image-Turbo's FlowMatchEulerDiscreteScheduler config (static shift 3)
    tokenizer/                tokenizer.json copied from --tokenizer (GPT-2's byte-level BPE, at
                              test time: test data is never committed) and a tokenizer_config.json
                              with a Qwen3-style chat template (user turns, the generation prompt,
                              an empty thinking block only when enable_thinking is false)
    text_encoder/             Qwen3Model (llama_family.py's qwen3 layout, base-model checkpoint),
                              hidden_size = the transformer's cap_feat_dim, the tokenizer's vocab
    transformer/              z_image_transformer.py's tiny ZImageTransformer2DModel
    vae/                      vae_decoder.py's tiny AutoencoderKL (FLUX's scaling and shift), with
                              a sample_size above the image so neither side tiles

The pipeline, restated from diffusers' pipeline_z_image.py (no diffusers here):
    text = chat template over [{"role": "user", "content": prompt}], add_generation_prompt,
           enable_thinking=True; ids = tokenizer(text) (the padding to max_sequence_length is
           masked, and the mask drops those rows again)
    cond = text_encoder(ids).hidden_states[-2]                [L, cap_feat_dim]
    CFG only when guidance_scale > 1 (do_classifier_free_guidance); then uncond from the
           negative prompt ("" when none)
    sigmas: the default custom sigmas (linspace(1, 1/N, N), denoise_samplers.z_image_default_sigmas)
           through set_timesteps (static shift 3: mu unused), terminal 0
    per step: t = sigma * 1000 (f32), model time (1000 - t) / 1000; out = transformer(x, time, cond)
           (and uncond); pred = pos + g (pos - neg); x = x + (sigma' - sigma) * (-pred), in f32
    image = vae.decode(x / scaling_factor + shift_factor); uint8 = round(clamp(image/2 + 0.5) 255)
The transformer and VAE run in float64 on exactly the stored weights (their generators'
forward passes); the latent is rounded to float32 after every step, as the pipeline holds it.

Cases (reference.safetensors): tokens_prompt, tokens_negative [L] i32; per case in (plain: g 0,
cfg: g 3 with the negative prompt): noise_<case> [16, H/2, W/2] f32 (the injected initial
latent), latent_<case> (the final latent) f32, image_<case> [H, W, 3] u8. Image 40 x 24.
Usage: z_image_pipeline.py --out DIR --tokenizer PATH/tokenizer.json [--seed N] [--steps N]
"""

import json
import os
import re
import shutil

import torch

import denoise_samplers
import llama_family
import prism_ref
import vae_decoder
import z_image_transformer

PROMPT = "a red fox in the snow"
NEGATIVE = "blurry, low quality"
WIDTH, HEIGHT = 40, 24
CASES = {"plain": 0.0, "cfg": 3.0}

# Z-Image-Turbo's scheduler/scheduler_config.json.
SCHEDULER = {"_class_name": "FlowMatchEulerDiscreteScheduler", "_diffusers_version": "0.36.0.dev0",
             "num_train_timesteps": 1000, "shift": 3.0, "use_dynamic_shifting": False}

# Qwen3's chat template reduced to what one user turn and the generation prompt use.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}")
TOKENIZER_CONFIG = {"add_bos_token": False, "add_prefix_space": False, "bos_token": None,
                    "chat_template": CHAT_TEMPLATE, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
                    "model_max_length": 131072, "tokenizer_class": "Qwen2Tokenizer"}


# ---- the tokenizer: byte-level BPE (GPT-2), restated --------------------------------------------

# GPT-2's pre-tokenizer split with re's classes: \p{L} as [^\W\d_], \p{N} as \d (exact on the
# ASCII prompts here; Debian's python has no `regex`).
GPT2_SPLIT = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")


def byte_alphabet():
    """GPT-2's map of the 256 bytes to printable characters."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def bpe_encode(tokenizer_json, text):
    model = tokenizer_json["model"]
    vocab = model["vocab"]
    ranks = {tuple(m.split(" ") if isinstance(m, str) else m): i for i, m in enumerate(model["merges"])}
    alphabet = byte_alphabet()
    ids = []
    for piece in GPT2_SPLIT.findall(text):
        word = [alphabet[b] for b in piece.encode("utf-8")]
        while len(word) > 1:
            pairs = [(ranks.get((a, b), len(ranks)), i) for i, (a, b) in enumerate(zip(word, word[1:]))]
            rank, i = min(pairs)
            if rank == len(ranks):
                break
            word = word[:i] + [word[i] + word[i + 1]] + word[i + 2:]
        ids.extend(vocab[w] for w in word)
    return ids


def prompt_ids(tokenizer_json, prompt):
    env = prism_chat_environment()
    text = env.from_string(CHAT_TEMPLATE).render(messages=[{"role": "user", "content": prompt}],
                                                 add_generation_prompt=True, enable_thinking=True)
    return torch.tensor(bpe_encode(tokenizer_json, text), dtype=torch.int32)


def prism_chat_environment():
    import chat_templates  # real Jinja2, set up as transformers' apply_chat_template
    return chat_templates.environment()


# ---- the directory -------------------------------------------------------------------------------

def write_directory(out, tokenizer_path, seed, vocab):
    """Writes every component; returns (qwen3 model f64, transformer weights f64 and config,
    VAE weights f64 and config)."""
    with open(os.path.join(out, "model_index.json"), "w", encoding="utf-8") as f:
        json.dump(z_image_transformer.MODEL_INDEX, f, indent=2)
    prism_ref.hf_dir.write_config(os.path.join(out, "scheduler"), SCHEDULER)
    os.rename(os.path.join(out, "scheduler", "config.json"), os.path.join(out, "scheduler", "scheduler_config.json"))
    tok_dir = os.path.join(out, "tokenizer")
    os.makedirs(tok_dir, exist_ok=True)
    shutil.copyfile(tokenizer_path, os.path.join(tok_dir, "tokenizer.json"))
    with open(os.path.join(tok_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(TOKENIZER_CONFIG, f, indent=2)

    generator = prism_ref.seed_everything(seed)
    tc = dict(z_image_transformer.CONFIG)
    t_state = {k: v.float().contiguous() for k, v in z_image_transformer.random_state(tc, generator).items()}
    t_dir = os.path.join(out, "transformer")
    prism_ref.hf_dir.write_config(t_dir, tc)
    z_image_transformer.write_weights(t_dir, t_state, None)

    layout = llama_family.LAYOUTS["qwen3"]
    sizes = dict(hidden=tc["cap_feat_dim"], layers=layout.layers, heads=layout.heads, kv_heads=layout.kv_heads,
                 head_dim=layout.head_dim, intermediate=layout.intermediate, vocab=vocab)
    qc = llama_family.make_config("qwen3", layout, sizes, "f32", False, False)
    qwen3 = llama_family.CausalLM(qc)
    llama_family.init_weights(qwen3, qc)
    q_state = {k: v.detach().float().contiguous() for k, v in qwen3.state_dict().items()}
    base_c, base_state = llama_family.strip_to_base_model("qwen3", qc, q_state)
    prism_ref.write_model_dir(os.path.join(out, "text_encoder"), base_c, base_state)
    qwen3.double()

    vc = vae_decoder.make_config("tiny")
    vc["sample_size"] = 4 * max(WIDTH, HEIGHT)  # one tile: the pipeline decodes whole
    v_state = {n: vae_decoder.random_parameter(n, s).float().contiguous()
               for n, s in vae_decoder.parameter_shapes(vc).items()}
    v_dir = os.path.join(out, "vae")
    prism_ref.hf_dir.write_config(v_dir, vc)
    prism_ref.save_file(v_state, os.path.join(v_dir, vae_decoder.WEIGHTS_FILE), {"format": "pt"})
    return (qwen3, {k: v.double() for k, v in t_state.items()}, tc, {k: v.double() for k, v in v_state.items()}, vc,
            generator)


# ---- the pipeline --------------------------------------------------------------------------------

def run_pipeline(qwen3, tw, tc, vw, vc, cond_ids, uncond_ids, noise, guidance, steps):
    """ZImagePipeline.__call__ on token ids and an initial latent [C, h, w] f32. Returns
    (final latent f32, image [H, W, 3] u8)."""
    with torch.no_grad():
        cond = qwen3.hidden_states(cond_ids)[-2]  # [L, cap_feat_dim]
        do_cfg = guidance > 1
        uncond = qwen3.hidden_states(uncond_ids)[-2] if do_cfg else None
        sigmas, _ = denoise_samplers.flow_match_euler_schedule(
            SCHEDULER, steps, sigmas=denoise_samplers.z_image_default_sigmas(steps))
        x = noise.clone()  # f32
        for i in range(steps):
            t = torch.tensor([sigmas[i] * 1000.0], dtype=torch.float32)
            time = (1000.0 - t) / 1000.0  # f32, as the pipeline computes it
            rows, caps = [x.double().unsqueeze(1)], [cond]
            if do_cfg:
                rows.append(x.double().unsqueeze(1))
                caps.append(uncond)
            outs, _ = z_image_transformer.forward(tw, tc, rows, time.repeat(len(rows)), caps)
            pos = outs[0].squeeze(1)
            pred = pos + guidance * (pos - outs[1].squeeze(1)) if do_cfg else pos
            x = (x.double() + (sigmas[i + 1] - sigmas[i]) * -pred).float()
        z = x.double().unsqueeze(0) / vc["scaling_factor"] + (vc["shift_factor"] or 0.0)
        image = vae_decoder.decode(z, vw, vc)
        return x, vae_decoder.postprocess_uint8(image.float())[0]


def main():
    parser = prism_ref.generator_parser(__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", required=True, help="a GPT-2 tokenizer.json (copied into tokenizer/)")
    parser.add_argument("--steps", type=int, default=4)
    a = parser.parse_args()
    with open(a.tokenizer, encoding="utf-8") as f:
        tokenizer_json = json.load(f)
    ids = list(tokenizer_json["model"]["vocab"].values()) + [t["id"] for t in tokenizer_json.get("added_tokens", [])]
    vocab = 1 + max(ids)  # every id the tokenizer can give has an embedding row
    os.makedirs(a.out, exist_ok=True)
    qwen3, tw, tc, vw, vc, generator = write_directory(a.out, a.tokenizer, a.seed, vocab)
    cond_ids, uncond_ids = prompt_ids(tokenizer_json, PROMPT), prompt_ids(tokenizer_json, NEGATIVE)
    f = 2 ** (len(vc["block_out_channels"]) - 1)
    tensors = {"tokens_prompt": cond_ids, "tokens_negative": uncond_ids}
    for case, guidance in CASES.items():
        noise = torch.randn((tc["in_channels"], HEIGHT // f, WIDTH // f), generator=generator)
        latent, image = run_pipeline(qwen3, tw, tc, vw, vc, cond_ids, uncond_ids, noise, guidance, a.steps)
        tensors.update({f"noise_{case}": noise, f"latent_{case}": latent, f"image_{case}": image.contiguous()})
    metadata = {"generator": "z_image_pipeline.py", "seed": str(a.seed), "steps": str(a.steps),
                "prompt": PROMPT, "negative_prompt": NEGATIVE, "width": str(WIDTH), "height": str(HEIGHT),
                "guidance_plain": str(CASES["plain"]), "guidance_cfg": str(CASES["cfg"]), "torch": torch.__version__}
    prism_ref.save_reference(a.out, tensors, metadata)


if __name__ == "__main__":
    main()
