"""safetensors read and write with torch + numpy only (the `safetensors` package is not
installable here). The format: 8-byte little-endian header length N, N bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}} padded
with spaces to a multiple of 8, then the tensor bytes, offsets relative to the data start.

Writing orders tensors by element size (largest first), then name, as the reference
implementation does: with the header padded to 8, every tensor then starts aligned to its
element size, so a C++ reader can mmap the file and hand out typed pointers.
This module knows nothing about models; hf_dir.py builds model directories on top of it.
"""

import json
import struct

import numpy as np
import torch

# safetensors dtype name -> (torch dtype, numpy dtype of the raw little-endian bytes).
# BF16 has no numpy type: its bytes travel as int16 and are reinterpreted by torch.
_DTYPES = {
    "F64": (torch.float64, np.dtype("<f8")),
    "F32": (torch.float32, np.dtype("<f4")),
    "F16": (torch.float16, np.dtype("<f2")),
    "BF16": (torch.bfloat16, np.dtype("<i2")),
    "I64": (torch.int64, np.dtype("<i8")),
    "I32": (torch.int32, np.dtype("<i4")),
    "I16": (torch.int16, np.dtype("<i2")),
    "I8": (torch.int8, np.dtype("i1")),
    "U8": (torch.uint8, np.dtype("u1")),
    "BOOL": (torch.bool, np.dtype("?")),
}
_NAME_OF_TORCH = {t: name for name, (t, _) in _DTYPES.items()}

HEADER_ALIGN = 8
METADATA_KEY = "__metadata__"


class SafetensorsError(ValueError):
    """A malformed file or an unsupported tensor."""


def dtype_name(dtype):
    """The safetensors name of a torch dtype ("F32", "BF16", ...)."""
    try:
        return _NAME_OF_TORCH[dtype]
    except KeyError:
        raise SafetensorsError(f"unsupported dtype {dtype}") from None


def _tensor_bytes(t):
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)  # same bits; numpy can hold int16
    return t.numpy().astype(_DTYPES[dtype_name(t.dtype)][1], copy=False).tobytes()


def serialize(tensors, metadata=None):
    """bytes of a safetensors file. tensors: {name: torch.Tensor}; metadata: {str: str}."""
    if metadata is not None:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise SafetensorsError(f"metadata must map str to str, got {k!r}: {v!r}")
    for name, t in tensors.items():
        if name == METADATA_KEY:
            raise SafetensorsError(f"{METADATA_KEY} is not a tensor name")
        if not isinstance(t, torch.Tensor):
            raise SafetensorsError(f"{name}: not a torch.Tensor")
        dtype_name(t.dtype)  # fails early on an unsupported dtype

    order = sorted(tensors, key=lambda n: (-tensors[n].element_size(), n))
    header = {}
    if metadata:
        header[METADATA_KEY] = dict(metadata)
    chunks = []
    offset = 0
    for name in order:
        t = tensors[name]
        data = _tensor_bytes(t)
        header[name] = {
            "dtype": dtype_name(t.dtype),
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)

    header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % HEADER_ALIGN)
    return struct.pack("<Q", len(header_bytes)) + header_bytes + b"".join(chunks)


def save_file(tensors, path, metadata=None):
    """Writes tensors ({name: torch.Tensor}) to path; returns the number of bytes written."""
    data = serialize(tensors, metadata)
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def read_header(data):
    """(header dict without __metadata__, metadata dict, data start) of a file's bytes."""
    if len(data) < 8:
        raise SafetensorsError("file shorter than its 8-byte header length")
    (n,) = struct.unpack_from("<Q", data, 0)
    if 8 + n > len(data):
        raise SafetensorsError(f"header length {n} past the end of a {len(data)}-byte file")
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError("header is not a JSON object")
    metadata = header.pop(METADATA_KEY, None) or {}
    return header, metadata, 8 + n


def deserialize(data):
    """({name: torch.Tensor}, metadata) from a file's bytes. Tensors own their memory."""
    header, metadata, start = read_header(data)
    body = len(data) - start
    tensors = {}
    for name, info in header.items():
        try:
            torch_dtype, np_dtype = _DTYPES[info["dtype"]]
            shape = [int(d) for d in info["shape"]]
            begin, end = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError(f"{name}: bad header entry {info!r}") from None
        numel = int(np.prod(shape, dtype=np.int64))
        if not 0 <= begin <= end <= body or end - begin != numel * np_dtype.itemsize:
            raise SafetensorsError(f"{name}: data_offsets {begin, end} do not fit "
                                   f"{info['dtype']}{shape} in a {body}-byte body")
        array = np.frombuffer(data, dtype=np_dtype, count=numel, offset=start + begin).copy()
        t = torch.from_numpy(array.reshape(shape))
        if torch_dtype == torch.bfloat16:
            t = t.view(torch.bfloat16)
        tensors[name] = t
    return tensors, metadata


def load_file(path, with_metadata=False):
    """{name: torch.Tensor} of a file (and its metadata when with_metadata)."""
    with open(path, "rb") as f:
        tensors, metadata = deserialize(f.read())
    return (tensors, metadata) if with_metadata else tensors
