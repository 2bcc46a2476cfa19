"""Rotary position embedding (RoPE): apply_rotary, and FlashAttention's apply_rotary_emb.

Each pair of a row's first rotary_dim elements (rotary_dim = 2 * cos.shape[1]) is rotated by
the angle of its token's position p: y1 = x1 cos[p] - x2 sin[p], y2 = x1 sin[p] + x2 cos[p], in
fp32; the rest of the row is copied. Pairs are (i, i + rotary_dim / 2) (GPT-NeoX, Llama) or,
interleaved, (2i, 2i + 1) (GPT-J). numpy arrays run on the CPU backend; torch tensors (CPU or
CUDA) through the custom ops flashkit::rotary (with autograd: the gradient is the inverse
rotation) and flashkit::rotary_ (in place).
"""

from __future__ import annotations

import numpy as np

from . import _arrays, _flashkit

if _arrays.torch is not None:
    from . import _rotary_torch


def apply_rotary(
    x,
    cos,
    sin,
    *,
    seqlen_offsets=None,
    position_ids=None,
    cu_seqlens=None,
    interleaved=False,
    conjugate=False,
    inplace=False,
):
    """x rotated: [batch, seqlen, heads, d], or packed [total, heads, d] with cu_seqlens (int32
    [batch + 1]); cos / sin [max_positions, rotary_dim / 2] in f32 or x's dtype. Token i of
    sequence b is at seqlen_offsets[b] + i (int32 [batch]), or at position_ids[b, i] (int32
    [batch, seqlen], [total] packed, any strides: a broadcast view gives a whole sequence one
    position), or at i. conjugate rotates the other way (the inverse). inplace writes x itself
    and returns it (torch: not while x requires grad)."""
    kind = _arrays.array_kind(
        x=x,
        cos=cos,
        sin=sin,
        seqlen_offsets=seqlen_offsets,
        position_ids=position_ids,
        cu_seqlens=cu_seqlens,
    )
    _arrays.expect_ndim("x", x, *_arrays.token_layout(cu_seqlens is not None))
    for name, table in (("cos", cos), ("sin", sin)):
        _arrays.expect_ndim(name, table, 2, "[max_positions, rotary_dim / 2]")
    arrays = (x, cos, sin, cu_seqlens, seqlen_offsets, position_ids)
    if kind == "torch":
        return _rotary_torch.rotary(arrays, bool(interleaved), bool(conjugate), bool(inplace))
    out = x if inplace else np.empty_like(x)
    _flashkit.apply_rotary(
        x,
        out,
        cos,
        sin,
        cu_seqlens,
        seqlen_offsets,
        position_ids,
        bool(interleaved),
        bool(conjugate),
    )
    return out


def apply_rotary_emb(
    x,
    cos,
    sin,
    interleaved=False,
    inplace=False,
    seqlen_offsets=0,
    cu_seqlens=None,
    max_seqlen=None,
):
    """FlashAttention's flash_attn.layers.rotary.apply_rotary_emb: seqlen_offsets an int (every
    sequence) or an int32 [batch] tensor; max_seqlen is accepted (flashkit needs no bound)."""
    del max_seqlen
    if isinstance(seqlen_offsets, int):
        batch = cu_seqlens.shape[0] - 1 if cu_seqlens is not None else x.shape[0]
        if seqlen_offsets == 0:
            seqlen_offsets = None
        elif _arrays.is_torch(x):
            seqlen_offsets = _arrays.torch.full(
                (batch,), seqlen_offsets, dtype=_arrays.torch.int32, device=x.device
            )
        else:
            seqlen_offsets = np.full((batch,), seqlen_offsets, dtype=np.int32)
    return apply_rotary(
        x,
        cos,
        sin,
        seqlen_offsets=seqlen_offsets,
        cu_seqlens=cu_seqlens,
        interleaved=interleaved,
        inplace=inplace,
    )
