"""Self-tests of vae_decoder.py, the reference the C++ VAE parity test trusts: the files carry
diffusers' names and config keys; decode agrees with a second formulation built from torch.nn
modules (nn.GroupNorm, nn.Conv2d, nn.Upsample, attention by einsum over explicit heads); the
tiled decode with one tile covering the latent is the plain decode, and a two-tile decode
blends its seam as diffusers' blend_h does, computed here pixel by pixel.
"""

import json
import os
import tempfile
import unittest

import torch
from torch import nn

import vae_decoder
from prism_ref import hf_dir, safetensors_io


def module_decode(z, w, c):
    """The decoder again, from nn modules loaded with the same weights."""
    g = c["norm_num_groups"]

    def gn(p, ch, act=True):
        m = nn.GroupNorm(g, ch, eps=1e-6).double()
        m.weight.data, m.bias.data = w[p + ".weight"], w[p + ".bias"]
        return nn.Sequential(m, nn.SiLU()) if act else m

    def cv(p):
        wt = w[p + ".weight"]
        m = nn.Conv2d(wt.shape[1], wt.shape[0], wt.shape[2], padding=wt.shape[2] // 2).double()
        m.weight.data, m.bias.data = wt, w[p + ".bias"]
        return m

    def res(x, p):
        cin, cout = x.shape[1], w[p + "conv1.weight"].shape[0]
        h = cv(p + "conv2")(gn(p + "norm2", cout)(cv(p + "conv1")(gn(p + "norm1", cin)(x))))
        return (cv(p + "conv_shortcut")(x) if cin != cout else x) + h

    def attn(x, p):
        n, ch, hh, ww = x.shape
        t = gn(p + "group_norm", ch, act=False)(x).flatten(2)  # [N, C, T]
        q, k, v = (torch.einsum("oc,nct->nto", w[p + f"to_{s}.weight"], t) + w[p + f"to_{s}.bias"] for s in "qkv")
        a = torch.einsum("nts,nsc->ntc", torch.softmax(torch.einsum("ntc,nsc->nts", q, k) * ch ** -0.5, -1), v)
        o = torch.einsum("oc,ntc->not", w[p + "to_out.0.weight"], a) + w[p + "to_out.0.bias"][:, None]
        return x + o.reshape(n, ch, hh, ww)

    x = cv("post_quant_conv")(z) if c["use_post_quant_conv"] else z
    x = res(cv("decoder.conv_in")(x), "decoder.mid_block.resnets.0.")
    if c["mid_block_add_attention"]:
        x = attn(x, "decoder.mid_block.attentions.0.")
    x = res(x, "decoder.mid_block.resnets.1.")
    for i in range(len(c["block_out_channels"])):
        for j in range(c["layers_per_block"] + 1):
            x = res(x, f"decoder.up_blocks.{i}.resnets.{j}.")
        if f"decoder.up_blocks.{i}.upsamplers.0.conv.weight" in w:
            x = cv(f"decoder.up_blocks.{i}.upsamplers.0.conv")(nn.Upsample(scale_factor=2, mode="nearest")(x))
    return cv("decoder.conv_out")(gn("decoder.conv_norm_out", x.shape[1])(x))


class VaeDecoderReferenceTest(unittest.TestCase):
    def generate(self, layout, dtype="f32"):
        d = tempfile.mkdtemp()
        vae_decoder.generate(d, layout, weight_dtype=dtype)
        with open(os.path.join(d, "config.json")) as f:
            config = json.load(f)
        weights = safetensors_io.load_file(os.path.join(d, vae_decoder.WEIGHTS_FILE))
        return config, weights, hf_dir.load_reference(d)

    def test_names_and_config(self):
        config, weights, _ = self.generate("tiny")
        self.assertEqual(config["_class_name"], "AutoencoderKL")
        self.assertEqual(config["up_block_types"], ["UpDecoderBlock2D"] * 2)
        for name in ("decoder.conv_in.weight", "decoder.mid_block.attentions.0.to_out.0.bias",
                     "decoder.up_blocks.0.upsamplers.0.conv.weight", "decoder.up_blocks.1.resnets.0.conv_shortcut.weight",
                     "decoder.conv_norm_out.weight", "decoder.conv_out.bias"):
            self.assertIn(name, weights)
        self.assertNotIn("decoder.up_blocks.1.upsamplers.0.conv.weight", weights)  # the last block
        self.assertNotIn("post_quant_conv.weight", weights)

    def test_decode_matches_module_formulation(self):
        for layout in ("tiny", "tiny3"):
            config, weights, ref = self.generate(layout)
            w = {k: v.double() for k, v in weights.items()}
            for case, (_, h, _, _) in vae_decoder.LAYOUTS[layout]["cases"].items():
                if h > 20:
                    continue  # the module formulation is slow at 80x72
                z = ref[f"latents_{case}"].double() / config["scaling_factor"] + (config["shift_factor"] or 0.0)
                with torch.no_grad():
                    got = module_decode(z, w, config)
                self.assertLess(float((got.float() - ref[f"image_{case}"]).abs().max()), 1e-5, (layout, case))

    def test_tiling(self):
        config, weights, ref = self.generate("tiny")
        w = {k: v.double() for k, v in weights.items()}
        z = torch.randn(1, 16, 3, 6, dtype=torch.float64)
        whole = vae_decoder.decode(z, w, config)
        big = dict(config, sample_size=64)  # one tile covers the latent
        self.assertTrue(torch.equal(vae_decoder.tiled_decode(z, w, big), whole))
        # sample_size 8: 4-cell tiles every 3 cells, blend 2 px, keep 6 px: tiles at columns 0 and 3.
        tiled = vae_decoder.tiled_decode(z, w, config)
        left = vae_decoder.decode(z[:, :, :, 0:4], w, config)
        right = vae_decoder.decode(z[:, :, :, 3:6], w, config)
        self.assertTrue(torch.equal(tiled[..., :6], left[..., :6]))
        self.assertTrue(torch.allclose(tiled[..., 6], left[..., 6]))  # weight 1 on the left tile
        self.assertTrue(torch.allclose(tiled[..., 7], 0.5 * left[..., 7] + 0.5 * right[..., 1]))
        self.assertTrue(torch.equal(tiled[..., 8:], right[..., 2:]))


if __name__ == "__main__":
    unittest.main()
