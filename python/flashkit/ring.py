"""Ring attention (context parallelism): one sequence sharded over ranks by tokens.

    comm = flashkit.nccl_ring()                          # one rank per process (torch.distributed)
    pos = flashkit.ring_positions(comm.size, comm.rank, local_len)   # global token of each row
    out = flashkit.ring_attention(q[:, pos], k[:, pos], v[:, pos], comm, causal=True)

Every rank passes its own shard, q [batch, L, heads_q, d] and k, v [batch, L, heads_kv, d] (L the
same on every rank, even for the default zigzag layout), and gets its rows of the whole
sequence's attention. The mask is over global positions. Torch tensors get gradients through
autograd (the backward passes the shards around the ring again); numpy arrays run on the CPU
backend, with flashkit.in_process_ring giving communicators whose ranks are threads of this
process. On CUDA the call runs on the current stream, the shards travelling on a second stream
of the device beside the attention calls.

Ranks that are threads of one process sharing a GPU take their gradients from
ring_attention_backward, not from autograd: autograd runs a process's CUDA backward functions on
one worker thread per device, where such ranks would wait for each other for ever. A process per
rank (nccl_ring) has no such limit.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from . import _arrays, _flashkit
from ._arrays import expect_ndim

RingComm = _flashkit.RingComm
_LAYOUTS = ("zigzag", "contiguous")

# Every communicator this module made, by id: the torch custom ops (_ring_torch.py) take that key,
# as an op cannot take the object. Weak values, so an entry goes with its communicator.
_comms: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _registered(comms: list) -> list:
    for comm in comms:
        _comms[id(comm)] = comm
    return comms


def _comm(key: int) -> RingComm:
    comm = _comms.get(key)
    if comm is None:
        raise ValueError(
            "comm: expected a communicator made by flashkit.in_process_ring or flashkit.nccl_ring"
            " that is still alive, got none under this key"
        )
    return comm


def in_process_ring(ranks: int) -> list:
    """`ranks` communicators of one ring whose ranks are threads of this process (the ring
    attention calls release the GIL while they wait for each other)."""
    return _registered(_flashkit.in_process_ring(int(ranks)))


def nccl_ring(group=None) -> RingComm:
    """This process's communicator of an NCCL ring over the ranks of a torch.distributed group
    (default: the whole world), on the current CUDA device. Every rank of the group calls it."""
    torch = _arrays.torch
    if torch is None or not torch.distributed.is_available() or not torch.distributed.is_initialized():
        raise RuntimeError("nccl_ring: expected torch.distributed to be initialized, got none")
    dist = torch.distributed
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    box = [_flashkit.nccl_ring_id() if rank == 0 else None]
    dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0) if group else 0, group=group)
    return _registered([_flashkit.nccl_ring(box[0], size, rank)])[0]


def ring_positions(ranks: int, rank: int, local_seqlen: int, layout: str = "zigzag") -> np.ndarray:
    """The global token of each of `rank`'s `local_seqlen` shard rows (int64), e.g. to cut a
    rank's shard out of a whole sequence: x[:, ring_positions(...)]."""
    _check_layout(layout)
    return np.asarray(
        _flashkit.ring_positions(layout, int(ranks), int(rank), int(local_seqlen)), dtype=np.int64
    )


def _check_layout(layout):
    if layout not in _LAYOUTS:
        raise ValueError(f"layout: expected one of {_LAYOUTS}, got {layout!r}")


def _settings(comm, softmax_scale, causal, window_size, softcap, prefix_len, layout, deterministic):
    """The call's settings as plain values in RingOptions' order, checked: what the custom ops
    take (torch.compile traces this, so it makes no extension object)."""
    if not isinstance(comm, RingComm):
        raise TypeError(f"comm: expected a flashkit.RingComm, got {type(comm).__name__}")
    _check_layout(layout)
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise ValueError(f"window_size: expected a pair (left, right), got {window_size!r}")
    return (
        None if softmax_scale is None else float(softmax_scale),
        bool(causal),
        int(window_size[0]),
        int(window_size[1]),
        0.0 if softcap is None else float(softcap),
        int(prefix_len),
        layout,
        bool(deterministic),
    )


def _options(settings) -> _flashkit.RingOptions:
    o = _flashkit.RingOptions()
    (
        o.softmax_scale,
        o.causal,
        o.window_left,
        o.window_right,
        o.softcap,
        o.prefix_len,
        o.layout,
        o.deterministic,
    ) = settings
    return o


def _check_shards(q, k, v):
    for name, x in (("q", q), ("k", k), ("v", v)):
        expect_ndim(name, x, 4, "[batch, L, heads, dim]")


# One side stream per CUDA device for the shards' trips, made on first use.
_side_streams: dict = {}
_side_lock = threading.Lock()


def _streams(q) -> tuple[int, int]:
    """The current stream of q's device and the side stream, as cudaStream_t integers."""
    torch = _arrays.torch
    if not q.is_cuda:
        return 0, 0
    with _side_lock:
        side = _side_streams.get(q.device)
        if side is None:
            side = _side_streams[q.device] = torch.cuda.Stream(q.device)
    return torch.cuda.current_stream(q.device).cuda_stream, side.cuda_stream


def _torch_call(fn, tensors, comm, o):
    """fn(*tensors, comm, o) for torch tensors (None allowed): DLPack views that autograd does
    not see, the first tensor's device current, o's streams set to its current and side ones."""
    from ._torch_ops import _on_device, _view

    o.stream, o.comm_stream = _streams(tensors[0])
    with _on_device(tensors[0]):
        fn(*(_view(t) for t in tensors), comm, o)


def _torch_forward(q, k, v, alibi_slopes, comm, o):
    torch = _arrays.torch
    out = q.new_empty((*q.shape[:-1], v.shape[-1]))
    lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
    _torch_call(_flashkit.ring_forward, (q, k, v, out, lse, alibi_slopes), comm, o)
    return out, lse


def _torch_backward(dout, q, k, v, out, lse, alibi_slopes, comm, o):
    torch = _arrays.torch
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    tensors = (q, k, v, out, lse, dout, dq, dk, dv, alibi_slopes)
    _torch_call(_flashkit.ring_backward, tensors, comm, o)
    return dq, dk, dv


def ring_attention(
    q,
    k,
    v,
    comm,
    *,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    prefix_len=0,
    layout="zigzag",
    deterministic=False,
    return_lse=False,
):
    """This rank's rows of attention over the whole sharded sequence. Every rank of `comm`'s ring
    calls it together with its own shard and the same settings.

    The mask is over global positions: causal, window_size=(left, right) (-1 unbounded),
    prefix_len (global tokens seen by every query), softcap, alibi_slopes (f32 [heads_q] or
    [batch, heads_q], on q's device). layout: "zigzag" (2R chunks of L/2, rank r holding chunks r
    and 2R-1-r: equal causal work on every rank) or "contiguous". deterministic: bit-identical
    gradients across runs. Returns out, and with return_lse also lse (f32 [batch, heads_q, L])."""
    kind = _arrays.array_kind(q=q, k=k, v=v, alibi_slopes=alibi_slopes)
    _check_shards(q, k, v)
    settings = _settings(
        comm, softmax_scale, causal, window_size, softcap, prefix_len, layout, deterministic
    )
    if kind == "torch":
        from . import _ring_torch

        out, lse = _ring_torch.ring_fwd(q, k, v, alibi_slopes, id(comm), *settings)
    else:
        out = np.empty((*q.shape[:-1], v.shape[-1]), dtype=q.dtype)
        lse = np.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=np.float32)
        _flashkit.ring_forward(q, k, v, out, lse, alibi_slopes, comm, _options(settings))
    return (out, lse) if return_lse else out


def ring_attention_backward(
    dout,
    q,
    k,
    v,
    out,
    lse,
    comm,
    *,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    prefix_len=0,
    layout="zigzag",
    deterministic=False,
):
    """Gradients (dq, dk, dv) of this rank's shard given dout and the forward's out and lse
    (ring_attention with return_lse=True), with the forward's settings. Every rank calls it
    together. Torch users normally let autograd call it."""
    kind = _arrays.array_kind(
        dout=dout, q=q, k=k, v=v, out=out, lse=lse, alibi_slopes=alibi_slopes
    )
    _check_shards(q, k, v)
    settings = _settings(
        comm, softmax_scale, causal, window_size, softcap, prefix_len, layout, deterministic
    )
    if kind == "torch":
        from . import _ring_torch

        return _ring_torch.ring_bwd(dout, q, k, v, out, lse, alibi_slopes, id(comm), *settings)
    dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(v)
    _flashkit.ring_backward(
        q, k, v, out, lse, dout, dq, dk, dv, alibi_slopes, comm, _options(settings)
    )
    return dq, dk, dv
