"""Shared helpers for the PyTorch reference generators in tests/reference/: our own
safetensors reader and writer, HF model directories (config.json, weights, sharding) with a
reference.safetensors of inputs and expected outputs beside them, seeding, and the common
command line. Generators build tiny random models with the real families' parameter names;
nothing here knows any model.
"""

from . import cli, hf_dir, safetensors_io, seeding  # noqa: F401
from .cli import generator_parser  # noqa: F401
from .hf_dir import load_reference, read_weights, save_reference, write_model_dir  # noqa: F401
from .safetensors_io import load_file, save_file  # noqa: F401
from .seeding import seed_everything  # noqa: F401
