"""flashkit.attention on numpy arrays (CPU backend) against the fp64 numpy reference."""

import numpy as np
import pytest

import flashkit
import np_reference as ref
from conftest import randn

# (batch, seqlen_q, seqlen_k, heads_q, heads_kv, d, d_v)
SHAPES = {
    "square": (2, 33, 33, 4, 4, 16, 16),
    "gqa_longer_k": (2, 17, 45, 6, 2, 32, 32),
    "mqa_longer_q": (1, 40, 23, 4, 1, 8, 8),
    "dv_differs": (1, 19, 27, 2, 2, 24, 40),
}

# Mask settings as flashkit.attention keywords.
MASKS = {
    "none": {},
    "causal_br": {"causal": True},
    "causal_tl": {"causal": True, "causal_align": "top_left"},
    "window": {"window_size": (5, 3)},
    "causal_window_left": {"causal": True, "window_size": (7, -1)},
    "softcap": {"softcap": 2.5},
    "prefix_causal": {"causal": True, "prefix_len": 6, "causal_align": "top_left"},
    "scale": {"softmax_scale": 0.3},
}


def reference_kwargs(kw, alibi=None):
    return {
        "scale": kw.get("softmax_scale"),
        "causal": kw.get("causal", False),
        "bottom_right": kw.get("causal_align", "bottom_right") == "bottom_right",
        "window": kw.get("window_size", (-1, -1)),
        "softcap": kw.get("softcap", 0.0),
        "prefix_len": kw.get("prefix_len", 0),
        "alibi": alibi,
    }


def make_qkv(rng, shape, dtype):
    b, nq, nk, hq, hk, d, dv = shape
    return (
        randn(rng, b, nq, hq, d, dtype=dtype),
        randn(rng, b, nk, hk, d, dtype=dtype),
        randn(rng, b, nk, hk, dv, dtype=dtype),
    )


def assert_close(got, want, tol):
    finite = np.isfinite(want)
    assert np.array_equal(np.isfinite(got), finite)
    np.testing.assert_allclose(got[finite], want[finite], rtol=tol, atol=tol)


# fp64 runs the oracle (tight), fp32 the tiled path (fp32 accumulation).
TOL = {np.float64: 1e-10, np.float32: 2e-5}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("shape", SHAPES)
def test_matches_reference(rng, shape, mask, dtype):
    q, k, v = make_qkv(rng, SHAPES[shape], dtype)
    kw = MASKS[mask]
    out, lse = flashkit.attention(q, k, v, return_lse=True, **kw)
    want_out, want_lse = ref.attention(q, k, v, **reference_kwargs(kw))
    assert out.dtype == dtype and out.shape == want_out.shape
    assert lse.dtype == np.float32 and lse.shape == want_lse.shape
    assert_close(out, want_out, TOL[dtype])
    assert_close(lse, want_lse, 1e-5)


@pytest.mark.parametrize("per_batch", [False, True])
def test_alibi(rng, per_batch):
    shape = (2, 21, 30, 4, 2, 16, 16)
    q, k, v = make_qkv(rng, shape, np.float64)
    slopes = rng.uniform(0.05, 0.5, size=(2, 4) if per_batch else (4,)).astype(np.float32)
    kw = {"causal": True}
    out = flashkit.attention(q, k, v, alibi_slopes=slopes, **kw)
    want, _ = ref.attention(q, k, v, **reference_kwargs(kw, alibi=slopes))
    assert_close(out, want, 1e-10)


def test_query_seeing_no_key_gives_zero_and_minus_inf(rng):
    # Bottom-right causal with more queries than keys: the first 10 queries see nothing.
    q, k, v = make_qkv(rng, (1, 16, 6, 2, 2, 8, 8), np.float32)
    out, lse = flashkit.attention(q, k, v, causal=True, return_lse=True)
    assert np.all(out[:, :10] == 0)
    assert np.all(np.isneginf(lse[:, :, :10]))
    assert np.all(np.isfinite(lse[:, :, 10:]))


def test_float16(rng):
    q, k, v = make_qkv(rng, SHAPES["gqa_longer_k"], np.float16)
    out = flashkit.attention(q, k, v, causal=True)
    want, _ = ref.attention(q, k, v, causal=True)
    assert out.dtype == np.float16
    # fp16 output rounding (2^-11 relative) dominates.
    np.testing.assert_allclose(out, want, rtol=5e-3, atol=5e-3)


def test_strided_views_are_read_in_place(rng):
    # [batch, heads, seqlen, d] storage seen as BSHD: strided, last dim contiguous, zero copy.
    b, n, h, d = 2, 24, 4, 16
    q, k, v = (randn(rng, b, h, n, d).transpose(0, 2, 1, 3) for _ in range(3))
    assert not q.flags.c_contiguous
    out = flashkit.attention(q, k, v, causal=True)
    want, _ = ref.attention(q, k, v, causal=True)
    assert_close(out, want, 1e-10)


def test_read_only_inputs(rng):
    q, k, v = make_qkv(rng, SHAPES["square"], np.float32)
    for x in (q, k, v):
        x.flags.writeable = False
    out = flashkit.attention(q, k, v)
    want, _ = ref.attention(q, k, v)
    assert_close(out, want, 2e-5)


@pytest.mark.parametrize("algo", ["reference", "naive", "fa2", "auto"])
def test_cpu_algorithms_agree(rng, algo):
    q, k, v = make_qkv(rng, SHAPES["gqa_longer_k"], np.float32)
    out = flashkit.attention(q, k, v, causal=True, window_size=(9, 0), algo=algo)
    want, _ = ref.attention(q, k, v, causal=True, window=(9, 0))
    assert_close(out, want, 2e-5)


def packed_inputs(rng, lens_q, lens_k, hq, hk, d, dtype=np.float64):
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q = randn(rng, cu_q[-1], hq, d, dtype=dtype)
    k = randn(rng, cu_k[-1], hk, d, dtype=dtype)
    v = randn(rng, cu_k[-1], hk, d, dtype=dtype)
    return q, k, v, cu_q, cu_k


# Sequence 1 has no queries, sequence 3 no keys: both must be handled (the latter gives zeros).
VARLEN_LENS = ([5, 0, 17, 4, 9], [8, 6, 17, 0, 30])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("mask", ["none", "causal_br", "causal_tl", "window", "softcap"])
def test_varlen(rng, mask, dtype):
    q, k, v, cu_q, cu_k = packed_inputs(rng, *VARLEN_LENS, 4, 2, 16, dtype)
    kw = MASKS[mask]
    out, lse = flashkit.attention(
        q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, return_lse=True, **kw
    )
    want_out, want_lse = ref.attention(
        q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, **reference_kwargs(kw)
    )
    assert out.shape == q.shape and lse.shape == (4, q.shape[0])
    assert_close(out, want_out, TOL[dtype])
    assert_close(lse, want_lse, 1e-5)


def test_varlen_alibi_per_sequence(rng):
    q, k, v, cu_q, cu_k = packed_inputs(rng, *VARLEN_LENS, 4, 4, 8)
    slopes = rng.uniform(0.1, 1.0, size=(5, 4)).astype(np.float32)
    out = flashkit.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, alibi_slopes=slopes)
    want, _ = ref.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, alibi=slopes)
    assert_close(out, want, 1e-10)


def test_flash_attn_func_is_fa2_semantics(rng):
    q, k, v = make_qkv(rng, SHAPES["gqa_longer_k"], np.float64)
    slopes = rng.uniform(0.1, 0.5, size=(6,)).astype(np.float32)
    out = flashkit.flash_attn_func(
        q, k, v, 0.0, 0.2, True, (4, 2), 1.5, slopes, False, False
    )  # positional, in FlashAttention-2's order
    want, _ = ref.attention(
        q, k, v, scale=0.2, causal=True, window=(4, 2), softcap=1.5, alibi=slopes
    )
    assert_close(out, want, 1e-10)


def test_flash_attn_varlen_func(rng):
    q, k, v, cu_q, cu_k = packed_inputs(rng, *VARLEN_LENS, 4, 2, 16)
    out = flashkit.flash_attn_varlen_func(
        q, k, v, cu_q, cu_k, 17, 30, causal=True, window_size=(6, 0)
    )
    want, _ = ref.attention(
        q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=True, window=(6, 0)
    )
    assert_close(out, want, 1e-10)


def test_flash_attn_packed_funcs_read_their_slices(rng):
    qkv = randn(rng, 2, 21, 3, 4, 16)  # [batch, seqlen, 3, heads, d]
    q, k, v = (qkv[:, :, i] for i in range(3))
    out = flashkit.flash_attn_qkvpacked_func(qkv, 0.0, None, True, (5, 0))
    want, _ = ref.attention(q, k, v, causal=True, window=(5, 0))
    assert_close(out, want, 1e-10)

    q = randn(rng, 2, 9, 6, 16)
    kv = randn(rng, 2, 30, 2, 2, 16)  # GQA: 6 query heads over 2 KV heads
    out = flashkit.flash_attn_kvpacked_func(q, kv, causal=True, softcap=2.0)
    want, _ = ref.attention(q, kv[:, :, 0], kv[:, :, 1], causal=True, softcap=2.0)
    assert_close(out, want, 1e-10)


def test_flash_attn_varlen_packed_funcs(rng):
    lens = [5, 0, 17, 4]
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    qkv = randn(rng, int(cu[-1]), 3, 4, 16)  # [total, 3, heads, d]
    out = flashkit.flash_attn_varlen_qkvpacked_func(qkv, cu, max(lens), causal=True)
    q, k, v = (qkv[:, i] for i in range(3))
    want, _ = ref.attention(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, causal=True)
    assert_close(out, want, 1e-10)

    q, k, v, cu_q, cu_k = packed_inputs(rng, *VARLEN_LENS, 4, 2, 16)
    kv = np.stack([k, v], axis=1)  # [total_k, 2, heads_kv, d]
    out = flashkit.flash_attn_varlen_kvpacked_func(q, kv, cu_q, cu_k, 17, 30, window_size=(6, 2))
    want, _ = ref.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, window=(6, 2))
    assert_close(out, want, 1e-10)
