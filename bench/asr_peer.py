#!/usr/bin/env python3
"""The PyTorch peer of bench/asr_bench, and the writer of its real-size checkpoints.

    asr_peer.py write --config whisper-tiny|whisper-base|FILE --out DIR [--dtype bf16|f32] [--seed S]
        A WhisperForConditionalGeneration checkpoint with random weights at the config's real
        sizes (bench/configs/whisper-{tiny,base}.json, or any config.json), written by
        tests/reference/whisper_family.py (config.json and generation_config.json as
        transformers writes them, the real tensor names), plus the tokenizer files Prism loads:
        tokenizer.json = the real GPT-2 byte-level BPE (../shared/testdata/tokenizers/gpt2)
        with Whisper's special tokens at the real multilingual ids (<|endoftext|> 50257,
        <|startoftranscript|> 50258, 99 languages, <|translate|> .. <|notimestamps|>, then
        <|0.00|> .. <|30.00|> from 50364; GPT-2's own id 50256 becomes the inert "<|filler|>",
        as tests/test_util/whisper_tokenizer.h does), tokenizer_config.json and a
        WhisperFeatureExtractor preprocessor_config.json. Speed does not depend on weight values.

    asr_peer.py run --model DIR --plan plan.json --inputs inputs.safetensors --out result.json
                    [--dtype bf16|f32] [--threads 2]
        Whisper as plain torch runs it, under torch.inference_mode, on the inputs the bench
        prepared with Prism's front end (the same log-mel segments and the same prompt ids):
        - "chunks": a long-form transcription decoded as openai/whisper's transcribe() does,
          one 30-s chunk after another: the encoder over the chunk's [80, 3000] log-mel, the
          cross-attention K/V of every decoder layer computed once, the prompt prefilled, then
          greedy decoding with a self-attention KV cache (preallocated, one token a step),
          suppress_tokens masked, exactly plan["tokens"] tokens (end-of-text ignored, as the
          bench's fixed count). Times the encoder and the decoder of each chunk.
        - "partial": one live partial, as Prism's live streams decode it: the encoder over the
          window alone (whisper.cpp's reduced audio_ctx: the first frames / 2 positions), then
          plan["partial"]["tokens"] greedy tokens; the best of plan["partial"]["repeats"].
        - the same-weights check: the logits after chunk 0's prompt (check.safetensors beside
          result.json), which the bench compares with the models alone in Prism.
        result.json: {"chunks": [{"encoder_s", "decoder_s"}], "total_s", "partial_s",
                      "partial_encoder_s", "first_tokens", "dtype", "threads"}
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
from prism_ref import hf_dir, safetensors_io  # noqa: E402
import whisper_family  # noqa: E402

CONFIGS = {"whisper-tiny": os.path.join(HERE, "configs", "whisper-tiny.json"),
           "whisper-base": os.path.join(HERE, "configs", "whisper-base.json")}
GPT2 = os.path.join(HERE, "..", "..", "shared", "testdata", "tokenizers", "gpt2", "tokenizer.json")


# ---- write -----------------------------------------------------------------------------------

def added_token(i, content, special=True):
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": not special, "special": special}


def write_tokenizer(out, vocab_size, gpt2_path):
    """tokenizer.json / tokenizer_config.json of the multilingual layout (vocab 51865)."""
    if vocab_size != 51865:
        raise SystemExit(f"vocab_size {vocab_size}: the bench's tokenizer is the multilingual layout (51865)")
    with open(gpt2_path, encoding="utf-8") as f:
        t = json.load(f)
    vocab = t["model"]["vocab"]
    del vocab["<|endoftext|>"]
    vocab["<|filler|>"] = 50256
    added, next_id = [], 50257

    def add(content, special=True):
        nonlocal next_id
        added.append(added_token(next_id, content, special))
        next_id += 1

    add("<|endoftext|>")
    add("<|startoftranscript|>")
    for code in whisper_family.LANGUAGES[:99]:
        add(f"<|{code}|>")
    for s in ("<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>",
              "<|notimestamps|>"):
        add(s)
    for i in range(1501):
        add(f"<|{i * 0.02:.2f}|>", special=False)  # the Hub's newer files: non-special
    assert next_id == vocab_size, next_id
    t["added_tokens"] = added
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(t, f)
    config = {"add_prefix_space": False, "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
              "pad_token": "<|endoftext|>", "unk_token": "<|endoftext|>", "errors": "replace",
              "model_max_length": 1024, "processor_class": "WhisperProcessor", "tokenizer_class": "WhisperTokenizer"}
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)


def write(args):
    config = CONFIGS.get(args.config, args.config)
    os.makedirs(args.out, exist_ok=True)
    c = whisper_family.write(args.out, seed=args.seed, weight_dtype=args.dtype, reference=False, config_path=config)
    write_tokenizer(args.out, c["vocab_size"], args.gpt2)
    pre = {"chunk_length": 30, "feature_extractor_type": "WhisperFeatureExtractor", "feature_size": c["num_mel_bins"],
           "hop_length": 160, "n_fft": 400, "n_samples": 480000, "nb_max_frames": 3000, "padding_side": "right",
           "padding_value": 0.0, "processor_class": "WhisperProcessor", "return_attention_mask": False,
           "sampling_rate": 16000}
    with open(os.path.join(args.out, "preprocessor_config.json"), "w", encoding="utf-8") as f:
        json.dump(pre, f, indent=2)
    print(f"wrote {args.out}: d_model {c['d_model']}, {c['encoder_layers']}+{c['decoder_layers']} layers, "
          f"vocab {c['vocab_size']}, {args.dtype}")


# ---- run: Whisper in plain torch with a KV cache -----------------------------------------------

class Whisper:
    """The checkpoint's tensors and a forward written with torch.nn.functional (the
    reference's semantics: whisper_family.py), in `dtype`."""

    def __init__(self, model_dir, dtype):
        with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
            self.c = json.load(f)
        state = hf_dir.read_weights(model_dir)
        self.w = {k: v.to(dtype).contiguous() for k, v in state.items()}
        self.dtype = dtype
        c = self.c
        self.d = c["d_model"]
        self.enc_heads, self.dec_heads = c["encoder_attention_heads"], c["decoder_attention_heads"]
        self.act = {"gelu": F.gelu, "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
                    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
                    "relu": F.relu}[c.get("activation_function", "gelu")]
        p = self._prefix()
        self.embed_tokens = self.w[p + "decoder.embed_tokens.weight"]

    def _prefix(self):
        return "model." if "model.encoder.conv1.weight" in self.w else ""

    def lin(self, x, name, bias=True):
        b = self.w.get(name + ".bias") if bias else None
        return F.linear(x, self.w[name + ".weight"], b)

    def ln(self, x, name):
        return F.layer_norm(x, (self.d,), self.w[name + ".weight"], self.w[name + ".bias"], 1e-5)

    @staticmethod
    def attend(q, k, v, heads, causal_from=None):
        """q [Lq, d], k/v [Lk, heads, hd] → [Lq, d]; causal_from: q's first position."""
        lq = q.shape[0]
        hd = k.shape[-1]
        q = (q * hd ** -0.5).view(lq, heads, hd).transpose(0, 1)            # [h, Lq, hd]
        scores = torch.matmul(q, k.permute(1, 2, 0))                         # [h, Lq, Lk]
        if causal_from is not None and lq > 1:
            lk = k.shape[0]
            mask = torch.arange(lk)[None, :] > (causal_from + torch.arange(lq))[:, None]
            scores = scores.masked_fill(mask, float("-inf"))
        probs = torch.softmax(scores.float(), dim=-1).to(v.dtype)
        return torch.matmul(probs, v.transpose(0, 1)).transpose(0, 1).reshape(lq, -1)

    def encode(self, features):
        """features [80, F] → encoder output [F / 2, d]."""
        p = self._prefix() + "encoder."
        x = features.to(self.dtype)[None]
        x = F.gelu(F.conv1d(x, self.w[p + "conv1.weight"], self.w[p + "conv1.bias"], padding=1))
        x = F.gelu(F.conv1d(x, self.w[p + "conv2.weight"], self.w[p + "conv2.bias"], stride=2, padding=1))
        x = x[0].transpose(0, 1)
        x = x + self.w[p + "embed_positions.weight"][: x.shape[0]]
        n, h = x.shape[0], self.enc_heads
        for i in range(self.c["encoder_layers"]):
            q = f"{p}layers.{i}."
            y = self.ln(x, q + "self_attn_layer_norm")
            k = self.lin(y, q + "self_attn.k_proj", bias=False).view(n, h, -1)
            v = self.lin(y, q + "self_attn.v_proj").view(n, h, -1)
            x = x + self.lin(self.attend(self.lin(y, q + "self_attn.q_proj"), k, v, h), q + "self_attn.out_proj")
            y = self.ln(x, q + "final_layer_norm")
            x = x + self.lin(self.act(self.lin(y, q + "fc1")), q + "fc2")
        return self.ln(x, p + "layer_norm")

    def cross(self, enc):
        """[(k, v)] per decoder layer, [frames, heads, hd]: computed once per segment."""
        p = self._prefix() + "decoder."
        n, h = enc.shape[0], self.dec_heads
        return [(self.lin(enc, f"{p}layers.{i}.encoder_attn.k_proj", bias=False).view(n, h, -1),
                 self.lin(enc, f"{p}layers.{i}.encoder_attn.v_proj").view(n, h, -1))
                for i in range(self.c["decoder_layers"])]

    def new_cache(self, length):
        hd = self.d // self.dec_heads
        return [(torch.zeros(length, self.dec_heads, hd, dtype=self.dtype),
                 torch.zeros(length, self.dec_heads, hd, dtype=self.dtype)) for _ in range(self.c["decoder_layers"])]

    def decode_step(self, ids, start, cache, cross):
        """Logits [vocab] after tokens `ids` at positions start.., appending their K/V to cache."""
        p = self._prefix() + "decoder."
        n, h = len(ids), self.dec_heads
        x = self.embed_tokens[ids] + self.w[p + "embed_positions.weight"][start: start + n]
        for i, ((kc, vc), (ck, cv)) in enumerate(zip(cache, cross)):
            q = f"{p}layers.{i}."
            y = self.ln(x, q + "self_attn_layer_norm")
            kc[start: start + n] = self.lin(y, q + "self_attn.k_proj", bias=False).view(n, h, -1)
            vc[start: start + n] = self.lin(y, q + "self_attn.v_proj").view(n, h, -1)
            a = self.attend(self.lin(y, q + "self_attn.q_proj"), kc[: start + n], vc[: start + n], h, causal_from=start)
            x = x + self.lin(a, q + "self_attn.out_proj")
            y = self.ln(x, q + "encoder_attn_layer_norm")
            x = x + self.lin(self.attend(self.lin(y, q + "encoder_attn.q_proj"), ck, cv, h), q + "encoder_attn.out_proj")
            y = self.ln(x, q + "final_layer_norm")
            x = x + self.lin(self.act(self.lin(y, q + "fc1")), q + "fc2")
        x = self.ln(x[-1:], p + "layer_norm")
        return F.linear(x, self.embed_tokens)[0].float()  # proj_out tied

    def greedy(self, prompt, cross, tokens, suppress):
        """Exactly `tokens` greedy tokens after `prompt` (end-of-text ignored); the prompt's
        logits and the tokens."""
        cache = self.new_cache(len(prompt) + tokens)
        logits = self.decode_step(torch.tensor(prompt), 0, cache, cross)
        first = logits.clone()
        out = []
        pos = len(prompt)
        for step in range(tokens):
            logits[suppress] = float("-inf")
            t = int(logits.argmax())
            out.append(t)
            if step + 1 < tokens:
                logits = self.decode_step(torch.tensor([t]), pos, cache, cross)
                pos += 1
        return first, out


def run(args):
    torch.set_num_threads(args.threads)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    with open(args.plan, encoding="utf-8") as f:
        plan = json.load(f)
    inputs = safetensors_io.load_file(args.inputs)
    model = Whisper(args.model, dtype)
    suppress = torch.tensor(plan.get("suppress", []), dtype=torch.long)
    tokens = plan["tokens"]
    result = {"chunks": [], "dtype": args.dtype, "threads": args.threads, "first_tokens": []}
    check = None
    with torch.inference_mode():
        # Warm-up (not timed): one encoder pass and a few steps, as the bench warms Prism up.
        first = plan["chunks"][0]
        enc = model.encode(inputs[first["features"]])
        model.greedy(inputs[first["prompt"]].tolist(), model.cross(enc), 2, suppress)
        total = 0.0
        for i, chunk in enumerate(plan["chunks"]):
            t0 = time.perf_counter()
            cross = model.cross(model.encode(inputs[chunk["features"]]))
            t1 = time.perf_counter()
            logits, out = model.greedy(inputs[chunk["prompt"]].tolist(), cross, tokens, suppress)
            t2 = time.perf_counter()
            result["chunks"].append({"encoder_s": t1 - t0, "decoder_s": t2 - t1})
            result["first_tokens"].append(out[0])
            total += t2 - t0
            if i == 0:
                check = logits
            print(f"  peer chunk {i + 1}/{len(plan['chunks'])}: encoder {t1 - t0:.3f} s, "
                  f"{tokens} tokens {t2 - t1:.3f} s", file=sys.stderr, flush=True)
        result["total_s"] = total
        partial = plan.get("partial")
        if partial:
            best, best_enc = math.inf, math.inf
            for _ in range(partial.get("repeats", 3)):
                t0 = time.perf_counter()
                cross = model.cross(model.encode(inputs[partial["features"]]))
                t1 = time.perf_counter()
                model.greedy(inputs[partial["prompt"]].tolist(), cross, partial["tokens"], suppress)
                t2 = time.perf_counter()
                if t2 - t0 < best:
                    best, best_enc = t2 - t0, t1 - t0
            result["partial_s"], result["partial_encoder_s"] = best, best_enc
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f)
    safetensors_io.save_file({"logits": check.contiguous()},
                             os.path.join(os.path.dirname(os.path.abspath(args.out)), "check.safetensors"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="a real-size random Whisper checkpoint with tokenizer files")
    w.add_argument("--config", required=True, help="whisper-tiny, whisper-base or a config.json path")
    w.add_argument("--out", required=True)
    w.add_argument("--dtype", choices=("bf16", "f32"), default="bf16", help="dtype the weights are stored in")
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--gpt2", default=GPT2, help="GPT-2's tokenizer.json (testdata)")
    r = sub.add_parser("run", help="time the plan the bench wrote")
    r.add_argument("--model", required=True)
    r.add_argument("--plan", required=True)
    r.add_argument("--inputs", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--dtype", choices=("bf16", "f32"), default="bf16")
    r.add_argument("--threads", type=int, default=2)
    a = parser.parse_args()
    (write if a.command == "write" else run)(a)


if __name__ == "__main__":
    main()
