#!/usr/bin/env python3
"""The PyTorch peer of bench/generate_bench, and the writer of its real-size checkpoints.

    generate_peer.py write --config smollm2-360m|llama-3.2-1b|tiny --out DIR [--seed S]
        A LlamaForCausalLM directory with random bf16 weights at the named config's real
        sizes (config.json keys and tensor names as Hugging Face writes them), a byte-level
        tokenizer.json covering the whole vocabulary (256 byte tokens, then filler tokens, the
        last id "<|endoftext|>": every id decodes, the bench sends ids) and tokenizer_config.json.
        Linear weights are uniform with std 1/sqrt(fan_in), embeddings std 0.1, norms 1: hidden
        states keep their size through the layers, so next-token distributions are neither
        uniform nor one-hot (what the KV-quantisation figures need). Speed does not depend on
        the values.

    generate_peer.py run --model DIR --out result.json [--dtype bf16|f32] [--threads 2]
                         [--context 128] [--decode-tokens 32] [--prefill 512,2048]
                         [--prompt prompt.json]
        The model the way transformers' LlamaForCausalLM runs it (eager attention: matmul,
        causal mask, softmax; rotary embeddings incl. rope_scaling "llama3"; GQA by grouping
        query heads over each KV head), under torch.inference_mode:
        - decode at batch 1 with a preallocated KV cache: prefill `context` tokens, then time
          `decode-tokens` greedy steps;
        - prefill: one forward over N tokens for each N in --prefill (N=2048 is the bench's
          cold time to first token);
        - the next-token logits and greedy tokens of --prompt (ids), for a same-weights check
          against Prism.
        result.json: {"decode_tokens_per_s" (1 / median step), "decode_mean_tokens_per_s",
                      "decode_context", "prefill": {N: tokens_per_s},
                      "prompt_logits": [vocab floats], "greedy": [ids], "dtype", "threads"}
Run with OMP_WAIT_POLICY=PASSIVE (see embed_peer.py).
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
from prism_ref import hf_dir  # noqa: E402

CONFIGS = {
    # HuggingFaceTB/SmolLM2-360M config.json
    "smollm2-360m": dict(hidden_size=960, intermediate_size=2560, num_hidden_layers=32, num_attention_heads=15,
                         num_key_value_heads=5, head_dim=64, vocab_size=49152, max_position_embeddings=8192,
                         rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True, rope_scaling=None),
    # meta-llama/Llama-3.2-1B config.json
    "llama-3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=64, vocab_size=128256, max_position_embeddings=131072,
                         rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
                         rope_scaling={"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                       "original_max_position_embeddings": 8192, "rope_type": "llama3"}),
    # A small one to check the bench end to end in seconds.
    "tiny": dict(hidden_size=256, intermediate_size=640, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=64, vocab_size=4096, max_position_embeddings=4096,
                 rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=True, rope_scaling=None),
}


# ---- write ---------------------------------------------------------------------------------

def byte_alphabet():
    """GPT-2's byte -> printable character map (HF ByteLevel)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def tokenizer_files(out, vocab_size):
    alphabet = byte_alphabet()
    vocab = {alphabet[b]: b for b in range(256)}
    letters = "abcdefghijklmnopqrstuvwxyz"
    i = 256
    while len(vocab) < vocab_size - 1:  # " " + a base-26 name: unique, printable, decodable
        n, name = i, ""
        while True:
            name = letters[n % 26] + name
            n //= 26
            if n == 0:
                break
        vocab["Ġ" + name] = i
        i += 1
    eos = "<|endoftext|>"
    vocab[eos] = vocab_size - 1
    tok = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": vocab_size - 1, "content": eos, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": []},
    }
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": None, "eos_token": eos, "model_max_length": 131072,
                   "tokenizer_class": "GPT2Tokenizer"}, f, indent=2)
    return vocab_size - 1


def write(args):
    c = dict(CONFIGS[args.config])
    torch.manual_seed(args.seed)
    h, i, layers = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    nh, nkv, d, v = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["vocab_size"]

    def linear(rows, cols):  # uniform, std 1/sqrt(cols)
        return ((torch.rand(rows, cols) * 2 - 1) * math.sqrt(3.0 / cols)).to(torch.bfloat16)

    sd = {"model.embed_tokens.weight": (torch.randn(v, h) * 0.1).to(torch.bfloat16)}
    for l in range(layers):
        p = f"model.layers.{l}."
        sd[p + "input_layernorm.weight"] = torch.ones(h, dtype=torch.bfloat16)
        sd[p + "self_attn.q_proj.weight"] = linear(nh * d, h)
        sd[p + "self_attn.k_proj.weight"] = linear(nkv * d, h)
        sd[p + "self_attn.v_proj.weight"] = linear(nkv * d, h)
        sd[p + "self_attn.o_proj.weight"] = linear(h, nh * d)
        sd[p + "post_attention_layernorm.weight"] = torch.ones(h, dtype=torch.bfloat16)
        sd[p + "mlp.gate_proj.weight"] = linear(i, h)
        sd[p + "mlp.up_proj.weight"] = linear(i, h)
        sd[p + "mlp.down_proj.weight"] = linear(h, i)
    sd["model.norm.weight"] = torch.ones(h, dtype=torch.bfloat16)
    os.makedirs(args.out, exist_ok=True)
    eos = tokenizer_files(args.out, v)
    config = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
              "bos_token_id": None, "eos_token_id": eos, "head_dim": d, "hidden_act": "silu",
              "hidden_size": h, "initializer_range": 0.02, "intermediate_size": i,
              "max_position_embeddings": c["max_position_embeddings"], "mlp_bias": False, "model_type": "llama",
              "num_attention_heads": nh, "num_hidden_layers": layers, "num_key_value_heads": nkv,
              "pretraining_tp": 1, "rms_norm_eps": c["rms_norm_eps"], "rope_scaling": c["rope_scaling"],
              "rope_theta": c["rope_theta"], "tie_word_embeddings": c["tie_word_embeddings"],
              "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": v}
    hf_dir.write_model_dir(args.out, config, sd)
    with open(os.path.join(args.out, "generation_config.json"), "w", encoding="utf-8") as f:
        json.dump({"eos_token_id": eos}, f, indent=2)
    n = sum(t.numel() for t in sd.values())
    print(f"wrote {args.out}: {args.config}, {n / 1e6:.0f}M parameters, bf16")


# ---- run -----------------------------------------------------------------------------------

def inv_freq(c, d):
    f = 1.0 / (c["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    rs = c.get("rope_scaling")
    if rs and rs.get("rope_type", rs.get("type")) == "llama3":
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / f
        scaled = torch.where(wavelen > old / lo, f / factor, f)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / hi) & ~(wavelen > old / lo)
        f = torch.where(medium, smoothed, scaled)
    return f


class Llama:
    def __init__(self, model_dir, dtype):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.c = c = json.load(f)
        w = hf_dir.read_weights(model_dir)
        self.w = {k: t.to(dtype) for k, t in w.items()}
        del w
        self.h, self.layers = c["hidden_size"], c["num_hidden_layers"]
        self.nh, self.nkv = c["num_attention_heads"], c["num_key_value_heads"]
        self.d = c.get("head_dim") or self.h // self.nh
        self.eps = c["rms_norm_eps"]
        self.dtype = dtype
        self.lm_head = self.w.get("lm_head.weight", self.w["model.embed_tokens.weight"])
        self.inv_freq = inv_freq(c, self.d)

    def rms(self, x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(self.dtype) * w

    def rope(self, x, pos):  # x [T, H, D]
        f = pos[:, None].float() * self.inv_freq[None]
        emb = torch.cat([f, f], -1)
        cos, sin = emb.cos()[:, None].to(self.dtype), emb.sin()[:, None].to(self.dtype)
        half = self.d // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * cos + rot * sin

    def forward(self, ids, start, cache):
        """ids [T] at positions start..start+T-1; cache[l] = (K, V) [Hkv, max_len, D], written
        in place. Returns the last row's logits (f32)."""
        t = ids.shape[0]
        pos = torch.arange(start, start + t)
        x = self.w["model.embed_tokens.weight"][ids]
        g = self.nh // self.nkv
        end = start + t
        mask = None
        if t > 1:
            mask = torch.full((t, end), float("-inf"), dtype=self.dtype).triu(start + 1)
        for l in range(self.layers):
            p = f"model.layers.{l}."
            hs = self.rms(x, self.w[p + "input_layernorm.weight"])
            q = F.linear(hs, self.w[p + "self_attn.q_proj.weight"]).view(t, self.nh, self.d)
            k = F.linear(hs, self.w[p + "self_attn.k_proj.weight"]).view(t, self.nkv, self.d)
            v = F.linear(hs, self.w[p + "self_attn.v_proj.weight"]).view(t, self.nkv, self.d)
            q, k = self.rope(q, pos), self.rope(k, pos)
            kc, vc = cache[l]
            kc[:, start:end] = k.transpose(0, 1)
            vc[:, start:end] = v.transpose(0, 1)
            # [Hkv, g*T, D] @ [Hkv, D, end] -> [Hkv, g*T, end]
            qg = q.view(t, self.nkv, g, self.d).permute(1, 2, 0, 3).reshape(self.nkv, g * t, self.d)
            s = torch.matmul(qg, kc[:, :end].transpose(1, 2)) / math.sqrt(self.d)
            if mask is not None:
                s = s.view(self.nkv, g, t, end) + mask
                s = s.view(self.nkv, g * t, end)
            a = torch.matmul(s.float().softmax(-1).to(self.dtype), vc[:, :end])  # [Hkv, g*T, D]
            a = a.view(self.nkv, g, t, self.d).permute(2, 0, 1, 3).reshape(t, self.nh * self.d)
            x = x + F.linear(a, self.w[p + "self_attn.o_proj.weight"])
            hs = self.rms(x, self.w[p + "post_attention_layernorm.weight"])
            gate = F.linear(hs, self.w[p + "mlp.gate_proj.weight"])
            up = F.linear(hs, self.w[p + "mlp.up_proj.weight"])
            x = x + F.linear(F.silu(gate) * up, self.w[p + "mlp.down_proj.weight"])
        x = self.rms(x[-1:], self.w["model.norm.weight"])
        return F.linear(x, self.lm_head).float()[0]

    def new_cache(self, max_len):
        return [(torch.zeros(self.nkv, max_len, self.d, dtype=self.dtype),
                 torch.zeros(self.nkv, max_len, self.d, dtype=self.dtype)) for _ in range(self.layers)]


def run(args):
    torch.set_num_threads(args.threads)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    m = Llama(args.model, dtype)
    vocab = m.c["vocab_size"]
    gen = torch.Generator().manual_seed(5)
    result = {"dtype": args.dtype, "threads": args.threads, "prefill": {}}
    with torch.inference_mode():
        m.forward(torch.randint(0, vocab, (8,), generator=gen), 0, m.new_cache(8))  # warm-up

        # Decode at batch 1 after a prefill of `context` tokens.
        cache = m.new_cache(args.context + args.decode_tokens + 1)
        logits = m.forward(torch.randint(0, vocab, (args.context,), generator=gen), 0, cache)
        steps = []
        t0 = time.perf_counter()
        for i in range(args.decode_tokens):
            nxt = int(logits.argmax())
            t1 = time.perf_counter()
            logits = m.forward(torch.tensor([nxt]), args.context + i, cache)
            steps.append(time.perf_counter() - t1)
        s = time.perf_counter() - t0
        # The median step, as the bench reports Prism's (a shared machine stalls now and then).
        result["decode_tokens_per_s"] = 1.0 / sorted(steps)[len(steps) // 2]
        result["decode_mean_tokens_per_s"] = args.decode_tokens / s
        result["decode_context"] = args.context + args.decode_tokens / 2

        for n in args.prefill:
            cache = m.new_cache(n)
            ids = torch.randint(0, vocab, (n,), generator=gen)
            t0 = time.perf_counter()
            m.forward(ids, 0, cache)
            result["prefill"][str(n)] = n / (time.perf_counter() - t0)

        if args.prompt:
            with open(args.prompt) as f:
                prompt = json.load(f)
            cache = m.new_cache(len(prompt) + args.greedy_tokens)
            logits = m.forward(torch.tensor(prompt), 0, cache)
            result["prompt_logits"] = [round(float(x), 5) for x in logits]
            out = []
            for i in range(args.greedy_tokens):
                out.append(int(logits.argmax()))
                logits = m.forward(torch.tensor([out[-1]]), len(prompt) + i, cache)
            result["greedy"] = out
    with open(args.out, "w") as f:
        json.dump(result, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("--config", choices=sorted(CONFIGS), required=True)
    w.add_argument("--out", required=True)
    w.add_argument("--seed", type=int, default=1234)
    r = sub.add_parser("run")
    r.add_argument("--model", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--context", type=int, default=128)
    r.add_argument("--decode-tokens", type=int, default=32)
    r.add_argument("--prefill", type=lambda s: [int(x) for x in s.split(",") if x], default=[512, 2048])
    r.add_argument("--prompt", default="")
    r.add_argument("--greedy-tokens", type=int, default=16)
    args = ap.parse_args()
    if args.cmd == "write":
        write(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
