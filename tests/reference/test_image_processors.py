"""Self-tests of image_processors.py: the sizes its ports of transformers' processors compute
for known inputs (values worked out from transformers' code), the crop/pad rule, and the
budget rule. The C++ tests trust this file's outputs, so its arithmetic is pinned here.
Run: /usr/bin/python3 -m unittest discover -s tests/reference -p "test_*.py"
"""

import unittest

import numpy as np

import image_processors as ip


class Sizes(unittest.TestCase):
    def test_clip_shortest_edge(self):
        self.assertEqual(ip.clip_output_size(333, 500, 336), (336, 504))
        self.assertEqual(ip.clip_output_size(451, 301, 336), (503, 336))  # int() truncates 503.6
        self.assertEqual(ip.clip_output_size(336, 336, 336), (336, 336))

    def test_idefics3_longest_edge_rounds_the_other_side_up_to_even(self):
        self.assertEqual(ip.idefics3_resize_output_size(700, 1000, 2048), (1434, 2048))  # 1433.6 -> 1433 -> 1434
        self.assertEqual(ip.idefics3_resize_output_size(1000, 700, 2048), (2048, 1434))
        self.assertEqual(ip.idefics3_resize_output_size(1, 3000, 2048), (1, 2048))  # 0 is even, then at least 1

    def test_idefics3_caps_at_4096(self):
        self.assertEqual(ip.idefics3_resize_output_size(100, 10000, 8192), (41, 4096))

    def test_idefics3_tile_multiples(self):
        self.assertEqual(ip.idefics3_vision_encoder_size(1434, 2048, 512), (1536, 2048))
        self.assertEqual(ip.idefics3_vision_encoder_size(166, 256, 64), (192, 256))
        self.assertEqual(ip.idefics3_vision_encoder_size(512, 512, 512), (512, 512))


class Transforms(unittest.TestCase):
    def test_center_crop_pads_with_zeros_around_the_centre(self):
        image = np.full((2, 3, 3), 7, dtype=np.uint8)
        out = ip.center_crop(image, 4, 5)
        self.assertEqual(out.shape, (4, 5, 3))
        self.assertEqual(out[1:3, 1:4].min(), 7)
        self.assertEqual(int(out.sum()), 7 * 2 * 3 * 3)

    def test_pixel_values_are_rescaled_in_double_then_normalised_in_float(self):
        cfg = {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}
        values = ip.to_pixel_values(np.array([[[0, 255, 128]]], dtype=np.uint8), cfg)
        self.assertEqual(values.dtype, np.float32)
        self.assertEqual(values.shape, (3, 1, 1))
        self.assertEqual(values[0, 0, 0], -1.0)
        self.assertEqual(values[1, 0, 0], 1.0)
        expected = (np.float32(128 / 255) - np.float32(0.5)) / np.float32(0.5)
        self.assertEqual(values[2, 0, 0], expected)


class Budget(unittest.TestCase):
    def test_max_tiles_lowers_the_longest_edge_a_tile_at_a_time(self):
        cfg = ip.idefics3_with_budget(ip.SMOLVLM, 700, 1000, max_tiles=4)
        self.assertEqual(cfg["size"], {"longest_edge": 1024})  # 2 x 2 tiles
        cfg = ip.idefics3_with_budget(ip.SMOLVLM, 700, 1000, max_tiles=12)
        self.assertEqual(cfg["size"], {"longest_edge": 2048})  # 3 x 4 fits already

    def test_max_side_caps_and_zero_tiles_turns_splitting_off(self):
        cfg = ip.idefics3_with_budget(ip.SMOLVLM, 700, 1000, max_side=900)
        self.assertEqual(cfg["size"], {"longest_edge": 900})
        cfg = ip.idefics3_with_budget(ip.SMOLVLM, 700, 1000, max_tiles=0)
        self.assertFalse(cfg["do_image_splitting"])

    def test_smolvlm_splits_1000x700_into_3_by_4_plus_global(self):
        image = np.zeros((700, 1000, 3), dtype=np.uint8)
        values, rows, cols = ip.preprocess(image, ip.SMOLVLM)
        self.assertEqual((rows, cols), (3, 4))
        self.assertEqual(values.shape, (13, 3, 512, 512))
        self.assertEqual(float(values.min()), -1.0)


if __name__ == "__main__":
    unittest.main()
