"""FlashAttention-2 compatible functions: same names, arguments and semantics, so that
`from flash_attn import flash_attn_func` can become `from flashkit import flash_attn_func`.

FA2 semantics kept: causal is aligned bottom-right, window_size=(left, right) counts keys on each
side of the diagonal, alibi_slopes add -slope * |i + seqlen_k - seqlen_q - j|. What flashkit does
not implement raises NotImplementedError rather than being ignored: dropout, returning the
attention probabilities, and flash_attn_with_kvcache's rotary embedding, cache_batch_idx and
cache_leftpad.
"""

from __future__ import annotations

from .api import attention
from .kvcache import attention_with_kvcache


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


def flash_attn_with_kvcache(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    rotary_cos=None,
    rotary_sin=None,
    cache_seqlens=None,
    cache_batch_idx=None,
    cache_leftpad=None,
    block_table=None,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    rotary_interleaved=True,
    alibi_slopes=None,
    num_splits=0,
    return_softmax_lse=False,
):
    """Decode / chunked prefill against a KV cache, appending new tokens first.

    q [batch, seqlen_q, heads, d]. k_cache / v_cache: [num_blocks, page_size, kv_heads, d] with
    block_table (int32 [batch, max_blocks]), or [batch, seqlen_cache, kv_heads, d] without.
    cache_seqlens (int or int32 [batch]; default the whole cache): tokens already cached. With
    k, v [batch, seqlen_new, kv_heads, d] those are written into the cache (in place) at
    cache_seqlens first; attention then covers cache_seqlens + seqlen_new keys, the queries being
    the last tokens (causal is bottom-right aligned). num_splits=0 lets flashkit choose the key
    split. Returns out like q, and softmax_lse [batch, heads, seqlen_q] with return_softmax_lse.
    """
    del rotary_interleaved  # only meaningful with rotary_cos / rotary_sin
    for name, value in (
        ("rotary_cos", rotary_cos),
        ("rotary_sin", rotary_sin),
        ("cache_batch_idx", cache_batch_idx),
        ("cache_leftpad", cache_leftpad),
    ):
        if value is not None:
            raise NotImplementedError(
                f"{name}: flashkit's flash_attn_with_kvcache does not support it (pass None)"
            )
    if (k is None) != (v is None):
        raise ValueError(f"{'v' if v is None else 'k'}: expected a tensor when the other is given")
    return attention_with_kvcache(
        q,
        k_cache,
        v_cache,
        k,
        v,
        cache_seqlens,
        block_table,
        softmax_scale=softmax_scale,
        causal=causal,
        window_size=window_size,
        softcap=softcap,
        alibi_slopes=alibi_slopes,
        num_splits=num_splits,
        return_softmax_lse=return_softmax_lse,
    )
