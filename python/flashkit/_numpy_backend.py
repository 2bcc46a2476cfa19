"""Attention on numpy arrays: allocate the outputs, call the extension (CPU backend)."""

from __future__ import annotations

import numpy as np

from . import _flashkit
from ._arrays import lse_shape, out_shape
from ._settings import Settings


def forward(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, s: Settings, want_lse=True):
    varlen = cu_seqlens_q is not None
    out = np.empty(out_shape(q, v), dtype=q.dtype)
    lse = np.empty(lse_shape(q, varlen), dtype=np.float32) if want_lse else None
    _flashkit.forward(q, k, v, out, lse, alibi_slopes, cu_seqlens_q, cu_seqlens_k, s.options())
    return out, lse


def backward(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, alibi_slopes, s: Settings):
    dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(v)
    _flashkit.backward(
        q, k, v, out, lse, dout, dq, dk, dv, alibi_slopes, cu_seqlens_q, cu_seqlens_k, s.options()
    )
    return dq, dk, dv


def merge_states(states_o, states_lse):
    out = np.empty(states_o.shape[1:], dtype=states_o.dtype)
    out_lse = np.empty(states_lse.shape[1:], dtype=np.float32)
    _flashkit.merge_states(states_o, states_lse, out, out_lse)
    return out, out_lse


def max_seqlen(cu_seqlens) -> int:
    """The longest sequence of a numpy cu_seqlens (host memory, so reading it costs nothing)."""
    return int(np.diff(cu_seqlens).max()) if len(cu_seqlens) > 1 else 0
