"""MLA as torch custom ops: flashkit::mla_fwd (out, lse) and flashkit::mla_append (writes the
pages in place, declared as mutating them), so that torch.compile traces MLA calls. Outputs are
allocated with torch on q's device. In plain eager mode (`_torch_ops.eager`) the entry points
call the ops' bodies directly.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from . import _flashkit
from ._arrays import lse_shape
from ._torch_ops import _view, eager


def _alloc(q: Tensor, latent_dim: int, packed: bool) -> tuple[Tensor, Tensor]:
    out = q.new_empty((*q.shape[:-1], latent_dim))
    lse = q.new_empty(lse_shape(q, packed), dtype=torch.float32)
    return out, lse


def _decode_call(arrays, scalars, want_lse):
    """The call; scalars are (max_seqlen_q, latent_dim, softmax_scale, causal, num_splits,
    algo). lse is allocated and written only when wanted (None otherwise)."""
    q, pages, block_table, seq_lens, scale, cu_seqlens_q = arrays
    out, lse = _alloc(q, scalars[1], cu_seqlens_q is not None)
    if not want_lse:
        lse = None
    _flashkit.mla_decode(
        _view(q),
        _view(pages),
        _view(block_table),
        _view(seq_lens),
        _view(out),
        _view(lse),
        _view(scale),
        _view(cu_seqlens_q),
        *scalars,
    )
    return out, lse


def _mla_fwd(
    q: Tensor,
    pages: Tensor,
    block_table: Tensor,
    seq_lens: Tensor,
    scale: Optional[Tensor],
    cu_seqlens_q: Optional[Tensor],
    max_seqlen_q: int,
    latent_dim: int,
    softmax_scale: Optional[float],
    causal: bool,
    num_splits: int,
    algo: str,
) -> tuple[Tensor, Tensor]:
    # The op's schema returns lse always.
    arrays = (q, pages, block_table, seq_lens, scale, cu_seqlens_q)
    scalars = (max_seqlen_q, latent_dim, softmax_scale, causal, num_splits, algo)
    return _decode_call(arrays, scalars, True)


mla_fwd = torch.library.custom_op("flashkit::mla_fwd", mutates_args=())(_mla_fwd)


@mla_fwd.register_fake
def _(q, pages, block_table, seq_lens, scale, cu_seqlens_q, max_seqlen_q, latent_dim, *rest):
    return _alloc(q, latent_dim, cu_seqlens_q is not None)


def decode(arrays, scalars, want_lse):
    """(out, lse) of mla_fwd; in plain eager mode its body, which leaves lse None unless
    want_lse."""
    if eager(*arrays):
        return _decode_call(arrays, scalars, want_lse)
    return mla_fwd(*arrays, *scalars)


def _mla_append(
    rows: Tensor,
    start_pos: Tensor,
    pages: Tensor,
    block_table: Tensor,
    scale: Optional[Tensor],
) -> None:
    _flashkit.mla_append(
        _view(rows), _view(start_pos), _view(pages), _view(block_table), _view(scale)
    )


mla_append = torch.library.custom_op("flashkit::mla_append", mutates_args=("pages",))(_mla_append)


@mla_append.register_fake
def _(rows, start_pos, pages, block_table, scale):
    return None


def append(rows, start_pos, pages, block_table, scale):
    """mla_append, or its body in plain eager mode."""
    arrays = (rows, start_pos, pages, block_table, scale)
    (_mla_append if eager(*arrays) else mla_append)(*arrays)
