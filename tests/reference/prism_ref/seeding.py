"""Determinism for reference generators: the same seed gives the same bytes on every run,
so a C++ parity failure is never a different random model. One thread because reduction
order in multi-threaded CPU kernels can change the last bits of a result.
"""

import random

import numpy as np
import torch

DEFAULT_SEED = 0


def seed_everything(seed=DEFAULT_SEED):
    """Seeds Python, numpy and torch, and makes torch single-threaded and deterministic.
    Returns a torch.Generator seeded with `seed` for code that wants its own stream."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    return torch.Generator().manual_seed(seed)
