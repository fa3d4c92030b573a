"""Self-tests of vision_family.py, the reference the C++ vision parity test (and the LLaVA /
Idefics3 references built on its towers) trust: the modules carry exactly transformers'
parameter names; the SigLIP head's attention is torch.nn.MultiheadAttention's (the module HF
uses) on the same state dict; a second, independent formulation in numpy float64 (patches by
reshape instead of a conv, attention per head by loops over views) gives the same tower
outputs; CLIP pools its text at the EOS; and `write` / `write-tower` produce what the C++ test
reads.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

import vision_family as vf
from prism_ref import hf_dir

HERE = os.path.dirname(os.path.abspath(__file__))


def np_layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def np_act(name, x):
    if name == "quick_gelu":
        return x / (1.0 + np.exp(-1.702 * x))
    if name == "gelu_pytorch_tanh":
        return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))
    raise AssertionError(name)


def np_softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_attention(q, k, v, heads):
    """One view: q [Lq, h], k / v [Lk, h] → [Lq, h], head by head."""
    d = q.shape[1] // heads
    out = np.zeros_like(q)
    for a in range(heads):
        sl = slice(a * d, (a + 1) * d)
        out[:, sl] = np_softmax(q[:, sl] @ k[:, sl].T / np.sqrt(d)) @ v[:, sl]
    return out


def np_tower(w, c, pixels, kind):
    """(hidden_states, last_hidden_state with post_layernorm, pooled) per HF, numpy float64."""
    p, h, eps, heads = c["patch_size"], c["hidden_size"], c["layer_norm_eps"], c["num_attention_heads"]
    lin = lambda x, name: x @ w[name + ".weight"].T + (w[name + ".bias"] if name + ".bias" in w else 0.0)
    ln = lambda x, name: np_layer_norm(x, w[name + ".weight"], w[name + ".bias"], eps)
    results = []
    for img in pixels:
        ch, s, _ = img.shape
        g = s // p
        patches = img[:, : g * p, : g * p].reshape(ch, g, p, g, p).transpose(1, 3, 0, 2, 4).reshape(g * g, -1)
        x = patches @ w["embeddings.patch_embedding.weight"].reshape(h, -1).T
        if kind == "clip":
            x = np.concatenate([w["embeddings.class_embedding"][None], x])
        else:
            x = x + w["embeddings.patch_embedding.bias"]
        x = x + w["embeddings.position_embedding.weight"]
        if kind == "clip":
            x = ln(x, "pre_layrnorm")
        states = [x]
        for i in range(c["num_hidden_layers"]):
            pre = f"encoder.layers.{i}."
            n = ln(x, pre + "layer_norm1")
            a = np_attention(lin(n, pre + "self_attn.q_proj"), lin(n, pre + "self_attn.k_proj"),
                             lin(n, pre + "self_attn.v_proj"), heads)
            x = x + lin(a, pre + "self_attn.out_proj")
            x = x + lin(np_act(c["hidden_act"], lin(ln(x, pre + "layer_norm2"), pre + "mlp.fc1")), pre + "mlp.fc2")
            states.append(x)
        last = ln(x, "post_layernorm")
        if kind == "clip":
            pooled = last[0]
        else:
            wq, wk, wv = np.split(w["head.attention.in_proj_weight"], 3)
            bq, bk, bv = np.split(w["head.attention.in_proj_bias"], 3)
            q = w["head.probe"][0] @ wq.T + bq
            o = lin(np_attention(q, last @ wk.T + bk, last @ wv.T + bv, heads), "head.attention.out_proj")
            pooled = (o + lin(np_act(c["hidden_act"], lin(ln(o, "head.layernorm"), "head.mlp.fc1")), "head.mlp.fc2"))[0]
        results.append((states, last, pooled))
    return ([np.stack([r[0][k] for r in results]) for k in range(len(results[0][0]))],
            np.stack([r[1] for r in results]), np.stack([r[2] for r in results]))


class NamesTest(unittest.TestCase):
    def test_dual_encoders_carry_transformers_names(self):
        clip = vf.ClipModel({"text_config": vf.tiny_clip_text_config(), "vision_config": vf.tiny_clip_vision_config(),
                             "projection_dim": 48})
        names = set(clip.state_dict())
        for n in ("logit_scale", "text_projection.weight", "visual_projection.weight",
                  "text_model.embeddings.token_embedding.weight", "text_model.embeddings.position_embedding.weight",
                  "text_model.final_layer_norm.bias", "vision_model.embeddings.class_embedding",
                  "vision_model.embeddings.patch_embedding.weight", "vision_model.pre_layrnorm.weight",
                  "vision_model.post_layernorm.bias", "vision_model.encoder.layers.2.self_attn.out_proj.bias",
                  "vision_model.encoder.layers.0.mlp.fc2.weight", "text_model.encoder.layers.1.layer_norm2.weight"):
            self.assertIn(n, names)
        self.assertNotIn("vision_model.embeddings.patch_embedding.bias", names)  # CLIP's conv has none
        self.assertFalse([n for n in names if "position_ids" in n])
        siglip = vf.SiglipModel({"text_config": vf.tiny_siglip_text_config(),
                                 "vision_config": vf.tiny_siglip_vision_config()})
        names = set(siglip.state_dict())
        for n in ("logit_scale", "logit_bias", "text_model.head.weight", "text_model.head.bias",
                  "vision_model.embeddings.patch_embedding.bias", "vision_model.head.probe",
                  "vision_model.head.attention.in_proj_weight", "vision_model.head.attention.in_proj_bias",
                  "vision_model.head.attention.out_proj.weight", "vision_model.head.layernorm.weight",
                  "vision_model.head.mlp.fc1.weight"):
            self.assertIn(n, names)
        self.assertNotIn("vision_model.pre_layrnorm.weight", names)
        headless = vf.SiglipVisionTransformer(vf.tiny_siglip_vision_config(vision_use_head=False))
        self.assertFalse([n for n in headless.state_dict() if n.startswith("head.")])


class TowerTest(unittest.TestCase):
    def test_head_attention_is_torch_multihead_attention(self):
        c = vf.tiny_siglip_vision_config()
        head = vf.init_random(vf.SiglipHead(c), seed=3).double()
        ref = torch.nn.MultiheadAttention(c["hidden_size"], c["num_attention_heads"], batch_first=True).double()
        ref.load_state_dict(head.attention.state_dict())
        x = torch.randn(2, 16, c["hidden_size"], dtype=torch.float64)
        probe = head.probe.expand(2, -1, -1)
        with torch.no_grad():
            torch.testing.assert_close(head.attention(probe, x), ref(probe, x, x, need_weights=False)[0])

    def test_towers_match_an_independent_numpy_formulation(self):
        for kind, cfg, cls in (("clip", vf.tiny_clip_vision_config(), vf.ClipVisionTransformer),
                               ("siglip", vf.tiny_siglip_vision_config(), vf.SiglipVisionTransformer),
                               ("siglip", vf.tiny_siglip_vision_config(image_size=30), vf.SiglipVisionTransformer)):
            with self.subTest(kind=kind, image_size=cfg["image_size"]):
                tower = vf.float64_copy(vf.init_random(cls(cfg), seed=1))
                pixels = torch.rand(2, 3, cfg["image_size"], cfg["image_size"], dtype=torch.float64) * 4 - 2
                with torch.no_grad():
                    states, last, pooled = tower(pixels)
                w = {k: v.numpy() for k, v in tower.state_dict().items()}
                np_states, np_last, np_pooled = np_tower(w, cfg, pixels.numpy(), kind)
                for k, (a, b) in enumerate(zip(states, np_states)):
                    np.testing.assert_allclose(a.numpy(), b, rtol=1e-9, atol=1e-9, err_msg=f"hidden_states[{k}]")
                # HF post-layernorms CLIP's pooled class token only, SigLIP's whole last state.
                want_last = np_states[-1] if kind == "clip" else np_last
                np.testing.assert_allclose(last.numpy(), want_last, rtol=1e-9, atol=1e-9)
                np.testing.assert_allclose(pooled.numpy(), np_pooled, rtol=1e-9, atol=1e-9)

    def test_random_weights_keep_activations_order_one(self):
        tower = vf.init_random(vf.ClipVisionTransformer(vf.tiny_clip_vision_config()), seed=0)
        with torch.no_grad():
            states, _, pooled = tower(torch.rand(2, 3, 32, 32) * 4 - 2)
        for s in states:
            self.assertTrue(0.3 < float(s.std()) < 5.0)
        self.assertTrue(0.3 < float(pooled.std()) < 5.0)


class TextTest(unittest.TestCase):
    def test_clip_pools_at_the_eos_which_is_the_last_token(self):
        cfg = vf.tiny_clip_text_config()
        text = vf.float64_copy(vf.init_random(vf.ClipTextTransformer(cfg), seed=2))
        ids = torch.tensor([[5, 9, 40, cfg["vocab_size"] - 1]], dtype=torch.int32)
        with torch.no_grad():
            last, pooled = text(ids)
            torch.testing.assert_close(pooled[0], last[0, -1])
            # Causal: a later token never changes an earlier state.
            longer, _ = text(torch.cat([ids, torch.tensor([[7]], dtype=torch.int32)], 1))
            torch.testing.assert_close(longer[0, :4], last[0])


class WriteTest(unittest.TestCase):
    def run_cli(self, *args):
        subprocess.run([sys.executable, os.path.join(HERE, "vision_family.py"), *args], check=True, cwd=HERE)

    def test_write_dual_encoders_and_tower(self):
        with tempfile.TemporaryDirectory() as tmp:
            for family in ("clip", "siglip"):
                out = os.path.join(tmp, family)
                self.run_cli("--out", out, "write", "--family", family)
                with open(os.path.join(out, "config.json")) as f:
                    config = json.load(f)
                self.assertEqual(config["model_type"], family)
                ref = hf_dir.load_reference(out)
                weights = hf_dir.read_weights(out)
                model = (vf.ClipModel if family == "clip" else vf.SiglipModel)(config)
                model.load_state_dict(weights)
                model = model.double()
                cu = ref["cu_seqlens"].tolist()
                self.assertEqual(cu[-1], len(ref["token_ids"]))
                with torch.no_grad():
                    for s in range(len(cu) - 1):
                        ids = ref["token_ids"][cu[s]:cu[s + 1]][None]
                        torch.testing.assert_close(model.text_embeds(ids)[0].float(), ref["text_embeds"][s])
                    image = model.image_embeds(ref["pixel_values"].double()).float()
                torch.testing.assert_close(image, ref["image_embeds"])
                layers = config["vision_config"]["num_hidden_layers"]
                self.assertEqual(sorted(k for k in ref if k.startswith("vision_hidden_")),
                                 [f"vision_hidden_{k}" for k in range(layers + 1)])
            out = os.path.join(tmp, "tower")
            self.run_cli("write-tower", "--kind", "siglip", "--no-head", "--out", out)
            weights = hf_dir.read_weights(out)
            self.assertTrue(all(k.startswith("vision_model.") for k in weights))
            self.assertFalse([k for k in weights if ".head." in k])
            self.assertNotIn("vision_pooled", hf_dir.load_reference(out))


if __name__ == "__main__":
    unittest.main()
