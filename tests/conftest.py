"""Test set-up: Numba's CUDA simulator where there is no GPU, and the platform markers."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

# Must happen before anything imports numba.cuda: without a GPU, @cuda.jit kernels run
# through Numba's simulator so the CUDA code paths are still tested; with a GPU they run on it.
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "0" if torch.cuda.is_available() else "1")

HAS_CUDA = torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (runs on the H200 test machine)")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)


@pytest.fixture
def rng() -> np.random.Generator:
    """A generator with a fresh seed each run; the seed is printed so a failure can be replayed
    with ORIN_TEST_SEED=<seed>."""
    seed = int(os.environ.get("ORIN_TEST_SEED", np.random.SeedSequence().entropy % 2**32))
    print(f"rng seed: {seed}")
    return np.random.default_rng(seed)
