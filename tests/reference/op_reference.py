"""PyTorch reference numbers for single ops (rope, QK-norm + rope, conv, patchify, group norm, upsampling), for the C++ op tests.

Usage: op_reference.py <case> <out_dir>

Writes raw little-endian .bin files (f32, or i32 for positions) into out_dir. Shapes and
parameters are fixed per case and mirrored by the C++ test that reads them; inputs are drawn
here (seeded) so both sides run on the same numbers. The rope cases copy Hugging Face's
arithmetic (Llama's rotate_half, GPT-J's rotate_every_two), not a re-derivation of it.
"""
import os
import sys

import torch
import torch.nn.functional as F


def save(out_dir, name, t):
    t.detach().contiguous().numpy().tofile(os.path.join(out_dir, name + ".bin"))


def rope_half(out_dir):
    # Llama: x [T, H, D], full rotary, theta 10000, positions up to 4095.
    T, H, D, theta = 7, 3, 64, 10000.0
    x = torch.randn(T, H, D)
    pos = torch.tensor([0, 1, 5, 100, 1023, 2047, 4095], dtype=torch.int32)
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
    freqs = pos.float()[:, None] @ inv_freq[None, :]  # [T, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]

    def rotate_half(v):
        v1, v2 = v[..., : v.shape[-1] // 2], v[..., v.shape[-1] // 2 :]
        return torch.cat((-v2, v1), dim=-1)

    out = x * cos + rotate_half(x) * sin
    for name, t in (("x", x), ("pos", pos), ("inv_freq", inv_freq), ("out", out)):
        save(out_dir, name, t)


def rope_interleaved(out_dir):
    # GPT-J: x [T, H, D] with D = 64, rotary_dim = 32 (the rest passes through).
    T, H, D, R = 5, 2, 64, 32
    x = torch.randn(T, H, D)
    pos = torch.tensor([0, 3, 17, 511, 2000], dtype=torch.int32)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, R, 2, dtype=torch.int64) / R))
    sinusoid = torch.einsum("i,j->ij", pos.to(torch.int64).float(), inv_freq).float()
    sin = torch.repeat_interleave(torch.sin(sinusoid)[:, None, :], 2, 2)
    cos = torch.repeat_interleave(torch.cos(sinusoid)[:, None, :], 2, 2)

    def rotate_every_two(v):
        v1, v2 = v[..., ::2], v[..., 1::2]
        return torch.stack((-v2, v1), dim=-1).flatten(-2)

    rot, rest = x[..., :R], x[..., R:]
    out = torch.cat([rot * cos + rotate_every_two(rot) * sin, rest], dim=-1)
    for name, t in (("x", x), ("pos", pos), ("inv_freq", inv_freq), ("out", out)):
        save(out_dir, name, t)


def rms_norm_rope(out_dir):
    # Z-Image's q/k path: RMSNorm over head_dim (eps 1e-5, a weight), then the rotation of
    # (even, odd) pairs as complex numbers times exp(i angle), angle = float32(pos * freq),
    # freq_i = 1 / 256^(2i / D). In float64 on the float32 inputs and cos/sin tables.
    T, H, D, P, theta, eps = 6, 3, 128, 64, 256.0, 1e-5
    x = torch.randn(T, H, D)
    weight = 1.0 + 0.1 * torch.randn(D)
    pos = torch.tensor([0, 1, 7, 31, 32, 63], dtype=torch.int32)
    freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    angle = (torch.arange(P, dtype=torch.float64)[:, None] * freq[None, :]).float().double()  # [P, D/2]
    cos, sin = angle.cos().float(), angle.sin().float()
    xd = x.double()
    normed = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * weight.double()
    pairs = torch.view_as_complex(normed.reshape(T, H, D // 2, 2).contiguous())
    rot = torch.complex(cos.double(), sin.double())[pos.long()][:, None, :]  # [T, 1, D/2]
    out = torch.view_as_real(pairs * rot).reshape(T, H, D).float()
    for name, t in (("x", x), ("weight", weight), ("pos", pos), ("cos", cos), ("sin", sin), ("out", out)):
        save(out_dir, name, t)


def conv1d(out_dir):
    # x [2, 6, 37], w [8, 3, 5]: groups 2, stride 2, padding 3, dilation 2, bias.
    x, w, b = torch.randn(2, 6, 37), torch.randn(8, 3, 5), torch.randn(8)
    out = F.conv1d(x, w, b, stride=2, padding=3, dilation=2, groups=2)
    for name, t in (("x", x), ("w", w), ("b", b), ("out", out)):
        save(out_dir, name, t)


def conv2d(out_dir):
    # x [2, 4, 11, 9], w [6, 2, 3, 2]: groups 2, stride (2, 1), padding (1, 2), dilation (1, 2).
    x, w, b = torch.randn(2, 4, 11, 9), torch.randn(6, 2, 3, 2), torch.randn(6)
    out = F.conv2d(x, w, b, stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2)
    for name, t in (("x", x), ("w", w), ("b", b), ("out", out)):
        save(out_dir, name, t)


def conv2d_patch(out_dir):
    # ViT patch embedding: x [1, 3, 32, 32], w [8, 3, 16, 16], stride 16, no bias.
    x, w = torch.randn(1, 3, 32, 32), torch.randn(8, 3, 16, 16)
    out = F.conv2d(x, w, None, stride=16)
    for name, t in (("x", x), ("w", w), ("out", out)):
        save(out_dir, name, t)


def patchify(out_dir):
    # ViT patch rows: x [2, 3, 35, 35], patch 8, so a 4 x 4 grid and the last 3 pixel rows and
    # columns unused (a stride-8 conv ignores them too). Each view's patches in raster order,
    # each patch's pixels in (channel, row, column) order: the conv weight's flattening.
    V, C, S, P = 2, 3, 35, 8
    g = S // P
    x = torch.randn(V, C, S, S)
    out = (x[:, :, : g * P, : g * P].reshape(V, C, g, P, g, P).permute(0, 2, 4, 1, 3, 5)
           .reshape(V * g * g, C * P * P))
    for name, t in (("x", x), ("out", out)):
        save(out_dir, name, t)


def group_norm(out_dir):
    # A VAE block's norm: [2, 12, 5, 7], 4 groups, affine, eps 1e-6, inputs off-centre; then SiLU.
    x = torch.randn(2, 12, 5, 7) * 3 + 10
    w, b = torch.randn(12), torch.randn(12)
    out = F.group_norm(x, 4, w, b, eps=1e-6)
    for name, t in (("x", x), ("w", w), ("b", b), ("out", out), ("out_silu", F.silu(out))):
        save(out_dir, name, t)


def upsample_nearest(out_dir):
    # nn.Upsample(scale_factor=2, mode="nearest") on [2, 3, 5, 4], and factor 3.
    x = torch.randn(2, 3, 5, 4)
    save(out_dir, "x", x)
    save(out_dir, "out2", F.interpolate(x, scale_factor=2.0, mode="nearest"))
    save(out_dir, "out3", F.interpolate(x, scale_factor=3.0, mode="nearest"))


CASES = {f.__name__: f for f in (rope_half, rope_interleaved, rms_norm_rope, conv1d, conv2d, conv2d_patch, patchify, group_norm,
                                  upsample_nearest)}

if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in CASES:
        sys.exit("usage: op_reference.py {%s} OUT_DIR" % "|".join(CASES))
    torch.manual_seed(0)
    os.makedirs(sys.argv[2], exist_ok=True)
    CASES[sys.argv[1]](sys.argv[2])
