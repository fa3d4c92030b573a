#!/usr/bin/env python3
"""The PyTorch peer of bench/embed_bench: a BERT-family encoder run the way
sentence-transformers runs it, on the same weights Prism loads.

    inputs sorted by length (longest first), batches of 32 padded to the batch's longest
    sequence, an attention mask, torch.inference_mode, 2 threads; then pooling (cls / mean
    / last token) and L2 normalisation as the model directory says.

The module mirrors Hugging Face's BertModel / XLMRobertaModel (eager attention: matmul,
additive mask, softmax), so its speed is what `transformers` does on this torch. Tokens come
pre-tokenized from the bench (the same ids Prism embeds), so only the model is timed.
Run with OMP_WAIT_POLICY=PASSIVE for fp32: without it Debian's torch spends 3-4x longer,
OpenMP and OpenBLAS threads fighting over the cores.

Usage: embed_peer.py --model DIR --corpus corpus.json --out result.json
                     [--dtype f32|bf16] [--batch 32] [--threads 2] [--vectors out.npy]
                     [--query-reps 30]
corpus.json: {"sequences": [[ids...], ...], "query": [ids...]}
result.json: {"seconds": s, "docs_per_s": x, "query_ms_median": m, "query_ms_p90": p}
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import prism_ref  # noqa: E402


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, i = c["hidden_size"], c["intermediate_size"]
        self.heads = c["num_attention_heads"]
        self.eps = c.get("layer_norm_eps", 1e-12)
        self.q, self.k, self.v, self.o = (nn.Linear(h, h) for _ in range(4))
        self.ln1 = nn.LayerNorm(h, eps=self.eps)
        self.up = nn.Linear(h, i)
        self.down = nn.Linear(i, h)
        self.ln2 = nn.LayerNorm(h, eps=self.eps)
        act = c.get("hidden_act", "gelu")
        self.act = (lambda x: F.gelu(x)) if act == "gelu" else (lambda x: F.gelu(x, approximate="tanh")) \
            if act in ("gelu_new", "gelu_pytorch_tanh") else F.relu

    def forward(self, x, mask):
        b, t, h = x.shape
        d = h // self.heads

        def split(y):
            return y.view(b, t, self.heads, d).transpose(1, 2)

        s = torch.matmul(split(self.q(x)), split(self.k(x)).transpose(-1, -2)) / math.sqrt(d) + mask
        ctx = torch.matmul(torch.softmax(s, dim=-1), split(self.v(x))).transpose(1, 2).reshape(b, t, h)
        x = self.ln1(x + self.o(ctx))
        return self.ln2(x + self.down(self.act(self.up(x))))


class Encoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c["hidden_size"]
        self.word = nn.Embedding(c["vocab_size"], h)
        self.pos = nn.Embedding(c["max_position_embeddings"], h)
        self.token_type = nn.Embedding(c.get("type_vocab_size", 2), h)
        self.ln = nn.LayerNorm(h, eps=c.get("layer_norm_eps", 1e-12))
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        # XLM-RoBERTa numbers positions from padding_idx + 1.
        self.pos_offset = c.get("pad_token_id", 1) + 1 if c.get("model_type") in ("xlm-roberta", "roberta") else 0

    def forward(self, ids, attn):
        t = ids.shape[1]
        pos = torch.arange(t).unsqueeze(0) + self.pos_offset
        x = self.ln(self.word(ids) + self.pos(pos) + self.token_type.weight[0])
        mask = (1.0 - attn[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, mask)
        return x


def load(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    weights = prism_ref.read_weights(model_dir)
    prefix = next((p for p in ("bert.", "roberta.", "") if p + "embeddings.word_embeddings.weight" in weights))
    m = Encoder(c)
    names = {
        "word.weight": "embeddings.word_embeddings.weight",
        "pos.weight": "embeddings.position_embeddings.weight",
        "token_type.weight": "embeddings.token_type_embeddings.weight",
        "ln.weight": "embeddings.LayerNorm.weight",
        "ln.bias": "embeddings.LayerNorm.bias",
    }
    per_layer = {
        "q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
        "o": "attention.output.dense", "ln1": "attention.output.LayerNorm",
        "up": "intermediate.dense", "down": "output.dense", "ln2": "output.LayerNorm",
    }
    for i in range(c["num_hidden_layers"]):
        for ours, theirs in per_layer.items():
            for p in ("weight", "bias"):
                names[f"layers.{i}.{ours}.{p}"] = f"encoder.layer.{i}.{theirs}.{p}"
    def tensor(name):
        # Old BERT checkpoints (bert-base-uncased) name LayerNorm parameters gamma and beta.
        if name not in weights and "LayerNorm" in name:
            name = name.replace(".weight", ".gamma").replace(".bias", ".beta")
        return weights[name].float()

    state = {ours: tensor(prefix + theirs) for ours, theirs in names.items()}
    m.load_state_dict(state)
    return m.eval(), c


def pooling_of(model_dir):
    """(mode, normalize) from modules.json + the pooling config; mean, no normalisation without."""
    path = os.path.join(model_dir, "modules.json")
    if not os.path.exists(path):
        return "mean", False
    with open(path) as f:
        modules = json.load(f)
    mode, normalize = "mean", False
    for m in modules:
        if m["type"].endswith("Pooling"):
            with open(os.path.join(model_dir, m["path"], "config.json")) as f:
                p = json.load(f)
            mode = "cls" if p.get("pooling_mode_cls_token") else "last_token" if p.get("pooling_mode_lasttoken") else "mean"
        if m["type"].endswith("Normalize"):
            normalize = True
    return mode, normalize


def pool(h, attn, mode):
    if mode == "cls":
        return h[:, 0]
    if mode == "last_token":
        return h[torch.arange(h.shape[0]), attn.sum(1) - 1]
    m = attn.unsqueeze(-1).to(h.dtype)
    return (h * m).sum(1) / m.sum(1).clamp(min=1e-9)


def embed(model, seqs, batch, mode, normalize, dtype, pad_id):
    """Sentence-transformers' encode loop: sort by length, pad each batch to its longest."""
    order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
    out = [None] * len(seqs)
    for b0 in range(0, len(order), batch):
        idx = order[b0:b0 + batch]
        t = max(len(seqs[i]) for i in idx)
        ids = torch.full((len(idx), t), pad_id, dtype=torch.long)
        attn = torch.zeros((len(idx), t), dtype=torch.long)
        for r, i in enumerate(idx):
            ids[r, :len(seqs[i])] = torch.tensor(seqs[i])
            attn[r, :len(seqs[i])] = 1
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            e = pool(model(ids, attn), attn, mode).float()
        if normalize:
            e = F.normalize(e, dim=-1)
        for r, i in enumerate(idx):
            out[i] = e[r]
    return torch.stack(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", choices=("f32", "bf16"), default="f32")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--vectors", help="write the embeddings here (.npy)")
    ap.add_argument("--query-reps", type=int, default=30)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    with open(a.corpus) as f:
        corpus = json.load(f)
    model, c = load(a.model)
    if a.dtype == "bf16":
        model = model.to(torch.bfloat16)
    mode, normalize = pooling_of(a.model)
    pad_id = c.get("pad_token_id", 0) or 0
    seqs = corpus["sequences"]
    with torch.inference_mode():
        embed(model, seqs[:64], a.batch, mode, normalize, a.dtype, pad_id)  # warm-up
        t0 = time.perf_counter()
        vecs = embed(model, seqs, a.batch, mode, normalize, a.dtype, pad_id)
        seconds = time.perf_counter() - t0
        lat = []
        q = [corpus["query"]]
        for _ in range(a.query_reps):
            t1 = time.perf_counter()
            embed(model, q, 1, mode, normalize, a.dtype, pad_id)
            lat.append((time.perf_counter() - t1) * 1e3)
    if a.vectors:
        np.save(a.vectors, vecs.numpy().astype(np.float32))
    lat.sort()
    with open(a.out, "w") as f:
        json.dump({"seconds": seconds, "docs_per_s": len(seqs) / seconds,
                   "query_ms_median": lat[len(lat) // 2], "query_ms_p90": lat[int(len(lat) * 0.9)]}, f)


if __name__ == "__main__":
    main()
