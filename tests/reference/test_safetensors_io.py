"""Self-tests of prism_ref: our safetensors reader/writer against the format's rules (byte
layout, alignment, metadata), the HF directory helpers (single file, shards + index), and
seeding. The C++ parity tests trust these files, so they are checked byte for byte here.
Run: /usr/bin/python3 -m unittest discover -s tests/reference -p "test_*.py"
"""

import json
import os
import struct
import tempfile
import unittest

import torch

from prism_ref import hf_dir, safetensors_io, seeding


def _header_of(data):
    (n,) = struct.unpack_from("<Q", data, 0)
    return n, json.loads(data[8:8 + n])


class SafetensorsRoundTrip(unittest.TestCase):
    def _round_trip(self, tensors, metadata=None):
        data = safetensors_io.serialize(tensors, metadata)
        out, meta = safetensors_io.deserialize(data)
        self.assertEqual(set(out), set(tensors))
        for name, t in tensors.items():
            self.assertEqual(out[name].dtype, t.dtype, name)
            self.assertEqual(out[name].shape, t.shape, name)
            self.assertTrue(torch.equal(out[name], t), name)
        return data, meta

    def test_every_dtype(self):
        g = torch.Generator().manual_seed(1)
        tensors = {
            "f32": torch.randn(3, 5, generator=g),
            "f16": torch.randn(4, 2, generator=g).half(),
            # values that are not exact in bf16 before the cast, so rounding matters
            "bf16": (torch.randn(7, generator=g) * 1e3).bfloat16(),
            "i8": torch.randint(-128, 128, (9,), generator=g, dtype=torch.int8),
            "u8": torch.randint(0, 256, (2, 3), generator=g, dtype=torch.uint8),
            "i32": torch.randint(-2**31, 2**31 - 1, (5,), generator=g, dtype=torch.int32),
            "i64": torch.tensor([-2**62, 0, 2**62 + 12345], dtype=torch.int64),
            "f64": torch.randn(2, generator=g, dtype=torch.float64),
            "bool": torch.tensor([True, False, True]),
            "scalar": torch.tensor(3.5),
            "empty": torch.zeros(0, 4),
        }
        data, _ = self._round_trip(tensors)
        _, header = _header_of(data)
        names = {"f32": "F32", "f16": "F16", "bf16": "BF16", "i8": "I8", "u8": "U8",
                 "i32": "I32", "i64": "I64", "f64": "F64", "bool": "BOOL"}
        for name, dtype in names.items():
            self.assertEqual(header[name]["dtype"], dtype)
        self.assertEqual(header["scalar"]["shape"], [])
        self.assertEqual(header["empty"]["shape"], [0, 4])

    def test_bf16_bytes_are_the_top_half_of_f32(self):
        # 1.0 = 0x3F800000 in f32 -> 0x3F80 in bf16, little endian: 80 3F.
        data = safetensors_io.serialize({"x": torch.tensor([1.0, -2.0], dtype=torch.bfloat16)})
        n, _ = _header_of(data)
        self.assertEqual(data[8 + n:], bytes([0x80, 0x3F, 0x00, 0xC0]))

    def test_f32_bytes_little_endian(self):
        data = safetensors_io.serialize({"x": torch.tensor([1.0])})
        n, header = _header_of(data)
        self.assertEqual(header["x"]["data_offsets"], [0, 4])
        self.assertEqual(data[8 + n:], struct.pack("<f", 1.0))

    def test_non_contiguous_input_is_written_contiguous(self):
        t = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()
        out, _ = safetensors_io.deserialize(safetensors_io.serialize({"t": t}))
        self.assertTrue(torch.equal(out["t"], t))


class SafetensorsLayout(unittest.TestCase):
    def test_header_padded_to_8_with_spaces(self):
        for name_len in range(1, 17):  # every padding amount occurs
            data = safetensors_io.serialize({"a" * name_len: torch.zeros(1)})
            (n,) = struct.unpack_from("<Q", data, 0)
            self.assertEqual(n % 8, 0)
            text = data[8:8 + n].decode("utf-8")
            stripped = text.rstrip(" ")
            self.assertTrue(stripped.endswith("}"))  # only spaces after the JSON
            self.assertLess(len(text) - len(stripped), 8)  # the least padding that aligns
            json.loads(text)  # trailing spaces are valid JSON whitespace

    def test_offsets_contiguous_and_aligned_to_element_size(self):
        tensors = {"a_u8": torch.zeros(3, dtype=torch.uint8),
                   "b_f32": torch.zeros(5),
                   "c_bf16": torch.zeros(3, dtype=torch.bfloat16),
                   "d_i64": torch.zeros(2, dtype=torch.int64)}
        data = safetensors_io.serialize(tensors)
        n, header = _header_of(data)
        spans = sorted(tuple(v["data_offsets"]) for v in header.values())
        self.assertEqual(spans[0][0], 0)
        for (_, end), (begin, _) in zip(spans, spans[1:]):
            self.assertEqual(end, begin)  # no gaps, no overlap
        self.assertEqual(spans[-1][1], len(data) - 8 - n)  # body ends at the file's end
        for name, t in tensors.items():
            self.assertEqual((8 + n + header[name]["data_offsets"][0]) % t.element_size(), 0, name)

    def test_metadata(self):
        tensors = {"x": torch.ones(2)}
        data = safetensors_io.serialize(tensors, {"format": "pt", "note": "tiny"})
        _, header = _header_of(data)
        self.assertEqual(header["__metadata__"], {"format": "pt", "note": "tiny"})
        out, meta = safetensors_io.deserialize(data)
        self.assertEqual(meta, {"format": "pt", "note": "tiny"})
        self.assertEqual(set(out), {"x"})
        _, header = _header_of(safetensors_io.serialize(tensors))
        self.assertNotIn("__metadata__", header)
        with self.assertRaises(safetensors_io.SafetensorsError):
            safetensors_io.serialize(tensors, {"n": 1})  # values must be strings

    def test_rejects_bad_input(self):
        with self.assertRaises(safetensors_io.SafetensorsError):
            safetensors_io.serialize({"c": torch.zeros(2, dtype=torch.complex64)})
        data = safetensors_io.serialize({"x": torch.zeros(4)})
        with self.assertRaises(safetensors_io.SafetensorsError):
            safetensors_io.deserialize(data[:-1])  # truncated body
        with self.assertRaises(safetensors_io.SafetensorsError):
            safetensors_io.deserialize(struct.pack("<Q", 1000) + b"{}")  # header past the end
        with self.assertRaises(safetensors_io.SafetensorsError):
            safetensors_io.deserialize(b"abc")

    def test_file_round_trip(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.safetensors")
            size = safetensors_io.save_file({"w": torch.ones(2, 2)}, path, {"k": "v"})
            self.assertEqual(os.path.getsize(path), size)
            tensors, meta = safetensors_io.load_file(path, with_metadata=True)
            self.assertTrue(torch.equal(tensors["w"], torch.ones(2, 2)))
            self.assertEqual(meta, {"k": "v"})


class HfDirectory(unittest.TestCase):
    def _state_dict(self):
        g = torch.Generator().manual_seed(2)
        return {f"model.layers.{i}.mlp.up_proj.weight": torch.randn(16, 8, generator=g)
                for i in range(5)}  # 512 bytes each

    def test_single_file(self):
        sd = self._state_dict()
        with tempfile.TemporaryDirectory() as d:
            paths = hf_dir.write_model_dir(d, {"hidden_size": 8}, sd)
            self.assertEqual([os.path.basename(p) for p in paths], ["model.safetensors"])
            self.assertFalse(os.path.exists(os.path.join(d, hf_dir.INDEX_FILE)))
            with open(os.path.join(d, "config.json")) as f:
                self.assertEqual(json.load(f), {"hidden_size": 8})
            _, meta = safetensors_io.load_file(paths[0], with_metadata=True)
            self.assertEqual(meta, {"format": "pt"})
            out = hf_dir.read_weights(d)
            self.assertEqual(set(out), set(sd))
            for k in sd:
                self.assertTrue(torch.equal(out[k], sd[k]))

    def test_sharded_index(self):
        sd = self._state_dict()
        with tempfile.TemporaryDirectory() as d:
            paths = hf_dir.write_weights(d, sd, max_shard_bytes=1100)  # two tensors per shard
            names = [os.path.basename(p) for p in paths]
            self.assertEqual(names, [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)])
            self.assertFalse(os.path.exists(os.path.join(d, "model.safetensors")))
            with open(os.path.join(d, hf_dir.INDEX_FILE)) as f:
                index = json.load(f)
            self.assertEqual(index["metadata"]["total_size"], 5 * 512)
            self.assertEqual(set(index["weight_map"]), set(sd))
            for name, file_name in index["weight_map"].items():  # each name in its shard
                self.assertIn(name, safetensors_io.load_file(os.path.join(d, file_name)))
            for p in paths:
                self.assertLessEqual(sum(t.numel() * 4 for t in safetensors_io.load_file(p).values()), 1100)
            out = hf_dir.read_weights(d)
            for k in sd:
                self.assertTrue(torch.equal(out[k], sd[k]))

    def test_tensor_bigger_than_shard_gets_its_own(self):
        sd = {"small": torch.zeros(2), "big": torch.zeros(100), "small2": torch.zeros(2)}
        with tempfile.TemporaryDirectory() as d:
            paths = hf_dir.write_weights(d, sd, max_shard_bytes=64)
            self.assertEqual(len(paths), 3)
            self.assertEqual(set(hf_dir.read_weights(d)), set(sd))

    def test_reference_file(self):
        with tempfile.TemporaryDirectory() as d:
            hf_dir.save_reference(d, {"x": torch.arange(3, dtype=torch.int32)}, {"seed": "0"})
            self.assertTrue(torch.equal(hf_dir.load_reference(d)["x"], torch.arange(3, dtype=torch.int32)))


class Seeding(unittest.TestCase):
    def setUp(self):  # seed_everything changes process-wide torch state: put it back
        self.threads = torch.get_num_threads()
        self.deterministic = torch.are_deterministic_algorithms_enabled()

    def tearDown(self):
        torch.set_num_threads(self.threads)
        torch.use_deterministic_algorithms(self.deterministic)

    def test_same_seed_same_values(self):
        seeding.seed_everything(7)
        a = torch.randn(4)
        seeding.seed_everything(7)
        self.assertTrue(torch.equal(a, torch.randn(4)))
        seeding.seed_everything(8)
        self.assertFalse(torch.equal(a, torch.randn(4)))


if __name__ == "__main__":
    unittest.main()
