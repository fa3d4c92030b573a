#!/usr/bin/env python3
"""The PyTorch peer of bench/image_bench, and the writer of its random real-size checkpoints.

The model code is not restated here: the Z-Image transformer is tests/reference/
z_image_transformer.py's forward (a from-scratch re-statement of diffusers'
ZImageTransformer2DModel) and the Qwen3 text encoder is tests/reference/llama_family.py's
CausalLM. Both are run in the dtype their weights are loaded in, the way diffusers and
transformers run a bf16 model on CPU with torch 1.13 (no scaled_dot_product_attention there:
eager matmul attention with a key mask): a few of the reference's helpers are swapped for
dtype-following ones (_bf16_execution): linears cast their input to the weight's dtype, RMSNorms
take their variance in float32 and return the input's dtype, RoPE rotates in float32 and returns
the input's dtype. t_embedder stays float32 (its input is the float sinusoid).

    image_peer.py write-transformer --out DIR --layers K [--quick] [--seed S]
        DIR/model_index.json, DIR/transformer/config.json (Tongyi-MAI/Z-Image-Turbo's
        transformer config with n_layers = K; --quick: a tiny config with the real head_dim)
        and DIR/transformer/diffusion_pytorch_model-*.safetensors + its index (bf16, shards of
        about 2 GB, each drawn, written and freed in turn: the full model does not fit twice
        in memory). Scales as z_image_transformer.random_state's, drawn in float32.
    image_peer.py write-text --out DIR --layers K [--quick]
        A Qwen3 directory at Qwen3-4B's sizes (Z-Image's text_encoder) with K layers, bf16
        (llama_family.random_state).
    image_peer.py check --model DIR --out FILE
        Runs one small row (32 x 32 latent, 40-token caption, t = 0.6) in bf16 and in float32 on
        the same (bf16-valued) weights; FILE (safetensors): x, cap, t, out_bf16, out_f32.
    image_peer.py run-transformer --model DIR --out JSON --latents 64x64,128x128 --caption 128
                                  [--passes 1] [--threads 2] [--ops]
        Per latent size: one untimed pass, then --passes timed passes of one row: the best
        pass's seconds ("total"), of all but the main layers ("fixed"), and of the fastest
        single main block over the passes ("layer"); noise_refiner, context_refiner, layers. --ops:
        the block's linears (x @ W^T at the block's shapes) and its attention core (q k^T,
        mask, softmax, @ v) alone at the pass's unified sequence length, best of 3.
    image_peer.py run-text --model DIR --out JSON --tokens 128 [--passes 2] [--threads 2]
        hidden_states of one prompt through every layer of the checkpoint, best of --passes.
    image_peer.py write-vae --out DIR [--quick]
        An AutoencoderKL vae/ folder at FLUX.1's sizes (Z-Image's VAE; --quick: the tiny layout),
        f32 random weights (vae_decoder.py's).
    image_peer.py run-vae --model DIR --out JSON --latents 64x64,128x128 [--threads 2]
        vae_decoder.decode (diffusers' AutoencoderKL.decode restated) in float32, whole (not
        tiled, as the Z-Image pipeline decodes), one image per latent size after a small
        untimed one; seconds per size.
Run with OMP_WAIT_POLICY=PASSIVE (see embed_peer.py).
"""

import argparse
import json
import math
import os
import resource
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import llama_family as lf  # noqa: E402
import vae_decoder  # noqa: E402
import z_image_transformer as zt  # noqa: E402
from prism_ref import hf_dir, safetensors_io  # noqa: E402

# Tongyi-MAI/Z-Image-Turbo transformer/config.json (n_layers set by --layers).
Z_IMAGE_TURBO = {
    "_class_name": "ZImageTransformer2DModel", "_diffusers_version": "0.36.0.dev0",
    "all_f_patch_size": [1], "all_patch_size": [2], "axes_dims": [32, 48, 48], "axes_lens": [1024, 512, 512],
    "cap_feat_dim": 2560, "dim": 3840, "in_channels": 16, "n_heads": 30, "n_kv_heads": 30, "n_layers": 30,
    "n_refiner_layers": 2, "norm_eps": 1e-05, "qk_norm": True, "rope_theta": 256.0, "t_scale": 1000.0,
}
# --quick: the real head_dim and axes, two heads.
Z_IMAGE_QUICK = dict(Z_IMAGE_TURBO, dim=256, n_heads=2, n_kv_heads=2, cap_feat_dim=128, n_refiner_layers=1,
                     axes_lens=[256, 64, 64])
# Qwen3-4B (Z-Image's text_encoder/config.json), layers set by --layers.
QWEN3_4B = dict(hidden=2560, heads=32, kv_heads=8, head_dim=128, intermediate=9728, vocab=151936)
QWEN3_QUICK = dict(hidden=128, heads=4, kv_heads=2, head_dim=32, intermediate=384, vocab=4096)

SHARD_BYTES = 2 << 30


# ---- write ------------------------------------------------------------------------------------

def draw(name, shape, c):
    """One tensor, float32, on z_image_transformer.random_state's scales."""
    if (name.endswith("norm1.weight") or name.endswith("norm2.weight") or "norm_" in name
            or name == "cap_embedder.0.weight"):
        return 1.0 + 0.2 * torch.randn(shape)
    if name.endswith("pad_token"):
        return torch.randn(shape)
    if "adaLN_modulation" in name:
        return torch.randn(shape) / math.sqrt(shape[-1] if len(shape) > 1 else 1)
    fan_in = shape[1] if len(shape) == 2 else c["dim"]
    bound = 1.0 / math.sqrt(fan_in)
    return torch.empty(shape).uniform_(-bound, bound)


def write_transformer(args):
    c = dict(Z_IMAGE_QUICK if args.quick else Z_IMAGE_TURBO, n_layers=args.layers)
    torch.manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "model_index.json"), "w", encoding="utf-8") as f:
        json.dump(zt.MODEL_INDEX, f, indent=2)
    tdir = os.path.join(args.out, "transformer")
    hf_dir.write_config(tdir, c)
    shapes = zt.param_shapes(c)
    shards, current, size = [], [], 0
    for name, shape in shapes.items():
        nbytes = 2 * math.prod(shape)
        if current and size + nbytes > SHARD_BYTES:
            shards.append(current)
            current, size = [], 0
        current.append(name)
        size += nbytes
    shards.append(current)
    weight_map, total = {}, 0
    for i, names in enumerate(shards):
        file_name = f"diffusion_pytorch_model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        state = {n: draw(n, shapes[n], c).to(torch.bfloat16) for n in names}
        safetensors_io.save_file(state, os.path.join(tdir, file_name), {"format": "pt"})
        total += sum(t.numel() * 2 for t in state.values())
        weight_map.update({n: file_name for n in names})
        del state
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(tdir, "diffusion_pytorch_model.safetensors.index.json"), "w", encoding="utf-8") as f:
        json.dump(index, f, indent=2)


def write_text(args):
    sizes = dict(QWEN3_QUICK if args.quick else QWEN3_4B, layers=args.layers)
    c = lf.make_config("qwen3", lf.LAYOUTS["qwen3"], sizes, "bf16", False, False)
    torch.manual_seed(args.seed)
    hf_dir.write_model_dir(args.out, c, lf.random_state(c, torch.bfloat16), SHARD_BYTES)


def write_vae(args):
    vae_decoder.generate(args.out, "tiny" if args.quick else "real", args.seed, "f32", reference=False)


# ---- running the reference in a reduced dtype ---------------------------------------------------

def _bf16_execution():
    """Swaps the reference's float64-exact helpers for dtype-following ones (module globals,
    so the reference's forward picks them up)."""
    def linear(w, name, x, bias=True):
        weight = w[name + ".weight"]
        return F.linear(x.to(weight.dtype), weight, w[name + ".bias"] if bias else None)

    def rms_norm(x, weight, eps):
        y = x.float()
        y = (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
        return y * weight.to(x.dtype)

    exact_rope = zt.apply_rope

    def apply_rope(x, angles):
        return exact_rope(x.float(), angles.float()).to(x.dtype)

    zt.linear, zt.rms_norm, zt.apply_rope = linear, rms_norm, apply_rope

    exact_cos_sin = lf.rope_cos_sin

    def rope_cos_sin(positions, inv_freq):  # transformers casts cos, sin to the states' dtype
        cos, sin = exact_cos_sin(positions, inv_freq)
        return cos.to(_bf16_execution.dtype), sin.to(_bf16_execution.dtype)

    def norm_forward(self, x):  # transformers' Qwen3RMSNorm: float32 variance
        y = x.float()
        return self.weight * (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)

    lf.rope_cos_sin = rope_cos_sin
    lf.RMSNorm.forward = norm_forward


_bf16_execution.dtype = torch.bfloat16
_bf16_execution()

# Seconds of each block call of the running pass, by prefix ("noise_refiner",
# "context_refiner", "layers").
STAGE_SECONDS = {}
_exact_block = zt.block


def _timed_block(w, p, c, x, mask, angles, t_emb):
    t0 = time.perf_counter()
    y = _exact_block(w, p, c, x, mask, angles, t_emb)
    STAGE_SECONDS.setdefault(p.split(".")[0], []).append(time.perf_counter() - t0)
    return y


zt.block = _timed_block


def load_transformer(model_dir, dtype):
    tdir = os.path.join(model_dir, "transformer")
    with open(os.path.join(tdir, "config.json"), encoding="utf-8") as f:
        c = json.load(f)
    with open(os.path.join(tdir, "diffusion_pytorch_model.safetensors.index.json"), encoding="utf-8") as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    w = {}
    for name, t in ((n, t) for fn in files for n, t in safetensors_io.load_file(os.path.join(tdir, fn)).items()):
        keep_f32 = name.startswith("t_embedder.")
        w[name] = t.to(torch.float32 if keep_f32 or dtype == torch.float32 else dtype)
    return c, w


def one_pass(w, c, latent, cap, t):
    STAGE_SECONDS.clear()
    t0 = time.perf_counter()
    outs, _ = zt.forward(w, c, [latent], torch.tensor([t], dtype=torch.float32), [cap])
    total = time.perf_counter() - t0
    layers = STAGE_SECONDS.get("layers", [])
    # fixed: all but the main layers (embedding, refiners, final layer); layer: the fastest
    # main block (they are all the same shapes: the best repetition of one).
    return outs[0], {"total": total, "fixed": total - sum(layers), "layer": min(layers) if layers else 0.0,
                     **{k: sum(v) for k, v in STAGE_SECONDS.items()}}


def vm_hwm_bytes():
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def check(args):
    torch.manual_seed(args.seed)
    out = {}
    for name, dtype in (("bf16", torch.bfloat16), ("f32", torch.float32)):
        c, w = load_transformer(args.model, dtype)
        if not out:
            out["x"] = torch.randn(c["in_channels"], 1, 32, 32)
            out["cap"] = torch.randn(40, c["cap_feat_dim"])
            out["t"] = torch.tensor([0.6], dtype=torch.float32)
        with torch.inference_mode():
            y, _ = one_pass(w, c, out["x"], out["cap"], 0.6)
        out["out_" + name] = y.float().contiguous()
        del w
    safetensors_io.save_file(out, args.out, {"generator": "image_peer.py check"})


def time_best(fn, reps):
    best = 1e30
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def block_ops(c, tokens):
    """Seconds of one main block's linears and of its attention core, alone, at `tokens`."""
    d, heads, inter = c["dim"], c["n_heads"], zt.ffn_hidden(c)
    x = torch.randn(tokens, d).to(torch.bfloat16)
    xi = torch.randn(tokens, inter).to(torch.bfloat16)
    weights = {n: (torch.rand(shape) * 0.02).to(torch.bfloat16) for n, shape in (
        ("to_q", (d, d)), ("to_k", (d, d)), ("to_v", (d, d)), ("to_out", (d, d)),
        ("w1", (inter, d)), ("w3", (inter, d)), ("w2", (d, inter)))}

    def linears():
        for n, wt in weights.items():
            F.linear(xi if n == "w2" else x, wt)

    q, k, v = (torch.randn(1, heads, tokens, d // heads).to(torch.bfloat16) for _ in range(3))
    mask = torch.ones(1, tokens, dtype=torch.bool)

    def attention():  # z_image_transformer.attention's core, as it runs it
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
        torch.softmax(scores, dim=-1) @ v

    with torch.inference_mode():
        linears()
        attention()
        return {"linear_s": time_best(linears, 3), "attention_s": time_best(attention, 3), "tokens": tokens}


def run_transformer(args):
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    c, w = load_transformer(args.model, torch.bfloat16)
    result = {"threads": args.threads, "load_s": time.perf_counter() - t0, "sizes": [],
              "n_layers": c["n_layers"], "dtype": "bf16"}
    torch.manual_seed(args.seed)
    for hw in args.latents:
        h, wd = hw
        latent = torch.randn(c["in_channels"], 1, h, wd)
        cap = torch.randn(args.caption, c["cap_feat_dim"])
        with torch.inference_mode():
            one_pass(w, c, latent, cap, 0.5)  # untimed: allocator, first touch
            best = {}
            for _ in range(args.passes):
                _, s = one_pass(w, c, latent, cap, 0.5)
                best = {k: min(v, best.get(k, v)) for k, v in s.items()}
        image_tokens = (h // 2) * (wd // 2)
        entry = {"latent": [h, wd], "image_tokens": image_tokens, "caption_tokens": args.caption, "seconds": best}
        if args.ops:
            tokens = zt.SEQ_MULTI_OF * (-(-image_tokens // zt.SEQ_MULTI_OF) - (-args.caption // zt.SEQ_MULTI_OF))
            entry["ops"] = block_ops(c, tokens)
        result["sizes"].append(entry)
    result["vm_hwm_bytes"] = vm_hwm_bytes()
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)


def run_text(args):
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    with open(os.path.join(args.model, "config.json"), encoding="utf-8") as f:
        c = json.load(f)
    model = lf.CausalLM(c).to(torch.bfloat16)
    model.load_state_dict(hf_dir.read_weights(args.model))
    load_s = time.perf_counter() - t0
    ids = torch.randint(0, c["vocab_size"] - 1, (args.tokens,))
    with torch.inference_mode():
        model.hidden_states(ids)
        best = time_best(lambda: model.hidden_states(ids), args.passes)
    result = {"threads": args.threads, "load_s": load_s, "tokens": args.tokens, "seconds": best,
              "num_hidden_layers": c["num_hidden_layers"], "vm_hwm_bytes": vm_hwm_bytes()}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)


def run_vae(args):
    torch.set_num_threads(args.threads)
    with open(os.path.join(args.model, "config.json"), encoding="utf-8") as f:
        c = json.load(f)
    w = {n: t.float() for n, t in safetensors_io.load_file(os.path.join(args.model, vae_decoder.WEIGHTS_FILE)).items()}
    result = {"threads": args.threads, "sizes": []}
    with torch.inference_mode():
        vae_decoder.decode(torch.randn(1, c["latent_channels"], 8, 8), w, c)
        for h, wd in args.latents:
            z = torch.randn(1, c["latent_channels"], h, wd)
            t0 = time.perf_counter()
            vae_decoder.decode(z, w, c)
            result["sizes"].append({"latent": [h, wd], "seconds": time.perf_counter() - t0})
    result["vm_hwm_bytes"] = vm_hwm_bytes()
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("write-transformer", "write-text", "write-vae"):
        p = sub.add_parser(name)
        p.add_argument("--out", required=True)
        p.add_argument("--layers", type=int, required=name != "write-vae")
        p.add_argument("--quick", action="store_true")
        p.add_argument("--seed", type=int, default=1234)
    p = sub.add_parser("check")
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=7)
    p = sub.add_parser("run-transformer")
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--latents", type=lambda s: [tuple(int(v) for v in x.split("x")) for x in s.split(",")],
                   required=True)
    p.add_argument("--caption", type=int, default=128)
    p.add_argument("--passes", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ops", action="store_true")
    p.add_argument("--seed", type=int, default=7)
    p = sub.add_parser("run-vae")
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--latents", type=lambda s: [tuple(int(v) for v in x.split("x")) for x in s.split(",")],
                   required=True)
    p.add_argument("--threads", type=int, default=2)
    p = sub.add_parser("run-text")
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    {"write-transformer": write_transformer, "write-text": write_text, "write-vae": write_vae, "check": check,
     "run-transformer": run_transformer, "run-text": run_text, "run-vae": run_vae}[a.cmd](a)


if __name__ == "__main__":
    main()
