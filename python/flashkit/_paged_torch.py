"""Paged attention as torch custom ops: flashkit::paged_fwd (out, lse), flashkit::cascade_fwd
(out, lse) and flashkit::append_kv (writes the pages in place, declared as mutating them). Outputs
and the split workspace are allocated with torch on the inputs' device, and kernels launch on the
current CUDA stream without host synchronization, so decode steps can be captured in CUDA graphs
and traced by torch.compile. In plain eager mode (`_torch_ops.eager`) the entry points call the
ops' bodies directly: a decode step's kernels take tens of microseconds, the op's dispatch as
long again.
"""

from __future__ import annotations

import atexit
import functools
from typing import Optional

import torch
from torch import Tensor

from . import _flashkit
from ._arrays import lse_shape, out_shape
from ._settings import cascade_options
from ._torch_ops import _on_device, _stream, _view, eager


def _alloc(q: Tensor, v_pages: Tensor, packed: bool) -> tuple[Tensor, Tensor]:
    out = q.new_empty(out_shape(q, v_pages))
    lse = q.new_empty(lse_shape(q, packed), dtype=torch.float32)
    return out, lse


@functools.lru_cache(maxsize=None)
def _multiprocessors(device: int) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


@functools.lru_cache(maxsize=256)
def _split_plan(batch, q_len, heads_q, heads_kv, dv, capacity, sms, num_splits, rows):
    """(num_splits, workspace elems) of a call's shape, memoised: the plan is a pure function of
    these integers, and eager decode calls the same shape every step."""
    if num_splits == 0:
        num_splits, _ = _flashkit.plan_paged_split(
            batch, q_len, heads_q, heads_kv, dv, capacity, sms
        )
    return num_splits, _flashkit.paged_workspace_elems(num_splits, rows, heads_q, dv)


def _split_workspace(q, v_pages, block_table, packed, max_seqlen_q, num_splits):
    """(num_splits, workspace) for a CUDA call: the plan the C++ side would make (SMs, the
    table's capacity), resolved here so that the workspace can be a torch allocation. The CPU
    backend allocates its own."""
    if not q.is_cuda:
        return num_splits, None
    heads_q, dv = q.shape[-2], v_pages.shape[-1]
    rows = q.shape[0] if packed else q.shape[0] * q.shape[1]
    num_splits, elems = _split_plan(
        block_table.shape[0],
        max_seqlen_q if packed else q.shape[1],
        heads_q,
        v_pages.shape[2],
        dv,
        block_table.shape[1] * v_pages.shape[1],
        _multiprocessors(q.get_device()) if num_splits == 0 else 0,
        num_splits,
        rows,
    )
    return num_splits, (q.new_empty((elems,), dtype=torch.float32) if elems else None)


@functools.lru_cache(maxsize=256)
def _paged_options(scalars, num_splits, stream):
    """The extension's PagedOptions for paged_fwd's scalars with the plan's num_splits,
    memoised (the extension only reads it): building one and setting its nine fields costs a
    decode step ~2 us of host time."""
    o = _flashkit.PagedOptions()
    o.softmax_scale, o.causal, o.window_left, o.window_right, o.softcap, o.max_seqlen_q = scalars[
        :6
    ]
    o.algo = scalars[7]
    o.num_splits = num_splits
    o.stream = stream
    return o


# Extension objects, like _torch_ops._options': dropped before the extension's teardown at exit.
atexit.register(_paged_options.cache_clear)


def _paged_call(arrays, alibi_slopes, scalars, want_lse):
    """The paged call; scalars are paged_fwd's (softmax_scale, causal, window_left,
    window_right, softcap, max_seqlen_q, num_splits, algo). lse is allocated and written only
    when wanted (None otherwise)."""
    q, k_pages, v_pages, block_table, seq_lens, k_scale, v_scale, cu_seqlens_q = arrays
    max_seqlen_q, num_splits = scalars[5:7]
    packed = cu_seqlens_q is not None
    if want_lse:
        out, lse = _alloc(q, v_pages, packed)
    else:
        out, lse = q.new_empty(out_shape(q, v_pages)), None
    num_splits, workspace = _split_workspace(
        q, v_pages, block_table, packed, max_seqlen_q, num_splits
    )
    o = _paged_options(scalars, num_splits, _stream(q))
    with _on_device(q):
        _flashkit.paged_attention(
            _view(q),
            _view(k_pages),
            _view(v_pages),
            _view(block_table),
            _view(seq_lens),
            _view(out),
            _view(lse),
            _view(k_scale),
            _view(v_scale),
            _view(cu_seqlens_q),
            _view(alibi_slopes),
            _view(workspace),
            o,
        )
    return out, lse


def _paged_fwd(
    q: Tensor,
    k_pages: Tensor,
    v_pages: Tensor,
    block_table: Tensor,
    seq_lens: Tensor,
    k_scale: Optional[Tensor],
    v_scale: Optional[Tensor],
    cu_seqlens_q: Optional[Tensor],
    alibi_slopes: Optional[Tensor],
    softmax_scale: Optional[float],
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    max_seqlen_q: int,
    num_splits: int,
    algo: str,
) -> tuple[Tensor, Tensor]:
    # The op's schema returns lse always.
    arrays = (q, k_pages, v_pages, block_table, seq_lens, k_scale, v_scale, cu_seqlens_q)
    scalars = (
        softmax_scale,
        causal,
        window_left,
        window_right,
        softcap,
        max_seqlen_q,
        num_splits,
        algo,
    )
    return _paged_call(arrays, alibi_slopes, scalars, True)


paged_fwd = torch.library.custom_op("flashkit::paged_fwd", mutates_args=())(_paged_fwd)


@paged_fwd.register_fake
def _(q, k_pages, v_pages, block_table, seq_lens, k_scale, v_scale, cu_seqlens_q, *rest):
    return _alloc(q, v_pages, cu_seqlens_q is not None)


def _cascade_call(arrays, scalars, want_lse, side_stream):
    """The cascade call; scalars are cascade_fwd's (softmax_scale, causal, softcap, algo),
    side_stream a cudaStream_t as an integer (0: none). lse is allocated and written only when
    wanted (None otherwise)."""
    q, v_pages = arrays[0], arrays[2]
    if want_lse:
        out, lse = _alloc(q, v_pages, False)
    else:
        out, lse = q.new_empty(out_shape(q, v_pages)), None
    batch, q_len, heads_q = q.shape[0], q.shape[1], q.shape[2]
    elems = _flashkit.cascade_workspace_elems(batch, q_len, heads_q, v_pages.shape[-1])
    workspace = q.new_empty((elems,), dtype=torch.float32)
    o = cascade_options(scalars, _stream(q), side_stream)
    with _on_device(q):
        _flashkit.cascade_attention(
            *(_view(a) for a in arrays), _view(out), _view(lse), _view(workspace), o
        )
    return out, lse


def _cascade_fwd(
    q: Tensor,
    k_pages: Tensor,
    v_pages: Tensor,
    shared_block_table: Tensor,
    shared_seq_len: Tensor,
    suffix_k_pages: Tensor,
    suffix_v_pages: Tensor,
    suffix_block_table: Tensor,
    suffix_seq_lens: Tensor,
    softmax_scale: Optional[float],
    causal: bool,
    softcap: float,
    algo: str,
    side_stream: int,
) -> tuple[Tensor, Tensor]:
    # The op's schema returns lse always.
    shared = (q, k_pages, v_pages, shared_block_table, shared_seq_len)
    suffix = (suffix_k_pages, suffix_v_pages, suffix_block_table, suffix_seq_lens)
    return _cascade_call(shared + suffix, (softmax_scale, causal, softcap, algo), True, side_stream)


cascade_fwd = torch.library.custom_op("flashkit::cascade_fwd", mutates_args=())(_cascade_fwd)


@cascade_fwd.register_fake
def _(q, k_pages, v_pages, *rest):
    return _alloc(q, v_pages, False)


def cascade(arrays, scalars, want_lse, side_stream=0):
    """(out, lse) of cascade_fwd with scalars (softmax_scale, causal, softcap, algo) and a side
    stream (a cudaStream_t as an integer, 0: none); in plain eager mode its body, which leaves
    lse None unless want_lse."""
    if eager(*arrays):
        return _cascade_call(arrays, scalars, want_lse, side_stream)
    return cascade_fwd(*arrays, *scalars, side_stream)


def append(k_new, v_new, start_pos, k_pages, v_pages, block_table, k_scale, v_scale):
    """append_kv, or its body in plain eager mode."""
    arrays = (k_new, v_new, start_pos, k_pages, v_pages, block_table, k_scale, v_scale)
    (_append_kv if eager(*arrays) else append_kv)(*arrays)


def _append_kv(
    k_new: Tensor,
    v_new: Tensor,
    start_pos: Tensor,
    k_pages: Tensor,
    v_pages: Tensor,
    block_table: Tensor,
    k_scale: Optional[Tensor],
    v_scale: Optional[Tensor],
) -> None:
    with _on_device(k_new):
        _flashkit.append_kv(
            _view(k_new),
            _view(v_new),
            _view(start_pos),
            _view(k_pages),
            _view(v_pages),
            _view(block_table),
            _view(k_scale),
            _view(v_scale),
            _stream(k_new),
        )


append_kv = torch.library.custom_op("flashkit::append_kv", mutates_args=("k_pages", "v_pages"))(
    _append_kv
)


@append_kv.register_fake
def _(k_new, v_new, start_pos, k_pages, v_pages, block_table, k_scale, v_scale):
    return None


def forward(arrays, alibi_slopes, s, max_seqlen_q, num_splits, algo, want_lse):
    """(out, lse) of paged_fwd with the scalars of Settings s; in plain eager mode its body,
    which leaves lse None unless want_lse (a decode step saves an allocation). arrays: q,
    k_pages, v_pages, block_table, seq_lens, k_scale, v_scale, cu_seqlens_q."""
    scalars = (
        s.softmax_scale,
        s.causal,
        s.window_left,
        s.window_right,
        s.softcap,
        max_seqlen_q,
        num_splits,
        algo,
    )
    if eager(*arrays, alibi_slopes):
        return _paged_call(arrays, alibi_slopes, scalars, want_lse)
    return paged_fwd(*arrays, alibi_slopes, *scalars)
