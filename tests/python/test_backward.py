"""flashkit.attention_backward on numpy arrays against the numpy reference gradients, and the
reference gradients (and flashkit's) against finite differences."""

import numpy as np
import pytest

import flashkit
import np_reference as ref
from conftest import randn
from test_forward import MASKS, SHAPES, VARLEN_LENS, make_qkv, packed_inputs, reference_kwargs

TOL = {np.float64: 1e-9, np.float32: 1e-4}


def flashkit_grads(q, k, v, dout, **kw):
    out, lse = flashkit.attention(q, k, v, return_lse=True, **kw)
    return flashkit.attention_backward(dout, q, k, v, out, lse, **kw)


def assert_grads_close(got, want, tol):
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert g.shape == w.shape, name
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * scale, err_msg=name)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("mask", ["none", "causal_br", "causal_tl", "window", "softcap", "scale"])
@pytest.mark.parametrize("shape", ["square", "gqa_longer_k", "mqa_longer_q", "dv_differs"])
def test_matches_reference(rng, shape, mask, dtype):
    q, k, v = make_qkv(rng, SHAPES[shape], dtype)
    dout = randn(rng, *q.shape[:-1], v.shape[-1], dtype=dtype)
    kw = MASKS[mask]
    got = flashkit_grads(q, k, v, dout, **kw)
    _, _, want = ref.attention(q, k, v, dout=dout, **reference_kwargs(kw))
    for g, x in zip(got, (q, k, v)):
        assert g.dtype == x.dtype
    assert_grads_close(got, want, TOL[dtype])


def test_alibi_and_prefix(rng):
    q, k, v = make_qkv(rng, (2, 20, 26, 4, 2, 16, 16), np.float64)
    dout = randn(rng, *q.shape)
    slopes = rng.uniform(0.05, 0.5, size=(2, 4)).astype(np.float32)
    kw = {"causal": True, "prefix_len": 5}
    got = flashkit_grads(q, k, v, dout, alibi_slopes=slopes, **kw)
    _, _, want = ref.attention(q, k, v, dout=dout, **reference_kwargs(kw, alibi=slopes))
    assert_grads_close(got, want, 1e-9)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_varlen(rng, dtype):
    q, k, v, cu_q, cu_k = packed_inputs(rng, *VARLEN_LENS, 4, 2, 16, dtype)
    dout = randn(rng, *q.shape, dtype=dtype)
    kw = {"causal": True, "window_size": (10, 0), "cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k}
    got = flashkit_grads(q, k, v, dout, **kw)
    _, _, want = ref.attention(
        q, k, v, dout=dout, causal=True, window=(10, 0), cu_seqlens_q=cu_q, cu_seqlens_k=cu_k
    )
    assert_grads_close(got, want, TOL[dtype])


def test_against_finite_differences(rng):
    # Small enough to difference every input element: GQA, causal, softcap and ALiBi at once.
    q, k, v = make_qkv(rng, (1, 5, 7, 4, 2, 3, 3), np.float64)
    dout = randn(rng, *q.shape)
    slopes = np.array([0.3, 0.1, 0.2, 0.4], dtype=np.float32)
    kw = {"causal": True, "softcap": 1.7, "alibi_slopes": slopes}

    def loss(q_, k_, v_):
        return float(np.sum(flashkit.attention(q_, k_, v_, **kw) * dout))

    got = flashkit_grads(q, k, v, dout, **kw)
    eps = 1e-6
    inputs = [q, k, v]
    for which, grad in enumerate(got):
        numeric = np.zeros_like(grad)
        for idx in np.ndindex(grad.shape):
            plus = [x.copy() for x in inputs]
            minus = [x.copy() for x in inputs]
            plus[which][idx] += eps
            minus[which][idx] -= eps
            numeric[idx] = (loss(*plus) - loss(*minus)) / (2 * eps)
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-7)
