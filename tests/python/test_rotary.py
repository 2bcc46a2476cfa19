"""Rotary embedding from Python: apply_rotary, FlashAttention's apply_rotary_emb and the rotary
tables of flash_attn_with_kvcache, against rotations computed here in float64 from the
definition. Torch tests at the end skip themselves without torch."""

import numpy as np
import pytest

import flashkit
from conftest import op_recorder, randn


def tables(max_positions, rotary_dim, dtype=np.float32):
    k = np.arange(rotary_dim // 2)
    angle = np.arange(max_positions)[:, None] * 10000.0 ** (-2.0 * k / rotary_dim)
    return np.cos(angle).astype(dtype), np.sin(angle).astype(dtype)


def rotate(x, cos, sin, positions, interleaved=False, conjugate=False):
    """x [tokens, heads, d] rotated at positions [tokens], in float64."""
    x = np.asarray(x, dtype=np.float64).copy()
    half = cos.shape[1]
    c = np.asarray(cos, np.float64)[positions][:, None, :]
    s = np.asarray(sin, np.float64)[positions][:, None, :] * (-1.0 if conjugate else 1.0)
    first = slice(0, 2 * half, 2) if interleaved else slice(0, half)
    second = slice(1, 2 * half, 2) if interleaved else slice(half, 2 * half)
    x1, x2 = x[..., first].copy(), x[..., second].copy()
    x[..., first] = x1 * c - x2 * s
    x[..., second] = x1 * s + x2 * c
    return x


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rotary_dim", [16, 10])
def test_batch_with_offsets(rng, interleaved, rotary_dim):
    x = randn(rng, 3, 5, 2, 16, dtype=np.float32)
    cos, sin = tables(40, rotary_dim)
    offsets = np.array([0, 7, 30], dtype=np.int32)
    y = flashkit.apply_rotary(x, cos, sin, seqlen_offsets=offsets, interleaved=interleaved)
    positions = (offsets[:, None] + np.arange(5)).reshape(-1)
    want = rotate(x.reshape(15, 2, 16), cos, sin, positions, interleaved).reshape(x.shape)
    np.testing.assert_allclose(y, want, atol=1e-6, rtol=0)


def test_position_ids_broadcast_and_packed(rng):
    cos, sin = tables(64, 8)
    x = randn(rng, 2, 4, 3, 8, dtype=np.float32)
    at = np.array([9, 50], dtype=np.int32)
    ids = np.broadcast_to(at[:, None], (2, 4))  # a stride of 0: one position per sequence
    y = flashkit.apply_rotary(x, cos, sin, position_ids=ids)
    want = rotate(x.reshape(8, 3, 8), cos, sin, np.repeat(at, 4)).reshape(x.shape)
    np.testing.assert_allclose(y, want, atol=1e-6, rtol=0)

    packed = randn(rng, 9, 3, 8, dtype=np.float32)  # sequences of 3 and 4, then 2 spare rows
    cu = np.array([0, 3, 7], dtype=np.int32)
    out = flashkit.apply_rotary(packed, cos, sin, cu_seqlens=cu, seqlen_offsets=at)
    positions = np.concatenate([9 + np.arange(3), 50 + np.arange(4)])
    np.testing.assert_allclose(out[:7], rotate(packed[:7], cos, sin, positions), atol=1e-6)


def test_inplace_and_conjugate_undo(rng):
    x = randn(rng, 2, 6, 2, 32, dtype=np.float32)
    original = x.copy()
    cos, sin = tables(16, 32)
    y = flashkit.apply_rotary(x, cos, sin, inplace=True)
    assert y is x
    assert not np.allclose(x, original)
    flashkit.apply_rotary(x, cos, sin, conjugate=True, inplace=True)
    np.testing.assert_allclose(x, original, atol=1e-6, rtol=0)


def test_apply_rotary_emb_takes_an_int_offset(rng):
    x = randn(rng, 2, 3, 2, 16, dtype=np.float32)
    cos, sin = tables(20, 16)
    y = flashkit.apply_rotary_emb(x, cos, sin, interleaved=True, seqlen_offsets=4)
    positions = np.tile(4 + np.arange(3), 2)
    want = rotate(x.reshape(6, 2, 16), cos, sin, positions, True).reshape(x.shape)
    np.testing.assert_allclose(y, want, atol=1e-6, rtol=0)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("interleaved", [True, False])
def test_kvcache_rotates_new_keys_and_queries(rng, causal, interleaved):
    """FlashAttention's rule: new key i at cache_seqlens + i; queries likewise when causal, else
    all at cache_seqlens. The same call without tables on pre-rotated q and k must agree."""
    k_cache = randn(rng, 2, 32, 2, 16, dtype=np.float32)
    v_cache = randn(rng, 2, 32, 2, 16, dtype=np.float32)
    q = randn(rng, 2, 3, 4, 16, dtype=np.float32)
    k, v = (randn(rng, 2, 3, 2, 16, dtype=np.float32) for _ in range(2))
    lens = np.array([5, 20], dtype=np.int32)
    cos, sin = tables(32, 16)
    new_positions = (lens[:, None] + np.arange(3)).reshape(-1)
    q_positions = new_positions if causal else np.repeat(lens, 3)
    k_rot = rotate(k.reshape(6, 2, 16), cos, sin, new_positions, interleaved).reshape(k.shape)
    q_rot = rotate(q.reshape(6, 4, 16), cos, sin, q_positions, interleaved).reshape(q.shape)

    caches = (k_cache.copy(), v_cache.copy())
    out = flashkit.flash_attn_with_kvcache(
        q,
        *caches,
        k,
        v,
        cos,
        sin,
        cache_seqlens=lens,
        causal=causal,
        rotary_interleaved=interleaved,
    )
    plain_caches = (k_cache.copy(), v_cache.copy())
    want = flashkit.flash_attn_with_kvcache(
        q_rot.astype(np.float32),
        *plain_caches,
        k_rot.astype(np.float32),
        v,
        cache_seqlens=lens,
        causal=causal,
    )
    np.testing.assert_allclose(out, want, atol=2e-6, rtol=0)
    np.testing.assert_allclose(caches[0], plain_caches[0], atol=1e-6, rtol=0)


def test_kvcache_rotary_positions_count_the_left_padding(rng):
    """As in FlashAttention, positions are cache slots: with cache_leftpad the first key a
    sequence sees is not at position 0."""
    k_cache, v_cache = (randn(rng, 2, 16, 1, 8, dtype=np.float32) for _ in range(2))
    q, k, v = (randn(rng, 2, 1, 1, 8, dtype=np.float32) for _ in range(3))
    lens, pad = np.array([6, 9], dtype=np.int32), np.array([2, 5], dtype=np.int32)
    cos, sin = tables(16, 8)
    caches = (k_cache.copy(), v_cache.copy())
    out = flashkit.flash_attn_with_kvcache(
        q, *caches, k, v, cos, sin, cache_seqlens=lens, cache_leftpad=pad, causal=True
    )
    k_rot = rotate(k[:, 0], cos, sin, lens, interleaved=True)[:, None].astype(np.float32)
    q_rot = rotate(q[:, 0], cos, sin, lens, interleaved=True)[:, None].astype(np.float32)
    want = flashkit.flash_attn_with_kvcache(
        q_rot, k_cache, v_cache, k_rot, v, cache_seqlens=lens, cache_leftpad=pad, causal=True
    )
    np.testing.assert_allclose(out, want, atol=2e-6, rtol=0)


def test_kvcache_rotary_errors(rng):
    k_cache = randn(rng, 1, 16, 1, 8, dtype=np.float32)
    q = randn(rng, 1, 1, 1, 8, dtype=np.float32)
    cos, sin = tables(16, 8)
    with pytest.raises(ValueError, match="rotary_sin: expected a table"):
        flashkit.flash_attn_with_kvcache(q, k_cache, k_cache, rotary_cos=cos)
    with pytest.raises(ValueError, match="rotary_cos: expected None without k and v"):
        flashkit.flash_attn_with_kvcache(q, k_cache, k_cache, rotary_cos=cos, rotary_sin=sin)
    k = randn(rng, 1, 1, 1, 8, dtype=np.float32)
    with pytest.raises(flashkit.FlashkitError, match=r"seqlen_offsets\[0\]: expected a position"):
        flashkit.flash_attn_with_kvcache(
            q, k_cache, k_cache.copy(), k, k, cos[:4], sin[:4], cache_seqlens=4
        )


def test_errors_name_the_argument(rng):
    x = randn(rng, 2, 3, 2, 8, dtype=np.float32)
    cos, sin = tables(8, 8)
    with pytest.raises(ValueError, match="x: expected a rank-4"):
        flashkit.apply_rotary(x[0], cos, sin)
    with pytest.raises(ValueError, match="cos: expected a rank-2"):
        flashkit.apply_rotary(x, cos[0], sin)
    with pytest.raises(flashkit.FlashkitError, match=r"cos\.shape\[1\]"):
        flashkit.apply_rotary(x, *tables(8, 10))
    offsets = np.array([0, 6], dtype=np.int32)  # 6 + 2 = 8: past the 8 rows
    with pytest.raises(flashkit.FlashkitError, match=r"seqlen_offsets\[1\] \+ 2"):
        flashkit.apply_rotary(x, cos, sin, seqlen_offsets=offsets)
    with pytest.raises(flashkit.FlashkitError, match="position_ids: expected none"):
        flashkit.apply_rotary(
            x, cos, sin, seqlen_offsets=offsets, position_ids=np.zeros((2, 3), np.int32)
        )


# --- torch ---------------------------------------------------------------------------------------


def _torch():
    return pytest.importorskip("torch")


def test_torch_matches_numpy_and_its_gradient_is_the_inverse_rotation(rng):
    torch = _torch()
    x = randn(rng, 2, 4, 2, 16, dtype=np.float32)
    g = randn(rng, 2, 4, 2, 16, dtype=np.float32)
    cos, sin = tables(24, 16)
    offsets = np.array([3, 11], dtype=np.int32)
    want = flashkit.apply_rotary(x, cos, sin, seqlen_offsets=offsets)
    grad_want = flashkit.apply_rotary(g, cos, sin, seqlen_offsets=offsets, conjugate=True)
    tx = torch.from_numpy(x).requires_grad_()
    args = [torch.from_numpy(a) for a in (cos, sin)]
    with op_recorder() as mode:
        y = flashkit.apply_rotary(tx, *args, seqlen_offsets=torch.from_numpy(offsets))
        y.backward(torch.from_numpy(g))
    assert "flashkit.rotary.default" in mode.ops
    np.testing.assert_array_equal(y.detach().numpy(), want)
    np.testing.assert_array_equal(tx.grad.numpy(), grad_want)


def test_torch_inplace_and_table_gradients(rng):
    torch = _torch()
    x = torch.from_numpy(randn(rng, 1, 3, 1, 8, dtype=np.float32))
    cos, sin = (torch.from_numpy(t) for t in tables(8, 8))
    want = flashkit.apply_rotary(x.numpy().copy(), cos.numpy(), sin.numpy())
    assert flashkit.apply_rotary(x, cos, sin, inplace=True) is x
    np.testing.assert_array_equal(x.numpy(), want)
    with pytest.raises(ValueError, match="inplace: expected False while x requires grad"):
        flashkit.apply_rotary(x.clone().requires_grad_(), cos, sin, inplace=True)
    with pytest.raises(ValueError, match="cos: expected a table that does not require grad"):
        flashkit.apply_rotary(x, cos.clone().requires_grad_(), sin)


def test_torch_kvcache_rotary_matches_numpy(rng):
    torch = _torch()
    k_cache = randn(rng, 2, 16, 1, 16, dtype=np.float32)
    q = randn(rng, 2, 2, 2, 16, dtype=np.float32)
    k, v = (randn(rng, 2, 2, 1, 16, dtype=np.float32) for _ in range(2))
    cos, sin = tables(16, 16)
    lens = np.array([3, 9], dtype=np.int32)
    np_caches = (k_cache.copy(), k_cache.copy())
    want = flashkit.flash_attn_with_kvcache(q, *np_caches, k, v, cos, sin, cache_seqlens=lens)
    t = [torch.from_numpy(a) for a in (q, k_cache.copy(), k_cache.copy(), k, v, cos, sin, lens)]
    out = flashkit.flash_attn_with_kvcache(*t[:7], cache_seqlens=t[7])
    np.testing.assert_array_equal(out.numpy(), want)
    np.testing.assert_array_equal(t[1].numpy(), np_caches[0])


def test_torch_cuda_matches_the_cpu(rng):
    """The CUDA kernel against the CPU backend: apply_rotary (bf16, interleaved, offsets) and
    flash_attn_with_kvcache's rotary tables (non-causal: the queries at one position each)."""
    torch = _torch()
    if not (torch.cuda.is_available() and flashkit.info()["build"]["cuda"]):
        pytest.skip("needs a GPU and flashkit's CUDA backend")
    x = torch.from_numpy(randn(rng, 2, 7, 4, 64, dtype=np.float32)).to(torch.bfloat16)
    cos, sin = (torch.from_numpy(t) for t in tables(32, 48))
    offsets = torch.tensor([3, 20], dtype=torch.int32)
    want = flashkit.apply_rotary(x, cos, sin, seqlen_offsets=offsets, interleaved=True)
    got = flashkit.apply_rotary(
        x.cuda(), cos.cuda(), sin.cuda(), seqlen_offsets=offsets.cuda(), interleaved=True
    )
    # fp32 math rounded once to bf16; the GPU's fused multiply-adds may land one bf16 step away.
    torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=2**-7)

    k_cache = torch.from_numpy(randn(rng, 2, 32, 2, 64, dtype=np.float32)).to(torch.bfloat16)
    q = torch.from_numpy(randn(rng, 2, 2, 4, 64, dtype=np.float32)).to(torch.bfloat16)
    k = torch.from_numpy(randn(rng, 2, 2, 2, 64, dtype=np.float32)).to(torch.bfloat16)
    lens = torch.tensor([5, 17], dtype=torch.int32)
    tabs = [torch.from_numpy(t).to(torch.bfloat16) for t in tables(32, 64)]
    outs = []
    for device in ("cpu", "cuda"):
        args = [t.to(device) for t in (q, k_cache.clone(), k_cache.clone(), k, k, *tabs)]
        outs.append(flashkit.flash_attn_with_kvcache(*args, cache_seqlens=lens.to(device)).cpu())
    torch.testing.assert_close(outs[1], outs[0], atol=2e-2, rtol=2e-2)
