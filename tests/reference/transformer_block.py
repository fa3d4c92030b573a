#!/usr/bin/env python3
"""Reference for one Llama decoder layer: the pre-norm transformer block every decoder
family builds on. Writes a tiny random model as an HF directory (config.json with Llama's
keys, model.safetensors with Llama's parameter names "model.layers.0.*") and
reference.safetensors with fixed inputs and the expected outputs, which
tests/parity/transformer_block_test.cpp matches.

    x -> RMSNorm -> q/k/v proj (grouped-query) -> RoPE (half rotation) -> causal attention
      -> o_proj -> + x -> RMSNorm -> SwiGLU MLP -> + residual

Inputs are TWO sequences of different lengths back to back ([T, hidden], cu_seqlens =
[0, 7, 20]), each at positions 0..len-1 and attending only to itself: the flat varlen
batch the C++ ops take. The expected outputs are computed in float64 from the stored
(float32, or bf16-rounded) weights, so they are exact to float32 storage and the C++ fp32
error is the C++ side's alone. This file is a reference, not a model: it is written for
reading, loops over sequences and never batches cleverly.
Usage: transformer_block.py --out DIR [--seed N] [--weight-dtype f32|bf16] [--max-shard-bytes N]
"""

import math

import torch
from torch import nn
import torch.nn.functional as F

import prism_ref

# A real Llama config.json's keys at a tiny size. head_dim 64 because the C++ attention
# kernels support head dims 64, 80, 96 and 128. One decoder layer, no embeddings or head.
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "max_position_embeddings": 64,
    "attention_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
}
SEQ_LENS = (7, 13)


class RMSNorm(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_cos_sin(positions, head_dim, theta):
    """cos, sin: [T, head_dim], each half repeated: Llama's "rotate_half" layout."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    freqs = positions.to(torch.float64)[:, None] * inv_freq[None, :]  # [T, head_dim / 2]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x, cos, sin):  # x: [T, H, D]; cos, sin: [T, D]
    return x * cos[:, None, :] + rotate_half(x) * sin[:, None, :]


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.num_heads = c["num_attention_heads"]
        self.num_kv_heads = c["num_key_value_heads"]
        self.head_dim = c["head_dim"]
        self.theta = c["rope_theta"]
        hidden = c["hidden_size"]
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=False)

    def forward(self, h, positions, cu_seqlens, trace):
        t = h.shape[0]
        q = self.q_proj(h).view(t, self.num_heads, self.head_dim)
        k = self.k_proj(h).view(t, self.num_kv_heads, self.head_dim)
        v = self.v_proj(h).view(t, self.num_kv_heads, self.head_dim)
        cos, sin = rope_cos_sin(positions, self.head_dim, self.theta)
        q, k = apply_rope(q, cos, sin).to(h.dtype), apply_rope(k, cos, sin).to(h.dtype)
        trace.update(q=q, k=k, v=v)

        group = self.num_heads // self.num_kv_heads
        out = torch.empty_like(q)
        for s in range(len(cu_seqlens) - 1):  # each sequence sees only itself
            b, e = int(cu_seqlens[s]), int(cu_seqlens[s + 1])
            qs = q[b:e].transpose(0, 1)                                   # [Hq, L, D]
            ks = k[b:e].transpose(0, 1).repeat_interleave(group, dim=0)   # [Hq, L, D]: GQA
            vs = v[b:e].transpose(0, 1).repeat_interleave(group, dim=0)
            scores = qs @ ks.transpose(1, 2) / math.sqrt(self.head_dim)   # [Hq, L, L]
            mask = torch.ones(e - b, e - b, dtype=torch.bool).tril()
            scores = scores.masked_fill(~mask, float("-inf"))
            out[b:e] = (scores.softmax(-1) @ vs).transpose(0, 1)
        trace.update(attn=out)
        out = self.o_proj(out.reshape(t, -1))
        trace.update(attn_out=out)
        return out


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        hidden, inter = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, h, trace):
        act = F.silu(self.gate_proj(h)) * self.up_proj(h)
        trace.update(mlp_act=act)
        out = self.down_proj(act)
        trace.update(mlp_out=out)
        return out


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = Mlp(c)

    def forward(self, x, positions, cu_seqlens):
        """Returns {name: tensor}: the block output "out" and the intermediates."""
        trace = {}
        h = self.input_layernorm(x)
        trace.update(input_norm=h)
        residual = x + self.self_attn(h, positions, cu_seqlens, trace)
        trace.update(residual=residual)
        out = residual + self.mlp(self.post_attention_layernorm(residual), trace)
        trace.update(out=out)
        return trace


class Block(nn.Module):
    """Only here so that parameter names read "model.layers.0.*" as in a Llama checkpoint."""

    def __init__(self, c):
        super().__init__()
        self.model = nn.Module()
        self.model.layers = nn.ModuleList([DecoderLayer(c)])

    def forward(self, x, positions, cu_seqlens):
        return self.model.layers[0](x, positions, cu_seqlens)


def init_weights(block, c):
    """nn.Linear's default init (uniform, bound 1/sqrt(in)) keeps activations O(1), so
    bf16/int8 errors are relative to realistic magnitudes; except q_proj and k_proj, scaled
    so attention logits have std ~2: a trained model's peaked softmax. A too-flat softmax
    averages over the keys and would hide a wrong mask, position or head mapping.
    Norm weights scatter around 1, as trained ones do, so a missing or transposed weight
    shows."""
    layer = block.model.layers[0]
    hidden = c["hidden_size"]
    with torch.no_grad():
        for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj):
            bound = 2.5 / math.sqrt(hidden)
            proj.weight.uniform_(-bound, bound)
        for norm in (layer.input_layernorm, layer.post_attention_layernorm):
            norm.weight.copy_(1.0 + 0.1 * torch.randn(hidden))


def make_inputs(c):
    """x: [T, hidden] f32, positions: [T] i32, cu_seqlens: [num_seqs + 1] i32."""
    x = torch.randn(sum(SEQ_LENS), c["hidden_size"])
    positions = torch.cat([torch.arange(n, dtype=torch.int32) for n in SEQ_LENS])
    cu_seqlens = torch.tensor([0] + list(SEQ_LENS), dtype=torch.int32).cumsum(0, dtype=torch.int32)
    return x, positions, cu_seqlens


def generate(out_dir, seed, weight_dtype="f32", max_shard_bytes=None):
    """Writes the model directory and reference.safetensors into out_dir."""
    prism_ref.seed_everything(seed)

    c = dict(CONFIG)
    block = Block(c)
    init_weights(block, c)
    x, positions, cu_seqlens = make_inputs(c)

    store_dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[weight_dtype]
    c["torch_dtype"] = {"f32": "float32", "bf16": "bfloat16"}[weight_dtype]
    state = {k: v.detach().to(store_dtype).contiguous() for k, v in block.state_dict().items()}
    prism_ref.write_model_dir(out_dir, c, state, max_shard_bytes)

    # The reference runs in float64 on exactly the stored weights and inputs.
    block.load_state_dict({k: v.to(torch.float32) for k, v in state.items()})
    block.double()
    with torch.no_grad():
        outputs = block(x.double(), positions, cu_seqlens)

    tensors = {"x": x, "positions": positions, "cu_seqlens": cu_seqlens}
    tensors.update({k: v.to(torch.float32).contiguous() for k, v in outputs.items()})
    metadata = {"generator": "transformer_block.py", "seed": str(seed),
                "seq_lens": ",".join(map(str, SEQ_LENS)), "torch": torch.__version__}
    prism_ref.save_reference(out_dir, tensors, metadata)


def main():
    parser = prism_ref.generator_parser(__doc__.splitlines()[0])
    parser.add_argument("--weight-dtype", choices=("f32", "bf16"), default="f32",
                        help="dtype the weights are stored in (real Llama checkpoints: bf16)")
    parser.add_argument("--max-shard-bytes", type=int, default=None,
                        help="shard the weights (model.safetensors.index.json) above this size")
    args = parser.parse_args()
    generate(args.out, args.seed, args.weight_dtype, args.max_shard_bytes)


if __name__ == "__main__":
    main()
