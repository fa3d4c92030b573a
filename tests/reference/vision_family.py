#!/usr/bin/env python3
"""Reference for the CLIP and SigLIP image towers and dual encoders: torch modules whose
state_dict() keys are exactly transformers' names (so other references, LLaVA and Idefics3,
build their vision side from them), tiny configs with HF's config keys, and a command line
that writes tiny random HF directories with expected outputs for
tests/parity/vision_family_test.cpp.

Modules (cfg = the HF vision_config / text_config dict; compute in whatever dtype the
module is in: references call .double() on the stored float32 weights):
    ClipVisionTransformer    CLIPVisionTransformer ("vision_model.*" in CLIPModel,
                             "vision_tower.vision_model.*" in LLaVA)
    SiglipVisionTransformer  SiglipVisionTransformer ("vision_model.*"; head when
                             cfg.get("vision_use_head", True); Idefics3's tower is this
                             without the head)
    ClipTextTransformer, SiglipTextTransformer, ClipModel, SiglipModel
Vision forward(pixel_values [B, 3, S, S]) returns (hidden_states, last_hidden_state, pooled)
as transformers does:
    hidden_states      list of num_hidden_layers + 1 tensors [B, N, hidden]: the encoder's
                       input (CLIP: after pre_layrnorm) then each layer's output; never
                       post-layernormed
    last_hidden_state  CLIP: hidden_states[-1] (HF does NOT post-layernorm it);
                       SigLIP: post_layernorm(hidden_states[-1])
    pooled             CLIP: post_layernorm(hidden_states[-1][:, 0]);
                       SigLIP: head(last_hidden_state) with a head, else None
Activations: quick_gelu x*sigmoid(1.702x), gelu (erf), gelu_pytorch_tanh.

Text towers (token ids [B, L], no attention mask: every row is full length):
    CLIP: causal attention, final_layer_norm, pooled at the EOS. HF picks it with
    input_ids.argmax(-1) when config eos_token_id == 2 (the real openai checkpoints) and the
    first eos_token_id otherwise; our token ids end with the EOS (the largest id), so both
    give the last token — the one Prism pools. text_embeds = text_projection(pooled).
    SigLIP: bidirectional attention, final_layer_norm, pooled = last position, head (Linear
    with bias). text_embeds = head output.
Dual encoders: image_embeds = visual_projection(pooled) (CLIP) / vision pooled (SigLIP);
logits_per_text = normalize(text) @ normalize(image).T * exp(logit_scale) (+ logit_bias for
SigLIP).

Command line:
    vision_family.py write --family clip|siglip --out DIR [--seed N]
        a tiny random CLIPModel / SiglipModel directory (config.json + model.safetensors)
        and reference.safetensors:
          pixel_values [V, 3, S, S] f32; token_ids [T] i32, cu_seqlens [S + 1] i32 (texts of
          TEXT_LENGTHS tokens back to back, each ending with the EOS, the largest id);
          image_embeds [V, E], text_embeds [S, E] (each text run alone at its own length),
          text_hidden [T, E] (per-token states after final_layer_norm and the
          projection / head: what the Encoder returns), logits_per_text [S, V],
          vision_hidden_{k} [V, N, hidden] (hidden_states[k] for k in 0..layers),
          vision_last_hidden [V, N, hidden] (post_layernorm(hidden_states[-1]) for both
          kinds: what VisionTower::forward(layers, true) returns), vision_pooled [V, hidden]
    vision_family.py write-tower --kind clip|siglip --out DIR [--seed N] [--no-head]
        a bare CLIPVisionModel / SiglipVisionModel directory (names "vision_model.*",
        config.json is the vision config itself) with the same vision_* outputs.
Everything in float64 from the stored float32 weights.
"""

import argparse
import copy
import math

import torch
from torch import nn
import torch.nn.functional as F

import prism_ref

NUM_VIEWS = 3
TEXT_LENGTHS = (16, 7, 11)  # tokens of each fixed text (16 = the tiny max_position_embeddings)


# ---- configs ---------------------------------------------------------------------------------------

def tiny_clip_vision_config(**overrides):
    """CLIPVisionConfig keys; 32×32 images in 8×8 patches: 16 patches + the class token."""
    c = {"attention_dropout": 0.0, "hidden_act": "quick_gelu", "hidden_size": 64, "image_size": 32,
         "initializer_factor": 1.0, "initializer_range": 0.02, "intermediate_size": 128,
         "layer_norm_eps": 1e-5, "model_type": "clip_vision_model", "num_attention_heads": 4,
         "num_channels": 3, "num_hidden_layers": 3, "patch_size": 8, "projection_dim": 48}
    c.update(overrides)
    return c


def tiny_siglip_vision_config(**overrides):
    """SiglipVisionConfig keys; 32×32 images in 8×8 patches: 16 tokens, attention-pool head."""
    c = {"attention_dropout": 0.0, "hidden_act": "gelu_pytorch_tanh", "hidden_size": 64, "image_size": 32,
         "intermediate_size": 160, "layer_norm_eps": 1e-6, "model_type": "siglip_vision_model",
         "num_attention_heads": 4, "num_channels": 3, "num_hidden_layers": 3, "patch_size": 8}
    c.update(overrides)
    return c


def tiny_clip_text_config(**overrides):
    """CLIPTextConfig keys. eos_token_id 2 as openai/clip-vit-base-patch32's config has
    (HF then pools at argmax(input_ids)); our EOS is vocab_size - 1, the largest id."""
    c = {"attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 2, "hidden_act": "quick_gelu",
         "hidden_size": 48, "initializer_factor": 1.0, "initializer_range": 0.02, "intermediate_size": 96,
         "layer_norm_eps": 1e-5, "max_position_embeddings": 16, "model_type": "clip_text_model",
         "num_attention_heads": 4, "num_hidden_layers": 2, "pad_token_id": 1, "projection_dim": 48,
         "vocab_size": 99}
    c.update(overrides)
    return c


def tiny_siglip_text_config(**overrides):
    c = {"attention_dropout": 0.0, "bos_token_id": 49406, "eos_token_id": 49407, "hidden_act": "gelu_pytorch_tanh",
         "hidden_size": 64, "intermediate_size": 128, "layer_norm_eps": 1e-6, "max_position_embeddings": 16,
         "model_type": "siglip_text_model", "num_attention_heads": 4, "num_hidden_layers": 2,
         "pad_token_id": 1, "vocab_size": 99}
    c.update(overrides)
    return c


# ---- building blocks (HF names) ---------------------------------------------------------------------

def activation(name):
    if name == "quick_gelu":
        return lambda x: x * torch.sigmoid(1.702 * x)
    if name == "gelu":
        return lambda x: F.gelu(x)
    if name in ("gelu_pytorch_tanh", "gelu_new"):
        return lambda x: F.gelu(x, approximate="tanh")
    raise ValueError(f"hidden_act {name!r} not in the reference")


def attend(q, k, v, num_heads, causal=False):
    """softmax(q k^T / sqrt(d)) v over [B, Lq, H*d] / [B, Lk, H*d] → [B, Lq, H*d]."""
    b, lq, width = q.shape
    lk, d = k.shape[1], width // num_heads
    q = q.view(b, lq, num_heads, d).transpose(1, 2)
    k = k.view(b, lk, num_heads, d).transpose(1, 2)
    v = v.view(b, lk, num_heads, d).transpose(1, 2)
    scores = (q * d ** -0.5) @ k.transpose(-1, -2)  # HF scales q first
    if causal:
        mask = torch.ones(lq, lk, dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    return (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, lq, width)


class Attention(nn.Module):  # CLIPAttention / SiglipAttention
    def __init__(self, c):
        super().__init__()
        h = c["hidden_size"]
        self.num_heads = c["num_attention_heads"]
        self.k_proj = nn.Linear(h, h)
        self.v_proj = nn.Linear(h, h)
        self.q_proj = nn.Linear(h, h)
        self.out_proj = nn.Linear(h, h)

    def forward(self, x, causal=False):
        return self.out_proj(attend(self.q_proj(x), self.k_proj(x), self.v_proj(x), self.num_heads, causal))


class Mlp(nn.Module):  # CLIPMLP / SiglipMLP
    def __init__(self, c):
        super().__init__()
        self.act = activation(c["hidden_act"])
        self.fc1 = nn.Linear(c["hidden_size"], c["intermediate_size"])
        self.fc2 = nn.Linear(c["intermediate_size"], c["hidden_size"])

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class EncoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = Attention(c)
        self.layer_norm1 = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])
        self.mlp = Mlp(c)
        self.layer_norm2 = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(self, x, causal=False):
        x = x + self.self_attn(self.layer_norm1(x), causal)
        return x + self.mlp(self.layer_norm2(x))


class Encoder(nn.Module):  # "encoder.layers.{i}.*"
    def __init__(self, c):
        super().__init__()
        self.layers = nn.ModuleList([EncoderLayer(c) for _ in range(c["num_hidden_layers"])])

    def forward(self, x, causal=False):
        """[input, layer 1 output, ...]"""
        states = [x]
        for layer in self.layers:
            states.append(layer(states[-1], causal))
        return states


# ---- vision towers ------------------------------------------------------------------------------------

class ClipVisionEmbeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, p = c["hidden_size"], c["patch_size"]
        self.class_embedding = nn.Parameter(torch.zeros(h))
        self.patch_embedding = nn.Conv2d(c["num_channels"], h, kernel_size=p, stride=p, bias=False)
        num_positions = (c["image_size"] // p) ** 2 + 1
        self.position_embedding = nn.Embedding(num_positions, h)

    def forward(self, pixel_values):
        patches = self.patch_embedding(pixel_values.to(self.patch_embedding.weight.dtype))
        patches = patches.flatten(2).transpose(1, 2)  # [B, grid², hidden], row-major patches
        cls = self.class_embedding.expand(pixel_values.shape[0], 1, -1)
        return torch.cat([cls, patches], dim=1) + self.position_embedding.weight[None]


class ClipVisionTransformer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.embeddings = ClipVisionEmbeddings(c)
        self.pre_layrnorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])
        self.encoder = Encoder(c)
        self.post_layernorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(self, pixel_values):
        states = self.encoder(self.pre_layrnorm(self.embeddings(pixel_values)))
        last = states[-1]
        return states, last, self.post_layernorm(last[:, 0])


class SiglipVisionEmbeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, p = c["hidden_size"], c["patch_size"]
        self.patch_embedding = nn.Conv2d(c["num_channels"], h, kernel_size=p, stride=p)
        self.position_embedding = nn.Embedding((c["image_size"] // p) ** 2, h)

    def forward(self, pixel_values):
        patches = self.patch_embedding(pixel_values.to(self.patch_embedding.weight.dtype))
        return patches.flatten(2).transpose(1, 2) + self.position_embedding.weight[None]


class MultiheadAttention(nn.Module):
    """torch.nn.MultiheadAttention's parameters (in_proj_weight [3h, h] = q, k, v rows;
    in_proj_bias; out_proj), as SiglipMultiheadAttentionPoolingHead stores them."""

    def __init__(self, hidden, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.in_proj_weight = nn.Parameter(torch.zeros(3 * hidden, hidden))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * hidden))
        self.out_proj = nn.Linear(hidden, hidden)

    def forward(self, query, key_value):
        wq, wk, wv = self.in_proj_weight.chunk(3)
        bq, bk, bv = self.in_proj_bias.chunk(3)
        o = attend(F.linear(query, wq, bq), F.linear(key_value, wk, bk), F.linear(key_value, wv, bv), self.num_heads)
        return self.out_proj(o)


class SiglipHead(nn.Module):  # SiglipMultiheadAttentionPoolingHead
    def __init__(self, c):
        super().__init__()
        h = c["hidden_size"]
        self.probe = nn.Parameter(torch.zeros(1, 1, h))
        self.attention = MultiheadAttention(h, c["num_attention_heads"])
        self.layernorm = nn.LayerNorm(h, eps=c["layer_norm_eps"])
        self.mlp = Mlp(c)

    def forward(self, x):
        h = self.attention(self.probe.expand(x.shape[0], -1, -1), x)
        h = h + self.mlp(self.layernorm(h))
        return h[:, 0]


class SiglipVisionTransformer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.embeddings = SiglipVisionEmbeddings(c)
        self.encoder = Encoder(c)
        self.post_layernorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])
        self.use_head = c.get("vision_use_head", True)
        if self.use_head:
            self.head = SiglipHead(c)

    def forward(self, pixel_values):
        states = self.encoder(self.embeddings(pixel_values))
        last = self.post_layernorm(states[-1])
        return states, last, (self.head(last) if self.use_head else None)


# ---- text towers and dual encoders --------------------------------------------------------------------

class TextEmbeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.token_embedding = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.position_embedding = nn.Embedding(c["max_position_embeddings"], c["hidden_size"])

    def forward(self, input_ids):
        return self.token_embedding(input_ids.long()) + self.position_embedding.weight[: input_ids.shape[1]][None]


class ClipTextTransformer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.embeddings = TextEmbeddings(c)
        self.encoder = Encoder(c)
        self.final_layer_norm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(self, input_ids):
        """(last_hidden_state [B, L, h], pooled [B, h]) as CLIPTextTransformer."""
        last = self.final_layer_norm(self.encoder(self.embeddings(input_ids), causal=True)[-1])
        if self.config["eos_token_id"] == 2:
            eos = input_ids.long().argmax(-1)
        else:
            eos = (input_ids.long() == self.config["eos_token_id"]).int().argmax(-1)
        return last, last[torch.arange(last.shape[0]), eos]


class SiglipTextTransformer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        h = c["hidden_size"]
        self.embeddings = TextEmbeddings(c)
        self.encoder = Encoder(c)
        self.final_layer_norm = nn.LayerNorm(h, eps=c["layer_norm_eps"])
        self.head = nn.Linear(h, c.get("projection_size", h))

    def forward(self, input_ids):
        """(last_hidden_state, pooled = head(last position))."""
        last = self.final_layer_norm(self.encoder(self.embeddings(input_ids))[-1])
        return last, self.head(last[:, -1])


class ClipModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        t, v, dim = config["text_config"], config["vision_config"], config["projection_dim"]
        self.text_model = ClipTextTransformer(t)
        self.vision_model = ClipVisionTransformer(v)
        self.visual_projection = nn.Linear(v["hidden_size"], dim, bias=False)
        self.text_projection = nn.Linear(t["hidden_size"], dim, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor(config.get("logit_scale_init_value", 2.6592)))

    def text_hidden(self, input_ids):
        """[B, L, dim]: every token's final state projected (what Prism's Encoder returns)."""
        return self.text_projection(self.text_model(input_ids)[0])

    def text_embeds(self, input_ids):
        return self.text_projection(self.text_model(input_ids)[1])

    def image_embeds(self, pixel_values):
        return self.visual_projection(self.vision_model(pixel_values)[2])

    def logits_per_text(self, text_embeds, image_embeds):
        t, i = F.normalize(text_embeds, dim=-1), F.normalize(image_embeds, dim=-1)
        return t @ i.t() * self.logit_scale.exp()


class SiglipModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.text_model = SiglipTextTransformer(config["text_config"])
        self.vision_model = SiglipVisionTransformer(config["vision_config"])
        self.logit_scale = nn.Parameter(torch.randn(1))
        self.logit_bias = nn.Parameter(torch.randn(1))

    def text_hidden(self, input_ids):
        return self.text_model.head(self.text_model(input_ids)[0])

    def text_embeds(self, input_ids):
        return self.text_model(input_ids)[1]

    def image_embeds(self, pixel_values):
        return self.vision_model(pixel_values)[2]

    def logits_per_text(self, text_embeds, image_embeds):
        t, i = F.normalize(text_embeds, dim=-1), F.normalize(image_embeds, dim=-1)
        return t @ i.t() * self.logit_scale.exp() + self.logit_bias


# ---- weights --------------------------------------------------------------------------------------------

def init_random(module, seed=prism_ref.seeding.DEFAULT_SEED):
    """Non-trivial random weights that keep activations O(1): matrices ~ N(0, 1/fan_in)
    (conv: fan_in = channels·p²), biases ~ N(0, 0.1²), layer-norm weights ~ 1 + N(0, 0.1²),
    class / position embeddings and the probe ~ N(0, 0.5²) so they visibly matter, token
    embeddings ~ N(0, 1), logit_scale / logit_bias set to HF's init (log 10, -10) plus noise.
    NOTE: derived from names only, so any module built from these classes gets the same
    weights for the same seed."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            owner = module.get_submodule(name.rsplit(".", 1)[0]) if "." in name else module
            if isinstance(owner, nn.LayerNorm):
                p.copy_((1.0 if leaf == "weight" else 0.0) + 0.1 * torch.randn(p.shape, generator=g))
            elif leaf in ("bias", "in_proj_bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif leaf == "logit_scale":
                p.copy_(math.log(10.0) + 0.1 * torch.randn(p.shape, generator=g))
            elif leaf == "logit_bias":
                p.copy_(-10.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif isinstance(owner, nn.Embedding) and "token" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            elif isinstance(owner, nn.Embedding) or leaf in ("class_embedding", "probe"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:  # linear / conv / in_proj weights: [out, in, ...]
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(fan_in))
    return module


def float32_state(module):
    """{HF name: contiguous float32 tensor} as model.safetensors stores it."""
    return {k: v.detach().to(torch.float32).contiguous() for k, v in module.state_dict().items()}


def float64_copy(module):
    """The same module in float64 (references compute there from the stored weights)."""
    return copy.deepcopy(module).double()


# ---- inputs and expected outputs ----------------------------------------------------------------------

def fixed_pixels(num_views, cfg, generator):
    """[V, C, S, S] f32, normalised-pixel range (about ±2)."""
    s = cfg["image_size"]
    return (torch.rand(num_views, cfg.get("num_channels", 3), s, s, generator=generator) * 4.0 - 2.0).float()


def fixed_texts(text_cfg, generator):
    """One [L] i32 text per TEXT_LENGTHS (the first as long as max_position_embeddings, as
    SigLIP's padded inputs are), ids in [3, vocab - 1), the last one the EOS, vocab - 1 (the
    largest id, as in real vocabularies)."""
    vocab = text_cfg["vocab_size"]
    texts = []
    for n in TEXT_LENGTHS:
        n = min(n, text_cfg["max_position_embeddings"])
        ids = torch.randint(3, vocab - 1, (n,), generator=generator, dtype=torch.int32)
        ids[-1] = vocab - 1
        texts.append(ids)
    return texts


def vision_outputs(tower64, pixels):
    states, last, pooled = tower64(pixels.double())
    out = {f"vision_hidden_{k}": s.float() for k, s in enumerate(states)}
    # VisionTower::forward(all layers, post_layernorm=true) for both kinds.
    out["vision_last_hidden"] = tower64.post_layernorm(states[-1]).float()
    if pooled is not None:
        out["vision_pooled"] = pooled.float()
    return out


def write_dual(out_dir, family, seed):
    generator = prism_ref.seed_everything(seed)
    if family == "clip":
        vision, text = tiny_clip_vision_config(), tiny_clip_text_config()
        config = {"architectures": ["CLIPModel"], "initializer_factor": 1.0, "logit_scale_init_value": 2.6592,
                  "model_type": "clip", "projection_dim": 48, "text_config": text,
                  "torch_dtype": "float32", "transformers_version": "4.45.0", "vision_config": vision}
        model = ClipModel(config)
    else:
        vision, text = tiny_siglip_vision_config(), tiny_siglip_text_config()
        config = {"architectures": ["SiglipModel"], "initializer_factor": 1.0, "model_type": "siglip",
                  "text_config": text, "torch_dtype": "float32", "transformers_version": "4.45.0",
                  "vision_config": vision}
        model = SiglipModel(config)
    init_random(model, seed)
    state = float32_state(model)
    prism_ref.write_model_dir(out_dir, config, state)
    m = float64_copy(model)
    pixels = fixed_pixels(NUM_VIEWS, vision, generator)
    texts = fixed_texts(text, generator)
    with torch.no_grad():
        image_embeds = m.image_embeds(pixels.double())
        # Each text alone, at its own length (no padding, no mask), as the C++ side packs them.
        text_embeds = torch.cat([m.text_embeds(ids[None]) for ids in texts])
        text_hidden = torch.cat([m.text_hidden(ids[None])[0] for ids in texts])
        cu = torch.tensor([0] + [len(ids) for ids in texts]).cumsum(0).to(torch.int32)
        tensors = {"pixel_values": pixels, "token_ids": torch.cat(texts), "cu_seqlens": cu,
                   "image_embeds": image_embeds.float(), "text_embeds": text_embeds.float(),
                   "text_hidden": text_hidden.float(),
                   "logits_per_text": m.logits_per_text(text_embeds, image_embeds).float()}
        tensors.update(vision_outputs(m.vision_model, pixels))
    prism_ref.save_reference(out_dir, tensors, {"generator": "vision_family.py", "family": family,
                                                "seed": str(seed), "torch": torch.__version__})
    return config


def write_tower(out_dir, kind, seed, head=True):
    generator = prism_ref.seed_everything(seed)
    if kind == "clip":
        vision = tiny_clip_vision_config()
        tower, arch = ClipVisionTransformer(vision), "CLIPVisionModel"
    else:
        vision = tiny_siglip_vision_config(vision_use_head=head)
        tower, arch = SiglipVisionTransformer(vision), "SiglipVisionModel"
    config = {"architectures": [arch], **vision, "torch_dtype": "float32", "transformers_version": "4.45.0"}
    init_random(tower, seed)
    # CLIPVisionModel / SiglipVisionModel hold the transformer as "vision_model".
    state = {"vision_model." + k: v for k, v in float32_state(tower).items()}
    prism_ref.write_model_dir(out_dir, dict(sorted(config.items())), state)
    pixels = fixed_pixels(NUM_VIEWS, vision, generator)
    with torch.no_grad():
        tensors = {"pixel_values": pixels, **vision_outputs(float64_copy(tower), pixels)}
    prism_ref.save_reference(out_dir, tensors, {"generator": "vision_family.py", "kind": kind,
                                                "seed": str(seed), "torch": torch.__version__})
    return config


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="a tiny CLIPModel / SiglipModel directory with expected outputs")
    w.add_argument("--family", choices=("clip", "siglip"), required=True)
    t = sub.add_parser("write-tower", help="a tiny CLIPVisionModel / SiglipVisionModel directory")
    t.add_argument("--kind", choices=("clip", "siglip"), required=True)
    t.add_argument("--no-head", action="store_true", help="SigLIP without the pooling head (vision_use_head false)")
    # --out / --seed before or after the command: the C++ tests' generate_reference runs
    # `vision_family.py --out DIR <args>`.
    for p in (parser, w, t):
        top = p is parser
        p.add_argument("--out", default=None if top else argparse.SUPPRESS, help="model directory to write (created)")
        p.add_argument("--seed", type=int, default=prism_ref.seeding.DEFAULT_SEED if top else argparse.SUPPRESS,
                       help="random seed")
    a = parser.parse_args()
    if a.out is None:
        parser.error("--out is required")
    if a.command == "write":
        write_dual(a.out, a.family, a.seed)
    else:
        write_tower(a.out, a.kind, a.seed, head=not a.no_head)


if __name__ == "__main__":
    main()
