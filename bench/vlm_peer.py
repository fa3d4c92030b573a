#!/usr/bin/env python3
"""The PyTorch peer of bench/vlm_bench, and the writer of its real-size checkpoints.

    vlm_peer.py write --config smolvlm-256m|smolvlm-500m|llava-clip336-smollm2-360m|tiny|tiny-llava --out DIR
                      [--seed S]
        A vision-language checkpoint with random bf16 weights at the named config's real sizes,
        in its Hugging Face layout (config.json keys and tensor names as transformers writes
        them), with preprocessor_config.json, processor_config.json, a byte-level
        tokenizer.json holding the family's image tokens at their real ids (text becomes bytes:
        the bench builds prompts itself) and tokenizer_config.json:
        - smolvlm-256m / smolvlm-500m: HuggingFaceTB/SmolVLM-{256M,500M}-Instruct (Idefics3:
          SigLIP-B/16 at 512 px, pixel shuffle 4 -> 64 rows per view, SmolLM2-135M / -360M);
        - llava-clip336-smollm2-360m: llava-1.5's vision tower (CLIP ViT-L/14 at 336 px, layer
          -2, class token dropped -> 576 rows) and projector in front of SmolLM2-360M, in the
          llava-hf layout;
        - tiny, tiny-llava: small ones of each family that run the whole bench in a minute.
        Linear weights are uniform with std 1/sqrt(fan_in), embeddings std 0.1, norms 1: speed
        does not depend on the values.

    vlm_peer.py run --model DIR --plan plan.json --inputs inputs.safetensors --out result.json
                    [--dtype bf16|f32] [--threads 2]
        The model the way transformers runs it (eager attention; Idefics3's pixel shuffle,
        LLaVA's feature layer and projector; the language model is generate_peer.py's Llama),
        under torch.inference_mode, on inputs the bench prepared with Prism's preprocessing:
        - each scenario of plan.json: its media items' pixel views through the vision tower and
          connector (all of a request's views in one batch, as transformers does), Prism's
          pooling knobs applied the same way (spatial p x p, temporal t: plain averages), the
          rows spliced at the image-token positions of its prompt, one prefill; times the
          encoder and the prefill (their sum is the peer's time to first token: it caches
          nothing between requests). A scenario with "encoder_like": NAME has the same views as
          scenario NAME: its encoder time is NAME's and only its prefill runs (the peer's
          encoder takes tens of seconds a view on this machine);
        - encoder images/s at each batch size of plan["encoder_batches"]: B / the encoder time of
          plan["encoder_batches_from"][B] (a scenario of exactly B views) where given, else the
          best of plan["encoder_repeats"] runs on plan["encoder_pixels"][:B] (after the one-view
          warm-up, as the bench times Prism's);
        - the same-weights check: the first scenario's visual rows and last-position logits
          (check.safetensors beside result.json).
        result.json: {"scenarios": {name: {"encoder_s", "prefill_s", "ttft_s", "visual_rows",
                      "prompt_tokens", "first_token"}}, "encoder_images_per_s": {B: v},
                      "dtype", "threads"}
Run with OMP_WAIT_POLICY=PASSIVE (see embed_peer.py).
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
sys.path.insert(0, HERE)
from prism_ref import hf_dir, safetensors_io  # noqa: E402
import generate_peer  # noqa: E402

# ---- configs -------------------------------------------------------------------------------

SIGLIP_B16_512 = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                      image_size=512, patch_size=16, layer_norm_eps=1e-6, hidden_act="gelu_pytorch_tanh")
CLIP_L14_336 = dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                    image_size=336, patch_size=14, layer_norm_eps=1e-5, hidden_act="quick_gelu", projection_dim=768)
# HuggingFaceTB/SmolLM2-135M and -360M (the language models of SmolVLM-256M and -500M).
SMOLLM2_135M = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                    num_key_value_heads=3, head_dim=64, max_position_embeddings=8192, rope_theta=100000.0,
                    rms_norm_eps=1e-5)
SMOLLM2_360M = dict(hidden_size=960, intermediate_size=2560, num_hidden_layers=32, num_attention_heads=15,
                    num_key_value_heads=5, head_dim=64, max_position_embeddings=8192, rope_theta=100000.0,
                    rms_norm_eps=1e-5)

TINY_TEXT = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=32, max_position_embeddings=4096, rope_theta=10000.0, rms_norm_eps=1e-5)

CONFIGS = {
    "smolvlm-256m": dict(family="idefics3", vision=SIGLIP_B16_512, text=SMOLLM2_135M, scale_factor=4,
                         longest_edge=2048),
    "smolvlm-500m": dict(family="idefics3", vision=SIGLIP_B16_512, text=SMOLLM2_360M, scale_factor=4,
                         longest_edge=2048),
    "llava-clip336-smollm2-360m": dict(family="llava", vision=CLIP_L14_336, text=SMOLLM2_360M),
    "tiny": dict(family="idefics3",
                 vision=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                             image_size=64, patch_size=8, layer_norm_eps=1e-6, hidden_act="gelu_pytorch_tanh"),
                 text=TINY_TEXT, scale_factor=4, longest_edge=192),
    "tiny-llava": dict(family="llava",
                       vision=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=2,
                                   image_size=56, patch_size=14, layer_norm_eps=1e-5, hidden_act="quick_gelu",
                                   projection_dim=64),
                       text=TINY_TEXT),
}

BASE_VOCAB = 49152  # SmolLM2's: ids below are text tokens
IDEFICS3_VOCAB = 49280
LLAVA_VOCAB = 49216  # BASE_VOCAB + <image>, <pad>, padded to a multiple of 64 as llava-hf pads 32002 to 32064


# ---- write ---------------------------------------------------------------------------------

def added_tokens(family):
    """{token: id}: SmolVLM's added tokens at their real ids, or llava's <image> and <pad>."""
    if family == "llava":
        return {"<image>": BASE_VOCAB, "<pad>": BASE_VOCAB + 1}
    t = {"<global-img>": BASE_VOCAB}
    for r in range(1, 7):
        for c in range(1, 7):
            t[f"<row_{r}_col_{c}>"] = BASE_VOCAB + (r - 1) * 6 + c
    t["<fake_token_around_image>"] = 49189
    t["<image>"] = 49190
    for i in range(88):
        t[f"<|reserved_special_token_{i}|>"] = 49191 + i
    t["<end_of_utterance>"] = 49279
    return t


def tokenizer_files(out, family):
    """A byte-level tokenizer.json: <|endoftext|>, <|im_start|>, <|im_end|> (ids 0-2), the 256
    byte tokens, filler words up to BASE_VOCAB, then the family's added tokens."""
    alphabet = generate_peer.byte_alphabet()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {s: i for i, s in enumerate(specials)}
    for b in range(256):
        vocab[alphabet[b]] = len(vocab)
    letters = "abcdefghijklmnopqrstuvwxyz"
    i = 0
    while len(vocab) < BASE_VOCAB:  # " " + a base-26 name: unique and printable
        n, name = i, ""
        while True:
            name = letters[n % 26] + name
            n //= 26
            if n == 0:
                break
        vocab["Ġ" + name] = len(vocab)
        i += 1

    def special(content, token_id):
        return {"id": token_id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True}

    added = [special(s, i) for i, s in enumerate(specials)]
    added += [special(s, i) for s, i in sorted(added_tokens(family).items(), key=lambda kv: kv[1])]
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": []},
    }
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    eos = "<end_of_utterance>" if family == "idefics3" else "<|im_end|>"
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": "<|im_start|>", "eos_token": eos, "pad_token": "<|im_end|>", "model_max_length": 8192,
                   "tokenizer_class": "GPT2Tokenizer"}, f, indent=2)


class Weights:
    """Random bf16 tensors under their names, drawn in the order they are made."""

    def __init__(self):
        self.sd = {}

    def linear(self, name, rows, cols, bias=False):  # uniform, std 1/sqrt(cols)
        self.sd[name + ".weight"] = ((torch.rand(rows, cols) * 2 - 1) * math.sqrt(3.0 / cols)).to(torch.bfloat16)
        if bias:
            self.sd[name + ".bias"] = (torch.randn(rows) * 0.02).to(torch.bfloat16)

    def norm(self, name, n, bias=True):
        self.sd[name + ".weight"] = torch.ones(n, dtype=torch.bfloat16)
        if bias:
            self.sd[name + ".bias"] = torch.zeros(n, dtype=torch.bfloat16)

    def randn(self, name, *shape, std=0.1):
        self.sd[name] = (torch.randn(*shape) * std).to(torch.bfloat16)


def vision_weights(w, prefix, v, clip, num_patches):
    d, i = v["hidden_size"], v["intermediate_size"]
    if clip:
        w.randn(prefix + "embeddings.class_embedding", d)
    p = v["patch_size"]
    w.sd[prefix + "embeddings.patch_embedding.weight"] = (
        (torch.rand(d, 3, p, p) * 2 - 1) * math.sqrt(3.0 / (3 * p * p))).to(torch.bfloat16)
    if not clip:
        w.sd[prefix + "embeddings.patch_embedding.bias"] = torch.zeros(d, dtype=torch.bfloat16)
    w.randn(prefix + "embeddings.position_embedding.weight", num_patches + (1 if clip else 0), d)
    if clip:
        w.norm(prefix + "pre_layrnorm", d)
    for l in range(v["num_hidden_layers"]):
        q = f"{prefix}encoder.layers.{l}."
        for proj in ("k_proj", "v_proj", "q_proj", "out_proj"):
            w.linear(q + "self_attn." + proj, d, d, bias=True)
        w.norm(q + "layer_norm1", d)
        w.linear(q + "mlp.fc1", i, d, bias=True)
        w.linear(q + "mlp.fc2", d, i, bias=True)
        w.norm(q + "layer_norm2", d)
    w.norm(prefix + "post_layernorm", d)


def text_weights(w, prefix, t, vocab, lm_head):
    h, i = t["hidden_size"], t["intermediate_size"]
    nh, nkv, d = t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"]
    w.randn(prefix + "embed_tokens.weight", vocab, h)
    for l in range(t["num_hidden_layers"]):
        p = f"{prefix}layers.{l}."
        w.norm(p + "input_layernorm", h, bias=False)
        w.linear(p + "self_attn.q_proj", nh * d, h)
        w.linear(p + "self_attn.k_proj", nkv * d, h)
        w.linear(p + "self_attn.v_proj", nkv * d, h)
        w.linear(p + "self_attn.o_proj", h, nh * d)
        w.norm(p + "post_attention_layernorm", h, bias=False)
        w.linear(p + "mlp.gate_proj", i, h)
        w.linear(p + "mlp.up_proj", i, h)
        w.linear(p + "mlp.down_proj", h, i)
    w.norm(prefix + "norm", h, bias=False)
    w.randn(lm_head, vocab, h)


def llama_text_config(t, vocab, eos):
    return {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "head_dim": t["head_dim"],
            "hidden_act": "silu", "hidden_size": t["hidden_size"], "intermediate_size": t["intermediate_size"],
            "max_position_embeddings": t["max_position_embeddings"], "mlp_bias": False, "model_type": "llama",
            "num_attention_heads": t["num_attention_heads"], "num_hidden_layers": t["num_hidden_layers"],
            "num_key_value_heads": t["num_key_value_heads"], "pad_token_id": 2, "eos_token_id": eos,
            "rms_norm_eps": t["rms_norm_eps"], "rope_scaling": None, "rope_theta": t["rope_theta"],
            "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": vocab}


def write_idefics3(c, out):
    v, t, s = c["vision"], c["text"], c["scale_factor"]
    grid = v["image_size"] // v["patch_size"]
    w = Weights()
    vision_weights(w, "model.vision_model.", v, clip=False, num_patches=grid * grid)
    w.linear("model.connector.modality_projection.proj", t["hidden_size"], v["hidden_size"] * s * s)
    text_weights(w, "model.text_model.", t, IDEFICS3_VOCAB, "lm_head.weight")
    eos = added_tokens("idefics3")["<end_of_utterance>"]
    config = {"architectures": ["Idefics3ForConditionalGeneration"], "image_token_id": 49190,
              "model_type": "idefics3", "pad_token_id": 128002, "scale_factor": s,
              "text_config": llama_text_config(t, IDEFICS3_VOCAB, eos), "tie_word_embeddings": False,
              "torch_dtype": "bfloat16", "use_cache": True,
              "vision_config": dict(v, model_type="idefics3_vision", num_channels=3), "vocab_size": IDEFICS3_VOCAB}
    preprocessor = {"do_convert_rgb": True, "do_image_splitting": True, "do_normalize": True, "do_pad": True,
                    "do_rescale": True, "do_resize": True, "image_mean": [0.5, 0.5, 0.5],
                    "image_processor_type": "Idefics3ImageProcessor", "image_std": [0.5, 0.5, 0.5],
                    "max_image_size": {"longest_edge": v["image_size"]}, "processor_class": "Idefics3Processor",
                    "resample": 1, "rescale_factor": 1 / 255, "size": {"longest_edge": c["longest_edge"]}}
    processor = {"image_seq_len": (grid // s) ** 2, "processor_class": "Idefics3Processor"}
    return config, w.sd, preprocessor, processor, eos


def write_llava(c, out):
    v, t = c["vision"], c["text"]
    grid = v["image_size"] // v["patch_size"]
    w = Weights()
    vision_weights(w, "vision_tower.vision_model.", v, clip=True, num_patches=grid * grid)
    w.linear("multi_modal_projector.linear_1", t["hidden_size"], v["hidden_size"], bias=True)
    w.linear("multi_modal_projector.linear_2", t["hidden_size"], t["hidden_size"], bias=True)
    text_weights(w, "language_model.model.", t, LLAVA_VOCAB, "language_model.lm_head.weight")
    eos = 2
    config = {"architectures": ["LlavaForConditionalGeneration"], "ignore_index": -100,
              "image_token_index": BASE_VOCAB, "model_type": "llava", "pad_token_id": BASE_VOCAB + 1,
              "projector_hidden_act": "gelu", "text_config": llama_text_config(t, LLAVA_VOCAB, eos),
              "tie_word_embeddings": False, "torch_dtype": "bfloat16",
              "vision_config": dict(v, model_type="clip_vision_model", num_channels=3),
              "vision_feature_layer": -2, "vision_feature_select_strategy": "default", "vocab_size": LLAVA_VOCAB}
    size = v["image_size"]
    preprocessor = {"crop_size": {"height": size, "width": size}, "do_center_crop": True, "do_convert_rgb": True,
                    "do_normalize": True, "do_rescale": True, "do_resize": True,
                    "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_processor_type": "CLIPImageProcessor",
                    "image_std": [0.26862954, 0.26130258, 0.27577711], "processor_class": "LlavaProcessor",
                    "resample": 3, "rescale_factor": 1 / 255, "size": {"shortest_edge": size}}
    processor = {"patch_size": v["patch_size"], "processor_class": "LlavaProcessor",
                 "vision_feature_select_strategy": "default"}
    return config, w.sd, preprocessor, processor, eos


def write(args):
    c = CONFIGS[args.config]
    torch.manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)
    config, sd, preprocessor, processor, eos = (write_llava if c["family"] == "llava" else write_idefics3)(c, args.out)
    hf_dir.write_model_dir(args.out, config, sd)
    tokenizer_files(args.out, c["family"])
    for name, j in (("preprocessor_config.json", preprocessor), ("processor_config.json", processor),
                    ("generation_config.json", {"eos_token_id": eos})):
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
            json.dump(j, f, indent=2)
    vision = sum(t.numel() for n, t in sd.items() if "vision" in n)
    print(f"wrote {args.out}: {args.config}, {sum(t.numel() for t in sd.values()) / 1e6:.0f}M parameters "
          f"({vision / 1e6:.0f}M in the vision tower), bf16")


# ---- run -----------------------------------------------------------------------------------

def activation(name):
    if name == "gelu_pytorch_tanh":
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "quick_gelu":
        return lambda x: x * torch.sigmoid(1.702 * x)
    if name == "gelu":
        return F.gelu
    raise ValueError(f"unknown hidden_act {name}")


class VisionTower:
    """CLIPVisionTransformer / Idefics3VisionTransformer (SigLIP), eager attention."""

    def __init__(self, v, w, prefix, clip, dtype):
        self.v, self.w, self.p, self.clip, self.dtype = v, w, prefix, clip, dtype
        self.d, self.heads = v["hidden_size"], v["num_attention_heads"]
        self.eps = v["layer_norm_eps"]
        self.act = activation(v["hidden_act"])

    def ln(self, x, name):
        return F.layer_norm(x, (self.d,), self.w[name + ".weight"], self.w[name + ".bias"], self.eps)

    def lin(self, x, name):
        return F.linear(x, self.w[name + ".weight"], self.w.get(name + ".bias"))

    def forward(self, pixels, layers, post_layernorm):
        """pixels [V, 3, S, S] -> hidden states [V, N(+1), D] after `layers` layers."""
        p = self.p
        x = F.conv2d(pixels.to(self.dtype), self.w[p + "embeddings.patch_embedding.weight"],
                     self.w.get(p + "embeddings.patch_embedding.bias"), stride=self.v["patch_size"])
        x = x.flatten(2).transpose(1, 2)  # [V, N, D]
        if self.clip:
            cls = self.w[p + "embeddings.class_embedding"].expand(x.shape[0], 1, -1)
            x = torch.cat([cls, x], 1)
        x = x + self.w[p + "embeddings.position_embedding.weight"][None, : x.shape[1]]
        if self.clip:
            x = self.ln(x, p + "pre_layrnorm")
        n, hd = x.shape[1], self.d // self.heads
        for l in range(layers):
            q = f"{p}encoder.layers.{l}."
            h = self.ln(x, q + "layer_norm1")

            def heads(t):
                return t.view(-1, n, self.heads, hd).transpose(1, 2)

            qs = heads(self.lin(h, q + "self_attn.q_proj")) * hd ** -0.5
            ks, vs = heads(self.lin(h, q + "self_attn.k_proj")), heads(self.lin(h, q + "self_attn.v_proj"))
            a = torch.matmul(qs, ks.transpose(2, 3)).softmax(-1, dtype=torch.float32).to(self.dtype)
            a = torch.matmul(a, vs).transpose(1, 2).reshape(-1, n, self.d)
            x = x + self.lin(a, q + "self_attn.out_proj")
            h = self.ln(x, q + "layer_norm2")
            x = x + self.lin(self.act(self.lin(h, q + "mlp.fc1")), q + "mlp.fc2")
        if post_layernorm:
            x = self.ln(x, p + "post_layernorm")
        return x


def pixel_shuffle(x, s):
    """Idefics3Connector.pixel_shuffle: [V, N, D] -> [V, N / s², D s²]."""
    v, n, d = x.shape
    g = int(n ** 0.5)
    x = x.reshape(v, g, g // s, d * s).permute(0, 2, 1, 3)
    x = x.reshape(v, g // s, g // s, d * s * s).permute(0, 2, 1, 3)
    return x.reshape(v, n // (s * s), d * s * s)


class MediaEncoder:
    """Pixel views -> rows in the LM's embedding space (tower, feature selection, projector)."""

    def __init__(self, c, w, dtype):
        self.c, self.w, self.dtype = c, w, dtype
        self.llava = c["model_type"] == "llava"
        v = c["vision_config"]
        prefix = "vision_tower.vision_model." if self.llava else "model.vision_model."
        self.tower = VisionTower(v, w, prefix, clip=self.llava, dtype=dtype)
        self.layers = v["num_hidden_layers"]
        if self.llava:  # hidden_states[vision_feature_layer]: layer -2 is after layers - 1 layers
            self.layers = self.layers + 1 + c["vision_feature_layer"]
        grid = v["image_size"] // v["patch_size"]
        self.grid_side = grid if self.llava else grid // c["scale_factor"]

    def encode(self, pixels):
        if self.llava:
            x = self.tower.forward(pixels, self.layers, post_layernorm=False)[:, 1:]  # "default": drop CLS
            x = F.linear(x, self.w["multi_modal_projector.linear_1.weight"], self.w["multi_modal_projector.linear_1.bias"])
            x = F.linear(F.gelu(x), self.w["multi_modal_projector.linear_2.weight"],
                         self.w["multi_modal_projector.linear_2.bias"])
        else:
            x = self.tower.forward(pixels, self.layers, post_layernorm=True)
            x = pixel_shuffle(x, self.c["scale_factor"])
            x = F.linear(x, self.w["model.connector.modality_projection.proj.weight"])
        return x  # [V, grid_side², hidden]

    def pool(self, rows, spatial, temporal):
        """Prism's visual-token knobs as plain averages: p x p cells of each view's grid, then t
        consecutive views (the last group may be short). [V, g², H] -> [rows, H]."""
        v, _, h = rows.shape
        g = self.grid_side
        if spatial > 1:
            x = rows.view(v, g, g, h).permute(0, 3, 1, 2).float()
            rows = F.avg_pool2d(x, spatial).permute(0, 2, 3, 1).reshape(v, -1, h).to(rows.dtype)
        if temporal > 1:
            rows = torch.stack([rows[i:i + temporal].float().mean(0) for i in range(0, v, temporal)]).to(rows.dtype)
        return rows.reshape(-1, h)


class TextModel(generate_peer.Llama):
    """generate_peer.py's Llama over a VLM's language model: the text_config and the weights
    under the family's prefix. Its forward takes token ids; visual rows go in as rows
    appended to the embedding table, the image positions pointing at them (what
    masked_scatter does to inputs_embeds)."""

    def __init__(self, config, weights, dtype):  # not super().__init__: that reads a LlamaForCausalLM dir
        llava = config["model_type"] == "llava"
        prefix = "language_model.model." if llava else "model.text_model."
        head = "language_model.lm_head.weight" if llava else "lm_head.weight"
        self.c = c = dict(config["text_config"])
        self.w = {"model." + k[len(prefix):]: t for k, t in weights.items() if k.startswith(prefix)}
        self.h, self.layers = c["hidden_size"], c["num_hidden_layers"]
        self.nh, self.nkv = c["num_attention_heads"], c["num_key_value_heads"]
        self.d = c.get("head_dim") or self.h // self.nh
        self.eps = c["rms_norm_eps"]
        self.dtype = dtype
        self.lm_head = weights[head]
        self.inv_freq = generate_peer.inv_freq(c, self.d)
        self.table = self.w["model.embed_tokens.weight"]

    def splice(self, ids, image_token_id, rows):
        """ids with the image positions renumbered to rows appended to the embedding table."""
        pos = (ids == image_token_id).nonzero().flatten()
        if pos.numel() != rows.shape[0]:
            raise ValueError(f"{pos.numel()} image positions for {rows.shape[0]} rows")
        self.w["model.embed_tokens.weight"] = torch.cat([self.table, rows.to(self.dtype)])
        spliced = ids.clone()
        spliced[pos] = self.table.shape[0] + torch.arange(pos.numel())
        return spliced


def run(args):
    torch.set_num_threads(args.threads)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    with open(os.path.join(args.model, "config.json")) as f:
        config = json.load(f)
    with open(args.plan) as f:
        plan = json.load(f)
    inputs = safetensors_io.load_file(args.inputs)
    weights = {k: t.to(dtype) for k, t in hf_dir.read_weights(args.model).items()}
    encoder = MediaEncoder(config, weights, dtype)
    lm = TextModel(config, weights, dtype)
    image_token_id = config.get("image_token_id", config.get("image_token_index"))
    result = {"dtype": args.dtype, "threads": args.threads, "scenarios": {}, "encoder_images_per_s": {}}
    check = {}
    with torch.inference_mode():
        # Warm-up: one view through the encoder, a short prefill.
        encoder.encode(inputs[plan["scenarios"][0]["items"][0]["pixels"]][:1])
        lm.forward(torch.arange(8), 0, lm.new_cache(8))
        for s in plan["scenarios"]:
            ids = inputs[s["prompt"]].long()
            like = s.get("encoder_like")
            if like:  # the same views as an earlier scenario: its encoder time, rows of the right shape
                encoder_s = result["scenarios"][like]["encoder_s"]
                rows = torch.zeros(int((ids == image_token_id).sum()), lm.h, dtype=dtype)
            else:
                t0 = time.perf_counter()
                rows = []
                for item in s["items"]:
                    views = encoder.encode(inputs[item["pixels"]])
                    rows.append(encoder.pool(views, item.get("spatial_pool", 1), item.get("temporal_pool", 1)))
                rows = torch.cat(rows)
                encoder_s = time.perf_counter() - t0
            spliced = lm.splice(ids, image_token_id, rows)  # not timed: our splice, not transformers'
            t1 = time.perf_counter()
            logits = lm.forward(spliced, 0, lm.new_cache(ids.numel()))
            prefill_s = time.perf_counter() - t1
            result["scenarios"][s["name"]] = {
                "encoder_s": encoder_s, "prefill_s": prefill_s, "ttft_s": encoder_s + prefill_s,
                "visual_rows": rows.shape[0], "prompt_tokens": ids.numel(), "first_token": int(logits.argmax())}
            if s.get("check") and not check:
                check = {"rows": rows.float().contiguous(), "logits": logits.float().contiguous()}
            print(f"peer: {s['name']}: {rows.shape[0]} visual rows, {ids.numel()} tokens, encoder {encoder_s:.2f} s, "
                  f"prefill {prefill_s:.2f} s", file=sys.stderr, flush=True)
        pixels = inputs[plan["encoder_pixels"]]
        for b, name in plan.get("encoder_batches_from", {}).items():
            result["encoder_images_per_s"][b] = int(b) / result["scenarios"][name]["encoder_s"]
        for b in plan["encoder_batches"]:
            if str(b) in result["encoder_images_per_s"]:
                continue
            best = float("inf")
            for _ in range(plan.get("encoder_repeats", 1)):
                t0 = time.perf_counter()
                encoder.encode(pixels[:b])
                best = min(best, time.perf_counter() - t0)
            result["encoder_images_per_s"][str(b)] = b / best
    safetensors_io.save_file(check, os.path.join(os.path.dirname(os.path.abspath(args.out)), "check.safetensors"))
    with open(args.out, "w") as f:
        json.dump(result, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("--config", choices=sorted(CONFIGS), required=True)
    w.add_argument("--out", required=True)
    w.add_argument("--seed", type=int, default=1234)
    r = sub.add_parser("run")
    r.add_argument("--model", required=True)
    r.add_argument("--plan", required=True)
    r.add_argument("--inputs", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    r.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if args.cmd == "write":
        write(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
