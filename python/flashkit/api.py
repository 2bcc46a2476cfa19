"""flashkit's own functions, for numpy arrays (CPU backend) and torch tensors (CPU or CUDA).

Layout is FlashAttention's: q [batch, seqlen_q, heads_q, d], k and v [batch, seqlen_k, heads_kv,
d]; with cu_seqlens_q/k the batch dim is dropped and sequences are packed along the first dim.
heads_q must be a multiple of heads_kv (GQA/MQA). Torch tensors go through the flashkit::fwd and
flashkit::bwd custom ops, so autograd and torch.compile work.
"""

from __future__ import annotations

from . import _arrays, _numpy_backend
from ._settings import make_settings

if _arrays.torch is not None:
    from . import _torch_ops


def _backend(kind: str):
    return _torch_ops if kind == "torch" else _numpy_backend


def _varlen_settings(kind, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    """max_seqlen_q/k, read from numpy cu_seqlens when left out. Torch callers pass them (as in
    FlashAttention): reading a CUDA tensor would synchronize the device."""
    if (cu_seqlens_q is None) != (cu_seqlens_k is None):
        missing = "cu_seqlens_k" if cu_seqlens_k is None else "cu_seqlens_q"
        raise ValueError(f"{missing}: expected a tensor when the other cu_seqlens is given")
    if cu_seqlens_q is None:
        return 0, 0
    lengths = []
    for name, given, cu in (
        ("max_seqlen_q", max_seqlen_q, cu_seqlens_q),
        ("max_seqlen_k", max_seqlen_k, cu_seqlens_k),
    ):
        if given is None:
            if kind == "torch":
                raise ValueError(f"{name}: expected an int with torch cu_seqlens, got None")
            given = _numpy_backend.max_seqlen(cu)
        lengths.append(given)
    return tuple(lengths)


def _checked_settings(kind, q, k, v, varlen_args, **settings):
    """Checks q, k, v and the varlen arguments (cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
    max_seqlen_k) of one call; returns its settings."""
    cu_q, cu_k, max_seqlen_q, max_seqlen_k = varlen_args
    max_q, max_k = _varlen_settings(kind, cu_q, cu_k, max_seqlen_q, max_seqlen_k)
    _arrays.check_qkv(q, k, v, cu_q is not None or cu_k is not None)
    return make_settings(max_seqlen_q=max_q, max_seqlen_k=max_k, **settings)


def attention(
    q,
    k,
    v,
    *,
    softmax_scale=None,
    causal=False,
    causal_align="bottom_right",
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    prefix_len=0,
    cu_seqlens_q=None,
    cu_seqlens_k=None,
    max_seqlen_q=None,
    max_seqlen_k=None,
    deterministic=False,
    return_lse=False,
    algo="auto",
):
    """Exact attention softmax(scale * q k^T + mask) v.

    softmax_scale: default 1/sqrt(d). causal_align: where the causal diagonal sits when
    seqlen_q != seqlen_k: "bottom_right" (the last query sees every key; FlashAttention >= 2.1)
    or "top_left". window_size=(left, right): query i sees keys within [diag - left,
    diag + right], -1 unbounded. softcap > 0: scores become softcap * tanh(s / softcap).
    alibi_slopes: f32 [heads_q] or [batch, heads_q]; the score gets -slope * |diag - j|.
    prefix_len: keys before it are seen by every query (prefix-LM). algo: "auto", or one of
    "reference", "naive", "fa1", "fa2", "fa3" to pick an implementation (benchmarks, tests).

    Returns out [.., seqlen_q, heads_q, d_v], and with return_lse also lse (f32 [batch, heads_q,
    seqlen_q], or [heads_q, total_q] with varlen; natural log, -inf for a query that sees no key).
    """
    kind = _arrays.array_kind(
        q=q,
        k=k,
        v=v,
        alibi_slopes=alibi_slopes,
        cu_seqlens_q=cu_seqlens_q,
        cu_seqlens_k=cu_seqlens_k,
    )
    s = _checked_settings(
        kind,
        q,
        k,
        v,
        (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k),
        softmax_scale=softmax_scale,
        causal=causal,
        causal_align=causal_align,
        window_size=window_size,
        softcap=softcap,
        prefix_len=prefix_len,
        deterministic=deterministic,
        algo=algo,
    )
    out, lse = _backend(kind).forward(
        q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, s, want_lse=return_lse
    )
    return (out, lse) if return_lse else out


def attention_backward(
    dout,
    q,
    k,
    v,
    out,
    lse,
    *,
    softmax_scale=None,
    causal=False,
    causal_align="bottom_right",
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    prefix_len=0,
    cu_seqlens_q=None,
    cu_seqlens_k=None,
    max_seqlen_q=None,
    max_seqlen_k=None,
    deterministic=False,
    algo="auto",
):
    """Gradients (dq, dk, dv) of attention(q, k, v, ...) given dout, and the forward's out and
    lse (call attention with return_lse=True). The settings must be the forward's. Torch users
    normally let autograd call this."""
    kind = _arrays.array_kind(
        dout=dout,
        q=q,
        k=k,
        v=v,
        out=out,
        lse=lse,
        alibi_slopes=alibi_slopes,
        cu_seqlens_q=cu_seqlens_q,
        cu_seqlens_k=cu_seqlens_k,
    )
    s = _checked_settings(
        kind,
        q,
        k,
        v,
        (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k),
        softmax_scale=softmax_scale,
        causal=causal,
        causal_align=causal_align,
        window_size=window_size,
        softcap=softcap,
        prefix_len=prefix_len,
        deterministic=deterministic,
        algo=algo,
    )
    return _backend(kind).backward(
        dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, alibi_slopes, s
    )


def merge_states(states_o, states_lse, *, return_lse=False):
    """Merges S partial attention results over disjoint key sets (split-K, cascade, ring):
    states_o [S, tokens, heads, d], states_lse f32 [S, tokens, heads]. Returns out [tokens,
    heads, d] and with return_lse also lse [tokens, heads]. Not differentiable."""
    kind = _arrays.array_kind(states_o=states_o, states_lse=states_lse)
    _arrays.expect_ndim("states_o", states_o, 4, "[states, tokens, heads, head_dim]")
    _arrays.expect_ndim("states_lse", states_lse, 3, "[states, tokens, heads]")
    out, lse = _backend(kind).merge_states(states_o, states_lse)
    return (out, lse) if return_lse else out
