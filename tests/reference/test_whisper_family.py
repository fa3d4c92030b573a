"""Self-tests of whisper_family.py, the reference the C++ Whisper parity test trusts: the files
carry WhisperForConditionalGeneration's real parameter names (k_proj without a bias, no
proj_out.weight) and config keys; generation_config.json carries the real special ids per
vocabulary; the stored outputs agree with a second, independent formulation in numpy float64
(convolutions as explicit sums over taps, GELU from math.erf, attention head by head, read
back through our safetensors reader), for 30-s segments and the reduced path; the stored
greedy continuation is the argmax chain of those logits; --no-reference writes the same names.
"""

import json
import math
import os
import tempfile
import unittest

import numpy as np
import torch

import whisper_family
from prism_ref import hf_dir

ERF = np.vectorize(math.erf)


def gelu(x):
    return 0.5 * x * (1.0 + ERF(x / math.sqrt(2.0)))


def layer_norm(x, w, name):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) * w[name + ".weight"] + w[name + ".bias"]


def linear(x, w, name):
    y = x @ w[name + ".weight"].T
    return y + w[name + ".bias"] if name + ".bias" in w else y


def conv1d(x, weight, bias, stride):
    """x [C_in, L], weight [C_out, C_in, 3], padding 1 → [C_out, L_out]."""
    padded = np.pad(x, ((0, 0), (1, 1)))
    length = (x.shape[1] + 2 - 3) // stride + 1
    out = np.zeros((weight.shape[0], length)) + bias[:, None]
    for tap in range(3):
        taps = padded[:, tap: tap + stride * (length - 1) + 1: stride]  # [C_in, L_out]
        out += weight[:, :, tap] @ taps
    return out


def attention(q, k, v, heads, causal):
    """q [Lq, d], k / v [Lk, d] → [Lq, d]; softmax(q kᵀ / sqrt(D)) v per head."""
    d = q.shape[1] // heads
    out = np.empty_like(q)
    for h in range(heads):
        cols = slice(h * d, (h + 1) * d)
        s = q[:, cols] @ k[:, cols].T / math.sqrt(d)
        if causal:
            s = np.where(np.tril(np.ones(s.shape, dtype=bool)), s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        out[:, cols] = (p / p.sum(-1, keepdims=True)) @ v[:, cols]
    return out


def independent_encoder(w, c, features):
    """[F / 2, d] of one segment [mels, F]."""
    x = gelu(conv1d(features, w["model.encoder.conv1.weight"], w["model.encoder.conv1.bias"], 1))
    x = gelu(conv1d(x, w["model.encoder.conv2.weight"], w["model.encoder.conv2.bias"], 2)).T
    x = x + w["model.encoder.embed_positions.weight"][: x.shape[0]]
    for i in range(c["encoder_layers"]):
        p = f"model.encoder.layers.{i}."
        h = layer_norm(x, w, p + "self_attn_layer_norm")
        a = attention(linear(h, w, p + "self_attn.q_proj"), linear(h, w, p + "self_attn.k_proj"),
                      linear(h, w, p + "self_attn.v_proj"), c["encoder_attention_heads"], False)
        x = x + linear(a, w, p + "self_attn.out_proj")
        h = layer_norm(x, w, p + "final_layer_norm")
        x = x + linear(gelu(linear(h, w, p + "fc1")), w, p + "fc2")
    return layer_norm(x, w, "model.encoder.layer_norm")


def independent_cross(w, c, enc):
    """[(k, v)] per decoder layer, each [frames, d]."""
    return [(linear(enc, w, f"model.decoder.layers.{l}.encoder_attn.k_proj"),
             linear(enc, w, f"model.decoder.layers.{l}.encoder_attn.v_proj")) for l in range(c["decoder_layers"])]


def independent_logits(w, c, ids, cross):
    """[L, vocab] of one sequence."""
    heads = c["decoder_attention_heads"]
    x = w["model.decoder.embed_tokens.weight"][ids] + w["model.decoder.embed_positions.weight"][: len(ids)]
    for i, (k, v) in enumerate(cross):
        p = f"model.decoder.layers.{i}."
        h = layer_norm(x, w, p + "self_attn_layer_norm")
        a = attention(linear(h, w, p + "self_attn.q_proj"), linear(h, w, p + "self_attn.k_proj"),
                      linear(h, w, p + "self_attn.v_proj"), heads, True)
        x = x + linear(a, w, p + "self_attn.out_proj")
        h = layer_norm(x, w, p + "encoder_attn_layer_norm")
        x = x + linear(attention(linear(h, w, p + "encoder_attn.q_proj"), k, v, heads, False), w,
                       p + "encoder_attn.out_proj")
        h = layer_norm(x, w, p + "final_layer_norm")
        x = x + linear(gelu(linear(h, w, p + "fc1")), w, p + "fc2")
    return layer_norm(x, w, "model.decoder.layer_norm") @ w["model.decoder.embed_tokens.weight"].T


def expected_names(c):
    """Every tensor name of a WhisperForConditionalGeneration checkpoint, from HF's rules."""
    names = ["model.encoder.conv1.weight", "model.encoder.conv1.bias", "model.encoder.conv2.weight",
             "model.encoder.conv2.bias", "model.encoder.embed_positions.weight", "model.encoder.layer_norm.weight",
             "model.encoder.layer_norm.bias", "model.decoder.embed_tokens.weight",
             "model.decoder.embed_positions.weight", "model.decoder.layer_norm.weight",
             "model.decoder.layer_norm.bias"]

    def attn(p):
        return [p + "q_proj.weight", p + "q_proj.bias", p + "k_proj.weight", p + "v_proj.weight", p + "v_proj.bias",
                p + "out_proj.weight", p + "out_proj.bias"]

    def common(p):
        return attn(p + "self_attn.") + [p + n for n in (
            "self_attn_layer_norm.weight", "self_attn_layer_norm.bias", "fc1.weight", "fc1.bias", "fc2.weight",
            "fc2.bias", "final_layer_norm.weight", "final_layer_norm.bias")]

    for i in range(c["encoder_layers"]):
        names += common(f"model.encoder.layers.{i}.")
    for i in range(c["decoder_layers"]):
        p = f"model.decoder.layers.{i}."
        names += common(p) + attn(p + "encoder_attn.") + [p + "encoder_attn_layer_norm.weight",
                                                           p + "encoder_attn_layer_norm.bias"]
    return sorted(names)


def rel_error(got, want):
    return np.abs(got - want).max() / np.abs(want).max()


class WhisperFamilyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.out = cls.tmp.name
        cls.c = whisper_family.write(cls.out)
        cls.w = {k: v.double().numpy() for k, v in hf_dir.read_weights(cls.out).items()}
        cls.ref = hf_dir.load_reference(cls.out)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_names_shapes_and_config(self):
        c = self.c
        with open(os.path.join(self.out, "config.json")) as f:
            self.assertEqual(json.load(f), c)
        self.assertEqual(c["model_type"], "whisper")
        self.assertEqual(c["architectures"], ["WhisperForConditionalGeneration"])
        self.assertEqual(c["activation_function"], "gelu")
        self.assertEqual(sorted(self.w), expected_names(c))
        self.assertNotIn("proj_out.weight", self.w)
        d = c["d_model"]
        self.assertEqual(self.w["model.encoder.conv1.weight"].shape, (d, c["num_mel_bins"], 3))
        self.assertEqual(self.w["model.encoder.conv2.weight"].shape, (d, d, 3))
        self.assertEqual(self.w["model.encoder.embed_positions.weight"].shape, (c["max_source_positions"], d))
        self.assertEqual(self.w["model.decoder.embed_positions.weight"].shape, (c["max_target_positions"], d))
        self.assertEqual(self.w["model.decoder.layers.1.fc1.weight"].shape, (c["decoder_ffn_dim"], d))
        # The encoder positions are openai's sinusoids: sin | cos of geometric timescales.
        pos = self.w["model.encoder.embed_positions.weight"]
        inc = math.log(10000) / (d // 2 - 1)
        t = np.arange(c["max_source_positions"])[:, None] * np.exp(-inc * np.arange(d // 2))[None, :]
        np.testing.assert_allclose(pos, np.concatenate([np.sin(t), np.cos(t)], 1), atol=1e-6)

    def test_encoder_and_cross_kv_match_an_independent_formulation(self):
        ref, c, w = self.ref, self.c, self.w
        for s in range(2):
            enc = independent_encoder(w, c, ref["features"][s].double().numpy())
            self.assertLess(rel_error(enc, ref["encoder_output"][s].double().numpy()), 1e-5, f"segment {s}")
            for l, (k, v) in enumerate(independent_cross(w, c, enc)):
                shape = k.shape[0], c["decoder_attention_heads"], -1
                self.assertLess(rel_error(k.reshape(shape), ref["cross_k"][l, s].double().numpy()), 1e-5)
                self.assertLess(rel_error(v.reshape(shape), ref["cross_v"][l, s].double().numpy()), 1e-5)
        enc = independent_encoder(w, c, ref["features_reduced"][0].double().numpy())
        self.assertEqual(enc.shape, (500, c["d_model"]))
        self.assertLess(rel_error(enc, ref["encoder_output_reduced"][0].double().numpy()), 1e-5)

    def test_logits_and_greedy_chain_match_an_independent_formulation(self):
        ref, c, w = self.ref, self.c, self.w
        self.assertGreaterEqual(float(ref["min_margin"]), whisper_family.MIN_MARGIN)
        prompt = ref["prompt"].long().numpy()
        self.assertEqual(prompt[0], c["decoder_start_token_id"])
        generated = [ref["generated"][0], ref["generated"][1], ref["generated_reduced"]]
        self.assertFalse(torch.equal(generated[0], generated[1]), "the two segments' continuations differ")
        for s, gen in enumerate(generated):
            self.assertNotIn(c["eos_token_id"], gen.tolist())
            enc = (ref["encoder_output"][s] if s < 2 else ref["encoder_output_reduced"][0]).double().numpy()
            full = independent_logits(w, c, np.concatenate([prompt, gen.long().numpy()]), independent_cross(w, c, enc))
            want = ref["logits"][s] if s < 2 else ref["logits_reduced"]
            self.assertLess(rel_error(full[: len(prompt)], want.double().numpy()), 1e-5, f"segment {s}")
            if s < 2:
                cont = ref["continuation_logits"][s].double().numpy()
                self.assertLess(rel_error(full[len(prompt):], cont), 1e-5)
            chain = full[len(prompt) - 1: len(prompt) - 1 + len(gen)].argmax(-1)
            self.assertEqual(chain.tolist(), gen.tolist())

    def test_generation_config_carries_the_real_special_ids(self):
        with open(os.path.join(self.out, whisper_family.GENERATION_CONFIG_FILE)) as f:
            g = json.load(f)
        self.assertEqual((g["eos_token_id"], g["decoder_start_token_id"]), (510, 511))  # small vocab: the top ids
        for vocab, eot, en, translate, transcribe, notimestamps, languages in (
                (51865, 50257, 50259, 50358, 50359, 50363, 99), (51864, 50256, 50258, 50357, 50358, 50362, None),
                (51866, 50257, 50259, 50359, 50360, 50364, 100)):
            c = whisper_family.make_config(dict(whisper_family.TINY_SIZES, vocab_size=vocab), "f32")
            g = whisper_family.make_generation_config(c)
            self.assertEqual((c["eos_token_id"], c["decoder_start_token_id"]), (eot, eot + 1))
            self.assertEqual((g["eos_token_id"], g["decoder_start_token_id"]), (eot, eot + 1))
            self.assertEqual(g["no_timestamps_token_id"], notimestamps)
            self.assertEqual(g["prev_sot_token_id"], notimestamps - 2)
            self.assertEqual(g["begin_suppress_tokens"], [220, eot])
            self.assertEqual(g["is_multilingual"], languages is not None)
            if languages:
                self.assertEqual(len(g["lang_to_id"]), languages)
                self.assertEqual(g["lang_to_id"]["<|en|>"], en)
                self.assertEqual(g["task_to_id"], {"transcribe": transcribe, "translate": translate})
                self.assertIn(notimestamps - 1, g["suppress_tokens"])  # <|nospeech|>
            self.assertEqual(whisper_family.make_prompt(vocab, None).tolist(), [eot + 1, en, transcribe, notimestamps])
        ids = whisper_family.special_ids(51865)
        self.assertEqual(ids["languages"]["yo"] - ids["languages"]["en"], 66)  # openai's order
        self.assertEqual(ids["timestamp_begin"] + 1500, 51864)  # <|30.00|>: the last id

    def test_no_reference_writes_the_same_names_at_the_given_size(self):
        with tempfile.TemporaryDirectory() as out, tempfile.TemporaryDirectory() as cfg_dir:
            cfg = os.path.join(cfg_dir, "config.json")
            with open(cfg, "w") as f:
                json.dump(dict(whisper_family.TINY_SIZES, d_model=32, encoder_layers=1, max_source_positions=100), f)
            c = whisper_family.write(out, weight_dtype="bf16", reference=False, config_path=cfg)
            self.assertFalse(os.path.exists(os.path.join(out, hf_dir.REFERENCE_FILE)))
            w = hf_dir.read_weights(out)
            self.assertEqual(sorted(w), expected_names(c))
            self.assertEqual(w["model.decoder.embed_tokens.weight"].dtype, torch.bfloat16)
            self.assertEqual(tuple(w["model.encoder.embed_positions.weight"].shape), (100, 32))
            self.assertEqual(tuple(w["model.decoder.layers.0.fc2.weight"].shape), (32, 256))


if __name__ == "__main__":
    unittest.main()
