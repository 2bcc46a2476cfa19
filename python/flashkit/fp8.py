"""FP8 attention with block scaling and Hadamard incoherent processing (CPU backend).

quantize_fp8 stores q, k or v as e4m3 (torch.float8_e4m3fn) with one f32 scale per block of
block_size tokens and head (the block's max |x| / 448). With hadamard=True each row is first
multiplied by the orthonormal Hadamard matrix of order d, which spreads outlier channels over
all channels so that the block scale fits the typical value. Rotating q and k leaves q k^T
unchanged; attention_fp8(..., rotated=True) rotates the output back for the rotated v. e4m3
needs torch tensors (numpy has no float8 dtype); hadamard_transform takes numpy arrays too.
"""

from __future__ import annotations

import numpy as np

from . import _arrays, _flashkit
from ._settings import make_settings

_LAYOUT = "[batch, seqlen, heads, head_dim]"


def hadamard_transform(x, *, inplace=False):
    """x [batch, seqlen, heads, d] times the orthonormal Hadamard matrix of order d (a power of
    two) along its last dim; applying it twice gives x back."""
    _arrays.array_kind(x=x)
    _arrays.expect_ndim("x", x, 4, _LAYOUT)
    out = x if inplace else (x.new_empty(x.shape) if _arrays.is_torch(x) else np.empty_like(x))
    _flashkit.hadamard_transform(_arrays_view(x), _arrays_view(out))
    return out


def _arrays_view(x):
    if _arrays.is_torch(x):
        return _arrays.torch.utils.dlpack.to_dlpack(x)
    return x


def _torch_only(name, x):
    if not _arrays.is_torch(x):
        raise TypeError(
            f"{name}: expected a torch tensor (e4m3 has no numpy dtype), got {type(x).__name__}"
        )


def quantize_fp8(x, *, block_size=128, hadamard=False):
    """(x_fp8, scale): x [batch, seqlen, heads, d] as torch.float8_e4m3fn, and f32 scales
    [batch, heads, ceil(seqlen / block_size)] with x ~ x_fp8 * scale (per block and head)."""
    _torch_only("x", x)
    _arrays.expect_ndim("x", x, 4, _LAYOUT)
    torch = _arrays.torch
    batch, seqlen, heads, _ = x.shape
    out = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    blocks = -(-seqlen // int(block_size)) if block_size > 0 else 0
    scale = torch.empty((batch, heads, blocks), dtype=torch.float32, device=x.device)
    _flashkit.quantize_fp8(
        _arrays_view(x), _arrays_view(out), _arrays_view(scale), int(block_size), bool(hadamard)
    )
    return out, scale


def attention_fp8(
    q,
    k,
    v,
    q_scale,
    k_scale,
    v_scale,
    *,
    block_size=128,
    rotated=False,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    out_dtype=None,
    return_lse=False,
    algo="auto",
):
    """Attention over quantize_fp8's outputs (all with the same block_size; rotated when they
    were quantized with hadamard=True). GQA, masks and softmax_scale as in flashkit.attention.
    Returns out [batch, seqlen_q, heads_q, d_v] of out_dtype (default torch.bfloat16), and with
    return_lse also lse (f32 [batch, heads_q, seqlen_q])."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        _torch_only(name, x)
        _arrays.expect_ndim(name, x, 4, _LAYOUT)
    torch = _arrays.torch
    s = make_settings(
        softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap
    )
    o = _flashkit.Fp8Options()
    o.block_size = int(block_size)
    o.rotated = bool(rotated)
    o.softmax_scale = s.softmax_scale
    o.causal = s.causal
    o.window_left = s.window_left
    o.window_right = s.window_right
    o.softcap = s.softcap
    o.algo = algo
    out_dtype = torch.bfloat16 if out_dtype is None else out_dtype
    out = torch.empty((*q.shape[:-1], v.shape[-1]), dtype=out_dtype, device=q.device)
    lse = None
    if return_lse:
        lse = torch.empty(_arrays.lse_shape(q, False), dtype=torch.float32, device=q.device)
    views = [_arrays_view(t) for t in (q, k, v, q_scale, k_scale, v_scale, out)]
    _flashkit.attention_fp8(*views, None if lse is None else _arrays_view(lse), o)
    return (out, lse) if return_lse else out
