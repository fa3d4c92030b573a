"""Self-tests of bert_family.py, the reference the C++ BERT parity test trusts: each layout's
files carry the family's real parameter names, config keys and sentence-transformers files;
the outputs agree with a second, independent formulation in numpy float64 (the whole flat
batch at once with a block-diagonal mask, LayerNorm and GELU written out) read back through
our safetensors reader; size flags and --no-reference build benchmark models.
"""

import json
import math
import os
import tempfile
import unittest

import numpy as np
import torch

import bert_family
from prism_ref import hf_dir

LAYOUTS = ("bert", "minilm", "bge", "e5", "gte", "xlmr")


def erf(x):
    return np.vectorize(math.erf)(x)


def independent_forward(w, c, token_ids, cu_seqlens, pooling, normalize):
    """Hidden states [T, H] and embeddings [S, H], float64 numpy, from {name: array} without
    prefix and with LayerNorm weight/bias names."""
    eps, h, a = c["layer_norm_eps"], c["hidden_size"], c["num_attention_heads"]
    d, t = h // a, len(token_ids)
    offset = c["pad_token_id"] + 1 if c["model_type"] == "xlm-roberta" else 0

    def ln(x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * w[name + ".weight"] + w[name + ".bias"]

    def dense(x, name):
        return x @ w[name + ".weight"].T + w[name + ".bias"]

    seq = np.searchsorted(cu_seqlens, np.arange(t), side="right") - 1  # sequence of each token
    positions = np.arange(t) - cu_seqlens[seq] + offset
    same_seq = seq[:, None] == seq[None, :]
    x = (w["embeddings.word_embeddings.weight"][token_ids] + w["embeddings.position_embeddings.weight"][positions]
         + w["embeddings.token_type_embeddings.weight"][0])
    x = ln(x, "embeddings.LayerNorm")
    for i in range(c["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        q, k, v = (dense(x, p + "attention.self." + n).reshape(t, a, d) for n in ("query", "key", "value"))
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(d)
        scores = np.where(same_seq[None], scores, -np.inf)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        ctx = np.einsum("hqk,khd->qhd", probs, v).reshape(t, h)
        attn = ln(dense(ctx, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
        inter = dense(attn, p + "intermediate.dense")
        inter = 0.5 * inter * (1 + erf(inter / np.sqrt(2)))  # "gelu": the erf form
        x = ln(dense(inter, p + "output.dense") + attn, p + "output.LayerNorm")
    starts, ends = cu_seqlens[:-1], cu_seqlens[1:]
    if pooling == "cls":
        pooled = x[starts]
    elif pooling == "lasttoken":
        pooled = x[ends - 1]
    else:
        pooled = np.stack([x[b:e].mean(0) for b, e in zip(starts, ends)])
    if normalize:
        pooled = pooled / np.maximum(np.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)
    return x, pooled


def unprefixed(weights):
    """{name: float64 array}: the model's own names, as BertModel has them."""
    out = {}
    for k, v in weights.items():
        if k.startswith(("cls.", "lm_head.")) or k.endswith("position_ids"):
            continue
        k = k.removeprefix("bert.").removeprefix("roberta.")
        k = k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        out[k] = v.double().numpy()
    return out


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class BertFamilyReference(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.threads = torch.get_num_threads()
        cls.deterministic = torch.are_deterministic_algorithms_enabled()
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dirs = {}
        for layout in LAYOUTS:
            cls.dirs[layout] = os.path.join(cls.tmp.name, layout)
            bert_family.generate(cls.dirs[layout], layout, seed=5)
        cls.dirs["xlmr_mlm"] = os.path.join(cls.tmp.name, "xlmr_mlm")
        bert_family.generate(cls.dirs["xlmr_mlm"], "xlmr", seed=5, masked_lm=True, weight_dtype="bf16")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()
        torch.set_num_threads(cls.threads)  # generate() seeds process-wide state
        torch.use_deterministic_algorithms(cls.deterministic)

    def config(self, name):
        return read_json(os.path.join(self.dirs[name], "config.json"))

    def test_real_names_and_shapes(self):
        for name in LAYOUTS + ("xlmr_mlm",):
            c = self.config(name)
            h, inter, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
            layer = {"attention.self.query.weight": [h, h], "attention.self.query.bias": [h],
                     "attention.self.key.weight": [h, h], "attention.self.key.bias": [h],
                     "attention.self.value.weight": [h, h], "attention.self.value.bias": [h],
                     "attention.output.dense.weight": [h, h], "attention.output.dense.bias": [h],
                     "attention.output.LayerNorm.weight": [h], "attention.output.LayerNorm.bias": [h],
                     "intermediate.dense.weight": [inter, h], "intermediate.dense.bias": [inter],
                     "output.dense.weight": [h, inter], "output.dense.bias": [h],
                     "output.LayerNorm.weight": [h], "output.LayerNorm.bias": [h]}
            expected = {"embeddings.word_embeddings.weight": [v, h],
                        "embeddings.position_embeddings.weight": [c["max_position_embeddings"], h],
                        "embeddings.token_type_embeddings.weight": [c["type_vocab_size"], h],
                        "embeddings.LayerNorm.weight": [h], "embeddings.LayerNorm.bias": [h]}
            for i in range(c["num_hidden_layers"]):
                expected.update({f"encoder.layer.{i}.{k}": s for k, s in layer.items()})
            weights = hf_dir.read_weights(self.dirs[name])
            got = {k: list(t.shape) for k, t in weights.items()}
            prefix = {"bert": "bert.", "xlmr_mlm": "roberta."}.get(name, "")
            if name == "bert":  # bert-base-uncased's original LayerNorm names
                expected = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): s
                            for k, s in expected.items()}
            for k, shape in expected.items():
                self.assertEqual(got.pop(prefix + k, None), shape, f"{name}: {prefix + k}")
            if name != "xlmr_mlm":  # BertModel's pooler (bert-base-uncased keeps it too)
                self.assertEqual(got.pop(prefix + "pooler.dense.weight"), [h, h])
                self.assertEqual(got.pop(prefix + "pooler.dense.bias"), [h])
            # What is left: heads and buffers a loader must ignore.
            extra = {"bert": {"cls."}, "minilm": {"embeddings.position_ids"}, "xlmr_mlm": {"lm_head."}}.get(name, set())
            for k in got:
                self.assertTrue(any(k.startswith(e) for e in extra), f"{name}: unexpected tensor {k}")

    def test_config_keys(self):
        for name in LAYOUTS:
            c = self.config(name)
            xlmr = name == "xlmr"
            self.assertEqual(c["model_type"], "xlm-roberta" if xlmr else "bert")
            self.assertEqual(c["hidden_act"], "gelu")
            self.assertEqual(c["position_embedding_type"], "absolute")
            self.assertEqual(c["type_vocab_size"], 1 if xlmr else 2)
            self.assertEqual(c["pad_token_id"], 1 if xlmr else 0)
            self.assertEqual(c["max_position_embeddings"], 66 if xlmr else 64)  # XLM-R: 64 past pad + 1
            self.assertEqual(c["layer_norm_eps"], 1e-5 if xlmr else 1e-12)
            self.assertEqual(c["architectures"], {"bert": ["BertForMaskedLM"], "xlmr": ["XLMRobertaModel"]}.get(name, ["BertModel"]))
            if not xlmr:
                self.assertEqual(c["vocab_size"], bert_family.BERT_VOCAB_SIZE)
            head_dim = c["hidden_size"] // c["num_attention_heads"]
            self.assertEqual(head_dim, 32 if name in ("minilm", "bge", "e5") else 64)

    def test_sentence_transformers_files(self):
        want = {"minilm": ("mean", True), "bge": ("cls", True), "e5": ("mean", True), "gte": ("mean", False),
                "xlmr": ("mean", True)}
        self.assertFalse(os.path.exists(os.path.join(self.dirs["bert"], "modules.json")))
        for name, (pooling, normalize) in want.items():
            modules = read_json(os.path.join(self.dirs[name], "modules.json"))
            types = [m["type"].rsplit(".", 1)[1] for m in modules]
            self.assertEqual(types, ["Transformer", "Pooling"] + (["Normalize"] if normalize else []), name)
            p = read_json(os.path.join(self.dirs[name], modules[1]["path"], "config.json"))
            self.assertEqual(p["word_embedding_dimension"], self.config(name)["hidden_size"])
            modes = {k for k, v in p.items() if k.startswith("pooling_mode_") and v}
            self.assertEqual(modes, {{"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens"}[pooling]}, name)
        self.assertNotIn("pooling_mode_lasttoken", read_json(os.path.join(self.dirs["minilm"], "1_Pooling", "config.json")))
        prompts = read_json(os.path.join(self.dirs["e5"], "config_sentence_transformers.json"))["prompts"]
        self.assertEqual(prompts, {"query": "query: ", "passage": "passage: "})

    def test_tokenizers(self):
        for name in LAYOUTS:
            tok = read_json(os.path.join(self.dirs[name], "tokenizer.json"))
            if name != "xlmr":
                self.assertEqual(tok["model"].get("type", "WordPiece"), "WordPiece")
                self.assertEqual(len(tok["model"]["vocab"]), bert_family.BERT_VOCAB_SIZE)
                continue
            self.assertEqual(tok["model"]["type"], "Unigram")
            vocab = [p for p, _ in tok["model"]["vocab"]]
            self.assertEqual(vocab[:4], ["<s>", "<pad>", "</s>", "<unk>"])
            self.assertEqual(tok["model"]["unk_id"], 3)
            self.assertEqual(vocab[-1], "<mask>")
            self.assertEqual(len(vocab), self.config(name)["vocab_size"])
            self.assertEqual(tok["pre_tokenizer"]["type"], "Metaspace")
            self.assertEqual([next(iter(p.values()))["id"] for p in tok["post_processor"]["single"]], ["<s>", "A", "</s>"])

    def test_inputs(self):
        for name in LAYOUTS:
            r = hf_dir.load_reference(self.dirs[name])
            cu = r["cu_seqlens"].tolist()
            self.assertEqual([b - a for a, b in zip(cu, cu[1:])], list(bert_family.SEQ_LENS) + [64])
            ids = r["token_ids"]
            start, end = (0, 2) if name == "xlmr" else (101, 102)
            self.assertEqual([int(ids[i]) for i in cu[:-1]], [start] * 5)
            self.assertEqual([int(ids[i - 1]) for i in cu[1:]], [end] * 5)
            self.assertEqual(r["token_ids"].dtype, torch.int32)

    def test_matches_independent_formulation(self):
        for name in LAYOUTS + ("xlmr_mlm",):
            c = self.config(name)
            w = unprefixed(hf_dir.read_weights(self.dirs[name]))
            r = hf_dir.load_reference(self.dirs[name])
            layout = bert_family.LAYOUTS[name.removesuffix("_mlm")]
            hidden, embeddings = independent_forward(w, c, r["token_ids"].numpy(), r["cu_seqlens"].numpy(),
                                                     layout.pooling or "mean", layout.normalize)
            for key, got in (("hidden", hidden), ("embeddings", embeddings)):
                ref = r[key].double().numpy()
                err = np.abs(got - ref).max() / np.abs(ref).max()
                self.assertLess(err, 1e-6, f"{name} {key}")  # float32 storage of the outputs

    def test_attention_is_peaked(self):
        # The init promises a trained model's peaked softmax: in layer 0 of the longest
        # sequence, the top probability is well above uniform for most queries.
        c = self.config("gte")
        w = unprefixed(hf_dir.read_weights(self.dirs["gte"]))
        r = hf_dir.load_reference(self.dirs["gte"])
        b, e = int(r["cu_seqlens"][-2]), int(r["cu_seqlens"][-1])
        ids = r["token_ids"][b:e].long().numpy()
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:e - b] \
            + w["embeddings.token_type_embeddings.weight"][0]
        x = (x - x.mean(-1, keepdims=True)) / x.std(-1, keepdims=True)
        x = x * w["embeddings.LayerNorm.weight"] + w["embeddings.LayerNorm.bias"]
        d = c["hidden_size"] // c["num_attention_heads"]
        q = (x @ w["encoder.layer.0.attention.self.query.weight"].T)[:, :d]
        k = (x @ w["encoder.layer.0.attention.self.key.weight"].T)[:, :d]
        s = q @ k.T / np.sqrt(d)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        self.assertGreater(float(np.median(p.max(-1) * (e - b))), 4.0)

    def test_size_flags_without_reference(self):
        out = os.path.join(self.tmp.name, "sized")
        bert_family.generate(out, "minilm", hidden=96, layers=3, heads=3, intermediate=160, max_positions=128,
                             reference=False)
        c = read_json(os.path.join(out, "config.json"))
        self.assertEqual((c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"], c["intermediate_size"],
                          c["max_position_embeddings"], c["vocab_size"]), (96, 3, 3, 160, 128, 30522))
        self.assertFalse(os.path.exists(os.path.join(out, hf_dir.REFERENCE_FILE)))
        self.assertEqual(read_json(os.path.join(out, "sentence_bert_config.json"))["max_seq_length"], 128)


if __name__ == "__main__":
    unittest.main()
