"""Self-tests of llama_family.py, the reference the C++ Llama parity test trusts: each layout's
files carry the family's real parameter names and config keys; the logits agree with a second,
independent formulation in numpy float64 (RoPE as complex rotation of (x[i], x[i + D/2])
pairs, Llama 3 scaling from its published formula in float64, GQA by head index arithmetic,
Qwen3's q/k norms per head, the whole prompt at once) read back through our safetensors
reader; the stored greedy continuation is the argmax chain of those logits; the stored hidden
states are that formulation's layer outputs; --base-model writes Qwen3Model's names;
--no-reference writes benchmark models.
"""

import json
import math
import os
import tempfile
import unittest

import numpy as np
import torch

import llama_family
from prism_ref import hf_dir


def independent_inv_freq(c):
    d = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    inv = c["rope_theta"] ** (-np.arange(0, d, 2) / d)
    s = c.get("rope_scaling")
    if s and s.get("rope_type", s.get("type")) == "llama3":
        old = s["original_max_position_embeddings"]
        out = []
        for f in inv:
            wavelen = 2 * math.pi / f
            if wavelen < old / s["high_freq_factor"]:
                out.append(f)
            elif wavelen > old / s["low_freq_factor"]:
                out.append(f / s["factor"])
            else:
                smooth = (old / wavelen - s["low_freq_factor"]) / (s["high_freq_factor"] - s["low_freq_factor"])
                out.append((1 - smooth) * f / s["factor"] + smooth * f)
        inv = np.array(out)
    return inv


def independent_logits(w, c, ids, states=None):
    """[L, vocab] float64 numpy logits of one sequence from {name: array}; states, a list, gets
    the hidden_states tuple (embeddings, each layer's output, the last one normed)."""
    hq, hkv = c["num_attention_heads"], c["num_key_value_heads"]
    d = c.get("head_dim") or c["hidden_size"] // hq
    eps, n = c["rms_norm_eps"], len(ids)
    rot = np.exp(1j * np.arange(n)[:, None] * independent_inv_freq(c)[None, :])  # [L, D/2]

    def norm(x, name):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w[name]

    def lin(x, name):
        y = x @ w[name + ".weight"].T
        return y + w[name + ".bias"] if name + ".bias" in w else y

    def rope(x):  # [L, H, D]: (x[i], x[i + D/2]) as one complex number, rotated
        z = (x[..., : d // 2] + 1j * x[..., d // 2:]) * rot[:, None, :]
        return np.concatenate([z.real, z.imag], -1)

    x = w["model.embed_tokens.weight"][ids]
    if states is not None:
        states.append(x)
    mask = np.tril(np.ones((n, n), dtype=bool))
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = norm(x, p + "input_layernorm.weight")
        q = lin(h, p + "self_attn.q_proj").reshape(n, hq, d)
        k = lin(h, p + "self_attn.k_proj").reshape(n, hkv, d)
        if p + "self_attn.q_norm.weight" in w:  # Qwen3: each head's D values
            q, k = norm(q, p + "self_attn.q_norm.weight"), norm(k, p + "self_attn.k_norm.weight")
        q, k = rope(q), rope(k)
        v = lin(h, p + "self_attn.v_proj").reshape(n, hkv, d)
        out = np.empty((n, hq, d))
        for head in range(hq):
            kv = head // (hq // hkv)
            s = q[:, head] @ k[:, kv].T / math.sqrt(d)
            s = np.where(mask, s, -np.inf)
            pr = np.exp(s - s.max(-1, keepdims=True))
            out[:, head] = (pr / pr.sum(-1, keepdims=True)) @ v[:, kv]
        x = x + lin(out.reshape(n, hq * d), p + "self_attn.o_proj")
        h = norm(x, p + "post_attention_layernorm.weight")
        g = lin(h, p + "mlp.gate_proj")
        x = x + lin(g / (1 + np.exp(-g)) * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
        if states is not None:
            states.append(x)
    if states is not None:
        states[-1] = norm(x, "model.norm.weight")
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return norm(x, "model.norm.weight") @ head.T


class LlamaFamilyTest(unittest.TestCase):
    def generate(self, layout, *args, **kwargs):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        c = llama_family.generate(tmp.name, layout, *args, **kwargs)
        return tmp.name, c

    def check_layout(self, layout, tied, biased):
        out, c = self.generate(layout)
        with open(os.path.join(out, "config.json")) as f:
            self.assertEqual(json.load(f), c)
        w = {k: v.double().numpy() for k, v in hf_dir.read_weights(out).items()}
        self.assertEqual("lm_head.weight" in w, not tied)
        self.assertEqual("model.layers.1.self_attn.q_proj.bias" in w, biased)
        self.assertNotIn("model.layers.0.self_attn.o_proj.bias", w)
        ref = {k: v for k, v in hf_dir.load_reference(out).items()}
        cu = ref["cu_seqlens"].tolist()
        self.assertEqual([b - a for a, b in zip(cu, cu[1:])], list(llama_family.PROMPT_LENS))
        self.assertGreaterEqual(float(ref["min_margin"]), llama_family.MIN_MARGIN)
        for s in range(len(cu) - 1):
            prompt = ref["token_ids"][cu[s]:cu[s + 1]].long()
            gen = ref["generated"][s].long()
            full = independent_logits(w, c, torch.cat([prompt, gen]).numpy())
            want = np.concatenate([ref["logits"][cu[s]:cu[s + 1]].double().numpy(),
                                   ref["continuation_logits"][s].double().numpy()])
            scale = np.abs(want).max()
            self.assertLess(np.abs(full - want).max() / scale, 1e-5, f"{layout} sequence {s}")
            # generated[j] is the argmax after prompt + generated[:j]
            chain = full[len(prompt) - 1:len(prompt) - 1 + len(gen)].argmax(-1)
            self.assertEqual(chain.tolist(), gen.tolist())
        return c

    def test_llama3_tied_with_llama3_rope(self):
        c = self.check_layout("llama3", tied=True, biased=False)
        self.assertEqual(c["rope_scaling"]["rope_type"], "llama3")
        self.assertEqual(c["head_dim"], 64)
        self.assertNotEqual(c["head_dim"], c["hidden_size"] // c["num_attention_heads"])

    def test_qwen2_qkv_biases_tied(self):
        c = self.check_layout("qwen2", tied=True, biased=True)
        self.assertEqual(c["model_type"], "qwen2")
        self.assertFalse(c["use_sliding_window"])

    def test_qwen3_qk_norm_tied_and_its_hidden_states(self):
        c = self.check_layout("qwen3", tied=True, biased=False)
        self.assertEqual(c["architectures"], ["Qwen3ForCausalLM"])
        self.assertNotEqual(c["head_dim"], c["hidden_size"] // c["num_attention_heads"])
        out, _ = self.generate("qwen3")
        w = {k: v.double().numpy() for k, v in hf_dir.read_weights(out).items()}
        self.assertEqual(w["model.layers.2.self_attn.q_norm.weight"].shape, (c["head_dim"],))
        ref = hf_dir.load_reference(out)
        cu = ref["cu_seqlens"].tolist()
        hidden = ref["hidden_states"].double().numpy()
        padded = ref["padded_hidden_states"].double().numpy()
        self.assertEqual(hidden.shape[0], c["num_hidden_layers"] + 1)
        for s in range(len(cu) - 1):
            states = []
            independent_logits(w, c, ref["token_ids"][cu[s]:cu[s + 1]].long().numpy(), states)
            for i, want in enumerate(states):
                got = hidden[i, cu[s]:cu[s + 1]]
                self.assertLess(np.abs(got - want).max() / np.abs(want).max(), 1e-6, f"state {i} sequence {s}")
                np.testing.assert_allclose(padded[i, s, :cu[s + 1] - cu[s]], got, rtol=0, atol=1e-6)

    def test_base_model_checkpoint(self):
        out, c = self.generate("qwen3", base_model=True)
        self.assertEqual(c["architectures"], ["Qwen3Model"])
        w = hf_dir.read_weights(out)
        self.assertIn("embed_tokens.weight", w)
        self.assertIn("layers.0.self_attn.k_norm.weight", w)
        self.assertFalse(any(k.startswith("model.") or k.startswith("lm_head") for k in w))
        with self.assertRaises(SystemExit):
            self.generate("mistral", base_model=True)

    def test_mistral_untied_gqa(self):
        c = self.check_layout("mistral", tied=False, biased=False)
        self.assertEqual(c["sliding_window"], 4096)
        self.assertLess(c["num_key_value_heads"], c["num_attention_heads"])

    def test_llama3_inv_freq_matches_the_formula(self):
        c = {"hidden_size": 2048, "num_attention_heads": 32, "head_dim": 64, "rope_theta": 500000.0,
             "rope_scaling": llama_family.LLAMA3_ROPE}
        got = llama_family.rope_inv_freq(c).double().numpy()
        want = independent_inv_freq(c)
        np.testing.assert_allclose(got, want, rtol=1e-6)
        self.assertTrue((got < c["rope_theta"] ** (-np.arange(0, 64, 2) / 64) * (1 - 1e-3)).any())  # scaled

    def test_no_reference_writes_a_bf16_model_at_the_given_size(self):
        out, c = self.generate("smollm2", weight_dtype="bf16", reference=False, hidden=64, layers=2, heads=2,
                               kv_heads=1, intermediate=96, vocab=300)
        self.assertFalse(os.path.exists(os.path.join(out, hf_dir.REFERENCE_FILE)))
        w = hf_dir.read_weights(out)
        self.assertEqual(c["head_dim"] if "head_dim" in c else 32, 32)
        self.assertEqual(w["model.embed_tokens.weight"].dtype, torch.bfloat16)
        self.assertEqual(tuple(w["model.layers.1.mlp.down_proj.weight"].shape), (64, 96))
        self.assertEqual(tuple(w["model.layers.0.self_attn.k_proj.weight"].shape), (32, 64))
        self.assertNotIn("lm_head.weight", w)


if __name__ == "__main__":
    unittest.main()
