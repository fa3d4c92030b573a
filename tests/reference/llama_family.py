#!/usr/bin/env python3
"""Reference for the Llama-family decoders: writes a random model in one family's real
Hugging Face layout (config.json keys and values, parameter names, tied or untied LM head,
biases) and reference.safetensors with fixed prompts, the expected logits at every prompt
position and a greedy continuation, which tests/parity/llama_family_test.cpp matches.

Layouts (tiny by default, every one with grouped-query heads):
    llama2   Llama-2: LlamaForCausalLM, theta 10000, no rope_scaling, untied lm_head
    llama3   Llama-3.2: rope_scaling {"rope_type": "llama3", factor 32, low 1, high 4,
             original 8192}, theta 500000, tied embeddings, an explicit head_dim (64) that is
             not hidden_size / num_attention_heads
    qwen2    Qwen2.5: Qwen2ForCausalLM, q/k/v biases (no o_proj bias), tied, theta 1e6,
             sliding_window present but use_sliding_window false
    mistral  Mistral-7B-v0.1: MistralForCausalLM, sliding_window 4096, untied
    smollm2  SmolLM2: llama with tied embeddings, theta 100000, an odd head count
    qwen3    Qwen3 (Qwen3-4B, Z-Image's text encoder): Qwen3ForCausalLM, q_norm / k_norm,
             tied, theta 1e6, an explicit head_dim (64) that is not hidden_size /
             num_attention_heads, three layers (so hidden_states[-2] is a middle layer's)
--attention-bias / --mlp-bias turn on Llama's optional biases (q/k/v/o and gate/up/down;
Qwen3 has attention_bias only); --linear-rope F sets rope_scaling {"type": "linear",
"factor": F} (long-context Llama 2 tunes); --base-model writes the base model's checkpoint
(Qwen3Model, LlamaModel, ...: architectures the base class, tensors without the "model."
prefix, no lm_head; a tied layout only), as a diffusion pipeline's text_encoder/ may hold it.

The forward pass, transformers' LlamaForCausalLM semantics (Mistral and Qwen2 are the same
graph with their own biases; Qwen3 adds q_norm / k_norm):
    x = embed_tokens[ids]
    per layer: x += o_proj(attention(rope(q_proj(n)), rope(k_proj(n)), v_proj(n)))  n = RMSNorm(x)
               x += down_proj(silu(gate_proj(n)) * up_proj(n))                       n = RMSNorm(x)
    logits = lm_head(RMSNorm(x))   (lm_head = embed_tokens when tied)
Qwen3 (Qwen3Attention): after the projections, each query and key head's head_dim values
get an RMSNorm of their own (q_norm, k_norm: one [head_dim] weight each, shared by the heads,
eps rms_norm_eps), before RoPE; values are not normalised.
Causal attention over the sequence's own tokens with num_key_value_heads shared by groups of
query heads; RoPE rotates halves ("rotate_half") with inv_freq built and scaled as
transformers' ROPE_INIT_FUNCTIONS do in float32, angles float32(pos * inv_freq) as its float32
outer product gives, their cos/sin then taken in float64. Everything else runs in float64 from
the stored (float32, or bf16-rounded) weights, so the outputs are exact to float32 storage.

Outputs (reference.safetensors): token_ids [T] i32 (the prompts back to back), cu_seqlens
[S + 1] i32, logits [T, vocab] f32 at every prompt position, generated [S, 32] i32 (greedy
continuation), continuation_logits [S, 32, vocab] f32 (the logits after feeding generated[j],
at position len + j), min_margin (the smallest top-1 minus top-2 logit along the greedy path,
asserted above MIN_MARGIN so float32 rounding cannot flip a choice), hidden_states
[L + 1, T, hidden] f32 (transformers' output_hidden_states tuple for each prompt alone, back
to back: [0] the embeddings, [i] the output of layer i - 1 before any norm, [L] the final
norm's output; a text encoder's reference), and padded_hidden_states (the same tuple of the
prompts as one right-padded batch [L + 1, S, max_len, hidden] under transformers' masks:
causal and padding, position_ids 0.. on every row; the generator asserts that its real
tokens' rows equal hidden_states', the semantics a padded text-encoder batch must keep).

Usage: llama_family.py --layout LAYOUT --out DIR [--seed N] [--weight-dtype f32|bf16]
    [--max-shard-bytes N] [--attention-bias] [--mlp-bias] [--linear-rope F] [--no-reference]
    [--hidden H --layers L --heads A --kv-heads K --head-dim D --intermediate I --vocab V]
    [--real-size llama-3.2-1b|smollm2-360m]
Real sizes, random bf16 weights in 1 GB shards, no reference (speed does not depend on weight
values):
    --real-size llama-3.2-1b  (= --layout llama3 --hidden 2048 --layers 16 --heads 32
                               --kv-heads 8 --head-dim 64 --intermediate 8192 --vocab 128256)
    --real-size smollm2-360m  (= --layout smollm2 --hidden 960 --layers 32 --heads 15
                               --kv-heads 5 --head-dim 64 --intermediate 2560 --vocab 49152)
"""

import dataclasses
import math

import torch
from torch import nn
import torch.nn.functional as F

import prism_ref

PROMPT_LENS = (5, 18, 37)  # across block boundaries of a 16-token paged cache
NUM_GENERATED = 32
# Top-1 minus top-2 logit along every greedy step: the float32 C++ side is ~1e-5 of the
# logits' range off, so a margin this size cannot flip.
MIN_MARGIN = 0.05
MAX_PROMPT_TRIES = 200


@dataclasses.dataclass(frozen=True)
class Layout:
    model_type: str
    architecture: str
    hidden: int          # tiny defaults
    heads: int
    kv_heads: int
    intermediate: int
    head_dim: int
    vocab: int = 512
    layers: int = 2
    tied: bool = False
    explicit_head_dim: bool = False  # config.json carries "head_dim"
    base_architecture: str = ""      # the family's model without LM head (--base-model)
    extra: dict = dataclasses.field(default_factory=dict)  # family-specific keys and values


LLAMA3_ROPE = {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
               "original_max_position_embeddings": 8192, "rope_type": "llama3"}

LAYOUTS = {
    "llama2": Layout("llama", "LlamaForCausalLM", 128, 4, 2, 256, 32, extra={
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "rope_scaling": None, "max_position_embeddings": 4096,
        "attention_bias": False, "mlp_bias": False, "bos_token_id": 1, "eos_token_id": 2,
        "pretraining_tp": 1}),
    "llama3": Layout("llama", "LlamaForCausalLM", 128, 4, 2, 256, 64, tied=True, explicit_head_dim=True, extra={
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "rope_scaling": LLAMA3_ROPE,
        "max_position_embeddings": 131072, "attention_bias": False, "mlp_bias": False,
        "bos_token_id": 128000, "eos_token_id": 128001, "pretraining_tp": 1}),
    "qwen2": Layout("qwen2", "Qwen2ForCausalLM", 128, 4, 2, 320, 32, tied=True, extra={
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": None, "max_position_embeddings": 32768,
        "sliding_window": 32768, "use_sliding_window": False, "max_window_layers": 21,
        "bos_token_id": 151643, "eos_token_id": 151645}),
    "mistral": Layout("mistral", "MistralForCausalLM", 128, 8, 2, 256, 16, extra={
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 32768,
        "sliding_window": 4096, "bos_token_id": 1, "eos_token_id": 2}),
    "smollm2": Layout("smollm2", "LlamaForCausalLM", 192, 3, 1, 384, 64, tied=True, extra={
        "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "rope_scaling": None, "max_position_embeddings": 8192,
        "attention_bias": False, "mlp_bias": False, "bos_token_id": 1, "eos_token_id": 2,
        "pretraining_tp": 1}),
    # Qwen3-4B's keys and values (Z-Image's text_encoder/config.json is the same file).
    "qwen3": Layout("qwen3", "Qwen3ForCausalLM", 128, 4, 2, 256, 64, layers=3, tied=True, explicit_head_dim=True,
                    base_architecture="Qwen3Model", extra={
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": None, "max_position_embeddings": 40960,
        "attention_bias": False, "attention_dropout": 0.0, "sliding_window": None, "use_sliding_window": False,
        "max_window_layers": 36, "bos_token_id": 151643, "eos_token_id": 151645}),
}
# SmolLM2 is a Llama checkpoint: model_type "llama" in its config.json.
CONFIG_MODEL_TYPE = {"smollm2": "llama"}

REAL_SIZES = {
    "llama-3.2-1b": ("llama3", dict(hidden=2048, layers=16, heads=32, kv_heads=8, head_dim=64,
                                    intermediate=8192, vocab=128256)),
    "smollm2-360m": ("smollm2", dict(hidden=960, layers=32, heads=15, kv_heads=5, head_dim=64,
                                     intermediate=2560, vocab=49152)),
}


# ---- configuration ------------------------------------------------------------------------------

def make_config(layout_name, layout, sizes, weight_dtype, attention_bias, mlp_bias, linear_rope=None):
    c = {
        "architectures": [layout.architecture],
        "hidden_act": "silu",
        "hidden_size": sizes["hidden"],
        "initializer_range": 0.02,
        "intermediate_size": sizes["intermediate"],
        "model_type": CONFIG_MODEL_TYPE.get(layout_name, layout.model_type),
        "num_attention_heads": sizes["heads"],
        "num_hidden_layers": sizes["layers"],
        "num_key_value_heads": sizes["kv_heads"],
        "tie_word_embeddings": layout.tied,
        "torch_dtype": {"f32": "float32", "bf16": "bfloat16"}[weight_dtype],
        "transformers_version": "4.45.0",
        "use_cache": True,
        "vocab_size": sizes["vocab"],
    }
    c.update(layout.extra)
    if layout.explicit_head_dim or sizes["head_dim"] != sizes["hidden"] // sizes["heads"]:
        c["head_dim"] = sizes["head_dim"]
    if mlp_bias and c["model_type"] != "llama":
        raise SystemExit("--mlp-bias is a Llama config key")
    if attention_bias and c["model_type"] not in ("llama", "qwen3"):
        raise SystemExit("--attention-bias is a Llama / Qwen3 config key")
    if attention_bias or mlp_bias:
        c["attention_bias"] = attention_bias
    if mlp_bias:
        c["mlp_bias"] = mlp_bias
    if linear_rope:
        c["rope_scaling"] = {"type": "linear", "factor": linear_rope}  # the older key, as those configs have
    return dict(sorted(c.items()))


def head_dim(c):
    return c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]


def biases(c):
    """(q/k/v bias, o bias, mlp bias) as each family's modules have them."""
    if c["model_type"] == "qwen2":
        return True, False, False
    attn = bool(c.get("attention_bias", False))
    return attn, attn, bool(c.get("mlp_bias", False))


def qk_norm(c):
    """Whether attention normalises each query / key head (Qwen3Attention's q_norm, k_norm)."""
    return c["model_type"] == "qwen3"


# ---- RoPE (transformers' modeling_rope_utils, float32) ----------------------------------------------

def rope_inv_freq(c):
    """[head_dim / 2] float32, scaled as rope_scaling says."""
    dim = head_dim(c)
    inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    s = c.get("rope_scaling")
    kind = (s or {}).get("rope_type", (s or {}).get("type", "default"))
    if kind == "default":
        return inv_freq
    if kind == "linear":
        return inv_freq / s["factor"]
    if kind != "llama3":
        raise SystemExit(f"rope_scaling type {kind} not in the reference")
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old_context_len = s["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low
    high_freq_wavelen = old_context_len / high
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low) / (high - low)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def rope_cos_sin(positions, inv_freq):
    """cos, sin [L, head_dim] float64, each half repeated (rotate_half layout)."""
    angles = positions.float()[:, None] * inv_freq[None, :]  # float32, as transformers
    emb = torch.cat([angles, angles], dim=-1).double()
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


# ---- the model: modules named as in transformers, so state_dict() gives the real names ---------

class RMSNorm(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = c["num_attention_heads"], c["num_key_value_heads"], head_dim(c)
        hidden = c["hidden_size"]
        qkv_bias, o_bias, _ = biases(c)
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=o_bias)
        if qk_norm(c):  # Qwen3: over head_dim, one weight for every head
            self.q_norm = RMSNorm(self.head_dim, c["rms_norm_eps"])
            self.k_norm = RMSNorm(self.head_dim, c["rms_norm_eps"])

    def forward(self, h, cos, sin, allowed=None):
        """h: [B, L, hidden] (or [L, hidden]: one sequence); cos, sin: [L, D]; allowed:
        [B, L, L] bool, the keys each query attends (default: causal)."""
        if h.dim() == 2:
            return self.forward(h[None], cos, sin, allowed)[0]
        b, n = h.shape[:2]
        q = self.q_proj(h).view(b, n, self.num_heads, self.head_dim)
        k = self.k_proj(h).view(b, n, self.num_kv_heads, self.head_dim)
        v = self.v_proj(h).view(b, n, self.num_kv_heads, self.head_dim).transpose(1, 2)
        if hasattr(self, "q_norm"):  # each head's D values, before RoPE
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)                                 # [B, H, L, D]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        group = self.num_heads // self.num_kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # repeat_kv
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)                 # [B, Hq, L, L]
        if allowed is None:
            allowed = torch.ones(n, n, dtype=torch.bool).tril()[None]
        p = scores.masked_fill(~allowed[:, None], float("-inf")).softmax(-1)
        return self.o_proj((p @ v).transpose(1, 2).reshape(b, n, -1))


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        hidden, inter = c["hidden_size"], c["intermediate_size"]
        bias = biases(c)[2]
        self.gate_proj = nn.Linear(hidden, inter, bias=bias)
        self.up_proj = nn.Linear(hidden, inter, bias=bias)
        self.down_proj = nn.Linear(inter, hidden, bias=bias)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = Mlp(c)
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])

    def forward(self, x, cos, sin, allowed=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, allowed)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):  # "model.*"
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([DecoderLayer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class CausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.model = Backbone(c)
        self.tied = c["tie_word_embeddings"]
        if not self.tied:
            self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        self.inv_freq = rope_inv_freq(c)

    def hidden_states(self, ids, allowed=None):
        """transformers' output_hidden_states tuple at positions 0..L-1 of ids [L] (or a batch
        [B, L]), stacked: [num_layers + 1, (B,) L, hidden]: the embeddings, each layer's raw
        output but the last's, and the last one's after the final norm."""
        cos, sin = rope_cos_sin(torch.arange(ids.shape[-1]), self.inv_freq)
        x = self.model.embed_tokens(ids.long())
        states = [x]
        for layer in self.model.layers:
            x = layer(x, cos, sin, allowed)
            states.append(x)
        states[-1] = self.model.norm(x)
        return torch.stack(states)

    def padded_hidden_states(self, prompts, pad_id):
        """The tuple of the prompts as one right-padded batch, [num_layers + 1, B, max_len,
        hidden], as transformers runs a tokenizer's padded output: attention_mask 1 on the real
        tokens, each query attending the real keys at or before it (causal and padding masks
        combined; a padding query still sees its prompt's keys), position_ids 0..max_len-1 on
        every row."""
        n = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), n), pad_id, dtype=torch.long)
        real = torch.zeros(len(prompts), n, dtype=torch.bool)
        for i, p in enumerate(prompts):
            ids[i, :len(p)] = p.long()
            real[i, :len(p)] = True
        allowed = torch.ones(n, n, dtype=torch.bool).tril()[None] & real[:, None, :]  # [B, L, L]
        return self.hidden_states(ids, allowed)

    def forward(self, ids):
        """Logits [L, vocab] of one sequence at positions 0..L-1."""
        x = self.hidden_states(ids)[-1]
        head = self.model.embed_tokens.weight if self.tied else self.lm_head.weight
        return x @ head.t()


# ---- weights ------------------------------------------------------------------------------------------

def init_weights(model, c):
    """nn.Linear's default init (uniform, bound 1/sqrt(in)) keeps activations O(1), so
    bf16/int8 errors are relative to realistic magnitudes; q_proj and k_proj are scaled so
    attention logits have std ~2, a trained model's peaked softmax (a flat one would hide a
    wrong mask, position or head mapping). Embeddings ~ N(0, 1) and an untied lm_head with
    std 4 / sqrt(hidden) give logits of std ~4, so top-2 margins are clear. Norm weights and
    biases scatter around 1 and 0 as trained ones do, so a missing or swapped one shows.
    NOTE: tied models get small embeddings (std 0.02) and a final norm around 20 instead:
    with large ones the input token's own embedding dominates the residual and x . E picks
    it again, so greedy decoding would repeat the last prompt token forever."""
    hidden = c["hidden_size"]
    tied = c["tie_word_embeddings"]
    with torch.no_grad():
        model.model.embed_tokens.weight.normal_(0.0, 0.02 if tied else 1.0)
        if not tied:
            model.lm_head.weight.normal_(0.0, 4.0 / math.sqrt(hidden))
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj):
                bound = 2.5 / math.sqrt(hidden)
                proj.weight.uniform_(-bound, bound)
        for m in model.modules():
            if isinstance(m, RMSNorm):
                m.weight.copy_(1.0 + 0.1 * torch.randn(m.weight.shape))
        if tied:
            model.model.norm.weight.mul_(4.5 / (0.02 * math.sqrt(hidden)))
        # q_norm / k_norm fix each head's RMS at their weight, so the projections' scale above
        # no longer sets the attention logits: weights around 1.4 give them std ~2 again.
        for layer in model.model.layers:
            if hasattr(layer.self_attn, "q_norm"):
                layer.self_attn.q_norm.weight.mul_(1.4)
                layer.self_attn.k_norm.weight.mul_(1.4)
        for m in model.modules():
            if isinstance(m, nn.Linear) and m.bias is not None:
                m.bias.copy_(0.1 * torch.randn(m.bias.shape))


def random_state(c, store_dtype):
    """{name: tensor} of a real-size model without building modules in float32 at once:
    one tensor at a time, drawn in float32 and stored as store_dtype (benchmarks only)."""
    h, inter, vocab = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    qd, kvd = c["num_attention_heads"] * head_dim(c), c["num_key_value_heads"] * head_dim(c)

    def uniform(out, inp):
        bound = 1.0 / math.sqrt(inp)
        return torch.empty(out, inp).uniform_(-bound, bound).to(store_dtype)

    state = {"model.embed_tokens.weight": torch.randn(vocab, h).mul_(0.4).to(store_dtype)}
    qkv_bias, o_bias, mlp_bias = biases(c)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for name, shape in (("self_attn.q_proj", (qd, h)), ("self_attn.k_proj", (kvd, h)),
                            ("self_attn.v_proj", (kvd, h)), ("self_attn.o_proj", (h, qd)),
                            ("mlp.gate_proj", (inter, h)), ("mlp.up_proj", (inter, h)),
                            ("mlp.down_proj", (h, inter))):
            state[p + name + ".weight"] = uniform(*shape)
            with_bias = {"self_attn.o_proj": o_bias}.get(name, mlp_bias if name.startswith("mlp") else qkv_bias)
            if with_bias:
                state[p + name + ".bias"] = (0.1 * torch.randn(shape[0])).to(store_dtype)
        if qk_norm(c):
            for name in ("self_attn.q_norm.weight", "self_attn.k_norm.weight"):
                state[p + name] = (1.0 + 0.1 * torch.randn(head_dim(c))).to(store_dtype)
        state[p + "input_layernorm.weight"] = (1.0 + 0.1 * torch.randn(h)).to(store_dtype)
        state[p + "post_attention_layernorm.weight"] = (1.0 + 0.1 * torch.randn(h)).to(store_dtype)
    state["model.norm.weight"] = (1.0 + 0.1 * torch.randn(h)).to(store_dtype)
    if not c["tie_word_embeddings"]:
        state["lm_head.weight"] = uniform(vocab, h)
    return state


# ---- inputs and outputs ----------------------------------------------------------------------------

def greedy(model, prompt):
    """(generated [32] i64, logits after each generated token [32, vocab], min margin)."""
    ids = prompt.long()
    generated, continuation, margin = [], [], float("inf")
    logits = model(ids)
    for _ in range(NUM_GENERATED):
        top2 = logits[-1].topk(2).values
        margin = min(margin, float(top2[0] - top2[1]))
        nxt = int(logits[-1].argmax())
        generated.append(nxt)
        ids = torch.cat([ids, torch.tensor([nxt])])
        logits = model(ids)
        continuation.append(logits[-1])
    return torch.tensor(generated), torch.stack(continuation), margin


def make_reference(model, c, generator):
    """Prompts of PROMPT_LENS random ids, each redrawn until its greedy path's margins all
    exceed MIN_MARGIN; their logits and continuations."""
    prompts, logits, generated, continuation, margins, states = [], [], [], [], [], []
    for n in PROMPT_LENS:
        for _ in range(MAX_PROMPT_TRIES):
            prompt = torch.randint(0, c["vocab_size"], (n,), dtype=torch.int32, generator=generator)
            gen, cont, margin = greedy(model, prompt)
            if margin >= MIN_MARGIN:
                break
        else:
            raise SystemExit(f"no prompt of {n} tokens with a greedy margin >= {MIN_MARGIN} in "
                             f"{MAX_PROMPT_TRIES} tries")
        prompts.append(prompt)
        logits.append(model(prompt))
        states.append(model.hidden_states(prompt))
        generated.append(gen)
        continuation.append(cont)
        margins.append(margin)
    cu = torch.tensor([0] + [len(p) for p in prompts], dtype=torch.int32).cumsum(0, dtype=torch.int32)
    hidden = torch.cat(states, dim=1)  # [L + 1, T, hidden]
    padded = model.padded_hidden_states(prompts, pad_id=c["eos_token_id"] % c["vocab_size"])
    for i, p in enumerate(prompts):  # right padding leaves the real tokens' rows as they were
        err = float((padded[:, i, :len(p)] - hidden[:, cu[i]:cu[i + 1]]).abs().max())
        if err > 1e-12:
            raise SystemExit(f"the padded batch's prompt {i} differs from the prompt alone by {err}")
    return {"token_ids": torch.cat(prompts), "cu_seqlens": cu, "logits": torch.cat(logits).float(),
            "generated": torch.stack(generated).to(torch.int32),
            "continuation_logits": torch.stack(continuation).float(),
            "min_margin": torch.tensor([min(margins)], dtype=torch.float32),
            "hidden_states": hidden.float(), "padded_hidden_states": padded.float()}


def strip_to_base_model(layout_name, c, state):
    layout = LAYOUTS[layout_name]
    if not layout.base_architecture or not c["tie_word_embeddings"]:
        raise SystemExit(f"--base-model needs a tied layout with a base model (qwen3), not {layout_name}")
    base = dict(c, architectures=[layout.base_architecture])
    return base, {k.removeprefix("model."): v for k, v in state.items() if k != "lm_head.weight"}


def generate(out_dir, layout_name, seed=prism_ref.seeding.DEFAULT_SEED, weight_dtype="f32",
             max_shard_bytes=None, attention_bias=False, mlp_bias=False, linear_rope=None, reference=True,
             base_model=False, **sizes):
    """Writes the model directory (and reference.safetensors unless not reference) into
    out_dir. sizes: hidden, layers, heads, kv_heads, head_dim, intermediate, vocab (None or
    absent: the layout's tiny default). base_model: write the base model's checkpoint
    (strip_to_base_model). Returns the config dict as written."""
    layout = LAYOUTS[layout_name]
    given = {k: v for k, v in sizes.items() if v is not None}
    s = dict(hidden=layout.hidden, layers=layout.layers, heads=layout.heads, kv_heads=layout.kv_heads,
             head_dim=layout.head_dim, intermediate=layout.intermediate, vocab=layout.vocab)
    if "hidden" in given and "heads" in given and "head_dim" not in given:
        s["head_dim"] = given["hidden"] // given["heads"]
    s.update(given)
    if s["heads"] % s["kv_heads"]:
        raise SystemExit(f"--heads {s['heads']} is not a multiple of --kv-heads {s['kv_heads']}")
    c = make_config(layout_name, layout, s, weight_dtype, attention_bias, mlp_bias, linear_rope)
    store_dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[weight_dtype]
    generator = prism_ref.seed_everything(seed)

    def write(state):
        written_c, written = strip_to_base_model(layout_name, c, state) if base_model else (c, state)
        prism_ref.write_model_dir(out_dir, written_c, written, max_shard_bytes)
        return written_c

    if not reference:
        return write(random_state(c, store_dtype))

    model = CausalLM(c)
    init_weights(model, c)
    state = {k: v.detach().to(store_dtype).contiguous() for k, v in model.state_dict().items()}
    written_c = write(state)
    # The reference runs in float64 on exactly the stored weights.
    model.load_state_dict({k: v.to(torch.float32) for k, v in state.items()})
    model.double()
    with torch.no_grad():
        tensors = make_reference(model, c, generator)
    metadata = {"generator": "llama_family.py", "layout": layout_name, "seed": str(seed),
                "weight_dtype": weight_dtype, "torch": torch.__version__}
    prism_ref.save_reference(out_dir, tensors, metadata)
    return written_c


def main():
    parser = prism_ref.generator_parser(__doc__.splitlines()[0])
    parser.add_argument("--layout", choices=sorted(LAYOUTS), default=None)
    parser.add_argument("--real-size", choices=sorted(REAL_SIZES), default=None,
                        help="a real checkpoint's sizes, bf16, no reference (benchmarks)")
    parser.add_argument("--weight-dtype", choices=("f32", "bf16"), default=None,
                        help="dtype the weights are stored in (default f32; bf16 with --real-size)")
    parser.add_argument("--max-shard-bytes", type=int, default=None,
                        help="shard the weights (model.safetensors.index.json) above this size")
    parser.add_argument("--attention-bias", action="store_true", help="Llama attention_bias: q/k/v/o biases")
    parser.add_argument("--mlp-bias", action="store_true", help="Llama mlp_bias: gate/up/down biases")
    parser.add_argument("--linear-rope", type=float, default=None, metavar="FACTOR",
                        help="rope_scaling {type: linear, factor: FACTOR}")
    parser.add_argument("--no-reference", action="store_true", help="write the model only")
    parser.add_argument("--base-model", action="store_true",
                        help="the base model's checkpoint (Qwen3Model: no model. prefix, no lm_head)")
    for flag, what in (("hidden", "hidden_size"), ("layers", "num_hidden_layers"),
                       ("heads", "num_attention_heads"), ("kv-heads", "num_key_value_heads"),
                       ("head-dim", "head_dim"), ("intermediate", "intermediate_size"), ("vocab", "vocab_size")):
        parser.add_argument("--" + flag, type=int, default=None, help=what)
    a = parser.parse_args()
    sizes = dict(hidden=a.hidden, layers=a.layers, heads=a.heads, kv_heads=a.kv_heads, head_dim=a.head_dim,
                 intermediate=a.intermediate, vocab=a.vocab)
    layout, reference, weight_dtype = a.layout, not a.no_reference, a.weight_dtype or "f32"
    if a.real_size:
        real_layout, real = REAL_SIZES[a.real_size]
        if layout not in (None, real_layout):
            raise SystemExit(f"--real-size {a.real_size} is layout {real_layout}")
        layout, reference, weight_dtype = real_layout, False, a.weight_dtype or "bf16"
        # 1 GB shards keep the writer's peak memory near the model's size (one file would
        # hold the whole serialized model twice).
        a.max_shard_bytes = a.max_shard_bytes or 1_000_000_000
        sizes = {**real, **{k: v for k, v in sizes.items() if v is not None}}
    if layout is None:
        parser.error("--layout or --real-size is required")
    generate(a.out, layout, seed=a.seed, weight_dtype=weight_dtype, max_shard_bytes=a.max_shard_bytes,
             attention_bias=a.attention_bias, mlp_bias=a.mlp_bias, linear_rope=a.linear_rope, reference=reference,
             base_model=a.base_model, **sizes)


if __name__ == "__main__":
    main()
