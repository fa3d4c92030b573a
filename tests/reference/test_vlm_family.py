"""Self-tests of vlm_family.py, the reference the C++ VLM parity test trusts: each family's
files carry the real parameter names and config keys (and omit what transformers defaults);
the LLaVA layouts differ only in names; Idefics3's pixel shuffle agrees with its index
formula; the projector outputs and the logits agree with a second formulation in numpy
float64 (read back through our safetensors reader, the rows spliced at the image tokens);
the stored greedy continuation is the argmax chain; the image rows change the logits.
"""

import json
import math
import os
import tempfile
import unittest

import numpy as np
import torch

import vlm_family
import vision_family
from prism_ref import hf_dir


def numpy_lm_logits(w, prefix, head, c, x):
    """[L, vocab] float64 logits of a Llama decoder over input rows x [L, hidden]."""
    hq, hkv = c["num_attention_heads"], c["num_key_value_heads"]
    d = c["hidden_size"] // hq
    eps, n = c["rms_norm_eps"], x.shape[0]
    inv = c["rope_theta"] ** (-np.arange(0, d, 2) / d)
    rot = np.exp(1j * np.arange(n)[:, None] * inv[None, :])

    def norm(v, name):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * w[name]

    def lin(v, name):
        return v @ w[name + ".weight"].T

    def rope(v):
        z = (v[..., : d // 2] + 1j * v[..., d // 2:]) * rot[:, None, :]
        return np.concatenate([z.real, z.imag], -1)

    mask = np.tril(np.ones((n, n), dtype=bool))
    for i in range(c["num_hidden_layers"]):
        p = f"{prefix}layers.{i}."
        h = norm(x, p + "input_layernorm.weight")
        q = rope(lin(h, p + "self_attn.q_proj").reshape(n, hq, d))
        k = rope(lin(h, p + "self_attn.k_proj").reshape(n, hkv, d))
        v = lin(h, p + "self_attn.v_proj").reshape(n, hkv, d)
        out = np.empty((n, hq, d))
        for head_index in range(hq):
            kv = head_index // (hq // hkv)
            s = np.where(mask, q[:, head_index] @ k[:, kv].T / math.sqrt(d), -np.inf)
            pr = np.exp(s - s.max(-1, keepdims=True))
            out[:, head_index] = (pr / pr.sum(-1, keepdims=True)) @ v[:, kv]
        x = x + lin(out.reshape(n, hq * d), p + "self_attn.o_proj")
        h = norm(x, p + "post_attention_layernorm.weight")
        g = lin(h, p + "mlp.gate_proj")
        x = x + lin(g / (1 + np.exp(-g)) * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    return norm(x, prefix + "norm.weight") @ w[head].T


def erf_gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def shuffle_by_index(x, scale):
    """[V, side², D] → [V, (side/s)², s² D]: out row (i, j), feature (a s + c) D + d =
    x[row i s + a, column j s + c, d]."""
    v, seq, dim = x.shape
    side = int(round(seq ** 0.5))
    out_side = side // scale
    out = np.empty((v, out_side * out_side, scale * scale * dim))
    for i in range(out_side):
        for j in range(out_side):
            for a in range(scale):
                for c in range(scale):
                    f = (a * scale + c) * dim
                    out[:, i * out_side + j, f:f + dim] = x[:, (i * scale + a) * side + j * scale + c]
    return out


class Generated:
    """The three directories, written once."""
    tmp = None
    dirs = {}

    @classmethod
    def get(cls, family, layout="old"):
        if cls.tmp is None:
            cls.tmp = tempfile.TemporaryDirectory()
        key = f"{family}_{layout}"
        if key not in cls.dirs:
            out = os.path.join(cls.tmp.name, key)
            vlm_family.write(out, family, layout)
            with open(os.path.join(out, "config.json"), encoding="utf-8") as f:
                config = json.load(f)
            w = {k: v.double().numpy() for k, v in hf_dir.read_weights(out).items()}
            r = hf_dir.load_reference(out)
            cls.dirs[key] = (out, config, w, r)
        return cls.dirs[key]


class LlavaTest(unittest.TestCase):
    def test_files_names_and_omitted_defaults(self):
        out, config, w, _ = Generated.get("llava", "old")
        self.assertEqual(config["model_type"], "llava")
        self.assertEqual(config["vision_feature_layer"], -2)
        self.assertEqual(config["vision_feature_select_strategy"], "default")
        for key in ("rms_norm_eps", "rope_theta", "max_position_embeddings"):
            self.assertNotIn(key, config["text_config"])
        for key in ("hidden_act", "layer_norm_eps"):
            self.assertNotIn(key, config["vision_config"])
        for name in ("vision_tower.vision_model.embeddings.class_embedding",
                     "vision_tower.vision_model.pre_layrnorm.weight",
                     "vision_tower.vision_model.encoder.layers.2.mlp.fc2.bias",
                     "multi_modal_projector.linear_1.bias", "multi_modal_projector.linear_2.weight",
                     "language_model.model.embed_tokens.weight", "language_model.model.norm.weight",
                     "language_model.lm_head.weight"):
            self.assertIn(name, w)
        with open(os.path.join(out, "preprocessor_config.json"), encoding="utf-8") as f:
            self.assertEqual(json.load(f)["image_processor_type"], "CLIPImageProcessor")

    def test_new_layout_is_the_same_model_renamed(self):
        _, _, old, r_old = Generated.get("llava", "old")
        _, _, new, r_new = Generated.get("llava", "new")

        def renamed(name):
            for a, b in (("vision_tower.", "model.vision_tower."), ("multi_modal_projector.", "model.multi_modal_projector."),
                         ("language_model.model.", "model.language_model."), ("language_model.lm_head.", "lm_head.")):
                if name.startswith(a):
                    return b + name[len(a):]
            raise AssertionError(name)

        self.assertEqual(sorted(renamed(n) for n in old), sorted(new))
        for n, v in old.items():
            np.testing.assert_array_equal(v, new[renamed(n)])
        for k in r_old:
            torch.testing.assert_close(r_old[k], r_new[k], rtol=0, atol=0)

    def test_projector_and_logits_independently(self):
        _, config, w, r = Generated.get("llava", "old")
        features = r["vision_features"].double().numpy()  # the tower is vision_family's (tested there)
        self.assertEqual(features.shape, (32, 64))  # 2 views × 16 patches, class token dropped
        p = "multi_modal_projector."
        h = erf_gelu(features @ w[p + "linear_1.weight"].T + w[p + "linear_1.bias"])
        rows = h @ w[p + "linear_2.weight"].T + w[p + "linear_2.bias"]
        np.testing.assert_allclose(rows, r["projector_outputs"].double().numpy(), rtol=0, atol=1e-5)
        self._check_logits(config, w, r, "language_model.model.", "language_model.lm_head.weight",
                           config["image_token_index"], rows)

    def test_feature_layer_is_hidden_states_minus_two_without_class_token(self):
        _, config, w, r = Generated.get("llava", "old")
        vision = vlm_family.llava_configs()[2]
        tower = vision_family.ClipVisionTransformer(vision).double()
        prefix = "vision_tower.vision_model."
        tower.load_state_dict({k[len(prefix):]: torch.from_numpy(v) for k, v in w.items() if k.startswith(prefix)})
        with torch.no_grad():
            states, _, _ = tower(r["pixel_values"].double())
        self.assertEqual(len(states), 4)  # embeddings + 3 layers: -2 is the output of layer 2
        want = states[2][:, 1:].reshape(-1, 64).numpy()
        np.testing.assert_allclose(r["vision_features"].double().numpy(), want, rtol=0, atol=1e-5)

    def _check_logits(self, config, w, r, prefix, head, image_token, rows):
        c = {**vlm_family.tiny_text_config(), **config["text_config"]}
        ids = r["token_ids"].numpy()
        x = w[prefix + "embed_tokens.weight"][ids].copy()
        x[ids == image_token] = rows
        logits = numpy_lm_logits(w, prefix, head, c, x)
        np.testing.assert_allclose(logits, r["logits"].double().numpy(), rtol=0, atol=1e-4)
        # Greedy: each generated token is the argmax after the previous ones.
        gen = r["generated"].numpy()
        self.assertEqual(gen[0], logits[-1].argmax())
        for j in range(1, len(gen)):
            self.assertEqual(gen[j], r["continuation_logits"][j - 1].argmax())
        # The images matter: other rows, other logits after the first image.
        x2 = w[prefix + "embed_tokens.weight"][ids].copy()
        x2[ids == image_token] = rows[::-1]
        other = numpy_lm_logits(w, prefix, head, c, x2)
        self.assertGreater(np.abs(other[-1] - logits[-1]).max(), 0.5)


class Idefics3Test(unittest.TestCase):
    def test_files_and_names(self):
        out, config, w, _ = Generated.get("idefics3")
        self.assertEqual(config["model_type"], "idefics3")
        self.assertEqual(config["text_config"]["architectures"], ["VLlama3ForCausalLM"])
        self.assertIn("model.connector.modality_projection.proj.weight", w)
        self.assertNotIn("model.connector.modality_projection.proj.bias", w)
        self.assertIn("model.vision_model.post_layernorm.weight", w)
        self.assertFalse(any(k.startswith("model.vision_model.head.") for k in w))
        self.assertIn("model.text_model.layers.1.mlp.down_proj.weight", w)
        self.assertIn("lm_head.weight", w)
        with open(os.path.join(out, "preprocessor_config.json"), encoding="utf-8") as f:
            self.assertEqual(json.load(f)["image_processor_type"], "Idefics3ImageProcessor")
        with open(os.path.join(out, "processor_config.json"), encoding="utf-8") as f:
            self.assertEqual(json.load(f)["image_seq_len"], 4)

    def test_pixel_shuffle_matches_its_index_formula(self):
        x = torch.randn(3, 64, 5, dtype=torch.float64)  # 3 views, 8 × 8 grid
        for scale in (2, 4):
            np.testing.assert_array_equal(vlm_family.pixel_shuffle(x, scale).numpy(),
                                          shuffle_by_index(x.numpy(), scale))

    def test_bucketed_position_ids_are_the_identity_for_real_grids(self):
        for side in (4, 26, 32):  # tiny, Idefics3-8B (364/14), SmolVLM (512/16)
            self.assertTrue(torch.equal(vlm_family.idefics3_position_ids(side), torch.arange(side * side)))

    def test_projector_and_logits_independently(self):
        _, config, w, r = Generated.get("idefics3")
        vision = vlm_family.idefics3_configs()[2]
        tower = vision_family.SiglipVisionTransformer(vision).double()
        prefix = "model.vision_model."
        tower.load_state_dict({k[len(prefix):]: torch.from_numpy(v) for k, v in w.items() if k.startswith(prefix)})
        with torch.no_grad():
            _, last, _ = tower(r["pixel_values"].double())
        shuffled = shuffle_by_index(last.numpy(), config["scale_factor"]).reshape(-1, 256)
        np.testing.assert_allclose(r["vision_features"].double().numpy(), shuffled, rtol=0, atol=1e-5)
        rows = shuffled @ w["model.connector.modality_projection.proj.weight"].T
        self.assertEqual(rows.shape, (8, 64))  # 2 views × (4 / 2)² rows
        np.testing.assert_allclose(rows, r["projector_outputs"].double().numpy(), rtol=0, atol=1e-5)
        LlavaTest._check_logits(self, config, w, r, "model.text_model.", "lm_head.weight",
                                config["image_token_id"], rows)


if __name__ == "__main__":
    unittest.main()
