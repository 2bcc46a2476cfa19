"""Shared fixtures of the Python tests. Tests that need torch live in test_torch*.py and skip
themselves when torch is missing."""

import importlib.machinery
import importlib.util
import pathlib
import zlib

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def load_script(relative_path):
    """A script of the repository (bench/, scripts/; with or without .py) as a module."""
    path = REPO / relative_path
    name = path.name.replace("-", "_").removesuffix(".py")
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    loader.exec_module(module)
    return module


@pytest.fixture
def rng(request):
    # Fresh random inputs per test, reproducible from the test's name: crc32, not hash(), whose
    # value for a str changes with every process (PYTHONHASHSEED).
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def randn(rng, *shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


def op_recorder():
    """A torch dispatch mode (needs torch) whose `ops` collects the names of the ops dispatched
    under it, e.g. "flashkit.fwd.default": which path a call took."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class OpRecorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.add(str(func))
            return func(*args, **(kwargs or {}))

    return OpRecorder()
