"""FlashAttention-2 compatible functions: same names, arguments and semantics, so that
`from flash_attn import flash_attn_func` can become `from flashkit import flash_attn_func`.
The packed forms (qkv [.., 3, heads, d], kv [.., 2, heads_kv, d]) are read in place: their
slices are strided views the kernels take as they are.

FA2 semantics kept: causal is aligned bottom-right, window_size=(left, right) counts keys on each
side of the diagonal, alibi_slopes add -slope * |i + seqlen_k - seqlen_q - j|. What flashkit does
not implement raises NotImplementedError rather than being ignored: dropout and returning the
attention probabilities.
"""

from __future__ import annotations

from ._arrays import expect_ndim
from .api import attention
from .kvcache import attention_with_kvcache, paged_attention


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
    block_table=None,
):
    """Packed sequences: q [total_q, heads, d], k/v [total_k, heads_kv, d], cu_seqlens int32
    [batch + 1] -> out [total_q, heads, d].

    With block_table (int32 [batch, max_blocks]), k and v are a paged cache [num_blocks,
    page_size, heads_kv, d] and sequence b's keys are its first cu_seqlens_k[b + 1] -
    cu_seqlens_k[b] slots along its blocks (forward only)."""
    _unsupported(dropout_p, return_attn_probs)
    if block_table is not None:
        for name, cache in (("k", k), ("v", v)):
            expect_ndim(name, cache, 4, "[num_blocks, page_size, heads_kv, d] (with block_table)")
        if cu_seqlens_k is None:
            raise ValueError("cu_seqlens_k: expected int32 [batch + 1] with block_table, got None")
        seq_lens = cu_seqlens_k[1:] - cu_seqlens_k[:-1]  # stays on the device, int32
        return paged_attention(
            q,
            k,
            v,
            block_table,
            seq_lens,
            cu_seqlens_q=cu_seqlens_q,
            max_seqlen_q=max_seqlen_q,
            softmax_scale=softmax_scale,
            causal=causal,
            window_size=window_size,
            softcap=softcap,
            alibi_slopes=alibi_slopes,
        )
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


def _unpack(packed, name, count, rank):
    """The `count` tensors stacked along dim -3 of `packed` ([.., count, heads, d], `rank` dims),
    as views. Torch tensors are unbound, so autograd stacks their gradients in one copy."""
    shape = tuple(getattr(packed, "shape", ()))
    if len(shape) != rank or shape[-3] != count:
        layout = "[batch, seqlen, " if rank == 5 else "[total_tokens, "
        raise ValueError(
            f"{name}: expected shape {layout}{count}, heads, d], got "
            f"{shape if hasattr(packed, 'shape') else type(packed).__name__}"
        )
    if hasattr(packed, "unbind"):
        return packed.unbind(dim=-3)
    return tuple(packed[..., i, :, :] for i in range(count))


def flash_attn_qkvpacked_func(qkv, *options, **keyword_options):
    """qkv [batch, seqlen, 3, heads, d] -> out [batch, seqlen, heads, d]. The options (dropout_p,
    softmax_scale, causal, ...) are flash_attn_func's, in its order."""
    q, k, v = _unpack(qkv, "qkv", 3, 5)
    return flash_attn_func(q, k, v, *options, **keyword_options)


def flash_attn_kvpacked_func(q, kv, *options, **keyword_options):
    """q [batch, seqlen_q, heads, d], kv [batch, seqlen_k, 2, heads_kv, d] -> out like q. The
    options are flash_attn_func's, in its order."""
    k, v = _unpack(kv, "kv", 2, 5)
    return flash_attn_func(q, k, v, *options, **keyword_options)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, *options, **keyword_options):
    """Packed sequences: qkv [total, 3, heads, d], cu_seqlens int32 [batch + 1] -> out
    [total, heads, d]. The options are flash_attn_varlen_func's, in its order."""
    q, k, v = _unpack(qkv, "qkv", 3, 4)
    return flash_attn_varlen_func(
        q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, *options, **keyword_options
    )


def flash_attn_varlen_kvpacked_func(
    q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *options, **keyword_options
):
    """Packed sequences: q [total_q, heads, d], kv [total_k, 2, heads_kv, d] -> out like q. The
    options are flash_attn_varlen_func's, in its order."""
    k, v = _unpack(kv, "kv", 2, 4)
    return flash_attn_varlen_func(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *options, **keyword_options
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
    block_table (int32 [batch, max_blocks]), or [cache_batch, seqlen_cache, kv_heads, d] without,
    sequence b in row cache_batch_idx[b] (int32 [batch]; default row b), its keys starting at
    slot cache_leftpad[b] (int32 [batch]; default 0; read as pages of one token).
    cache_seqlens (int or int32 [batch]; default the whole cache): tokens already cached. With
    k, v [batch, seqlen_new, kv_heads, d] those are written into the cache (in place) at
    cache_seqlens first; attention then covers cache_seqlens + seqlen_new keys, the queries being
    the last tokens (causal is bottom-right aligned). num_splits=0 lets flashkit choose the key
    split. Returns out like q, and softmax_lse [batch, heads, seqlen_q] with return_softmax_lse.

    rotary_cos / rotary_sin [seqlen_ro, rotary_dim / 2] (with k and v): k is rotated at positions
    cache_seqlens + i before it is appended, and q at the same positions under a causal or local
    mask, else every query at cache_seqlens; pairs (2i, 2i + 1) with rotary_interleaved, else
    (i, i + rotary_dim / 2). q and k themselves are left as they are.
    """
    rotary = None
    if rotary_cos is not None or rotary_sin is not None:
        if rotary_cos is None or rotary_sin is None:
            missing = "rotary_cos" if rotary_cos is None else "rotary_sin"
            raise ValueError(f"{missing}: expected a table when the other one is given, got None")
        rotary = (rotary_cos, rotary_sin, bool(rotary_interleaved))
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
        cache_batch_idx,
        cache_leftpad,
        softmax_scale=softmax_scale,
        causal=causal,
        window_size=window_size,
        softcap=softcap,
        alibi_slopes=alibi_slopes,
        num_splits=num_splits,
        return_softmax_lse=return_softmax_lse,
        rotary=rotary,
    )
