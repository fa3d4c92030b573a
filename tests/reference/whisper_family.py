#!/usr/bin/env python3
"""Reference for Whisper in transformers' WhisperForConditionalGeneration layout: torch modules
whose state_dict() keys are exactly the checkpoint's names, a tiny random model written as a
Hugging Face directory (config.json, model.safetensors, generation_config.json) and
reference.safetensors with the outputs tests/parity/whisper_family_test.cpp matches. Other
tests (the generate engine's, the demo's) call `write` for a tiny Whisper directory.

The model, transformers' modeling_whisper semantics (dropout off, no attention masks):
    encoder(features [B, num_mel_bins, F]):
        x = gelu(conv1(features))             conv1: k 3, pad 1              [B, d, F]
        x = gelu(conv2(x)).permute(0, 2, 1)    conv2: k 3, stride 2, pad 1   [B, F/2, d]
        x = x + embed_positions.weight[:F/2]   (the stored sinusoids)
        per layer: x += self_attn(self_attn_layer_norm(x))              bidirectional
                   x += fc2(act(fc1(final_layer_norm(x))))
        return layer_norm(x)
    F is 3000 (30 s) in transformers, which rejects any other length; F < 3000 (even) is
    whisper.cpp's reduced audio_ctx: the same graph over the first F/2 positions. That is
    the "reduced path" stored below.
    cross K/V of decoder layer l: k = enc · encoder_attn.k_proj (no bias), v = enc ·
    encoder_attn.v_proj + bias, as [frames, heads, head_dim].
    decoder(ids [L], enc):
        x = embed_tokens[ids] + embed_positions.weight[0..L)  (scale_embedding is never
                                                               applied by transformers)
        per layer: x += self_attn(self_attn_layer_norm(x))              causal
                   x += encoder_attn(encoder_attn_layer_norm(x), enc)  all frames
                   x += fc2(act(fc1(final_layer_norm(x))))
        logits = layer_norm(x) · embed_tokensᵀ   (proj_out is tied: no proj_out.weight in the
                                                   file, as save_pretrained drops it)
    Attention: q = q_proj(x) · head_dim^-0.5 (q, v, out_proj with bias; k_proj without).
    act = activation_function ("gelu": erf); the convs' GELU is always erf.
Everything runs in float64 on the stored (float32 or bf16-rounded) weights.

Token ids. With --vocab 51865 (multilingual, 99 languages), 51866 (large-v3, 100) or 51864
(English-only: every special id one lower) the config and generation_config carry the real
special ids (<|endoftext|> 50257, <|startoftranscript|> 50258, ...) and the prompt is
<|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>. With a small vocab (default
512) <|endoftext|> is V - 2 and <|startoftranscript|> V - 1 (nothing else is special) and the
prompt is <|startoftranscript|> and three fixed random ids.

reference.safetensors (write without --no-reference):
    features [2, num_mel_bins, 3000] f32   two segments of random log-mel (different audio)
    encoder_output [2, 1500, d] f32
    cross_k, cross_v [decoder_layers, 2, 1500, heads, head_dim] f32
    prompt [P] i32                          the decoder prompt (the same for both segments)
    logits [2, P, vocab] f32                at every prompt position, per segment
    generated [2, 32] i32                   greedy continuation (argmax, no logit rules)
    continuation_logits [2, 32, vocab] f32  after feeding generated[s, j] at position P + j
    features_reduced [1, num_mel_bins, 1000] f32, encoder_output_reduced [1, 500, d],
    cross_k_reduced, cross_v_reduced [decoder_layers, 1, 500, heads, head_dim],
    logits_reduced [P, vocab], generated_reduced [32] i32: the reduced path (F = 1000)
    min_margin [1] f32                      smallest top-1 minus top-2 logit on the greedy paths
The audio is redrawn until every greedy path keeps a top-2 margin of MIN_MARGIN (float32
rounding cannot flip a choice), never emits <|endoftext|> (an engine would stop there), and
the two segments' continuations differ (so mixing their cross-attention memories shows).

Command line:
    whisper_family.py write --out DIR [--seed N] [--vocab V] [--weight-dtype f32|bf16]
        [--no-reference] [--config FILE]
    --config FILE takes the sizes (and vocab) of a config.json, e.g.
    bench/configs/whisper-tiny.json; with --no-reference it writes random weights at that
    size for benchmarks (speed does not depend on weight values).
"""

import argparse
import json
import math
import os

import torch
from torch import nn
import torch.nn.functional as F

import prism_ref

GENERATION_CONFIG_FILE = "generation_config.json"
FULL_FRAMES = 3000      # 30 s of log-mel frames (hop 10 ms)
REDUCED_FRAMES = 1000   # whisper.cpp-style reduced audio_ctx: 10 s
NUM_SEGMENTS = 2
NUM_GENERATED = 32
SMALL_PROMPT_TAIL = 3   # random ids after <|startoftranscript|> with a small vocab
# Top-1 minus top-2 logit along every greedy step: float32 on the C++ side is ~1e-5 of the
# logits' range off, so a margin this size cannot flip.
MIN_MARGIN = 0.05
MAX_AUDIO_TRIES = 100

# openai/whisper's LANGUAGES, in token order (large-v3 adds "yue" as the 100th).
LANGUAGES = (
    "en", "zh", "de", "es", "ru", "ko", "fr", "ja", "pt", "tr", "pl", "ca", "nl", "ar", "sv", "it", "id", "hi",
    "fi", "vi", "he", "uk", "el", "ms", "cs", "ro", "da", "hu", "ta", "no", "th", "ur", "hr", "bg", "lt", "la",
    "mi", "ml", "cy", "sk", "te", "fa", "lv", "bn", "sr", "az", "sl", "kn", "et", "mk", "br", "eu", "is", "hy",
    "ne", "mn", "bs", "kk", "sq", "sw", "gl", "mr", "pa", "si", "km", "sn", "yo", "so", "af", "oc", "ka", "be",
    "tg", "sd", "gu", "am", "yi", "lo", "uz", "fo", "ht", "ps", "tk", "nn", "mt", "sa", "lb", "my", "bo", "tl",
    "mg", "as", "tt", "haw", "ln", "ha", "ba", "jw", "su", "yue",
)
# whisper-tiny's generation_config.json suppress_tokens (non-speech tokens, multilingual
# vocabulary), without the special ids, which are added from the layout.
MULTILINGUAL_SUPPRESS = (
    1, 2, 7, 8, 9, 10, 14, 25, 26, 27, 28, 29, 31, 58, 59, 60, 61, 62, 63, 90, 91, 92, 93, 359, 503, 522, 542,
    873, 893, 902, 918, 922, 931, 1350, 1853, 1982, 2460, 2627, 3246, 3253, 3268, 3536, 3846, 3961, 4183, 4667,
    6585, 6647, 7273, 9061, 9383, 10428, 10929, 11938, 12033, 12331, 12562, 13793, 14157, 14635, 15265, 15618,
    16553, 16604, 18362, 18956, 20075, 21675, 22520, 26130, 26161, 26435, 28279, 29464, 31650, 32302, 32470,
    36865, 42863, 47425, 49870, 50254,
)
# whisper-tiny.en's (the GPT-2 vocabulary).
ENGLISH_SUPPRESS = (
    1, 2, 7, 8, 9, 10, 14, 25, 26, 27, 28, 29, 31, 58, 59, 60, 61, 62, 63, 90, 91, 92, 93, 357, 366, 438, 532,
    685, 705, 796, 930, 1058, 1220, 1267, 1279, 1303, 1343, 1377, 1391, 1635, 1782, 1875, 2162, 2361, 2488, 3467,
    4008, 4211, 4600, 4808, 5299, 5855, 6329, 7203, 9609, 9959, 10563, 10786, 11420, 11709, 11907, 13163, 13697,
    13700, 14808, 15306, 16410, 16791, 17992, 19203, 19510, 20724, 22305, 22935, 27007, 30109, 30420, 33409,
    34949, 40283, 40493, 40549, 47282, 49146,
)

TINY_SIZES = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256, num_mel_bins=80,
                  max_source_positions=1500, max_target_positions=448, vocab_size=512)
SIZE_KEYS = tuple(TINY_SIZES)


# ---- token ids ---------------------------------------------------------------------------------

def special_ids(vocab):
    """{name: id} of the layout's special tokens (real ids for real vocabularies)."""
    if vocab < 51864:
        if vocab < 8:
            raise SystemExit(f"--vocab {vocab} is too small")
        return {"eot": vocab - 2, "sot": vocab - 1, "multilingual": False, "num_languages": 0}
    if vocab not in (51864, 51865, 51866):
        raise SystemExit(f"--vocab {vocab}: real Whisper vocabularies are 51864 (.en), 51865, 51866 (large-v3)")
    english_only = vocab == 51864
    num_languages = 100 if vocab == 51866 else 99
    base = 50256 if english_only else 50257  # <|endoftext|>
    ids = {"eot": base, "sot": base + 1, "multilingual": not english_only, "num_languages": num_languages}
    first_lang = base + 2
    after = first_lang + num_languages
    ids.update(translate=after, transcribe=after + 1, startoflm=after + 2, startofprev=after + 3,
               nospeech=after + 4, notimestamps=after + 5, timestamp_begin=after + 6,
               languages={code: first_lang + i for i, code in enumerate(LANGUAGES[:num_languages])})
    return ids


def make_prompt(vocab, generator):
    ids = special_ids(vocab)
    if "languages" in ids:
        return torch.tensor([ids["sot"], ids["languages"]["en"], ids["transcribe"], ids["notimestamps"]],
                            dtype=torch.int32)
    tail = torch.randint(0, ids["eot"], (SMALL_PROMPT_TAIL,), dtype=torch.int32, generator=generator)
    return torch.cat([torch.tensor([ids["sot"]], dtype=torch.int32), tail])


# ---- configuration -----------------------------------------------------------------------------

def make_config(sizes, weight_dtype):
    """config.json as transformers writes it for openai/whisper-*."""
    ids = special_ids(sizes["vocab_size"])
    c = {
        "activation_dropout": 0.0,
        "activation_function": "gelu",
        "apply_spec_augment": False,
        "architectures": ["WhisperForConditionalGeneration"],
        "attention_dropout": 0.0,
        "begin_suppress_tokens": [220, ids["eot"]] if "languages" in ids else [ids["eot"]],
        "bos_token_id": ids["eot"],
        "classifier_proj_size": 256,
        "decoder_layerdrop": 0.0,
        "decoder_start_token_id": ids["sot"],
        "dropout": 0.0,
        "encoder_layerdrop": 0.0,
        "eos_token_id": ids["eot"],
        "init_std": 0.02,
        "is_encoder_decoder": True,
        "mask_feature_length": 10,
        "mask_feature_min_masks": 0,
        "mask_feature_prob": 0.0,
        "mask_time_length": 10,
        "mask_time_min_masks": 2,
        "mask_time_prob": 0.05,
        "max_length": sizes["max_target_positions"],
        "median_filter_width": 7,
        "model_type": "whisper",
        "num_hidden_layers": sizes["encoder_layers"],
        "pad_token_id": ids["eot"],
        "scale_embedding": False,
        "torch_dtype": {"f32": "float32", "bf16": "bfloat16"}[weight_dtype],
        "transformers_version": "4.40.0",
        "use_cache": True,
        "use_weighted_layer_sum": False,
    }
    c.update(sizes)
    return dict(sorted(c.items()))


def make_generation_config(c):
    """generation_config.json as transformers writes it for whisper (real vocabularies), or
    the token ids alone for a small vocab."""
    vocab = c["vocab_size"]
    ids = special_ids(vocab)
    g = {"bos_token_id": ids["eot"], "decoder_start_token_id": ids["sot"], "eos_token_id": ids["eot"],
         "max_length": c["max_target_positions"], "pad_token_id": ids["eot"]}
    if "languages" not in ids:
        g.update(begin_suppress_tokens=[ids["eot"]], suppress_tokens=[])
        return dict(sorted(g.items()))
    specials = [ids["sot"], ids["translate"], ids["transcribe"], ids["startoflm"], ids["startofprev"],
                ids["nospeech"]]
    if ids["multilingual"]:
        suppress = list(MULTILINGUAL_SUPPRESS) + specials
        g.update(is_multilingual=True,
                 lang_to_id={f"<|{code}|>": i for code, i in ids["languages"].items()},
                 task_to_id={"transcribe": ids["transcribe"], "translate": ids["translate"]},
                 forced_decoder_ids=[[1, None], [2, ids["transcribe"]]])
    else:
        suppress = list(ENGLISH_SUPPRESS) + [ids["eot"]] + specials
        g.update(is_multilingual=False, forced_decoder_ids=[[1, ids["notimestamps"]]])
    g.update(begin_suppress_tokens=[220, ids["eot"]], suppress_tokens=sorted(suppress),
             no_timestamps_token_id=ids["notimestamps"], prev_sot_token_id=ids["startofprev"],
             max_initial_timestamp_index=50, return_timestamps=False, transformers_version="4.40.0")
    return dict(sorted(g.items()))


def write_generation_config(out_dir, c):
    with open(os.path.join(out_dir, GENERATION_CONFIG_FILE), "w", encoding="utf-8") as f:
        json.dump(make_generation_config(c), f, indent=2)
        f.write("\n")


# ---- the model: modules named as in transformers, so state_dict() gives the real names ---------

class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.head_dim = heads, d // heads
        self.k_proj = nn.Linear(d, d, bias=False)  # no bias in the original checkpoints
        self.v_proj = nn.Linear(d, d)
        self.q_proj = nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)

    def kv(self, memory):
        """k, v [frames, heads, head_dim] of a cross-attention memory [frames, d]."""
        n = memory.shape[0]
        return (self.k_proj(memory).view(n, self.heads, self.head_dim),
                self.v_proj(memory).view(n, self.heads, self.head_dim))

    def forward(self, x, k=None, v=None, causal=False):
        """x [L, d] of one sequence; k, v (cross-attention) or None (self-attention)."""
        n = x.shape[0]
        if k is None:
            k, v = self.kv(x)
        q = (self.q_proj(x) * self.head_dim ** -0.5).view(n, self.heads, self.head_dim)
        scores = torch.einsum("qhd,khd->hqk", q, k)
        if causal:
            mask = torch.ones(n, k.shape[0], dtype=torch.bool).tril()
            scores = scores.masked_fill(~mask, float("-inf"))
        out = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)
        return self.out_proj(out.reshape(n, -1))


def activation(name):
    if name == "gelu":
        return F.gelu
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "relu":
        return F.relu
    raise SystemExit(f"activation_function {name} not in the reference")


class EncoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["d_model"]
        self.self_attn = Attention(d, c["encoder_attention_heads"])
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, c["encoder_ffn_dim"])
        self.fc2 = nn.Linear(c["encoder_ffn_dim"], d)
        self.final_layer_norm = nn.LayerNorm(d)
        self.act = activation(c["activation_function"])

    def forward(self, x):
        x = x + self.self_attn(self.self_attn_layer_norm(x))
        return x + self.fc2(self.act(self.fc1(self.final_layer_norm(x))))


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, heads = c["d_model"], c["decoder_attention_heads"]
        self.self_attn = Attention(d, heads)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.encoder_attn = Attention(d, heads)
        self.encoder_attn_layer_norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, c["decoder_ffn_dim"])
        self.fc2 = nn.Linear(c["decoder_ffn_dim"], d)
        self.final_layer_norm = nn.LayerNorm(d)
        self.act = activation(c["activation_function"])

    def forward(self, x, cross_k, cross_v):
        x = x + self.self_attn(self.self_attn_layer_norm(x), causal=True)
        x = x + self.encoder_attn(self.encoder_attn_layer_norm(x), cross_k, cross_v)
        return x + self.fc2(self.act(self.fc1(self.final_layer_norm(x))))


class Encoder(nn.Module):  # "model.encoder.*"
    def __init__(self, c):
        super().__init__()
        d = c["d_model"]
        self.conv1 = nn.Conv1d(c["num_mel_bins"], d, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(d, d, kernel_size=3, stride=2, padding=1)
        self.embed_positions = nn.Embedding(c["max_source_positions"], d)
        self.layers = nn.ModuleList([EncoderLayer(c) for _ in range(c["encoder_layers"])])
        self.layer_norm = nn.LayerNorm(d)

    def forward(self, features):
        """features [B, num_mel_bins, F] (F even, F / 2 <= max_source_positions) → [B, F / 2, d]."""
        x = F.gelu(self.conv2(F.gelu(self.conv1(features)))).permute(0, 2, 1)
        x = x + self.embed_positions.weight[: x.shape[1]]
        out = []
        for segment in x:  # segments are independent
            for layer in self.layers:
                segment = layer(segment)
            out.append(self.layer_norm(segment))
        return torch.stack(out)


class Decoder(nn.Module):  # "model.decoder.*"
    def __init__(self, c):
        super().__init__()
        d = c["d_model"]
        self.embed_tokens = nn.Embedding(c["vocab_size"], d)
        self.embed_positions = nn.Embedding(c["max_target_positions"], d)
        self.layers = nn.ModuleList([DecoderLayer(c) for _ in range(c["decoder_layers"])])
        self.layer_norm = nn.LayerNorm(d)

    def forward(self, ids, cross):
        """Logits [L, vocab] of one sequence at positions 0..L-1; cross: [(k, v)] per layer."""
        x = self.embed_tokens(ids.long()) + self.embed_positions.weight[: len(ids)]
        for layer, (k, v) in zip(self.layers, cross):
            x = layer(x, k, v)
        return self.layer_norm(x) @ self.embed_tokens.weight.t()  # proj_out tied


class WhisperModel(nn.Module):  # "model.*"
    def __init__(self, c):
        super().__init__()
        self.encoder = Encoder(c)
        self.decoder = Decoder(c)


class WhisperForConditionalGeneration(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.model = WhisperModel(c)

    def cross_kv(self, encoder_output):
        """[(k, v)] per decoder layer of one segment's encoder output [frames, d]."""
        return [layer.encoder_attn.kv(encoder_output) for layer in self.model.decoder.layers]


# ---- weights -----------------------------------------------------------------------------------------

def sinusoids(length, channels, max_timescale=10000):
    """openai/whisper's positional table, which the checkpoints store as
    model.encoder.embed_positions.weight: [sin | cos] of geometric timescales."""
    increment = math.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = torch.exp(-increment * torch.arange(channels // 2, dtype=torch.float64))
    scaled_time = torch.arange(length, dtype=torch.float64)[:, None] * inv_timescales[None, :]
    return torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1).float()


def init_weights(model, c):
    """nn.Linear / nn.Conv1d default init (uniform, bound 1/sqrt(fan_in)) keeps activations
    O(1), so bf16 / int8 errors are relative to realistic magnitudes. Attention q/k
    projections are scaled so attention logits have std ~2 (self-attention) and ~5
    (cross-attention), a trained model's peaked softmax: a flat one would hide a wrong mask,
    frame or head mapping, and averaging 1500 frames evenly would make every segment's memory
    look alike. LayerNorm weights and biases scatter around 1 and 0 as trained ones do, so a
    missing or swapped one shows. The encoder's positions are the real sinusoids; the
    decoder's are learned (N(0, 0.5)).
    NOTE: the LM head is the embedding table (tied), so with a plain final layer_norm the
    input token's own embedding dominates x · E and greedy decoding repeats it. The final
    layer_norm's weight has random signs instead (the self-match e_t · diag(w) · e_t then
    averages out) and a scale that spreads the logits (std ~12), so the greedy paths vary
    and their top-2 margins are clear."""
    d = c["d_model"]
    embed_std = 0.3
    with torch.no_grad():
        model.model.decoder.embed_tokens.weight.normal_(0.0, embed_std)
        model.model.decoder.embed_positions.weight.normal_(0.0, 0.5)
        model.model.encoder.embed_positions.weight.copy_(sinusoids(c["max_source_positions"], d))
        attentions = [(layer.self_attn, 2.5) for layer in model.model.encoder.layers]
        for layer in model.model.decoder.layers:
            attentions += [(layer.self_attn, 2.5), (layer.encoder_attn, 6.0)]
        for attn, scale in attentions:
            bound = scale / math.sqrt(d)
            attn.q_proj.weight.uniform_(-bound, bound)
            attn.k_proj.weight.uniform_(-bound, bound)
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(1.0 + 0.1 * torch.randn(m.weight.shape))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape))
            elif isinstance(m, (nn.Linear, nn.Conv1d)) and m.bias is not None:
                m.bias.copy_(0.1 * torch.randn(m.bias.shape))
        final = model.model.decoder.layer_norm.weight
        final.copy_(torch.randn(final.shape) * 12.0 / (embed_std * math.sqrt(d)))


def random_state(c, store_dtype):
    """{name: tensor} at a real size, one tensor at a time (benchmarks only)."""
    d, vocab = c["d_model"], c["vocab_size"]

    def uniform(*shape):
        fan_in = math.prod(shape[1:])
        bound = 1.0 / math.sqrt(fan_in)
        return torch.empty(*shape).uniform_(-bound, bound).to(store_dtype)

    def bias(n):
        return (0.1 * torch.randn(n)).to(store_dtype)

    def norm(state, name):
        state[name + ".weight"] = (1.0 + 0.1 * torch.randn(d)).to(store_dtype)
        state[name + ".bias"] = bias(d)

    def attention(state, p):
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            state[p + proj + ".weight"] = uniform(d, d)
            if proj != "k_proj":
                state[p + proj + ".bias"] = bias(d)

    state = {"model.encoder.conv1.weight": uniform(d, c["num_mel_bins"], 3), "model.encoder.conv1.bias": bias(d),
             "model.encoder.conv2.weight": uniform(d, d, 3), "model.encoder.conv2.bias": bias(d),
             "model.encoder.embed_positions.weight": sinusoids(c["max_source_positions"], d).to(store_dtype)}
    for i in range(c["encoder_layers"]):
        p = f"model.encoder.layers.{i}."
        attention(state, p + "self_attn.")
        norm(state, p + "self_attn_layer_norm")
        state[p + "fc1.weight"], state[p + "fc1.bias"] = uniform(c["encoder_ffn_dim"], d), bias(c["encoder_ffn_dim"])
        state[p + "fc2.weight"], state[p + "fc2.bias"] = uniform(d, c["encoder_ffn_dim"]), bias(d)
        norm(state, p + "final_layer_norm")
    norm(state, "model.encoder.layer_norm")
    state["model.decoder.embed_tokens.weight"] = (0.3 * torch.randn(vocab, d)).to(store_dtype)
    state["model.decoder.embed_positions.weight"] = (0.5 * torch.randn(c["max_target_positions"], d)).to(store_dtype)
    for i in range(c["decoder_layers"]):
        p = f"model.decoder.layers.{i}."
        attention(state, p + "self_attn.")
        norm(state, p + "self_attn_layer_norm")
        attention(state, p + "encoder_attn.")
        norm(state, p + "encoder_attn_layer_norm")
        state[p + "fc1.weight"], state[p + "fc1.bias"] = uniform(c["decoder_ffn_dim"], d), bias(c["decoder_ffn_dim"])
        state[p + "fc2.weight"], state[p + "fc2.bias"] = uniform(d, c["decoder_ffn_dim"]), bias(d)
        norm(state, p + "final_layer_norm")
    norm(state, "model.decoder.layer_norm")
    return state


# ---- inputs and outputs ------------------------------------------------------------------------

def random_log_mel(num_mel_bins, frames, generator):
    """[num_mel_bins, frames] in the range of Whisper's normalised log-mel (about -1..1.5),
    smooth along time as speech spectra are."""
    x = torch.randn(num_mel_bins, frames + 4, generator=generator, dtype=torch.float64)
    x = (x[:, :-4] + x[:, 1:-3] + x[:, 2:-2] + x[:, 3:-1] + x[:, 4:]) / 5 * 1.2 + 0.2
    return x.clamp(-1.0, 1.5).float()


def greedy(model, prompt, cross):
    """(generated [N] i64, logits after each generated token [N, vocab], min margin)."""
    ids = prompt.long()
    generated, continuation, margin = [], [], float("inf")
    logits = model.model.decoder(ids, cross)
    for _ in range(NUM_GENERATED):
        top2 = logits[-1].topk(2).values
        margin = min(margin, float(top2[0] - top2[1]))
        nxt = int(logits[-1].argmax())
        generated.append(nxt)
        ids = torch.cat([ids, torch.tensor([nxt])])
        logits = model.model.decoder(ids, cross)
        continuation.append(logits[-1])
    return torch.tensor(generated), torch.stack(continuation), margin


def run_segment(model, features):
    """Encoder output [frames, d] and cross [(k, v)] of one segment [num_mel_bins, F]."""
    enc = model.model.encoder(features[None])[0]
    return enc, model.cross_kv(enc)


def draw_segment(model, c, prompt, frames, generator, avoid=None):
    """A random log-mel segment whose greedy path is clear (margin), never emits
    <|endoftext|> and differs from `avoid` (another segment's path); its outputs."""
    eot = special_ids(c["vocab_size"])["eot"]
    for _ in range(MAX_AUDIO_TRIES):
        features = random_log_mel(c["num_mel_bins"], frames, generator)
        enc, cross = run_segment(model, features.double())
        gen, cont, margin = greedy(model, prompt, cross)
        if margin >= MIN_MARGIN and eot not in gen.tolist() and (avoid is None or not torch.equal(gen, avoid)):
            return dict(features=features, enc=enc, cross=cross, generated=gen, continuation=cont, margin=margin,
                        logits=model.model.decoder(prompt.long(), cross))
    raise SystemExit(f"no audio of {frames} frames with a clear greedy path in {MAX_AUDIO_TRIES} tries")


def stack_cross(segments, which):
    """[decoder_layers, B, frames, heads, head_dim] of the segments' cross k (0) or v (1)."""
    layers = len(segments[0]["cross"])
    return torch.stack([torch.stack([s["cross"][l][which] for s in segments]) for l in range(layers)]).float()


def make_reference(model, c, generator):
    prompt = make_prompt(c["vocab_size"], generator)
    segments = []
    for _ in range(NUM_SEGMENTS):
        segments.append(draw_segment(model, c, prompt, FULL_FRAMES, generator,
                                     avoid=segments[0]["generated"] if segments else None))
    reduced = draw_segment(model, c, prompt, REDUCED_FRAMES, generator)
    margin = min([s["margin"] for s in segments] + [reduced["margin"]])
    return {
        "features": torch.stack([s["features"] for s in segments]),
        "encoder_output": torch.stack([s["enc"] for s in segments]).float(),
        "cross_k": stack_cross(segments, 0),
        "cross_v": stack_cross(segments, 1),
        "prompt": prompt,
        "logits": torch.stack([s["logits"] for s in segments]).float(),
        "generated": torch.stack([s["generated"] for s in segments]).to(torch.int32),
        "continuation_logits": torch.stack([s["continuation"] for s in segments]).float(),
        "features_reduced": reduced["features"][None],
        "encoder_output_reduced": reduced["enc"][None].float(),
        "cross_k_reduced": stack_cross([reduced], 0),
        "cross_v_reduced": stack_cross([reduced], 1),
        "logits_reduced": reduced["logits"].float(),
        "generated_reduced": reduced["generated"].to(torch.int32),
        "min_margin": torch.tensor([margin], dtype=torch.float32),
    }


def sizes_from(config_path, vocab):
    sizes = dict(TINY_SIZES)
    if config_path:
        with open(config_path, encoding="utf-8") as f:
            given = json.load(f)
        sizes.update({k: given[k] for k in SIZE_KEYS if k in given})
    if vocab is not None:
        sizes["vocab_size"] = vocab
    for k in ("encoder_attention_heads", "decoder_attention_heads"):
        if sizes["d_model"] % sizes[k]:
            raise SystemExit(f"d_model {sizes['d_model']} is not a multiple of {k} {sizes[k]}")
    return sizes


def write(out_dir, seed=prism_ref.seeding.DEFAULT_SEED, vocab=None, weight_dtype="f32", reference=True,
          config_path=None):
    """Writes the model directory (and reference.safetensors unless not reference) into
    out_dir. Returns the config dict."""
    c = make_config(sizes_from(config_path, vocab), weight_dtype)
    store_dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[weight_dtype]
    generator = prism_ref.seed_everything(seed)
    if not reference:
        prism_ref.write_model_dir(out_dir, c, random_state(c, store_dtype))
        write_generation_config(out_dir, c)
        return c

    model = WhisperForConditionalGeneration(c)
    init_weights(model, c)
    state = {k: v.detach().to(store_dtype).contiguous() for k, v in model.state_dict().items()}
    prism_ref.write_model_dir(out_dir, c, state)
    write_generation_config(out_dir, c)
    # The reference runs in float64 on exactly the stored weights.
    model.load_state_dict({k: v.to(torch.float32) for k, v in state.items()})
    model.double()
    with torch.no_grad():
        tensors = make_reference(model, c, generator)
    metadata = {"generator": "whisper_family.py", "seed": str(seed), "weight_dtype": weight_dtype,
                "torch": torch.__version__}
    prism_ref.save_reference(out_dir, tensors, metadata)
    return c


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="a tiny random WhisperForConditionalGeneration directory")
    w.add_argument("--vocab", type=int, default=None,
                   help="vocab_size (default 512; 51865 / 51864 / 51866 give the real special ids)")
    w.add_argument("--weight-dtype", choices=("f32", "bf16"), default="f32", help="dtype the weights are stored in")
    w.add_argument("--no-reference", action="store_true", help="write the model only")
    w.add_argument("--config", default=None, help="take the sizes from this config.json (e.g. a real checkpoint's)")
    # --out / --seed before or after the command: the C++ tests' generate_reference runs
    # `whisper_family.py --out DIR <args>`.
    for p in (parser, w):
        top = p is parser
        p.add_argument("--out", default=None if top else argparse.SUPPRESS, help="model directory to write (created)")
        p.add_argument("--seed", type=int, default=prism_ref.seeding.DEFAULT_SEED if top else argparse.SUPPRESS,
                       help="random seed")
    a = parser.parse_args()
    if a.out is None:
        parser.error("--out is required")
    write(a.out, seed=a.seed, vocab=a.vocab, weight_dtype=a.weight_dtype, reference=not a.no_reference,
          config_path=a.config)


if __name__ == "__main__":
    main()
