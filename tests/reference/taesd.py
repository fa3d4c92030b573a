"""Reference for models/taesd: the Tiny AutoEncoder (TAESD, and its FLUX.2 variant TAEF2)
re-stated from madebyollin/taesd's description, run on real trained weights.

    taesd.py --out DIR --encoder ENC.pth --decoder DEC.pth --input IN.safetensors
             [--variant flux_2|taesd] [--image PNG]
    taesd.py --out DIR --random taesd|flux_2 --latent-channels C --input IN.safetensors

IN holds "image" [N, 3, H, W] (RGB in [0, 1]) and optionally "latent" [N, C, h, w]. DIR/
reference.safetensors gets "encoded" = encoder(image), "decoded" = decoder(latent)
(unclamped; when IN has a latent) and "roundtrip" = decoder(encoder(image)).clamp(0, 1), with
the PSNR of the round trip against the image (when their sizes agree) in its metadata: "psnr" (this float64
computation) and "psnr_torch_f32" (the same network in float32, as PyTorch runs it by
default). With --image, the PNG is decoded with PIL and "image_matches_png" says whether IN's
image holds exactly its pixels / 255 in float32.
With --random, the weights are random (nn.Conv2d's default init scaled to He's, the GroupNorm
affine near (1, 0); seeded) in upstream's names and shapes, written by torch.save to
DIR/encoder.pth and DIR/decoder.pth in float16 as the real files are, and used from there.

The network (nn.Sequential indices are the checkpoint's names):
  conv(i, o)   = Conv2d(i, o, 3, padding=1)
  Block(c)     = relu(conv(relu(conv(relu(conv(x))))) + x)   (".conv.0", ".conv.2", ".conv.4";
                 the skip is the identity: every block here is 64 -> 64)
  flux_2 Block = the same after x += pool(x), pool = conv1x1(c, 4c, no bias) -> GroupNorm(4, 4c)
                 -> ReLU -> conv1x1(4c, c, no bias) (".pool.0", ".pool.1", ".pool.3"); only in the
                 three blocks nearest the latent (encoder 11-13, decoder 3-5)
  Encoder: conv(3,64) Block | conv s2 (no bias) Block x3 | conv s2 Block x3 | conv s2 Block x3 |
           conv(64, C)
  Decoder: tanh(z / 3) * 3, conv(C, 64), ReLU, Block x3 | (Upsample x2 nearest, conv no bias,
           Block x3) x2 | Upsample, conv, Block | conv(64, 3)
Latents are the VAE's raw latents (TAESD's scale factor is 1): no shift or scale belongs to the
nets. Upstream's scale_latents / unscale_latents (z / 6 + 0.5) only map them into [0, 1] to
store them as 8-bit images.

Computation is float64 (the fp16 weights widen exactly), so the reference adds no rounding of
its own at the C++ test's bounds.
"""

import collections
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from prism_ref import cli, safetensors_io, seeding  # noqa: E402

ENCODER_POOLED = (11, 12, 13)
DECODER_POOLED = (3, 4, 5)
GROUPS = 4
EPS = 1e-5


class Weights(dict):
    """A state dict that records which tensors the network read, so main() can check that the
    re-stated architecture uses every tensor of the file (and names none it lacks)."""

    def __init__(self, items):
        super().__init__(items)
        self.used = set()

    def __getitem__(self, key):
        self.used.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        if key in self:
            self.used.add(key)
        return super().get(key, default)

    def check_all_used(self, path):
        unused = sorted(set(self) - self.used)
        if unused:
            raise SystemExit(f"{path}: tensors the network never read: {unused}")


def load(path, dtype):
    sd = torch.load(path, map_location="cpu", weights_only=True)
    return Weights((k, v.to(dtype)) for k, v in sd.items())


def conv(w, name, x, stride=1):
    return F.conv2d(x, w[name + ".weight"], w.get(name + ".bias"), stride=stride, padding=w[name + ".weight"].shape[-1] // 2)


def block(w, i, x, pooled):
    p = str(i)
    if pooled:
        h = F.conv2d(x, w[p + ".pool.0.weight"])
        h = F.relu(F.group_norm(h, GROUPS, w[p + ".pool.1.weight"], w[p + ".pool.1.bias"], EPS))
        x = x + F.conv2d(h, w[p + ".pool.3.weight"])
    h = F.relu(conv(w, p + ".conv.0", x))
    h = F.relu(conv(w, p + ".conv.2", h))
    h = conv(w, p + ".conv.4", h)
    skip = F.conv2d(x, w[p + ".skip.weight"]) if p + ".skip.weight" in w else x
    return F.relu(h + skip)


def encoder(w, x, variant):
    pooled = ENCODER_POOLED if variant == "flux_2" else ()
    x = conv(w, "0", x)
    x = block(w, 1, x, False)
    for down in (2, 6, 10):
        x = conv(w, str(down), x, stride=2)
        for i in range(down + 1, down + 4):
            x = block(w, i, x, i in pooled)
    return conv(w, "14", x)


def decoder(w, z, variant):
    pooled = DECODER_POOLED if variant == "flux_2" else ()
    x = torch.tanh(z / 3) * 3
    x = F.relu(conv(w, "1", x))
    for i in (3, 4, 5):
        x = block(w, i, x, i in pooled)
    for up, blocks in ((6, (8, 9, 10)), (11, (13, 14, 15)), (16, (18,))):
        x = F.interpolate(x, scale_factor=2, mode="nearest")
        x = conv(w, str(up + 1), x)
        for i in blocks:
            x = block(w, i, x, False)
    return conv(w, "19", x)


def random_weights(variant, latent_channels, g):
    """Upstream's state dict names and shapes, random (see conv_params), in float16."""
    def conv_params(prefix, n_in, n_out, k, bias=True):
        w = torch.nn.Conv2d(n_in, n_out, k, bias=bias)
        # x1.6 moves the default init (std 1/sqrt(3 fan_in)) towards He's sqrt(2 / fan_in), so
        # outputs stay O(1) instead of fading to the biases (full He grows them to ~100 here).
        out = {prefix + ".weight": w.weight.detach() * 1.6}
        if bias:
            out[prefix + ".bias"] = w.bias.detach()
        return out

    def block_params(i, pooled):
        out = {}
        for j in (0, 2, 4):
            out.update(conv_params(f"{i}.conv.{j}", 64, 64, 3))
        if pooled:
            out.update(conv_params(f"{i}.pool.0", 64, 256, 1, bias=False))
            out[f"{i}.pool.1.weight"] = 1 + 0.1 * torch.randn(256, generator=g)
            out[f"{i}.pool.1.bias"] = 0.1 * torch.randn(256, generator=g)
            out.update(conv_params(f"{i}.pool.3", 256, 64, 1, bias=False))
        return out

    enc_pooled = ENCODER_POOLED if variant == "flux_2" else ()
    dec_pooled = DECODER_POOLED if variant == "flux_2" else ()
    enc = conv_params("0", 3, 64, 3)
    for i in (1, 3, 4, 5, 7, 8, 9, 11, 12, 13):
        enc.update(block_params(i, i in enc_pooled))
    for i in (2, 6, 10):
        enc.update(conv_params(str(i), 64, 64, 3, bias=False))
    enc.update(conv_params("14", 64, latent_channels, 3))
    dec = conv_params("1", latent_channels, 64, 3)
    for i in (3, 4, 5, 8, 9, 10, 13, 14, 15, 18):
        dec.update(block_params(i, i in dec_pooled))
    for i in (7, 12, 17):
        dec.update(conv_params(str(i), 64, 64, 3, bias=False))
    dec.update(conv_params("19", 64, 3, 3))
    half = lambda sd: collections.OrderedDict((k, v.half()) for k, v in sd.items())  # noqa: E731
    return half(enc), half(dec)


def psnr(a, b):
    mse = torch.mean((a.double() - b.double()) ** 2).item()
    return 10 * math.log10(1.0 / mse)


def main():
    parser = cli.generator_parser(__doc__)
    parser.add_argument("--encoder")
    parser.add_argument("--decoder")
    parser.add_argument("--input", required=True)
    parser.add_argument("--variant", default="flux_2", choices=["flux_2", "taesd"])
    parser.add_argument("--random", choices=["flux_2", "taesd"])
    parser.add_argument("--latent-channels", type=int, default=4)
    parser.add_argument("--image")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

    if args.random:
        g = seeding.seed_everything(args.seed)
        enc_sd, dec_sd = random_weights(args.random, args.latent_channels, g)
        args.encoder, args.decoder = os.path.join(args.out, "encoder.pth"), os.path.join(args.out, "decoder.pth")
        torch.save(enc_sd, args.encoder)
        torch.save(dec_sd, args.decoder)
        args.variant = args.random
    if not args.encoder or not args.decoder:
        parser.error("--encoder and --decoder, or --random, are required")

    inputs = safetensors_io.load_file(args.input)
    image = inputs["image"].double()
    enc, dec = load(args.encoder, torch.float64), load(args.decoder, torch.float64)
    meta = {}
    out = {}
    with torch.no_grad():
        encoded = encoder(enc, image, args.variant)
        if "latent" in inputs:
            out["decoded"] = decoder(dec, inputs["latent"].double(), args.variant).float()
        roundtrip = decoder(dec, encoded, args.variant).clamp(0, 1)
        enc.check_all_used(args.encoder)
        dec.check_all_used(args.decoder)
        if roundtrip.shape == image.shape:  # sizes not multiples of 8 come back larger
            meta["psnr"] = repr(psnr(roundtrip, image))
            enc32, dec32 = load(args.encoder, torch.float32), load(args.decoder, torch.float32)
            image32 = inputs["image"].float()
            roundtrip32 = decoder(dec32, encoder(enc32, image32, args.variant), args.variant).clamp(0, 1)
            meta["psnr_torch_f32"] = repr(psnr(roundtrip32, image32))
    if args.image:
        import numpy as np
        from PIL import Image

        png = torch.from_numpy(np.asarray(Image.open(args.image).convert("RGB"))).permute(2, 0, 1).unsqueeze(0)
        png = png.float() / 255.0
        meta["image_matches_png"] = "1" if png.shape == image.shape and torch.equal(png, inputs["image"]) else "0"
    out.update({"encoded": encoded.float(), "roundtrip": roundtrip.float()})
    safetensors_io.save_file(out, os.path.join(args.out, "reference.safetensors"), metadata=meta)
    print(" ".join(f"{k}={v}" for k, v in meta.items()))


if __name__ == "__main__":
    main()
