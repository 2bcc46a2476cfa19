"""Shared fixtures of the Python tests. Tests that need torch live in test_torch*.py and skip
themselves when torch is missing."""

import numpy as np
import pytest


@pytest.fixture
def rng(request):
    # Fresh random inputs per test, reproducible from the test's name.
    return np.random.default_rng(abs(hash(request.node.nodeid)) % 2**32)


def randn(rng, *shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)
