"""Rotary embedding as torch custom ops: flashkit::rotary (a new tensor; autograd: the gradient
is the conjugate rotation of the output's gradient, none for cos and sin, as in FlashAttention)
and flashkit::rotary_ (in place, declared as mutating x). Kernels launch on the current CUDA
stream. In plain eager mode without autograd (`_torch_ops.eager`) the entry point calls the
ops' bodies directly.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from . import _flashkit
from ._torch_ops import _on_device, _stream, _view, eager


def _call(x, out, cos, sin, cu_seqlens, seqlen_offsets, position_ids, interleaved, conjugate):
    with _on_device(x):
        _flashkit.apply_rotary(
            _view(x),
            _view(out),
            _view(cos),
            _view(sin),
            _view(cu_seqlens),
            _view(seqlen_offsets),
            _view(position_ids),
            interleaved,
            conjugate,
            _stream(x),
        )


def _rotary(
    x: Tensor,
    cos: Tensor,
    sin: Tensor,
    cu_seqlens: Optional[Tensor],
    seqlen_offsets: Optional[Tensor],
    position_ids: Optional[Tensor],
    interleaved: bool,
    conjugate: bool,
) -> Tensor:
    out = torch.empty_like(x)
    _call(x, out, cos, sin, cu_seqlens, seqlen_offsets, position_ids, interleaved, conjugate)
    return out


rotary_op = torch.library.custom_op("flashkit::rotary", mutates_args=())(_rotary)


@rotary_op.register_fake
def _(x, *rest):
    return torch.empty_like(x)


def _setup_context(ctx, inputs, output):
    _, cos, sin, cu_seqlens, seqlen_offsets, position_ids, interleaved, conjugate = inputs
    ctx.save_for_backward(cos, sin, cu_seqlens, seqlen_offsets, position_ids)
    ctx.flags = (interleaved, not conjugate)


def _backward(ctx, grad):
    if grad.stride(-1) != 1:  # the kernels read rows with unit stride
        grad = grad.contiguous()
    dx = rotary_op(grad, *ctx.saved_tensors, *ctx.flags)
    return (dx,) + (None,) * 7


rotary_op.register_autograd(_backward, setup_context=_setup_context)


def _rotary_(
    x: Tensor,
    cos: Tensor,
    sin: Tensor,
    cu_seqlens: Optional[Tensor],
    seqlen_offsets: Optional[Tensor],
    position_ids: Optional[Tensor],
    interleaved: bool,
    conjugate: bool,
) -> None:
    _call(x, x, cos, sin, cu_seqlens, seqlen_offsets, position_ids, interleaved, conjugate)


rotary_inplace_op = torch.library.custom_op("flashkit::rotary_", mutates_args=("x",))(_rotary_)


@rotary_inplace_op.register_fake
def _(x, *rest):
    return None


def rotary(arrays, interleaved, conjugate, inplace):
    """The rotated x (x itself when inplace)."""
    x, cos, sin = arrays[:3]
    if torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad):
        name = "cos" if cos.requires_grad else "sin"
        raise ValueError(
            f"{name}: expected a table that does not require grad (the rotation's gradient "
            "flows to x only), got one that does"
        )
    if inplace:
        if torch.is_grad_enabled() and x.requires_grad:
            raise ValueError("inplace: expected False while x requires grad, got True")
        (_rotary_ if eager(*arrays) else rotary_inplace_op)(*arrays, interleaved, conjugate)
        return x
    needs_grad = torch.is_grad_enabled() and x.requires_grad
    if eager(*arrays) and not needs_grad:
        return _rotary(*arrays, interleaved, conjugate)
    return rotary_op(*arrays, interleaved, conjugate)
