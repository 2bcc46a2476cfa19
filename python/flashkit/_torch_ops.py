"""flashkit as torch custom ops: flashkit::fwd, flashkit::bwd and flashkit::merge.

Custom ops (rather than calling the extension directly) are what let torch.compile trace through
attention without a graph break: the compiler sees an opaque op with a fake implementation that
gives output shapes, and autograd sees a registered backward. The op bodies allocate outputs with
torch on the inputs' device and launch on the current CUDA stream, with no host synchronization,
so they can also be captured into CUDA graphs.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Optional

import torch
from torch import Tensor
from torch.utils.dlpack import to_dlpack

from . import _flashkit
from ._arrays import lse_shape, out_shape
from ._settings import Settings


def _view(t: Optional[Tensor]):
    """A DLPack capsule of t for the extension. Going through to_dlpack rather than letting the
    extension call t.__dlpack__() matters on CUDA: __dlpack__ without a stream makes the legacy
    default stream wait on the current one, which is wrong inside CUDA-graph capture."""
    return None if t is None else to_dlpack(t.detach())


def _stream(t: Tensor) -> int:
    return torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda else 0


def _on_device(t: Tensor):
    """Makes t's GPU current for the call (a no-op for CPU tensors), as torch's own ops do."""
    return torch.cuda.device(t.device) if t.is_cuda else nullcontext()


def _out_dtype(q: Tensor) -> torch.dtype:
    # float8 inputs produce bf16 outputs; every other input dtype is kept.
    return torch.bfloat16 if q.element_size() == 1 else q.dtype


def _alloc_fwd(q: Tensor, v: Tensor, varlen: bool) -> tuple[Tensor, Tensor]:
    """Shared by the real and the fake forward so both give the same shapes and strides."""
    out = q.new_empty(out_shape(q, v), dtype=_out_dtype(q))
    lse = q.new_empty(lse_shape(q, varlen), dtype=torch.float32)
    return out, lse


def _alloc_bwd(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


# The scalar arguments of both ops, in Settings' order. Spelled out because custom_op infers its
# schema from annotations.
@torch.library.custom_op("flashkit::fwd", mutates_args=())
def fwd(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Optional[Tensor],
    cu_seqlens_k: Optional[Tensor],
    alibi_slopes: Optional[Tensor],
    softmax_scale: Optional[float],
    causal: bool,
    bottom_right: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    prefix_len: int,
    max_seqlen_q: int,
    max_seqlen_k: int,
    deterministic: bool,
    algo: str,
) -> tuple[Tensor, Tensor]:
    s = Settings(
        softmax_scale,
        causal,
        bottom_right,
        window_left,
        window_right,
        softcap,
        prefix_len,
        max_seqlen_q,
        max_seqlen_k,
        deterministic,
        algo,
    )
    out, lse = _alloc_fwd(q, v, cu_seqlens_q is not None)
    with _on_device(q):
        _flashkit.forward(
            _view(q),
            _view(k),
            _view(v),
            _view(out),
            _view(lse),
            _view(alibi_slopes),
            _view(cu_seqlens_q),
            _view(cu_seqlens_k),
            s.options(_stream(q)),
        )
    return out, lse


@fwd.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, *settings):
    return _alloc_fwd(q, v, cu_seqlens_q is not None)


@torch.library.custom_op("flashkit::bwd", mutates_args=())
def bwd(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    cu_seqlens_q: Optional[Tensor],
    cu_seqlens_k: Optional[Tensor],
    alibi_slopes: Optional[Tensor],
    softmax_scale: Optional[float],
    causal: bool,
    bottom_right: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    prefix_len: int,
    max_seqlen_q: int,
    max_seqlen_k: int,
    deterministic: bool,
    algo: str,
) -> tuple[Tensor, Tensor, Tensor]:
    s = Settings(
        softmax_scale,
        causal,
        bottom_right,
        window_left,
        window_right,
        softcap,
        prefix_len,
        max_seqlen_q,
        max_seqlen_k,
        deterministic,
        algo,
    )
    dq, dk, dv = _alloc_bwd(q, k, v)
    with _on_device(q):
        _flashkit.backward(
            _view(q),
            _view(k),
            _view(v),
            _view(out),
            _view(lse),
            _view(dout),
            _view(dq),
            _view(dk),
            _view(dv),
            _view(alibi_slopes),
            _view(cu_seqlens_q),
            _view(cu_seqlens_k),
            s.options(_stream(q)),
        )
    return dq, dk, dv


@bwd.register_fake
def _(dout, q, k, v, *rest):
    return _alloc_bwd(q, k, v)


@torch.library.custom_op("flashkit::merge", mutates_args=())
def merge(states_o: Tensor, states_lse: Tensor) -> tuple[Tensor, Tensor]:
    out = states_o.new_empty(states_o.shape[1:])
    out_lse = states_lse.new_empty(states_lse.shape[1:])
    with _on_device(states_o):
        _flashkit.merge_states(
            _view(states_o), _view(states_lse), _view(out), _view(out_lse), _stream(states_o)
        )
    return out, out_lse


@merge.register_fake
def _(states_o, states_lse):
    return states_o.new_empty(states_o.shape[1:]), states_lse.new_empty(states_lse.shape[1:])


# Autograd: gradients flow to q, k, v. lse is an auxiliary output and is marked
# non-differentiable: the backward kernels take no lse gradient, and a silently dropped one
# would be a wrong gradient.
_N_FWD_ARGS = 17


def _setup_context(ctx, inputs, output):
    q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, *settings = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, alibi_slopes)
    ctx.settings = settings
    ctx.mark_non_differentiable(lse)


def _backward(ctx, dout, _dlse):
    q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, alibi_slopes = ctx.saved_tensors
    if dout.stride(-1) != 1:  # e.g. the gradient of a transpose; the kernels need unit stride
        dout = dout.contiguous()
    dq, dk, dv = bwd(
        dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, alibi_slopes, *ctx.settings
    )
    return (dq, dk, dv) + (None,) * (_N_FWD_ARGS - 3)


fwd.register_autograd(_backward, setup_context=_setup_context)


def forward(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, s: Settings):
    return fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, *s)


def backward(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, alibi_slopes, s: Settings):
    return bwd(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, alibi_slopes, *s)


def merge_states(states_o, states_lse):
    return merge(states_o, states_lse)
