"""Ring attention as torch custom ops, flashkit::ring_fwd and flashkit::ring_bwd, with the
backward registered for autograd: torch.compile then traces through ring_attention without a
graph break (the ops are opaque to it, their fake implementations give the output shapes).

An op cannot take a communicator, so it takes the communicator's id, a key into ring.py's
registry of the communicators flashkit made. The op bodies are those of the eager calls in
ring.py: they launch on the current CUDA stream, but a ring call synchronises the host while the
ranks agree on the problem, so it cannot be captured into a CUDA graph.
"""

from __future__ import annotations

import torch

def _out_shapes(q, v):
    out = q.new_empty((*q.shape[:-1], v.shape[-1]))
    lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
    return out, lse


# The settings both ops take after their tensors: the communicator's id, then ring.py's
# _settings() in order.
_SETTINGS = (
    "int comm, float? softmax_scale, bool causal, int window_left, int window_right, "
    "float softcap, int prefix_len, str layout, bool deterministic"
)


def _ring_fwd(q, k, v, alibi_slopes, comm, *settings):
    from .ring import _comm, _options, _torch_forward

    return _torch_forward(q, k, v, alibi_slopes, _comm(comm), _options(settings))


ring_fwd = torch.library.custom_op(
    "flashkit::ring_fwd",
    _ring_fwd,
    mutates_args=(),
    schema=(
        f"(Tensor q, Tensor k, Tensor v, Tensor? alibi_slopes, {_SETTINGS}) -> (Tensor, Tensor)"
    ),
)


@ring_fwd.register_fake
def _(q, k, v, alibi_slopes, *settings):
    return _out_shapes(q, v)


def _ring_bwd(dout, q, k, v, out, lse, alibi_slopes, comm, *settings):
    from .ring import _comm, _options, _torch_backward

    return _torch_backward(dout, q, k, v, out, lse, alibi_slopes, _comm(comm), _options(settings))


ring_bwd = torch.library.custom_op(
    "flashkit::ring_bwd",
    _ring_bwd,
    mutates_args=(),
    schema=(
        "(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
        f"Tensor? alibi_slopes, {_SETTINGS}) -> (Tensor, Tensor, Tensor)"
    ),
)


@ring_bwd.register_fake
def _(dout, q, k, v, *rest):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


_N_FWD_ARGS = 13


def _setup_context(ctx, inputs, output):
    q, k, v, alibi_slopes, *settings = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, alibi_slopes)
    ctx.settings = settings
    ctx.mark_non_differentiable(lse)


def _backward(ctx, dout, _dlse):
    q, k, v, out, lse, alibi_slopes = ctx.saved_tensors
    dq, dk, dv = ring_bwd(dout.contiguous(), q, k, v, out, lse, alibi_slopes, *ctx.settings)
    return (dq, dk, dv) + (None,) * (_N_FWD_ARGS - 3)


ring_fwd.register_autograd(_backward, setup_context=_setup_context)
