"""Self-tests of transformer_block.py, the reference the C++ parity test trusts: its files
have Llama's names, shapes and config keys; it is deterministic and indifferent to sharding;
and its outputs agree with a second, independent formulation in numpy float64 (RoPE as a
complex rotation, attention as one [T, T] matrix with a block-diagonal causal mask, GQA by
head index), read back through our safetensors reader.
"""

import json
import os
import tempfile
import unittest

import numpy as np
import torch

import transformer_block
from prism_ref import hf_dir

PREFIX = "model.layers.0."


def independent_forward(w, c, x, positions, cu_seqlens):
    """The block again, written differently from transformer_block.py. All float64 numpy."""
    eps, d = c["rms_norm_eps"], c["head_dim"]
    hq, hkv = c["num_attention_heads"], c["num_key_value_heads"]
    t = x.shape[0]

    def rms(v, weight):
        return v / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + eps) * weight

    def rope(v):  # pairs (i, i + d/2) as the complex number v_i + j v_{i+d/2}
        inv_freq = c["rope_theta"] ** (-np.arange(d // 2) * 2.0 / d)
        z = (v[..., :d // 2] + 1j * v[..., d // 2:]) * np.exp(1j * positions[:, None, None] * inv_freq)
        return np.concatenate([z.real, z.imag], axis=-1)

    h = rms(x, w["input_layernorm.weight"])
    q = rope((h @ w["self_attn.q_proj.weight"].T).reshape(t, hq, d))
    k = rope((h @ w["self_attn.k_proj.weight"].T).reshape(t, hkv, d))
    v = (h @ w["self_attn.v_proj.weight"].T).reshape(t, hkv, d)
    seq = np.searchsorted(cu_seqlens, np.arange(t), side="right")  # sequence of each token
    allowed = (seq[:, None] == seq[None, :]) & (np.arange(t)[None, :] <= np.arange(t)[:, None])
    kv_head = np.arange(hq) // (hq // hkv)
    scores = np.einsum("qhd,khd->hqk", q, k[:, kv_head]) / np.sqrt(d)
    scores = np.where(allowed[None], scores, -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    attn = np.einsum("hqk,khd->qhd", p, v[:, kv_head])
    residual = x + attn.reshape(t, -1) @ w["self_attn.o_proj.weight"].T
    h2 = rms(residual, w["post_attention_layernorm.weight"])
    gate = h2 @ w["mlp.gate_proj.weight"].T
    act = gate / (1 + np.exp(-gate)) * (h2 @ w["mlp.up_proj.weight"].T)
    out = residual + act @ w["mlp.down_proj.weight"].T
    return {"input_norm": h, "q": q, "k": k, "v": v, "attn": attn, "residual": residual,
            "mlp_act": act, "out": out}


class TransformerBlockReference(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.threads = torch.get_num_threads()
        cls.deterministic = torch.are_deterministic_algorithms_enabled()
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dirs = {}
        for name, kwargs in {"f32": {}, "sharded": {"max_shard_bytes": 600_000},
                             "bf16": {"weight_dtype": "bf16"}}.items():
            cls.dirs[name] = os.path.join(cls.tmp.name, name)
            transformer_block.generate(cls.dirs[name], seed=3, **kwargs)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()
        torch.set_num_threads(cls.threads)  # generate() seeds process-wide state
        torch.use_deterministic_algorithms(cls.deterministic)

    def test_llama_names_shapes_and_config(self):
        with open(os.path.join(self.dirs["f32"], "config.json")) as f:
            c = json.load(f)
        hidden, inter, d = c["hidden_size"], c["intermediate_size"], c["head_dim"]
        self.assertIn(d, (64, 80, 96, 128))  # what the C++ attention kernels support
        expected = {
            "input_layernorm.weight": [hidden],
            "post_attention_layernorm.weight": [hidden],
            "self_attn.q_proj.weight": [c["num_attention_heads"] * d, hidden],
            "self_attn.k_proj.weight": [c["num_key_value_heads"] * d, hidden],
            "self_attn.v_proj.weight": [c["num_key_value_heads"] * d, hidden],
            "self_attn.o_proj.weight": [hidden, c["num_attention_heads"] * d],
            "mlp.gate_proj.weight": [inter, hidden],
            "mlp.up_proj.weight": [inter, hidden],
            "mlp.down_proj.weight": [hidden, inter],
        }
        w = hf_dir.read_weights(self.dirs["f32"])
        self.assertEqual({k: list(v.shape) for k, v in w.items()},
                         {PREFIX + k: s for k, s in expected.items()})
        self.assertTrue(all(v.dtype == torch.float32 for v in w.values()))
        self.assertTrue(all(v.dtype == torch.bfloat16 for v in hf_dir.read_weights(self.dirs["bf16"]).values()))

    def test_reference_inputs(self):
        r = hf_dir.load_reference(self.dirs["f32"])
        lens = transformer_block.SEQ_LENS
        self.assertEqual(r["cu_seqlens"].tolist(), [0, lens[0], lens[0] + lens[1]])
        self.assertEqual(r["positions"].tolist(), list(range(lens[0])) + list(range(lens[1])))
        self.assertEqual(r["positions"].dtype, torch.int32)
        self.assertEqual(r["cu_seqlens"].dtype, torch.int32)

    def test_deterministic_and_sharding_changes_nothing(self):
        self.assertTrue(os.path.exists(os.path.join(self.dirs["sharded"], hf_dir.INDEX_FILE)))
        a, b = hf_dir.read_weights(self.dirs["f32"]), hf_dir.read_weights(self.dirs["sharded"])
        self.assertEqual(set(a), set(b))
        for k in a:
            self.assertTrue(torch.equal(a[k], b[k]), k)
        ra, rb = hf_dir.load_reference(self.dirs["f32"]), hf_dir.load_reference(self.dirs["sharded"])
        for k in ra:
            self.assertTrue(torch.equal(ra[k], rb[k]), k)

    def test_matches_independent_formulation(self):
        for name in ("f32", "bf16"):
            with open(os.path.join(self.dirs[name], "config.json")) as f:
                c = json.load(f)
            w = {k[len(PREFIX):]: v.double().numpy() for k, v in hf_dir.read_weights(self.dirs[name]).items()}
            r = hf_dir.load_reference(self.dirs[name])
            got = independent_forward(w, c, r["x"].double().numpy(), r["positions"].numpy(),
                                      r["cu_seqlens"].numpy())
            for k, v in got.items():
                ref = r[k].double().numpy()
                err = np.abs(v - ref).max() / np.abs(ref).max()
                self.assertLess(err, 1e-6, f"{name} {k}")  # float32 storage of the outputs

    def test_attention_is_peaked(self):
        # The init promises a trained model's peaked softmax: top probability well above
        # uniform for most queries past the first few positions.
        r = hf_dir.load_reference(self.dirs["f32"])
        q, k = r["q"].double(), r["k"].double()
        b, e = int(r["cu_seqlens"][1]), int(r["cu_seqlens"][2])
        scores = torch.einsum("qd,kd->qk", q[b:e, 0], k[b:e, 0]) / 8.0
        scores = scores.masked_fill(~torch.ones(e - b, e - b, dtype=torch.bool).tril(), float("-inf"))
        top = scores.softmax(-1).max(-1).values[4:]
        uniform = 1.0 / torch.arange(5, e - b + 1, dtype=torch.float64)
        self.assertGreater(float((top / uniform).median()), 2.0)


if __name__ == "__main__":
    unittest.main()
