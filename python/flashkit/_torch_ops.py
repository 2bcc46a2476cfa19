"""flashkit as torch custom ops: flashkit::fwd, flashkit::bwd and flashkit::merge, and the eager
path that calls the same bodies without them.

Custom ops (rather than calling the extension directly) are what let torch.compile trace through
attention without a graph break: the compiler sees an opaque op with a fake implementation that
gives output shapes, and autograd sees a registered backward. The op bodies allocate outputs with
torch on the inputs' device and launch on the current CUDA stream, with no host synchronization,
so they can also be captured into CUDA graphs.

In plain eager mode the custom op's dispatch is pure host cost: on the H200's host a forward call
took 123 us through flash_attn_func, 104 us of them inside torch.ops.flashkit.fwd and 53 us in its
body, while the kernel of a BENCH.md N = 512 config runs 118-148 us, so eager calls were paced by
the host. `eager()` says when nothing needs the op (no compilation, no fake or other tensor
subclasses, no dispatch or function modes, no functorch transform, no profiler); the entry points
then call the bodies directly, through a torch.autograd.Function when a gradient is wanted.
"""

from __future__ import annotations

import atexit
import functools
from contextlib import nullcontext
from typing import Optional

import torch
from torch import Tensor
from torch.utils.dlpack import to_dlpack

from . import _flashkit
from ._arrays import lse_shape, out_shape
from ._settings import Settings

_C = torch._C
# What eager() consults, each optional: a torch without one of them takes the custom ops always.
_DISPATCH_MODES = getattr(_C, "_len_torch_dispatch_stack", None)
_FUNCTION_MODES = getattr(_C, "_is_torch_function_mode_enabled", None)
_FUNCTORCH = getattr(_C, "_are_functorch_transforms_active", None)
_PROFILER = getattr(getattr(_C, "_autograd", None), "_profiler_enabled", None)
_RAW_STREAM = getattr(_C, "_cuda_getCurrentRawStream", None)
_EAGER_READY = None not in (_DISPATCH_MODES, _FUNCTION_MODES, _FUNCTORCH, _PROFILER)


def eager(*tensors: Optional[Tensor]) -> bool:
    """True when a call on these tensors (None allowed) may skip the custom op: every tensor is
    a plain torch.Tensor (FakeTensor, FunctionalTensor and other subclasses are not), nothing is
    being compiled, no dispatch or function mode and no functorch transform is active, and the
    profiler is off (there the op's name marks the call)."""
    for t in tensors:
        if t is not None and type(t) is not Tensor:
            return False
    return (
        _EAGER_READY
        and not torch.compiler.is_compiling()
        and not _DISPATCH_MODES()
        and not _FUNCTION_MODES()
        and not _FUNCTORCH()
        and not _PROFILER()
    )


def _view(t: Optional[Tensor]):
    """A DLPack capsule of t for the extension. Going through to_dlpack rather than letting the
    extension call t.__dlpack__() matters on CUDA: __dlpack__ without a stream makes the legacy
    default stream wait on the current one, which is wrong inside CUDA-graph capture. (Unlike
    __dlpack__, to_dlpack takes tensors that require grad: no detach needed.)"""
    return None if t is None else to_dlpack(t)


def _stream(t: Tensor) -> int:
    if not t.is_cuda:
        return 0
    if _RAW_STREAM is not None:
        return _RAW_STREAM(t.get_device())
    return torch.cuda.current_stream(t.device).cuda_stream


def _on_device(t: Tensor):
    """Makes t's GPU current for the call, as torch's own ops do (a no-op for CPU tensors and
    for the GPU that is current already)."""
    if t.is_cuda and t.get_device() != torch.cuda.current_device():
        return torch.cuda.device(t.device)
    return nullcontext()


@functools.lru_cache(maxsize=256)
def _options(s: Settings, stream: int) -> _flashkit.Options:
    """s.options(stream), memoised (the extension only reads it): building an Options and
    setting its twelve fields costs a call ~1 us of host time."""
    return s.options(stream)


# The memoised Options are extension objects: dropped before the interpreter tears the extension
# down, they are not reported by nanobind's leak check at exit.
atexit.register(_options.cache_clear)


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


def _fwd_call(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, s: Settings, want_lse: bool):
    """The forward call; lse is allocated and written only when wanted (None otherwise)."""
    if want_lse:
        out, lse = _alloc_fwd(q, v, cu_seqlens_q is not None)
    else:
        out, lse = q.new_empty(out_shape(q, v), dtype=_out_dtype(q)), None
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
            _options(s, _stream(q)),
        )
    return out, lse


# The scalar arguments of both ops, in Settings' order. Spelled out because custom_op infers its
# schema from annotations.
def _fwd(
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
    return _fwd_call(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, s, True)


fwd = torch.library.custom_op("flashkit::fwd", mutates_args=())(_fwd)


@fwd.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, *settings):
    return _alloc_fwd(q, v, cu_seqlens_q is not None)


def _bwd(
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
            _options(s, _stream(q)),
        )
    return dq, dk, dv


bwd = torch.library.custom_op("flashkit::bwd", mutates_args=())(_bwd)


@bwd.register_fake
def _(dout, q, k, v, *rest):
    return _alloc_bwd(q, k, v)


def _merge(states_o: Tensor, states_lse: Tensor) -> tuple[Tensor, Tensor]:
    out = states_o.new_empty(states_o.shape[1:])
    out_lse = states_lse.new_empty(states_lse.shape[1:])
    with _on_device(states_o):
        _flashkit.merge_states(
            _view(states_o), _view(states_lse), _view(out), _view(out_lse), _stream(states_o)
        )
    return out, out_lse


merge = torch.library.custom_op("flashkit::merge", mutates_args=())(_merge)


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
    tensors = (dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, alibi_slopes)
    dq, dk, dv = (_bwd if eager(*tensors) else bwd)(*tensors, *ctx.settings)
    return (dq, dk, dv) + (None,) * (_N_FWD_ARGS - 3)


fwd.register_autograd(_backward, setup_context=_setup_context)


class _EagerAttention(torch.autograd.Function):
    """The custom op's autograd (the same setup_context and backward) around the eager body.
    forward takes ctx itself: with a separate setup_context, Function.apply binds the 17
    arguments through inspect.signature on every call (~40 us of host time per call)."""

    @staticmethod
    def forward(ctx, *inputs):
        output = _fwd(*inputs)
        _setup_context(ctx, inputs, output)
        return output

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, dlse):
        return _backward(ctx, dout, dlse)


def forward(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, s: Settings, want_lse=True):
    """(out, lse); lse may be None without want_lse (plain eager calls without a gradient skip
    its allocation)."""
    if not eager(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes):
        return fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, *s)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _EagerAttention.apply(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, *s)
    return _fwd_call(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, s, want_lse)


def backward(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, alibi_slopes, s: Settings):
    tensors = (dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, alibi_slopes)
    return (_bwd if eager(*tensors) else bwd)(*tensors, *s)


def merge_states(states_o, states_lse):
    return (_merge if eager(states_o, states_lse) else merge)(states_o, states_lse)
