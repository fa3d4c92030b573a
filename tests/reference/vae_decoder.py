#!/usr/bin/env python3
"""Reference for the AutoencoderKL decoder (models/vae): writes a tiny random VAE in diffusers'
layout (vae/config.json keys of AutoencoderKL, vae/diffusion_pytorch_model.safetensors with its
parameter names) and reference.safetensors with latents in the denoiser's space, the decoded
images and the tiled decode, which tests/parity/vae_decoder_test.cpp matches.

A re-statement of diffusers' AutoencoderKL.decode (Decoder, UNetMidBlock2D, UpDecoderBlock2D,
ResnetBlock2D, Upsample2D, the mid-block Attention) and tiled_decode, written from their
published formulas in plain torch, float64 from the stored (float32, or bf16-rounded) weights:
    z = latents / scaling_factor + shift_factor            (the pipelines' un-scaling)
    z = post_quant_conv(z)                                  (1x1, when use_post_quant_conv)
    x = conv_in(z)                                          3x3 -> block_out_channels[-1]
    x = resnet(x); x = attention(x) (if mid_block_add_attention); x = resnet(x)
    for each up block (block_out_channels reversed): layers_per_block + 1 resnets, then,
        except the last, nearest x2 upsample + 3x3 conv
    image = conv_out(silu(group_norm(x)))                   [N, out_channels, f h, f w], f = 2^(blocks - 1)
resnet(x) = shortcut(x) + conv2(silu(gn2(conv1(silu(gn1(x)))))), shortcut a 1x1 conv when the
channels change; every GroupNorm has norm_num_groups groups and eps 1e-6. attention(x): one
head of width C over the H*W positions of each image: t = group_norm(x) as [HW, C] rows,
x + to_out.0(softmax(to_q(t) to_k(t)^T / sqrt(C)) to_v(t)).

Tiled decode (diffusers' tiled_decode): tiles of L = int(sample_size / f) latent cells every
int(L * 0.75) cells, each decoded alone; tile (i, j) is blended in place with the already blended
tile above over its first B = int(sample_size * 0.25) rows (weights (1 - y/B) above, y/B own),
then with the blended tile to its left over its first B columns, then cropped to its first
sample_size - B rows and columns; the crops are concatenated.

Cases (reference.safetensors): latents_<case> [N, latent_channels, h, w] f32 (denoiser space),
image_<case> [N, out_channels, f h, f w] f32, tiled_<case> (the tiled decode with the config's
sample_size tiles; not for 80x72) and uint8_<case> [N, f h, f w, out_channels] u8 (diffusers' postprocess of
image_<case> in float32: round(clamp(x * 0.5 + 0.5, 0, 1) * 255)).

Layouts:
    tiny   block_out_channels [32, 64], layers_per_block 1, norm_num_groups 8, latent 16,
           FLUX's scaling 0.3611 / shift 0.1159, no quant convs, mid-block attention,
           sample_size 8 (4-cell tiles); cases 8x8 (N = 2) and 12x10 (N = 1), and 80x72
           (5760 positions: more than one query chunk in the C++ attention) decoded whole
    tiny3  block_out_channels [16, 32, 32], layers_per_block 2, latent 4, SD's scaling
           0.18215 with shift_factor null, post_quant_conv, no mid-block attention,
           sample_size 16; case 6x5 (N = 1)
Usage: vae_decoder.py --out DIR [--layout tiny|tiny3] [--seed N] [--weight-dtype f32|bf16]
       vae_decoder.py --out DIR --real-size [--weight-dtype bf16]   (FLUX's sizes, random
           weights, no reference: for measuring speed and memory)
"""

import math
import os

import torch
import torch.nn.functional as F

import prism_ref

WEIGHTS_FILE = "diffusion_pytorch_model.safetensors"
EPS = 1e-6
OVERLAP = 0.25  # diffusers' tile_overlap_factor

LAYOUTS = {
    "tiny": dict(config=dict(block_out_channels=[32, 64], layers_per_block=1, norm_num_groups=8,
                             latent_channels=16, sample_size=8, scaling_factor=0.3611, shift_factor=0.1159,
                             use_quant_conv=False, use_post_quant_conv=False, mid_block_add_attention=True),
                 cases={"8x8": (2, 8, 8, True), "12x10": (1, 12, 10, True), "80x72": (1, 80, 72, False)}),
    "tiny3": dict(config=dict(block_out_channels=[16, 32, 32], layers_per_block=2, norm_num_groups=8,
                              latent_channels=4, sample_size=16, scaling_factor=0.18215, shift_factor=None,
                              use_quant_conv=True, use_post_quant_conv=True, mid_block_add_attention=False),
                  cases={"6x5": (1, 6, 5, True)}),
    "real": dict(config=dict(block_out_channels=[128, 256, 512, 512], layers_per_block=2, norm_num_groups=32,
                             latent_channels=16, sample_size=1024, scaling_factor=0.3611, shift_factor=0.1159,
                             use_quant_conv=False, use_post_quant_conv=False, mid_block_add_attention=True),
                 cases={}),
}


def make_config(layout):
    """vae/config.json as diffusers' AutoencoderKL writes it (FLUX.1's file, resized)."""
    c = LAYOUTS[layout]["config"]
    n = len(c["block_out_channels"])
    return {
        "_class_name": "AutoencoderKL",
        "_diffusers_version": "0.36.0.dev0",
        "act_fn": "silu",
        "block_out_channels": list(c["block_out_channels"]),
        "down_block_types": ["DownEncoderBlock2D"] * n,
        "force_upcast": True,
        "in_channels": 3,
        "latent_channels": c["latent_channels"],
        "latents_mean": None,
        "latents_std": None,
        "layers_per_block": c["layers_per_block"],
        "mid_block_add_attention": c["mid_block_add_attention"],
        "norm_num_groups": c["norm_num_groups"],
        "out_channels": 3,
        "sample_size": c["sample_size"],
        "scaling_factor": c["scaling_factor"],
        "shift_factor": c["shift_factor"],
        "up_block_types": ["UpDecoderBlock2D"] * n,
        "use_post_quant_conv": c["use_post_quant_conv"],
        "use_quant_conv": c["use_quant_conv"],
    }


# ---- parameters: {diffusers name: shape} and random values --------------------------------------

def resnet_shapes(p, cin, cout):
    s = {p + "norm1.weight": (cin,), p + "norm1.bias": (cin,),
         p + "conv1.weight": (cout, cin, 3, 3), p + "conv1.bias": (cout,),
         p + "norm2.weight": (cout,), p + "norm2.bias": (cout,),
         p + "conv2.weight": (cout, cout, 3, 3), p + "conv2.bias": (cout,)}
    if cin != cout:
        s.update({p + "conv_shortcut.weight": (cout, cin, 1, 1), p + "conv_shortcut.bias": (cout,)})
    return s


def parameter_shapes(c):
    """Every tensor of the checkpoint the decoder reads, plus a few encoder-side ones that a
    real file holds and the decoder must ignore."""
    ch = c["block_out_channels"]
    lat, top = c["latent_channels"], ch[-1]
    s = {"decoder.conv_in.weight": (top, lat, 3, 3), "decoder.conv_in.bias": (top,)}
    s.update(resnet_shapes("decoder.mid_block.resnets.0.", top, top))
    if c["mid_block_add_attention"]:
        a = "decoder.mid_block.attentions.0."
        s.update({a + "group_norm.weight": (top,), a + "group_norm.bias": (top,)})
        for proj in ("to_q", "to_k", "to_v", "to_out.0"):
            s.update({a + proj + ".weight": (top, top), a + proj + ".bias": (top,)})
    s.update(resnet_shapes("decoder.mid_block.resnets.1.", top, top))
    rev = list(reversed(ch))
    prev = rev[0]
    for i, out in enumerate(rev):
        for j in range(c["layers_per_block"] + 1):
            s.update(resnet_shapes(f"decoder.up_blocks.{i}.resnets.{j}.", prev if j == 0 else out, out))
        if i != len(rev) - 1:
            s.update({f"decoder.up_blocks.{i}.upsamplers.0.conv.weight": (out, out, 3, 3),
                      f"decoder.up_blocks.{i}.upsamplers.0.conv.bias": (out,)})
        prev = out
    s.update({"decoder.conv_norm_out.weight": (ch[0],), "decoder.conv_norm_out.bias": (ch[0],),
              "decoder.conv_out.weight": (3, ch[0], 3, 3), "decoder.conv_out.bias": (3,)})
    if c["use_post_quant_conv"]:
        s.update({"post_quant_conv.weight": (lat, lat, 1, 1), "post_quant_conv.bias": (lat,)})
    # Encoder-side tensors: present in real files, never read by the decoder.
    s.update({"encoder.conv_in.weight": (ch[0], 3, 3, 3), "encoder.conv_in.bias": (ch[0],)})
    if c["use_quant_conv"]:
        s.update({"quant_conv.weight": (2 * lat, 2 * lat, 1, 1), "quant_conv.bias": (2 * lat,)})
    return s


def random_parameter(name, shape):
    """Convs and linears uniform in +-1/sqrt(fan_in) (PyTorch's default bound), q/k twice
    that so the attention is far from uniform; norms' scales near 1, biases small."""
    if name.endswith(".bias"):
        return 0.1 * torch.randn(shape)
    if "norm" in name:  # norm1, norm2, group_norm, conv_norm_out
        return 1.0 + 0.1 * torch.randn(shape)
    fan_in = math.prod(shape[1:])
    bound = 1.0 / math.sqrt(fan_in)
    if ".to_q." in name or ".to_k." in name:
        bound *= 2.0
    return torch.empty(shape).uniform_(-bound, bound)


# ---- the decoder, float64 -----------------------------------------------------------------------

def group_norm(x, w, p, groups, silu):
    y = F.group_norm(x, groups, w[p + ".weight"], w[p + ".bias"], EPS)
    return F.silu(y) if silu else y


def conv(x, w, p, padding):
    return F.conv2d(x, w[p + ".weight"], w[p + ".bias"], padding=padding)


def resnet(x, w, p, groups):
    h = conv(group_norm(x, w, p + "norm1", groups, True), w, p + "conv1", 1)
    h = conv(group_norm(h, w, p + "norm2", groups, True), w, p + "conv2", 1)  # dropout: identity
    shortcut = conv(x, w, p + "conv_shortcut", 0) if p + "conv_shortcut.weight" in w else x
    return shortcut + h  # output_scale_factor 1


def attention(x, w, p, groups):
    n, ch, hh, ww = x.shape
    t = group_norm(x, w, p + "group_norm", groups, False).reshape(n, ch, hh * ww).transpose(1, 2)  # [N, HW, C]
    q = F.linear(t, w[p + "to_q.weight"], w[p + "to_q.bias"])
    k = F.linear(t, w[p + "to_k.weight"], w[p + "to_k.bias"])
    v = F.linear(t, w[p + "to_v.weight"], w[p + "to_v.bias"])
    a = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(ch), dim=-1) @ v
    o = F.linear(a, w[p + "to_out.0.weight"], w[p + "to_out.0.bias"])
    return x + o.transpose(1, 2).reshape(n, ch, hh, ww)  # residual, rescale_output_factor 1


def decode(z, w, c):
    """z: [N, latent_channels, h, w] float64, already un-scaled."""
    g = c["norm_num_groups"]
    if c["use_post_quant_conv"]:
        z = conv(z, w, "post_quant_conv", 0)
    x = conv(z, w, "decoder.conv_in", 1)
    x = resnet(x, w, "decoder.mid_block.resnets.0.", g)
    if c["mid_block_add_attention"]:
        x = attention(x, w, "decoder.mid_block.attentions.0.", g)
    x = resnet(x, w, "decoder.mid_block.resnets.1.", g)
    num_blocks = len(c["block_out_channels"])
    for i in range(num_blocks):
        for j in range(c["layers_per_block"] + 1):
            x = resnet(x, w, f"decoder.up_blocks.{i}.resnets.{j}.", g)
        if i != num_blocks - 1:
            x = x.repeat_interleave(2, dim=2).repeat_interleave(2, dim=3)  # nearest x2
            x = conv(x, w, f"decoder.up_blocks.{i}.upsamplers.0.conv", 1)
    x = group_norm(x, w, "decoder.conv_norm_out", g, True)
    return conv(x, w, "decoder.conv_out", 1)


def tiled_decode(z, w, c):
    """diffusers' tiled_decode with the config's sample_size tiles and overlap 0.25."""
    factor = 2 ** (len(c["block_out_channels"]) - 1)
    tile_sample = c["sample_size"]
    tile_latent = int(tile_sample / factor)
    step = int(tile_latent * (1 - OVERLAP))
    blend = int(tile_sample * OVERLAP)
    keep = tile_sample - blend
    rows = [[decode(z[:, :, i:i + tile_latent, j:j + tile_latent], w, c) for j in range(0, z.shape[3], step)]
            for i in range(0, z.shape[2], step)]
    out_rows = []
    for i, row in enumerate(rows):
        out_row = []
        for j, tile in enumerate(row):
            if i > 0:  # in place: the tile below sees this one blended
                above = rows[i - 1][j]
                e = min(above.shape[2], tile.shape[2], blend)
                for y in range(e):
                    tile[:, :, y, :] = above[:, :, -e + y, :] * (1 - y / e) + tile[:, :, y, :] * (y / e)
            if j > 0:
                left = row[j - 1]
                e = min(left.shape[3], tile.shape[3], blend)
                for x in range(e):
                    tile[:, :, :, x] = left[:, :, :, -e + x] * (1 - x / e) + tile[:, :, :, x] * (x / e)
            out_row.append(tile[:, :, :keep, :keep])
        out_rows.append(torch.cat(out_row, dim=3))
    return torch.cat(out_rows, dim=2)


def postprocess_uint8(image):
    """diffusers' VaeImageProcessor.postprocess(output_type="np") then numpy_to_pil's uint8, in
    float32: [N, C, H, W] -> [N, H, W, C] u8."""
    x = (image.float() * 0.5 + 0.5).clamp(0, 1).permute(0, 2, 3, 1)
    return (x * 255).round().to(torch.uint8)


# ---- writing ------------------------------------------------------------------------------------

def generate(out_dir, layout="tiny", seed=prism_ref.seeding.DEFAULT_SEED, weight_dtype="f32", reference=True):
    store = {"f32": torch.float32, "bf16": torch.bfloat16}[weight_dtype]
    generator = prism_ref.seed_everything(seed)
    config = make_config(layout)
    shapes = parameter_shapes(config)
    state = {name: random_parameter(name, shape).to(store).contiguous() for name, shape in shapes.items()}
    prism_ref.hf_dir.write_config(out_dir, config)
    prism_ref.save_file(state, os.path.join(out_dir, WEIGHTS_FILE), {"format": "pt"})
    if not reference:
        return config
    w = {name: t.double() for name, t in state.items()}
    shift = config["shift_factor"] or 0.0
    tensors = {}
    with torch.no_grad():
        for case, (n, h, ww, tiled) in LAYOUTS[layout]["cases"].items():
            latents = torch.randn(n, config["latent_channels"], h, ww, generator=generator)  # denoiser space
            z = latents.double() / config["scaling_factor"] + shift
            image = decode(z, w, config)
            tensors[f"latents_{case}"] = latents.float()
            tensors[f"image_{case}"] = image.float()
            if tiled:
                tensors[f"tiled_{case}"] = tiled_decode(z, w, config).float()
            tensors[f"uint8_{case}"] = postprocess_uint8(image.float())
    prism_ref.save_reference(out_dir, tensors)
    return config


def main():
    parser = prism_ref.generator_parser(__doc__.splitlines()[0])
    parser.add_argument("--layout", choices=sorted(set(LAYOUTS) - {"real"}), default="tiny")
    parser.add_argument("--weight-dtype", choices=("f32", "bf16"), default="f32")
    parser.add_argument("--real-size", action="store_true", help="FLUX's sizes, random weights, no reference")
    args = parser.parse_args()
    if args.real_size:
        generate(args.out, "real", args.seed, args.weight_dtype, reference=False)
    else:
        generate(args.out, args.layout, args.seed, args.weight_dtype)


if __name__ == "__main__":
    main()
