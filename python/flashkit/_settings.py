"""The scalar settings of an attention call, checked once and shared by every entry point.

`Settings` is a plain named tuple of Python scalars so that it can be splatted into the torch
custom ops (which accept only scalars and tensors) and turned into the extension's `Options`.
"""

from __future__ import annotations

import atexit
import functools
from typing import NamedTuple

from . import _flashkit

_ALIGNS = ("bottom_right", "top_left")


class Settings(NamedTuple):
    softmax_scale: float | None
    causal: bool
    bottom_right: bool
    window_left: int
    window_right: int
    softcap: float
    prefix_len: int
    max_seqlen_q: int
    max_seqlen_k: int
    deterministic: bool
    algo: str

    def options(self, stream: int = 0) -> _flashkit.Options:
        """The extension's Options for this call; `stream` is a cudaStream_t as an integer."""
        o = _flashkit.Options()
        for name, value in zip(self._fields, self):
            setattr(o, name, value)
        o.stream = stream
        return o


def make_settings(
    *,
    softmax_scale=None,
    causal=False,
    causal_align="bottom_right",
    window_size=(-1, -1),
    softcap=0.0,
    prefix_len=0,
    max_seqlen_q=0,
    max_seqlen_k=0,
    deterministic=False,
    algo="auto",
) -> Settings:
    """Checks what the C++ layer cannot name in the user's terms (window_size, causal_align)."""
    if causal_align not in _ALIGNS:
        raise ValueError(f"causal_align: expected one of {_ALIGNS}, got {causal_align!r}")
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise ValueError(f"window_size: expected a pair (left, right), got {window_size!r}")
    left, right = (int(w) for w in window_size)
    for i, w in enumerate((left, right)):
        if w < -1:
            raise ValueError(f"window_size[{i}]: expected >= 0, or -1 for unbounded, got {w}")
    if not isinstance(algo, str):
        raise TypeError(f"algo: expected a string, got {type(algo).__name__}")
    return Settings(
        softmax_scale=None if softmax_scale is None else float(softmax_scale),
        causal=bool(causal),
        bottom_right=causal_align == "bottom_right",
        window_left=left,
        window_right=right,
        softcap=0.0 if softcap is None else float(softcap),
        prefix_len=int(prefix_len),
        max_seqlen_q=int(max_seqlen_q),
        max_seqlen_k=int(max_seqlen_k),
        deterministic=bool(deterministic),
        algo=algo,
    )


@functools.lru_cache(maxsize=64)
def cascade_options(scalars, stream: int, side_stream: int = 0) -> _flashkit.CascadeOptions:
    """The extension's CascadeOptions for scalars (softmax_scale, causal, softcap, algo) on a
    stream and an optional side stream (cudaStream_t values as integers, 0 for none), memoised:
    the extension only reads it, and a decode step repeats the same scalars every call."""
    o = _flashkit.CascadeOptions()
    o.softmax_scale, o.causal, o.softcap, o.algo = scalars
    o.stream = stream
    o.side_stream = side_stream
    return o


# Extension objects held by the cache are dropped before the extension's teardown at exit (a
# nanobind object alive then is reported as leaked).
atexit.register(cascade_options.cache_clear)
