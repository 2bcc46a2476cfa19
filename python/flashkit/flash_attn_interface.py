"""FlashAttention-2 compatible functions: same names, arguments and semantics, so that
`from flash_attn import flash_attn_func` can become `from flashkit import flash_attn_func`.

FA2 semantics kept: causal is aligned bottom-right, window_size=(left, right) counts keys on each
side of the diagonal, alibi_slopes add -slope * |i + seqlen_k - seqlen_q - j|. What flashkit does
not implement raises NotImplementedError rather than being ignored: dropout and returning the
attention probabilities.
"""

from __future__ import annotations

from .api import attention


def _unsupported(dropout_p, return_attn_probs) -> None:
    if dropout_p != 0.0:
        raise NotImplementedError(
            f"dropout_p: flashkit has no attention dropout, got {dropout_p} (pass 0.0)"
        )
    if return_attn_probs:
        raise NotImplementedError(
            "return_attn_probs: flashkit does not return (out, softmax_lse, S_dmask); call "
            "flashkit.attention(..., return_lse=True) for out and lse"
        )


def flash_attn_func(
    q,
    k,
    v,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """q [batch, seqlen_q, heads, d], k/v [batch, seqlen_k, heads_kv, d] -> out like q."""
    _unsupported(dropout_p, return_attn_probs)
    return attention(
        q,
        k,
        v,
        softmax_scale=softmax_scale,
        causal=causal,
        causal_align="bottom_right",
        window_size=window_size,
        softcap=softcap,
        alibi_slopes=alibi_slopes,
        deterministic=deterministic,
    )


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """Packed sequences: q [total_q, heads, d], k/v [total_k, heads_kv, d], cu_seqlens int32
    [batch + 1] -> out [total_q, heads, d]."""
    _unsupported(dropout_p, return_attn_probs)
    return attention(
        q,
        k,
        v,
        softmax_scale=softmax_scale,
        causal=causal,
        causal_align="bottom_right",
        window_size=window_size,
        softcap=softcap,
        alibi_slopes=alibi_slopes,
        cu_seqlens_q=cu_seqlens_q,
        cu_seqlens_k=cu_seqlens_k,
        max_seqlen_q=max_seqlen_q,
        max_seqlen_k=max_seqlen_k,
        deterministic=deterministic,
    )
