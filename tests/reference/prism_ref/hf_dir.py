"""Hugging Face model directories as the C++ parity tests load them: config.json plus
model.safetensors, or shards model-0000i-of-0000n.safetensors listed by
model.safetensors.index.json; and, beside them, reference.safetensors holding a generator's
fixed inputs and expected outputs. The reference file is ours, not part of the HF layout, so
a loader that scans the directory must only read what config/index name.
"""

import json
import os

from . import safetensors_io

CONFIG_FILE = "config.json"
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
REFERENCE_FILE = "reference.safetensors"


def write_config(out_dir, config):
    """config.json from a dict, keys in the order given (as transformers writes them)."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, CONFIG_FILE)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    return path


def _nbytes(t):
    return t.numel() * t.element_size()


def _plan_shards(state_dict, max_shard_bytes):
    """Lists of names, in state_dict order, each list under max_shard_bytes when it can be
    (a tensor bigger than the limit gets a shard of its own, as transformers does)."""
    shards, current, size = [], [], 0
    for name, t in state_dict.items():
        n = _nbytes(t)
        if current and size + n > max_shard_bytes:
            shards.append(current)
            current, size = [], 0
        current.append(name)
        size += n
    if current:
        shards.append(current)
    return shards


def write_weights(out_dir, state_dict, max_shard_bytes=None):
    """model.safetensors, or shards plus model.safetensors.index.json when the weights
    exceed max_shard_bytes. Returns the paths of the weight files written."""
    os.makedirs(out_dir, exist_ok=True)
    metadata = {"format": "pt"}  # what transformers' save_pretrained records
    total = sum(_nbytes(t) for t in state_dict.values())
    if max_shard_bytes is None or total <= max_shard_bytes:
        path = os.path.join(out_dir, SINGLE_FILE)
        safetensors_io.save_file(state_dict, path, metadata)
        return [path]

    shards = _plan_shards(state_dict, max_shard_bytes)
    weight_map, paths = {}, []
    for i, names in enumerate(shards):
        file_name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        path = os.path.join(out_dir, file_name)
        safetensors_io.save_file({n: state_dict[n] for n in names}, path, metadata)
        weight_map.update({n: file_name for n in names})
        paths.append(path)
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(out_dir, INDEX_FILE), "w", encoding="utf-8") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    return paths


def write_model_dir(out_dir, config, state_dict, max_shard_bytes=None):
    """config.json and the weights of one model directory."""
    write_config(out_dir, config)
    return write_weights(out_dir, state_dict, max_shard_bytes)


def read_weights(model_dir):
    """{name: tensor} of a directory written by write_weights (either layout)."""
    index_path = os.path.join(model_dir, INDEX_FILE)
    if not os.path.exists(index_path):
        return safetensors_io.load_file(os.path.join(model_dir, SINGLE_FILE))
    with open(index_path, encoding="utf-8") as f:
        weight_map = json.load(f)["weight_map"]
    tensors = {}
    for file_name in sorted(set(weight_map.values())):
        tensors.update(safetensors_io.load_file(os.path.join(model_dir, file_name)))
    missing = set(weight_map) - set(tensors)
    if missing:
        raise safetensors_io.SafetensorsError(f"index lists tensors no shard has: {sorted(missing)}")
    return tensors


def save_reference(out_dir, tensors, metadata=None, file_name=REFERENCE_FILE):
    """A generator's inputs and expected outputs ({name: tensor}), beside the model."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, file_name)
    safetensors_io.save_file(tensors, path, metadata)
    return path


def load_reference(out_dir, file_name=REFERENCE_FILE):
    return safetensors_io.load_file(os.path.join(out_dir, file_name))
