"""Self-tests of z_image_transformer.py, the reference the C++ parity test trusts: its files
have diffusers' layout, names and config keys; it is deterministic and indifferent to
sharding; and its outputs agree with a second, independent formulation in numpy float64
(each row alone, no batch padding or masks; patches gathered by index; RoPE as a complex
rotation; attention as one [S, S] matrix), read back through our safetensors reader.
"""

import json
import math
import os
import tempfile
import unittest

import numpy as np
import torch

import z_image_transformer as zi
from prism_ref import hf_dir, safetensors_io


def read_transformer(folder):
    index = os.path.join(folder, "diffusion_pytorch_model.safetensors.index.json")
    if not os.path.exists(index):
        return safetensors_io.load_file(os.path.join(folder, "diffusion_pytorch_model.safetensors"))
    with open(index, encoding="utf-8") as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    out = {}
    for name in files:
        out.update(safetensors_io.load_file(os.path.join(folder, name)))
    return out


def independent_row(w, c, x, t, cap):
    """One row: x [C, 1, H, W], t float32 model time, cap [L, cap_feat_dim]. numpy float64."""
    eps, dim, heads = c["norm_eps"], c["dim"], c["n_heads"]
    hd = dim // heads

    def rms(v, weight, e=eps):
        return v / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + e) * weight

    def lin(name, v, bias=True):
        y = v @ w[name + ".weight"].T
        return y + w[name + ".bias"] if bias else y

    def silu(v):
        return v / (1 + np.exp(-v))

    # Timestep: float32 argument, float64 cos/sin.
    half = 128
    freqs = np.exp(-math.log(10000.0) * np.arange(half) / half).astype(np.float32)
    arg = (np.float32(t) * np.float32(c["t_scale"])) * freqs
    t_emb = lin("t_embedder.mlp.2", silu(lin("t_embedder.mlp.0", np.concatenate([np.cos(arg.astype(np.float64)),
                                                                                  np.sin(arg.astype(np.float64))]))))

    C, _, H, W = x.shape
    ht, wt = H // 2, W // 2
    n = ht * wt
    patches = np.zeros((n, 4 * C))
    for hh in range(ht):
        for ww in range(wt):
            for ph in range(2):
                for pw in range(2):
                    patches[hh * wt + ww, (ph * 2 + pw) * C:(ph * 2 + pw + 1) * C] = x[:, 0, 2 * hh + ph, 2 * ww + pw]
    n_pad = -n % 32
    L = cap.shape[0]
    l_pad = -L % 32
    xi = np.concatenate([lin("all_x_embedder.2-1", patches), np.repeat(w["x_pad_token"], n_pad, axis=0)])
    ci = lin("cap_embedder.1", rms(cap, w["cap_embedder.0.weight"]))
    ci = np.concatenate([ci, np.repeat(w["cap_pad_token"], l_pad, axis=0)])

    cap_padded = L + l_pad
    img_ids = [(cap_padded + 1, i // wt, i % wt) for i in range(n)] + [(0, 0, 0)] * n_pad
    cap_ids = [(1 + i, 0, 0) for i in range(cap_padded)]

    def rotation(ids):  # [S, hd / 2] complex
        parts = []
        for a, (d, _) in enumerate(zip(c["axes_dims"], c["axes_lens"])):
            freq = 1.0 / (c["rope_theta"] ** (np.arange(0, d, 2) / d))
            ang = (np.array([p[a] for p in ids], dtype=np.float64)[:, None] * freq).astype(np.float32)
            parts.append(np.exp(1j * ang.astype(np.float64)))
        return np.concatenate(parts, axis=-1)

    def block(p, v, rot, mod):
        s = v.shape[0]

        def attn(h):
            q = (h @ w[p + "attention.to_q.weight"].T).reshape(s, heads, hd)
            k = (h @ w[p + "attention.to_k.weight"].T).reshape(s, heads, hd)
            vv = (h @ w[p + "attention.to_v.weight"].T).reshape(s, heads, hd)
            q, k = rms(q, w[p + "attention.norm_q.weight"], 1e-5), rms(k, w[p + "attention.norm_k.weight"], 1e-5)
            qc = (q[..., 0::2] + 1j * q[..., 1::2]) * rot[:, None, :]
            kc = (k[..., 0::2] + 1j * k[..., 1::2]) * rot[:, None, :]
            q = np.stack([qc.real, qc.imag], axis=-1).reshape(s, heads, hd)
            k = np.stack([kc.real, kc.imag], axis=-1).reshape(s, heads, hd)
            out = np.zeros((s, heads, hd))
            for hh in range(heads):
                sc = q[:, hh] @ k[:, hh].T / math.sqrt(hd)
                pr = np.exp(sc - sc.max(axis=1, keepdims=True))
                out[:, hh] = (pr / pr.sum(axis=1, keepdims=True)) @ vv[:, hh]
            return out.reshape(s, dim) @ w[p + "attention.to_out.0.weight"].T

        def ffn(h):
            g = h @ w[p + "feed_forward.w1.weight"].T
            return (silu(g) * (h @ w[p + "feed_forward.w3.weight"].T)) @ w[p + "feed_forward.w2.weight"].T

        if mod:
            m = lin(p + "adaLN_modulation.0", t_emb)
            s_msa, g_msa, s_mlp, g_mlp = np.split(m, 4)
            v = v + np.tanh(g_msa) * rms(attn(rms(v, w[p + "attention_norm1.weight"]) * (1 + s_msa)),
                                         w[p + "attention_norm2.weight"])
            return v + np.tanh(g_mlp) * rms(ffn(rms(v, w[p + "ffn_norm1.weight"]) * (1 + s_mlp)),
                                            w[p + "ffn_norm2.weight"])
        v = v + rms(attn(rms(v, w[p + "attention_norm1.weight"])), w[p + "attention_norm2.weight"])
        return v + rms(ffn(rms(v, w[p + "ffn_norm1.weight"])), w[p + "ffn_norm2.weight"])

    ri, rc = rotation(img_ids), rotation(cap_ids)
    for i in range(c["n_refiner_layers"]):
        xi = block(f"noise_refiner.{i}.", xi, ri, True)
        ci = block(f"context_refiner.{i}.", ci, rc, False)
    u = np.concatenate([xi, ci])
    ru = np.concatenate([ri, rc])
    unified = u.copy()
    for i in range(c["n_layers"]):
        u = block(f"layers.{i}.", u, ru, True)
    scale = 1 + lin("all_final_layer.2-1.adaLN_modulation.1", silu(t_emb))
    mu = u.mean(axis=-1, keepdims=True)
    ln = (u - mu) / np.sqrt(((u - mu) ** 2).mean(axis=-1, keepdims=True) + 1e-6)
    tok = lin("all_final_layer.2-1.linear", ln * scale)[:n]
    out = np.zeros((C, 1, H, W))
    for hh in range(ht):
        for ww in range(wt):
            for ph in range(2):
                for pw in range(2):
                    out[:, 0, 2 * hh + ph, 2 * ww + pw] = tok[hh * wt + ww, (ph * 2 + pw) * C:(ph * 2 + pw + 1) * C]
    return out, unified


class ZImageTransformerReference(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = os.path.join(cls.tmp.name, "f32")
        zi.generate(cls.dir, 0, "f32", None)
        cls.ref = hf_dir.load_reference(cls.dir)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_layout_names_and_config(self):
        with open(os.path.join(self.dir, "model_index.json"), encoding="utf-8") as f:
            self.assertEqual(json.load(f)["transformer"], ["diffusers", "ZImageTransformer2DModel"])
        with open(os.path.join(self.dir, "transformer", "config.json"), encoding="utf-8") as f:
            config = json.load(f)
        self.assertEqual(config["_class_name"], "ZImageTransformer2DModel")
        self.assertEqual(sum(config["axes_dims"]), config["dim"] // config["n_heads"])
        w = read_transformer(os.path.join(self.dir, "transformer"))
        self.assertEqual(set(w), set(zi.param_shapes(config)))
        for name in ("all_x_embedder.2-1.weight", "layers.1.attention.to_out.0.weight", "x_pad_token",
                     "noise_refiner.0.adaLN_modulation.0.bias", "context_refiner.0.attention.norm_k.weight",
                     "all_final_layer.2-1.adaLN_modulation.1.weight", "t_embedder.mlp.2.bias"):
            self.assertIn(name, w)
        self.assertNotIn("context_refiner.0.adaLN_modulation.0.weight", w)
        self.assertEqual(tuple(w["layers.0.feed_forward.w1.weight"].shape), (170, 64))

    def test_deterministic_and_sharding_indifferent(self):
        other = os.path.join(self.tmp.name, "sharded")
        zi.generate(other, 0, "f32", 100000)
        self.assertTrue(os.path.exists(os.path.join(other, "transformer",
                                                    "diffusion_pytorch_model.safetensors.index.json")))
        a = read_transformer(os.path.join(self.dir, "transformer"))
        b = read_transformer(os.path.join(other, "transformer"))
        self.assertEqual(set(a), set(b))
        for k in a:
            self.assertTrue(torch.equal(a[k], b[k]), k)
        again = hf_dir.load_reference(other)
        for k in self.ref:
            self.assertTrue(torch.equal(self.ref[k], again[k]), k)

    def test_matches_an_independent_per_row_formulation(self):
        head128 = os.path.join(self.tmp.name, "head128")
        zi.generate(head128, 0, "f32", None, "head128")
        for d in (self.dir, head128):
            ref = hf_dir.load_reference(d)
            with open(os.path.join(d, "transformer", "config.json"), encoding="utf-8") as f:
                c = json.load(f)
            w = {k: v.double().numpy() for k, v in read_transformer(os.path.join(d, "transformer")).items()}
            for b in range(2):
                out, unified = independent_row(w, c, ref[f"x_{b}"].double().numpy(), float(ref["t"][b]),
                                               ref[f"cap_{b}"].double().numpy())
                ref_out = ref[f"out_{b}"].double().numpy()
                # The reference stores float32: agreement to its rounding.
                self.assertLess(np.abs(out - ref_out).max(), 1e-6 * np.abs(ref_out).max(), f"{d} row {b}")
                ref_u = ref[f"unified_{b}"].double().numpy()
                self.assertLess(np.abs(unified - ref_u).max(), 1e-6 * np.abs(ref_u).max(), f"{d} row {b} unified")


if __name__ == "__main__":
    unittest.main()
