#!/usr/bin/env python3
"""Reference for the vision-language families: writes a tiny random checkpoint in one
family's real Hugging Face layout (config.json keys, parameter names, preprocessor and
processor configs) and reference.safetensors with fixed pixel views, the projector outputs
and the language model's logits on a prompt whose image-token positions hold those rows,
which tests/parity/vlm_family_test.cpp matches.

Families:
    llava     LlavaForConditionalGeneration (llava-hf/llava-1.5-7b-hf): CLIP tower (features of
              vision_feature_layer -2, the class token dropped: "default"), multi_modal_projector
              linear_1 -> gelu (erf) -> linear_2 with biases, Llama LM. As llava-1.5's config.json
              does, text_config and vision_config omit keys equal to transformers' defaults
              (rms_norm_eps, rope_theta, max_position_embeddings; hidden_act, layer_norm_eps).
              --layout old: transformers < 4.52 names ("vision_tower.vision_model.*",
              "multi_modal_projector.*", "language_model.model.*", "language_model.lm_head.weight");
              --layout new: >= 4.52 ("model.vision_tower.vision_model.*",
              "model.multi_modal_projector.*", "model.language_model.*", "lm_head.weight").
    idefics3  Idefics3ForConditionalGeneration (HuggingFaceTB/SmolVLM-256M-Instruct): SigLIP tower
              without head, post_layernorm applied, Idefics3Connector.pixel_shuffle by
              scale_factor, modality_projection.proj (no bias), Llama LM; names
              "model.vision_model.*", "model.connector.modality_projection.proj.weight",
              "model.text_model.*", "lm_head.weight". text_config carries SmolVLM's extra keys
              (architectures VLlama3ForCausalLM, is_llama_config, ...).

The forward pass, transformers' semantics:
    llava     rows = linear_2(gelu(linear_1(hidden_states[vision_feature_layer][:, 1:])))
    idefics3  rows = proj(pixel_shuffle(post_layernorm(last hidden state), scale_factor))
    inputs_embeds = embed_tokens(ids); the image-token positions replaced by the rows in order
    (masked_scatter), then the Llama decoder (llama_family.py) and the LM head.
The towers come from vision_family.py, the LM from llama_family.py; everything runs in
float64 on the stored float32 weights.

Outputs (reference.safetensors):
    pixel_values       [V, 3, S, S] f32: llava 2 images; idefics3 2 views (one tile, the global view)
    vision_features    [V * rows_in, Hv] f32: what the projector reads (llava: the selected
                       hidden states without the class token; idefics3: the shuffled rows)
    projector_outputs  [V * rows, hidden] f32 (rows per view: llava 16, idefics3 4)
    token_ids          [T] i32: the prompt, image_token_id at the rows' positions
    logits             [T, vocab] f32 at every prompt position
    generated          [12] i32: the greedy continuation; continuation_logits [12, vocab] f32
    min_margin         [1] f32: the smallest top-1 minus top-2 logit along the greedy path

Usage: vlm_family.py write --family llava|idefics3 --out DIR [--layout old|new] [--seed N]
(--out and --seed may also come before the command, as the C++ tests pass them).
"""

import argparse
import json
import math
import os

import torch
from torch import nn

import llama_family
import prism_ref
import vision_family

NUM_VIEWS = 2
NUM_GENERATED = 12
MIN_MARGIN = 0.05
MAX_PROMPT_TRIES = 200
PROMPT_TEXT_TOKENS = 11  # random text tokens around the image blocks


# ---- configs ------------------------------------------------------------------------------------

def tiny_text_config(**overrides):
    """A full LlamaConfig dict (every key the reference reads)."""
    c = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 160, "rms_norm_eps": 1e-6,
         "rope_theta": 10000.0, "rope_scaling": None, "max_position_embeddings": 2048,
         "tie_word_embeddings": False, "hidden_act": "silu"}
    c.update(overrides)
    return c


# Keys llava-1.5's text_config / vision_config leave to transformers' defaults; written
# configs omit them (when at the default) so a loader must apply the same defaults.
LLAMA_DEFAULTS = {"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 2048,
                  "hidden_act": "silu", "tie_word_embeddings": False, "rope_scaling": None}
CLIP_VISION_DEFAULTS = {"hidden_act": "quick_gelu", "layer_norm_eps": 1e-5}


def without_defaults(c, defaults):
    return {k: v for k, v in c.items() if not (k in defaults and defaults[k] == v)}


def llava_configs():
    """(config.json dict, full text cfg, full vision cfg)."""
    vision = vision_family.tiny_clip_vision_config(image_size=28, patch_size=7, num_hidden_layers=3)
    text = tiny_text_config()
    image_token_index = 150
    vision_json = without_defaults(vision, CLIP_VISION_DEFAULTS)
    for k in ("attention_dropout", "initializer_factor", "initializer_range"):
        vision_json.pop(k, None)
    text_json = {"_name_or_path": "lmsys/vicuna-7b-v1.5", "architectures": ["LlamaForCausalLM"],
                 **without_defaults(text, LLAMA_DEFAULTS), "torch_dtype": "float32"}
    config = {"architectures": ["LlavaForConditionalGeneration"], "ignore_index": -100,
              "image_token_index": image_token_index, "model_type": "llava", "pad_token_id": 159,
              "projector_hidden_act": "gelu", "text_config": dict(sorted(text_json.items())),
              "tie_word_embeddings": False, "torch_dtype": "float32", "transformers_version": "4.45.0",
              "vision_config": dict(sorted(vision_json.items())), "vision_feature_layer": -2,
              "vision_feature_select_strategy": "default", "image_seq_length": 16}
    return config, text, vision


def idefics3_configs():
    vision = vision_family.tiny_siglip_vision_config(image_size=28, patch_size=7, num_hidden_layers=2,
                                                     vision_use_head=False)
    text = tiny_text_config(vocab_size=128, rms_norm_eps=1e-5, rope_theta=100000.0, max_position_embeddings=8192,
                            num_attention_heads=4, num_key_value_heads=1)
    vision_json = {k: v for k, v in vision.items() if k not in ("vision_use_head", "attention_dropout")}
    vision_json["model_type"] = "idefics3"  # as transformers 4.46 wrote SmolVLM's vision_config
    text_json = {"architectures": ["VLlama3ForCausalLM"], **text, "is_llama_config": True,
                 "neftune_noise_alpha": 0.0, "pad_token_id": 2, "pixel_shuffle_factor": 2,
                 "qk_layer_norms": False, "rope_interleaved": False, "torch_dtype": "float32",
                 "use_resampler": False}
    config = {"architectures": ["Idefics3ForConditionalGeneration"], "image_token_id": 100,
              "model_type": "idefics3", "pad_token_id": 2, "scale_factor": 2,
              "text_config": dict(sorted(text_json.items())), "tie_word_embeddings": False,
              "torch_dtype": "float32", "transformers_version": "4.47.1", "use_cache": True,
              "vision_config": dict(sorted(vision_json.items()))}
    return config, text, vision


# Special text tokens of the tiny Idefics3 vocabulary (the image token is config's).
IDEFICS3_TOKENS = {"<fake_token_around_image>": 101, "<global-img>": 102, "<row_1_col_1>": 103, "\n": 10}

LLAVA_PREPROCESSOR = {
    "crop_size": {"height": 28, "width": 28}, "do_center_crop": True, "do_convert_rgb": True,
    "do_normalize": True, "do_rescale": True, "do_resize": True,
    "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_processor_type": "CLIPImageProcessor",
    "image_std": [0.26862954, 0.26130258, 0.27577711], "processor_class": "LlavaProcessor", "resample": 3,
    "rescale_factor": 0.00392156862745098, "size": {"shortest_edge": 28}}
LLAVA_PROCESSOR = {"image_token": "<image>", "num_additional_image_tokens": 1, "patch_size": 7,
                   "processor_class": "LlavaProcessor", "vision_feature_select_strategy": "default"}
IDEFICS3_PREPROCESSOR = {
    "do_convert_rgb": True, "do_image_splitting": True, "do_normalize": True, "do_pad": True,
    "do_rescale": True, "do_resize": True, "image_mean": [0.5, 0.5, 0.5],
    "image_processor_type": "Idefics3ImageProcessor", "image_std": [0.5, 0.5, 0.5],
    "max_image_size": {"longest_edge": 28}, "processor_class": "Idefics3Processor", "resample": 1,
    "rescale_factor": 0.00392156862745098, "size": {"longest_edge": 56}}
IDEFICS3_PROCESSOR = {"image_seq_len": 4, "processor_class": "Idefics3Processor"}


# ---- the models (HF module names) -------------------------------------------------------------------

class LlavaProjector(nn.Module):  # LlavaMultiModalProjector
    def __init__(self, vision_hidden, text_hidden, bias=True):
        super().__init__()
        self.linear_1 = nn.Linear(vision_hidden, text_hidden, bias=bias)
        self.linear_2 = nn.Linear(text_hidden, text_hidden, bias=bias)

    def forward(self, x):
        return self.linear_2(nn.functional.gelu(self.linear_1(x)))  # projector_hidden_act "gelu": erf


class Llava(nn.Module):
    """The vision half of LlavaForConditionalGeneration plus its LM (llama_family.CausalLM)."""

    def __init__(self, config, text, vision):
        super().__init__()
        self.config = config
        self.vision_tower = vision_family.ClipVisionTransformer(vision)
        self.multi_modal_projector = LlavaProjector(vision["hidden_size"], text["hidden_size"])
        self.language_model = llama_family.CausalLM(text)

    def vision_features(self, pixel_values):
        """hidden_states[vision_feature_layer] with the class token dropped: [V, rows, Hv]."""
        states, _, _ = self.vision_tower(pixel_values)
        selected = states[self.config["vision_feature_layer"]]
        assert self.config["vision_feature_select_strategy"] == "default"
        return selected[:, 1:]

    def image_features(self, pixel_values):
        return self.multi_modal_projector(self.vision_features(pixel_values))

    def state(self, layout):
        """{HF name: tensor} in the old or new parameter layout."""
        vision = "vision_tower.vision_model." if layout == "old" else "model.vision_tower.vision_model."
        projector = "multi_modal_projector." if layout == "old" else "model.multi_modal_projector."
        out = {vision + k: v for k, v in self.vision_tower.state_dict().items()}
        out.update({projector + k: v for k, v in self.multi_modal_projector.state_dict().items()})
        for k, v in self.language_model.state_dict().items():
            if layout == "old":
                out["language_model." + k] = v  # language_model.model.*, language_model.lm_head.weight
            elif k.startswith("model."):
                out["model.language_model." + k[len("model."):]] = v
            else:
                out[k] = v  # lm_head.weight
        return out


def pixel_shuffle(x, scale_factor):
    """Idefics3Connector.pixel_shuffle, step for step."""
    bsz, seq, embed_dim = x.size()
    height = width = int(seq ** 0.5)
    x = x.view(bsz, height, width, embed_dim)
    x = x.view(bsz, height, int(width / scale_factor), embed_dim * scale_factor)
    x = x.permute(0, 2, 1, 3)
    x = x.reshape(bsz, int(width / scale_factor), int(height / scale_factor), embed_dim * (scale_factor ** 2))
    x = x.permute(0, 2, 1, 3)
    return x.reshape(bsz, int(seq / (scale_factor ** 2)), embed_dim * (scale_factor ** 2))


def idefics3_position_ids(num_patches_per_side):
    """Idefics3VisionEmbeddings' position ids of a full (unpadded) view."""
    n = num_patches_per_side
    boundaries = torch.arange(1 / n, 1.0, 1 / n)
    coords = torch.arange(0, 1 - 1e-6, 1 / n)
    buckets = torch.bucketize(coords, boundaries, right=True)
    return (buckets[:, None] * n + buckets).flatten()


class Idefics3Connector(nn.Module):
    def __init__(self, vision_hidden, text_hidden, scale_factor):
        super().__init__()
        self.scale_factor = scale_factor
        self.modality_projection = nn.Module()
        self.modality_projection.proj = nn.Linear(vision_hidden * scale_factor ** 2, text_hidden, bias=False)


class Idefics3(nn.Module):
    def __init__(self, config, text, vision):
        super().__init__()
        self.config = config
        self.vision_model = vision_family.SiglipVisionTransformer(vision)
        self.connector = Idefics3Connector(vision["hidden_size"], text["hidden_size"], config["scale_factor"])
        self.language_model = llama_family.CausalLM(text)
        side = vision["image_size"] // vision["patch_size"]
        # NOTE: the Prism tower adds position i to patch i; HF buckets positions, which is
        # the same only where the float32 boundaries do not round a patch into the wrong bucket.
        if not torch.equal(idefics3_position_ids(side), torch.arange(side * side)):
            raise SystemExit(f"a {side}-patch side gets bucketed position ids that are not 0..n-1")

    def vision_features(self, pixel_values):
        """post_layernorm(last hidden state), pixel-shuffled: [V, rows, Hv s²]."""
        _, last, _ = self.vision_model(pixel_values)
        return pixel_shuffle(last, self.config["scale_factor"])

    def image_features(self, pixel_values):
        return self.connector.modality_projection.proj(self.vision_features(pixel_values))

    def state(self, layout):
        out = {"model.vision_model." + k: v for k, v in self.vision_model.state_dict().items()}
        out["model.connector.modality_projection.proj.weight"] = self.connector.modality_projection.proj.weight
        for k, v in self.language_model.state_dict().items():
            out[("model.text_model." + k[len("model."):]) if k.startswith("model.") else k] = v
        return out


def lm_logits(lm, embeds):
    """[L, vocab] logits of one sequence given its input embeddings [L, hidden] (positions 0..L-1)."""
    cos, sin = llama_family.rope_cos_sin(torch.arange(embeds.shape[0]), lm.inv_freq)
    x = embeds
    for layer in lm.model.layers:
        x = layer(x, cos, sin)
    x = lm.model.norm(x)
    head = lm.model.embed_tokens.weight if lm.tied else lm.lm_head.weight
    return x @ head.t()


def merge_inputs(lm, ids, image_token_id, rows):
    """inputs_embeds with the image-token positions replaced by rows, in order (masked_scatter)."""
    embeds = lm.model.embed_tokens(ids.long()).clone()
    mask = ids == image_token_id
    assert int(mask.sum()) == rows.shape[0], (int(mask.sum()), rows.shape)
    embeds[mask] = rows.to(embeds.dtype)
    return embeds


def init_weights(model, text, seed):
    """Tower: vision_family.init_random (activations O(1)). Projector: N(0, 1/fan_in)
    matrices and N(0, 0.1²) biases, so the spliced rows are about the size of the token
    embeddings. LM: nn.Linear's default init with llama_family.init_weights on top (untied:
    embeddings N(0, 1), lm_head std 4/sqrt(hidden): clear greedy margins)."""
    tower = model.vision_tower if isinstance(model, Llava) else model.vision_model
    vision_family.init_random(tower, seed)
    projector = model.multi_modal_projector if isinstance(model, Llava) else model.connector
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in projector.parameters():
            scale = 1.0 / math.sqrt(p.shape[1]) if p.dim() == 2 else 0.1
            p.copy_(scale * torch.randn(p.shape, generator=g))
    llama_family.init_weights(model.language_model, text)


# ---- prompts and outputs ----------------------------------------------------------------------------

def prompt_layout(family, config, rows_per_view, generator, text_vocab):
    """Token ids with image_token_id where the rows go: text, the views' blocks, text."""
    image = config["image_token_id"] if family == "idefics3" else config["image_token_index"]

    def text(n):
        ids = torch.randint(0, text_vocab, (n,), generator=generator, dtype=torch.int32)
        return [int(i) for i in ids]

    if family == "llava":
        # Two images, each "<image>" expanded to its rows, with text between.
        ids = text(5) + [image] * rows_per_view + text(3) + [image] * rows_per_view + text(PROMPT_TEXT_TOKENS - 8)
    else:
        # Idefics3Processor for a 1 x 1 split: the tile, then the global view.
        t = IDEFICS3_TOKENS
        fake, glob, row = t["<fake_token_around_image>"], t["<global-img>"], t["<row_1_col_1>"]
        block = ([fake, row] + [image] * rows_per_view + [t["\n"]] + [t["\n"], fake, glob] +
                 [image] * rows_per_view + [fake])
        ids = text(6) + block + text(PROMPT_TEXT_TOKENS - 6)
    return torch.tensor(ids, dtype=torch.int32)


def greedy(lm, embeds):
    """(generated [N] i64, logits after each generated token [N, vocab], min margin)."""
    generated, continuation, margin = [], [], float("inf")
    logits = lm_logits(lm, embeds)
    for _ in range(NUM_GENERATED):
        top2 = logits[-1].topk(2).values
        margin = min(margin, float(top2[0] - top2[1]))
        nxt = int(logits[-1].argmax())
        generated.append(nxt)
        embeds = torch.cat([embeds, lm.model.embed_tokens(torch.tensor([nxt]))])
        logits = lm_logits(lm, embeds)
        continuation.append(logits[-1])
    return torch.tensor(generated), torch.stack(continuation), margin


def make_reference(family, model, config, text, pixels, generator):
    lm = model.language_model
    image = config["image_token_id"] if family == "idefics3" else config["image_token_index"]
    features = model.vision_features(pixels.double())     # [V, rows_in, width]
    rows = model.image_features(pixels.double())           # [V, rows, hidden]
    flat_rows = rows.reshape(-1, rows.shape[-1])
    text_vocab = image  # text ids below the image token and the special ids after it
    for _ in range(MAX_PROMPT_TRIES):
        ids = prompt_layout(family, config, rows.shape[1], generator, text_vocab)
        embeds = merge_inputs(lm, ids, image, flat_rows)
        gen, cont, margin = greedy(lm, embeds)
        if margin >= MIN_MARGIN:
            break
    else:
        raise SystemExit(f"no prompt with a greedy margin >= {MIN_MARGIN} in {MAX_PROMPT_TRIES} tries")
    return {"pixel_values": pixels, "vision_features": features.reshape(-1, features.shape[-1]).float(),
            "projector_outputs": flat_rows.float(), "token_ids": ids, "logits": lm_logits(lm, embeds).float(),
            "generated": gen.to(torch.int32), "continuation_logits": cont.float(),
            "min_margin": torch.tensor([margin], dtype=torch.float32)}


def build(family):
    """(config.json dict, model, preprocessor_config, processor_config)."""
    if family == "llava":
        config, text, vision = llava_configs()
        return config, text, vision, Llava(config, text, vision), LLAVA_PREPROCESSOR, LLAVA_PROCESSOR
    config, text, vision = idefics3_configs()
    return config, text, vision, Idefics3(config, text, vision), IDEFICS3_PREPROCESSOR, IDEFICS3_PROCESSOR


def write(out_dir, family, layout="old", seed=prism_ref.seeding.DEFAULT_SEED):
    if family == "idefics3" and layout != "old":
        raise SystemExit("Idefics3 has one parameter layout (--layout old)")
    generator = prism_ref.seed_everything(seed)
    config, text, vision, model, preprocessor, processor = build(family)
    init_weights(model, text, seed)
    state = {k: v.detach().to(torch.float32).contiguous() for k, v in model.state(layout).items()}
    prism_ref.write_model_dir(out_dir, config, state)
    write_json(out_dir, "preprocessor_config.json", preprocessor)
    write_json(out_dir, "processor_config.json", processor)
    model.double()  # float64 on exactly the stored (float32) weights
    pixels = vision_family.fixed_pixels(NUM_VIEWS, vision, generator)
    with torch.no_grad():
        tensors = make_reference(family, model, config, text, pixels, generator)
    prism_ref.save_reference(out_dir, tensors, {"generator": "vlm_family.py", "family": family, "layout": layout,
                                                "seed": str(seed), "torch": torch.__version__})
    return config


def write_json(out_dir, name, obj):
    with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="a tiny VLM directory with expected outputs")
    w.add_argument("--family", choices=("llava", "idefics3"), required=True)
    w.add_argument("--layout", choices=("old", "new"), default="old",
                   help="LLaVA parameter names: transformers < 4.52 (old) or >= 4.52 (new)")
    for p in (parser, w):
        top = p is parser
        p.add_argument("--out", default=None if top else argparse.SUPPRESS, help="model directory to write (created)")
        p.add_argument("--seed", type=int, default=prism_ref.seeding.DEFAULT_SEED if top else argparse.SUPPRESS,
                       help="random seed")
    a = parser.parse_args()
    if a.out is None:
        parser.error("--out is required")
    write(a.out, a.family, a.layout, a.seed)


if __name__ == "__main__":
    main()
