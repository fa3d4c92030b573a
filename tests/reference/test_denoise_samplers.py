"""Self-test of denoise_samplers.py: properties the restated formulas must have whatever the
code, so a slip in the reference cannot pass as parity."""

import math
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import denoise_samplers as ds  # noqa: E402


class SchedulesTest(unittest.TestCase):
    def test_shift_one_is_linear_and_ends_at_zero(self):
        sigmas, timesteps = ds.flow_match_euler_schedule({"shift": 1.0}, 5)
        self.assertEqual(len(sigmas), 6)
        self.assertEqual(sigmas[-1], 0.0)
        self.assertAlmostEqual(sigmas[0], 1.0)
        self.assertAlmostEqual(sigmas[4], 0.001)
        self.assertAlmostEqual(timesteps[1], 1000 * (1 - 0.999 / 4))

    def test_z_image_default_sigmas_with_shift_three(self):
        sigmas, _ = ds.flow_match_euler_schedule(ds.Z_IMAGE, 9, 1.0, ds.z_image_default_sigmas(9))
        raw = 1 - 8 / 9 / 8
        self.assertAlmostEqual(sigmas[1], 3 * raw / (1 + 2 * raw))
        self.assertAlmostEqual(sigmas[8], 3 / 9 / (1 + 2 / 9))

    def test_shift_terminal_lands_on_terminal(self):
        sigmas, _ = ds.flow_match_euler_schedule(ds.LTX, 30, 1.3)
        self.assertAlmostEqual(sigmas[-2], 0.1)

    def test_calculate_shift_ends(self):
        self.assertAlmostEqual(ds.calculate_shift(256), 0.5)
        self.assertAlmostEqual(ds.calculate_shift(4096), 1.15)

    def test_unipc_timesteps_are_truncated(self):
        sigmas, timesteps = ds.unipc_flow_schedule(ds.WAN, 10)
        self.assertEqual(timesteps[0], 999.0)
        self.assertTrue(all(t == math.floor(t) for t in timesteps))
        self.assertEqual(sigmas[-1], 0.0)


class SamplersTest(unittest.TestCase):
    def straight_line(self, sampler, steps):
        # x_sigma = (1 - sigma) x0 + sigma n: the velocity n - x0 is constant, so every
        # consistent solver lands on x0 exactly.
        gen = torch.Generator().manual_seed(1)
        x0 = torch.randn(2, 3, generator=gen, dtype=torch.float64)
        n = torch.randn(2, 3, generator=gen, dtype=torch.float64)
        sigmas, _ = ds.unipc_flow_schedule(ds.WAN, steps)
        x = (1 - sigmas[0]) * x0 + sigmas[0] * n
        u = ds.UniPC(sigmas, order=3 if sampler == "unipc3" else 2)
        for i in range(steps):
            v = n - x0
            x = ds.euler_step(x, v, sigmas[i], sigmas[i + 1]) if sampler == "euler" else u.step(v, x)
        return (x - x0).abs().max().item()

    def test_exact_on_a_straight_line(self):
        for sampler in ("euler", "unipc", "unipc3"):
            self.assertLess(self.straight_line(sampler, 7), 1e-12, sampler)


class GuidanceTest(unittest.TestCase):
    def test_cfg_zero_star_scale_projects(self):
        u = torch.tensor([1.0, 2.0, 2.0], dtype=torch.float64)
        self.assertAlmostEqual(ds.cfg_zero_star_scale(3 * u, u), 3.0, places=7)

    def test_rescale_phi_one_matches_cond_std(self):
        gen = torch.Generator().manual_seed(2)
        c = torch.randn(10, generator=gen, dtype=torch.float64)
        p = 5 * torch.randn(10, generator=gen, dtype=torch.float64)
        self.assertAlmostEqual(ds.rescale_noise_cfg(p, c, 1.0).std().item(), c.std().item())

    def test_interval_and_truncation(self):
        g = ds.plain_guidance(guidance_scale=3.0, has_uncond=True, interval_stop=0.6)
        self.assertEqual(sum(ds.cfg_on(g, i, 50, 0.5) for i in range(50)), 30)
        g = ds.plain_guidance(guidance_scale=3.0, has_uncond=True, cfg_truncation=0.6)
        self.assertTrue(ds.cfg_on(g, 0, 10, 0.5))
        self.assertFalse(ds.cfg_on(g, 0, 10, 0.3))


if __name__ == "__main__":
    unittest.main()
