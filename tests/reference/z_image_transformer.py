#!/usr/bin/env python3
"""Reference for the Z-Image diffusion transformer (diffusers' ZImageTransformer2DModel):
writes a tiny random model in the real layout (model_index.json, transformer/config.json with
the real keys, transformer/diffusion_pytorch_model.safetensors or its sharded index, the real
parameter names) and reference.safetensors with a batch of two rows (different caption
lengths, different latent sizes) and the transformer's float64 outputs, which
tests/parity/z_image_transformer_test.cpp matches.

The forward pass, restated from diffusers' transformer_z_image.py (no diffusers here):
    t_emb = t_embedder(sinusoid(t * t_scale))            sinusoid: cos then sin, 256 wide
    image tokens: patchify "c f pf h ph w pw -> (f h w) (pf ph pw c)", padded to a multiple of
        32 by repeating the last patch; x = all_x_embedder["2-1"](patches); padded rows
        replaced by x_pad_token. Positions (cap_padded + 1, h, w); padded rows (0, 0, 0).
    caption tokens: padded to a multiple of 32 by repeating the last row; cap_embedder
        (RMSNorm, Linear); padded rows replaced by cap_pad_token. Positions (1 + i, 0, 0).
    noise_refiner blocks (adaLN-modulated) over each row's image tokens, context_refiner
        blocks (no modulation) over each row's caption tokens; then `layers` over each row's
        [image tokens, caption tokens]; then the final layer and unpatchify.
    NOTE: pad tokens (up to the multiple of 32) are inside the attention mask: they attend and
    are attended. Only the batch padding of pad_sequence (rows shorter than the longest) is
    masked out; this generator runs the batch exactly that way (padded, boolean key mask).
    Block: attention over RMSNorm(x) * (1 + scale_msa) with to_q/to_k/to_v, per-head RMSNorm
        (norm_q, norm_k, eps 1e-5), complex-interleaved RoPE over three axes (axes_dims),
        softmax(q k^T / sqrt(head_dim)); x += tanh(gate_msa) * attention_norm2(to_out.0(a));
        x += tanh(gate_mlp) * ffn_norm2(w2(silu(w1(h)) * w3(h))), h = ffn_norm1(x) * (1 + scale_mlp).
        (scale_msa, gate_msa, scale_mlp, gate_mlp) = chunk4(adaLN_modulation.0(t_emb)); blocks
        without modulation drop the scales and gates.
    Final layer: LayerNorm(x, no affine, eps 1e-6) * (1 + adaLN_modulation.1(silu(t_emb))), linear.

Precision: like upstream, the sinusoid's argument t * t_scale * freq and the RoPE angles are
float32 (the frequencies computed in float64 and rounded, as the C++ side does); their cos and
sin and everything else run in float64 on exactly the stored weights (float32, or
bf16-rounded), so the outputs are exact to the float32 arguments.

Outputs (reference.safetensors), per row b in 0, 1: x_b [C, 1, H_b, W_b] (the latent),
cap_b [L_b, cap_feat_dim], out_b [C, 1, H_b, W_b] (the transformer's output), unified_b
[img_padded_b + cap_padded_b, dim] (the sequence after the refiners, before `layers`); t [2]
(model time, 1 - sigma), sigma [2].

Layouts: tiny (dim 64, heads of 32 = axes_dims [8, 12, 12]; the rows above) and head128 (dim 256,
the real head_dim 128 = axes_dims [32, 48, 48]; a 1-token caption with a 2 x 2 latent, a
100-token caption with a 24 x 32 latent).

Usage: z_image_transformer.py --out DIR [--seed N] [--layout tiny|head128] [--weight-dtype f32|bf16]
    [--max-shard-bytes N]
"""

import json
import math
import os

import torch
import torch.nn.functional as F

import prism_ref
from prism_ref import safetensors_io

SEQ_MULTI_OF = 32
ADALN_EMBED_DIM = 256
FREQ_EMBED = 256
T_MID = 1024
PATCH, F_PATCH = 2, 1

CONFIG = {
    "_class_name": "ZImageTransformer2DModel",
    "_diffusers_version": "0.36.0.dev0",
    "all_f_patch_size": [1],
    "all_patch_size": [2],
    "axes_dims": [8, 12, 12],
    "axes_lens": [128, 32, 32],
    "cap_feat_dim": 48,
    "dim": 64,
    "in_channels": 16,
    "n_heads": 2,
    "n_kv_heads": 2,
    "n_layers": 2,
    "n_refiner_layers": 1,
    "norm_eps": 1e-05,
    "qk_norm": True,
    "rope_theta": 256.0,
    "t_scale": 1000.0,
}

MODEL_INDEX = {
    "_class_name": "ZImagePipeline",
    "_diffusers_version": "0.36.0.dev0",
    "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
    "text_encoder": ["transformers", "Qwen3Model"],
    "tokenizer": ["transformers", "Qwen2Tokenizer"],
    "transformer": ["diffusers", "ZImageTransformer2DModel"],
    "vae": ["diffusers", "AutoencoderKL"],
}

# Layouts: config overrides, each row's caption length and latent size (H, W).
LAYOUTS = {
    # Row 0: a 7-token caption (padded to 32) and an 8 x 12 latent (24 tokens, padded to 32);
    # row 1: a 64-token caption and a 16 x 16 latent (64 tokens), neither padded.
    "tiny": ({}, (7, 64), ((8, 12), (16, 16))),
    # The real head_dim (128) and axes_dims [32, 48, 48]; edge rows: a 1-token caption with a
    # 2 x 2 latent (one image token and 31 pad tokens), a 100-token caption with 24 x 32.
    "head128": ({"dim": 256, "n_heads": 2, "axes_dims": [32, 48, 48], "axes_lens": [256, 32, 32], "cap_feat_dim": 64},
                (1, 100), ((2, 2), (24, 32))),
}
SIGMAS = (0.75, 0.3125)  # exact in float32, and so is 1 - sigma


def ffn_hidden(c):
    return int(c["dim"] / 3 * 8)


def adaln_dim(c):
    return min(c["dim"], ADALN_EMBED_DIM)


# ---- weights ------------------------------------------------------------------------------

def block_names(prefix, c, modulation):
    d, hd, inter = c["dim"], c["dim"] // c["n_heads"], ffn_hidden(c)
    shapes = {
        "attention.to_q.weight": (d, d), "attention.to_k.weight": (d, d), "attention.to_v.weight": (d, d),
        "attention.to_out.0.weight": (d, d),
        "feed_forward.w1.weight": (inter, d), "feed_forward.w2.weight": (d, inter), "feed_forward.w3.weight": (inter, d),
        "attention_norm1.weight": (d,), "ffn_norm1.weight": (d,), "attention_norm2.weight": (d,),
        "ffn_norm2.weight": (d,),
    }
    if c["qk_norm"]:
        shapes.update({"attention.norm_q.weight": (hd,), "attention.norm_k.weight": (hd,)})
    if modulation:
        shapes.update({"adaLN_modulation.0.weight": (4 * d, adaln_dim(c)), "adaLN_modulation.0.bias": (4 * d,)})
    return {prefix + k: v for k, v in shapes.items()}


def param_shapes(c):
    d, a, key = c["dim"], adaln_dim(c), f"{PATCH}-{F_PATCH}"
    patch_in = F_PATCH * PATCH * PATCH * c["in_channels"]
    shapes = {
        f"all_x_embedder.{key}.weight": (d, patch_in), f"all_x_embedder.{key}.bias": (d,),
        f"all_final_layer.{key}.linear.weight": (patch_in, d), f"all_final_layer.{key}.linear.bias": (patch_in,),
        f"all_final_layer.{key}.adaLN_modulation.1.weight": (d, a),
        f"all_final_layer.{key}.adaLN_modulation.1.bias": (d,),
        "t_embedder.mlp.0.weight": (T_MID, FREQ_EMBED), "t_embedder.mlp.0.bias": (T_MID,),
        "t_embedder.mlp.2.weight": (a, T_MID), "t_embedder.mlp.2.bias": (a,),
        "cap_embedder.0.weight": (c["cap_feat_dim"],),
        "cap_embedder.1.weight": (d, c["cap_feat_dim"]), "cap_embedder.1.bias": (d,),
        "x_pad_token": (1, d), "cap_pad_token": (1, d),
    }
    for i in range(c["n_refiner_layers"]):
        shapes.update(block_names(f"noise_refiner.{i}.", c, True))
        shapes.update(block_names(f"context_refiner.{i}.", c, False))
    for i in range(c["n_layers"]):
        shapes.update(block_names(f"layers.{i}.", c, True))
    return shapes


def random_state(c, generator):
    """Weights on scales that keep every path visible in the output: linears uniform in
    +-1/sqrt(in) (nn.Linear's range), norm weights near 1, adaLN projections large enough
    that scales and gates are O(0.3..1), pad tokens O(1)."""
    state = {}
    for name, shape in param_shapes(c).items():
        if name.endswith("norm1.weight") or name.endswith("norm2.weight") or "norm_" in name or name == "cap_embedder.0.weight":
            t = 1.0 + 0.2 * torch.randn(shape, generator=generator, dtype=torch.float64)
        elif name.endswith("pad_token"):
            t = torch.randn(shape, generator=generator, dtype=torch.float64)
        elif "adaLN_modulation" in name:
            t = torch.randn(shape, generator=generator, dtype=torch.float64) / math.sqrt(shape[-1] if len(shape) > 1 else 1)
        else:
            fan_in = shape[1] if len(shape) == 2 else shape[0]
            bound = 1.0 / math.sqrt(fan_in if len(shape) == 2 else c["dim"])
            t = (torch.rand(shape, generator=generator, dtype=torch.float64) * 2 - 1) * bound
        state[name] = t
    return state


def write_weights(out_dir, state, max_shard_bytes):
    """diffusion_pytorch_model.safetensors, or shards plus its .index.json (diffusers' names)."""
    os.makedirs(out_dir, exist_ok=True)
    metadata = {"format": "pt"}
    nbytes = {n: t.numel() * t.element_size() for n, t in state.items()}
    if max_shard_bytes is None or sum(nbytes.values()) <= max_shard_bytes:
        safetensors_io.save_file(state, os.path.join(out_dir, "diffusion_pytorch_model.safetensors"), metadata)
        return
    shards, current, size = [], [], 0
    for name in state:
        if current and size + nbytes[name] > max_shard_bytes:
            shards.append(current)
            current, size = [], 0
        current.append(name)
        size += nbytes[name]
    shards.append(current)
    weight_map = {}
    for i, names in enumerate(shards):
        file_name = f"diffusion_pytorch_model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        safetensors_io.save_file({n: state[n] for n in names}, os.path.join(out_dir, file_name), metadata)
        weight_map.update({n: file_name for n in names})
    index = {"metadata": {"total_size": sum(nbytes.values())}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(out_dir, "diffusion_pytorch_model.safetensors.index.json"), "w", encoding="utf-8") as f:
        json.dump(index, f, indent=2)


# ---- the forward pass, float64 ------------------------------------------------------------

def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def linear(w, name, x, bias=True):
    y = x @ w[name + ".weight"].T
    return y + w[name + ".bias"] if bias else y


def timestep_embedding(t32, c):
    """[B, 256] float64: cos then sin of float32(t * t_scale) * float32 freqs (float32 products)."""
    half = FREQ_EMBED // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float64) / half).float()
    scaled = t32 * torch.tensor(c["t_scale"], dtype=torch.float32)
    args = (scaled[:, None] * freqs[None]).double()
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def rope_tables(c):
    """Per axis: float32 angles [axes_lens[a], axes_dims[a] / 2] (float64 frequencies)."""
    tables = []
    for d, e in zip(c["axes_dims"], c["axes_lens"]):
        freqs = 1.0 / (c["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        tables.append(torch.outer(torch.arange(e, dtype=torch.float64), freqs).float())
    return tables


def rope_angles(pos_ids, tables):
    """pos_ids [N, 3] -> float64 angles [N, head_dim / 2] (the float32 angles, widened)."""
    return torch.cat([tables[a][pos_ids[:, a]] for a in range(3)], dim=-1).double()


def apply_rope(x, angles):
    """x [B, S, H, D]; angles [B, S, D / 2]: (x[2i], x[2i+1]) times e^(i angle)."""
    xr = x.reshape(*x.shape[:-1], -1, 2)
    cos, sin = torch.cos(angles)[:, :, None, :], torch.sin(angles)[:, :, None, :]
    a, b = xr[..., 0], xr[..., 1]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(3)


def attention(w, p, c, x, mask, angles):
    """x [B, S, dim]; mask [B, S] bool (True: a real key); angles [B, S, D / 2]."""
    B, S, _ = x.shape
    heads = c["n_heads"]
    q = linear(w, p + "attention.to_q", x, False).unflatten(-1, (heads, -1))
    k = linear(w, p + "attention.to_k", x, False).unflatten(-1, (heads, -1))
    v = linear(w, p + "attention.to_v", x, False).unflatten(-1, (heads, -1))
    if c["qk_norm"]:
        q = rms_norm(q, w[p + "attention.norm_q.weight"], 1e-5)
        k = rms_norm(k, w[p + "attention.norm_k.weight"], 1e-5)
    q, k = apply_rope(q, angles), apply_rope(k, angles)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, H, S, D]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
    out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).flatten(2)
    return linear(w, p + "attention.to_out.0", out, False)


def block(w, p, c, x, mask, angles, t_emb):
    eps = c["norm_eps"]

    def ffn(h):
        return linear(w, p + "feed_forward.w2", F.silu(linear(w, p + "feed_forward.w1", h, False)) *
                      linear(w, p + "feed_forward.w3", h, False), False)

    if t_emb is not None:
        mod = linear(w, p + "adaLN_modulation.0", t_emb)[:, None, :]  # [B, 1, 4 dim]
        scale_msa, gate_msa, scale_mlp, gate_mlp = mod.chunk(4, dim=2)
        gate_msa, gate_mlp = gate_msa.tanh(), gate_mlp.tanh()
        scale_msa, scale_mlp = 1.0 + scale_msa, 1.0 + scale_mlp
        a = attention(w, p, c, rms_norm(x, w[p + "attention_norm1.weight"], eps) * scale_msa, mask, angles)
        x = x + gate_msa * rms_norm(a, w[p + "attention_norm2.weight"], eps)
        f = ffn(rms_norm(x, w[p + "ffn_norm1.weight"], eps) * scale_mlp)
        return x + gate_mlp * rms_norm(f, w[p + "ffn_norm2.weight"], eps)
    a = attention(w, p, c, rms_norm(x, w[p + "attention_norm1.weight"], eps), mask, angles)
    x = x + rms_norm(a, w[p + "attention_norm2.weight"], eps)
    return x + rms_norm(ffn(rms_norm(x, w[p + "ffn_norm1.weight"], eps)), w[p + "ffn_norm2.weight"], eps)


def grid(size, start):
    axes = [torch.arange(s0, s0 + n) for s0, n in zip(start, size)]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).flatten(0, 2)


def pad_batch(rows):
    """pad_sequence(batch_first) plus the key mask of the real (unpadded) entries."""
    longest = max(r.shape[0] for r in rows)
    out = torch.zeros((len(rows), longest) + tuple(rows[0].shape[1:]), dtype=rows[0].dtype)
    mask = torch.zeros((len(rows), longest), dtype=torch.bool)
    for i, r in enumerate(rows):
        out[i, :r.shape[0]] = r
        mask[i, :r.shape[0]] = True
    return out, mask


def forward(w, c, xs, t32, caps):
    """xs: [C, F, H, W] per row; t32: [B] float32 model time; caps: [L, cap_feat_dim] per row.
    Returns (outputs per row [C, F, H, W], unified sequences per row after the refiners)."""
    key, C = f"{PATCH}-{F_PATCH}", c["in_channels"]
    tables = rope_tables(c)
    t_emb = linear(w, "t_embedder.mlp.2", F.silu(linear(w, "t_embedder.mlp.0", timestep_embedding(t32, c))))

    imgs, img_pos, img_pad, sizes, cap_feats, cap_pos, cap_pad = [], [], [], [], [], [], []
    for x, cap in zip(xs, caps):
        cap_len = cap.shape[0]
        cap_padded = cap_len + (-cap_len) % SEQ_MULTI_OF
        cap_pos.append(grid((cap_padded, 1, 1), (1, 0, 0)))
        cap_pad.append(torch.arange(cap_padded) >= cap_len)
        cap_feats.append(torch.cat([cap, cap[-1:].repeat(cap_padded - cap_len, 1)]))
        _, Fr, H, W = x.shape
        sizes.append((Fr, H, W))
        ft, ht, wt = Fr // F_PATCH, H // PATCH, W // PATCH
        patches = x.view(C, ft, F_PATCH, ht, PATCH, wt, PATCH).permute(1, 3, 5, 2, 4, 6, 0)
        patches = patches.reshape(ft * ht * wt, F_PATCH * PATCH * PATCH * C)
        n = patches.shape[0]
        n_pad = (-n) % SEQ_MULTI_OF
        pos = grid((ft, ht, wt), (cap_padded + 1, 0, 0))
        img_pos.append(torch.cat([pos, torch.zeros((n_pad, 3), dtype=pos.dtype)]))
        img_pad.append(torch.arange(n + n_pad) >= n)
        imgs.append(torch.cat([patches, patches[-1:].repeat(n_pad, 1)]))

    x_lens = [r.shape[0] for r in imgs]
    x = linear(w, f"all_x_embedder.{key}", torch.cat(imgs))
    x[torch.cat(img_pad)] = w["x_pad_token"]
    x, x_mask = pad_batch(list(x.split(x_lens)))
    x_ang, _ = pad_batch([rope_angles(p, tables) for p in img_pos])
    for i in range(c["n_refiner_layers"]):
        x = block(w, f"noise_refiner.{i}.", c, x, x_mask, x_ang, t_emb)

    cap_lens = [r.shape[0] for r in cap_feats]
    cf = torch.cat(cap_feats)
    cf = linear(w, "cap_embedder.1", rms_norm(cf, w["cap_embedder.0.weight"], c["norm_eps"]))
    cf[torch.cat(cap_pad)] = w["cap_pad_token"]
    cf, cap_mask = pad_batch(list(cf.split(cap_lens)))
    cap_ang, _ = pad_batch([rope_angles(p, tables) for p in cap_pos])
    for i in range(c["n_refiner_layers"]):
        cf = block(w, f"context_refiner.{i}.", c, cf, cap_mask, cap_ang, None)

    unified_rows = [torch.cat([x[b, :x_lens[b]], cf[b, :cap_lens[b]]]) for b in range(len(xs))]
    unified, u_mask = pad_batch(unified_rows)
    u_ang, _ = pad_batch([torch.cat([x_ang[b, :x_lens[b]], cap_ang[b, :cap_lens[b]]]) for b in range(len(xs))])
    for i in range(c["n_layers"]):
        unified = block(w, f"layers.{i}.", c, unified, u_mask, u_ang, t_emb)

    fl = f"all_final_layer.{key}"
    scale = 1.0 + linear(w, fl + ".adaLN_modulation.1", F.silu(t_emb))
    normed = F.layer_norm(unified, (c["dim"],), eps=1e-6) * scale[:, None, :]
    out = linear(w, fl + ".linear", normed)
    results = []
    for b, (Fr, H, W) in enumerate(sizes):
        ft, ht, wt = Fr // F_PATCH, H // PATCH, W // PATCH
        tok = out[b, :ft * ht * wt].view(ft, ht, wt, F_PATCH, PATCH, PATCH, C)
        results.append(tok.permute(6, 0, 3, 1, 4, 2, 5).reshape(C, Fr, H, W))
    return results, unified_rows


def generate(out_dir, seed, weight_dtype, max_shard_bytes, layout="tiny"):
    overrides, caption_lens, latent_sizes = LAYOUTS[layout]
    c = dict(CONFIG)
    c.update(overrides)
    generator = prism_ref.seed_everything(seed)
    store_dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[weight_dtype]
    state = {k: v.to(store_dtype).contiguous() for k, v in random_state(c, generator).items()}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "model_index.json"), "w", encoding="utf-8") as f:
        json.dump(MODEL_INDEX, f, indent=2)
    transformer_dir = os.path.join(out_dir, "transformer")
    prism_ref.hf_dir.write_config(transformer_dir, c)
    write_weights(transformer_dir, state, max_shard_bytes)

    w = {k: v.to(torch.float64) for k, v in state.items()}  # exactly the stored values
    xs = [torch.randn((c["in_channels"], 1, h, wd), generator=generator).float() for h, wd in latent_sizes]
    caps = [torch.randn((n, c["cap_feat_dim"]), generator=generator).float() for n in caption_lens]
    sigma = torch.tensor(SIGMAS, dtype=torch.float32)
    t32 = 1.0 - sigma
    with torch.no_grad():
        outs, unified = forward(w, c, [x.double() for x in xs], t32, [cp.double() for cp in caps])
    tensors = {"t": t32, "sigma": sigma}
    for b in range(len(xs)):
        tensors[f"x_{b}"] = xs[b]
        tensors[f"cap_{b}"] = caps[b]
        tensors[f"out_{b}"] = outs[b].float()
        tensors[f"unified_{b}"] = unified[b].float()
    metadata = {"generator": "z_image_transformer.py", "layout": layout, "seed": str(seed), "weight_dtype": weight_dtype,
                "torch": torch.__version__}
    prism_ref.save_reference(out_dir, tensors, metadata)


def main():
    parser = prism_ref.generator_parser(__doc__.splitlines()[0])
    parser.add_argument("--layout", choices=sorted(LAYOUTS), default="tiny")
    parser.add_argument("--weight-dtype", choices=("f32", "bf16"), default="f32")
    parser.add_argument("--max-shard-bytes", type=int, default=None,
                        help="shard the weights (diffusion_pytorch_model.safetensors.index.json) above this size")
    a = parser.parse_args()
    generate(a.out, a.seed, a.weight_dtype, a.max_shard_bytes, a.layout)


if __name__ == "__main__":
    main()
