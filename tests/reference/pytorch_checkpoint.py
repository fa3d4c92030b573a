"""Reference files for formats/pytorch_checkpoint: real torch.save archives, written by
PyTorch itself, and the values the C++ reader must find in them.

    pytorch_checkpoint.py --out DIR

DIR gets:
  mixed.pth        a dict of every supported dtype (f32, f16, bf16, i8, u8, i32, i64, bool),
                   a transposed (non-contiguous) tensor, views sharing one storage at
                   offsets, a 0-d tensor, an empty tensor, an nn.Parameter, nested dicts, a
                   list, and non-tensor values (int, str, float, None) that are skipped.
  state_dict.pth   {"state_dict": a small nn.Sequential's state dict, "epoch": 3}
  deflated.pth     mixed.pth re-zipped with every entry deflated (Python's zipfile)
  legacy.pth       mixed.pth's f32 tensor saved with _use_new_zipfile_serialization=False
  scripted.pt      a TorchScript archive (torch.jit.save): its pickle names __torch__ classes
  float64.pth      {"x": a float64 tensor}
  small.pth        a tiny state dict for the fuzz test's mutations
  reference.safetensors  every tensor of mixed.pth and state_dict.pth under its flattened
                   name ("mixed/<name>", "state_dict/<name>"), contiguous, bool as U8.
"""

import os
import sys
import zipfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from prism_ref import cli, safetensors_io, seeding  # noqa: E402


def mixed(g):
    base = torch.randn(20, generator=g)
    return {
        "f32": torch.randn(3, 4, generator=g),
        "f16": torch.randn(2, 5, generator=g).half(),
        "bf16": (torch.randn(7, generator=g) * 100).bfloat16(),
        "i8": torch.randint(-128, 128, (6,), generator=g, dtype=torch.int8),
        "u8": torch.randint(0, 256, (2, 3), generator=g, dtype=torch.uint8),
        "i32": torch.randint(-2**31, 2**31 - 1, (5,), generator=g, dtype=torch.int32),
        "i64": torch.tensor([-2**62, 0, 2**62 + 12345], dtype=torch.int64),
        "bool": torch.tensor([True, False, True, True]),
        "transposed": torch.randn(4, 5, generator=g).t(),         # strides (1, 5)
        "sliced": torch.randn(6, 6, generator=g)[1:5, 2:4],       # offset 8, strides (6, 1)
        "shared_a": base[2:8],                                    # one storage, two views
        "shared_b": base[5:17].view(3, 4),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
        "param": torch.nn.Parameter(torch.randn(2, 2, generator=g)),
        "nested": {"inner": {"w": torch.randn(3, generator=g)}, 7: torch.arange(4)},
        "list": [torch.ones(2), (torch.zeros(1), torch.full((2,), 3.0))],
        "step": 7,
        "name": "not a tensor",
        "lr": 0.5,
        "nothing": None,
    }


def flatten(obj, prefix, out):
    """The names the C++ reader gives: '.'-joined dict keys and list indices."""
    if isinstance(obj, torch.Tensor):
        out[prefix] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            flatten(v, f"{prefix}.{i}" if prefix else str(i), out)


def expected(obj, tag):
    flat = {}
    flatten(obj, "", flat)
    out = {}
    for name, t in flat.items():
        t = t.detach().contiguous().clone()
        if t.dtype == torch.bool:
            t = t.to(torch.uint8)
        out[f"{tag}/{name}"] = t
    return out


def rezip_deflated(src, dst):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression=zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info.filename))


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.fc(x)


def main():
    args = cli.generator_parser(__doc__).parse_args()
    g = seeding.seed_everything(args.seed)
    os.makedirs(args.out, exist_ok=True)
    out = lambda name: os.path.join(args.out, name)  # noqa: E731

    m = mixed(g)
    torch.save(m, out("mixed.pth"))
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.GroupNorm(2, 4), torch.nn.Linear(4, 2))
    sd = {"state_dict": net.state_dict(), "epoch": 3}
    torch.save(sd, out("state_dict.pth"))
    rezip_deflated(out("mixed.pth"), out("deflated.pth"))
    torch.save({"f32": m["f32"]}, out("legacy.pth"), _use_new_zipfile_serialization=False)
    torch.jit.save(torch.jit.script(Tiny()), out("scripted.pt"))
    torch.save({"x": torch.randn(3, generator=g, dtype=torch.float64)}, out("float64.pth"))
    small = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 1), torch.nn.GroupNorm(1, 3)).half().state_dict()
    small["extra"] = torch.randn(2, 3, generator=g).t()
    torch.save(small, out("small.pth"))

    ref = expected(m, "mixed")
    ref.update(expected(sd, "state_dict"))
    safetensors_io.save_file(ref, out("reference.safetensors"))


if __name__ == "__main__":
    main()
