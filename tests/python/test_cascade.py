"""cascade_attention from Python: a batch sharing a prompt prefix, against paged_attention over
each request's prefix + suffix (the same pool: the shared pages listed first in every request's
table) and the fp64 numpy reference. Torch tests at the end skip themselves without torch, the
CUDA one without a GPU."""

import numpy as np
import pytest

import flashkit
from conftest import randn
from test_paged import reference


def make_cascade(rng, prefix, suffix_lens, page_size, kv_heads, d, dtype=np.float32):
    """One pool: the prefix's pages, then each suffix's own pages (a suffix starts at slot 0 of
    a page), shuffled. Returns pages, the shared table [1, n], the suffix table, and the plain
    table (prefix pages then suffix pages; a prefix ending mid-page is padded by whole pages, so
    the plain table is only valid for page-aligned prefixes)."""
    prefix_pages = -(-prefix // page_size)
    suffix_pages = [-(-n // page_size) for n in suffix_lens]
    num_pages = prefix_pages + sum(suffix_pages) + 2
    pool = rng.permutation(num_pages).astype(np.int32)
    shared = np.full((1, max(prefix_pages, 1)), -1, dtype=np.int32)
    shared[0, :prefix_pages] = pool[:prefix_pages]
    width = max(suffix_pages) + 1
    suffix = np.full((len(suffix_lens), width), -1, dtype=np.int32)
    plain = np.full((len(suffix_lens), prefix_pages + width), -1, dtype=np.int32)
    start = prefix_pages
    for b, n in enumerate(suffix_pages):
        suffix[b, :n] = pool[start : start + n]
        plain[b, :prefix_pages] = pool[:prefix_pages]
        plain[b, prefix_pages : prefix_pages + n] = pool[start : start + n]
        start += n
    k_pages = randn(rng, num_pages, page_size, kv_heads, d, dtype=dtype)
    v_pages = randn(rng, num_pages, page_size, kv_heads, d, dtype=dtype)
    return k_pages, v_pages, shared, suffix, plain


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("group", [1, 4])
@pytest.mark.parametrize("q_len", [1, 3])
@pytest.mark.parametrize("causal", [True, False])
def test_cascade_matches_plain_paged_attention(rng, page_size, group, q_len, causal):
    prefix = 32  # page-aligned for both page sizes, so the plain table holds the same tokens
    suffix_lens = np.array([q_len, q_len + 6, 45], dtype=np.int32)
    k_pages, v_pages, shared, suffix, plain = make_cascade(
        rng, prefix, suffix_lens, page_size, 2, 32
    )
    q = randn(rng, 3, q_len, 2 * group, 32, dtype=np.float32)
    out, lse = flashkit.cascade_attention(
        q,
        k_pages,
        v_pages,
        shared,
        np.array([prefix], dtype=np.int32),
        suffix,
        suffix_lens,
        causal=causal,
        return_lse=True,
    )
    seq_lens = (suffix_lens + prefix).astype(np.int32)
    want, want_lse = reference(q, k_pages, v_pages, plain, seq_lens, causal=causal)
    assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == (3, 2 * group, q_len)
    np.testing.assert_allclose(out, want, atol=2e-5, rtol=2e-5)
    np.testing.assert_allclose(lse, want_lse, atol=1e-4, rtol=1e-5)
    paged = flashkit.paged_attention(q, k_pages, v_pages, plain, seq_lens, causal=causal)
    np.testing.assert_allclose(out, paged, atol=2e-5, rtol=2e-5)


def test_cascade_empty_prefix_is_suffix_attention(rng):
    suffix_lens = np.array([5, 9], dtype=np.int32)
    k_pages, v_pages, shared, suffix, _ = make_cascade(rng, 0, suffix_lens, 4, 1, 32)
    q = randn(rng, 2, 1, 4, 32, dtype=np.float32)
    out = flashkit.cascade_attention(
        q, k_pages, v_pages, shared[0], np.array(0, dtype=np.int32), suffix, suffix_lens
    )
    want = flashkit.paged_attention(q, k_pages, v_pages, suffix, suffix_lens)
    np.testing.assert_array_equal(out, want)


def test_cascade_errors_name_the_argument(rng):
    suffix_lens = np.array([5, 9], dtype=np.int32)
    k_pages, v_pages, shared, suffix, _ = make_cascade(rng, 8, suffix_lens, 4, 1, 32)
    q = randn(rng, 2, 1, 4, 32, dtype=np.float32)
    lens = np.array([8], dtype=np.int32)
    with pytest.raises(flashkit.FlashkitError, match="shared.block_table.shape"):
        flashkit.cascade_attention(q, k_pages, v_pages, suffix, lens, suffix, suffix_lens)
    with pytest.raises(flashkit.FlashkitError, match="algo"):
        flashkit.cascade_attention(
            q, k_pages, v_pages, shared, lens, suffix, suffix_lens, algo="fa2"
        )
    with pytest.raises(ValueError, match="algo"):
        flashkit.cascade_attention(
            q, k_pages, v_pages, shared, lens, suffix, suffix_lens, algo=["auto"]
        )
    with pytest.raises(ValueError, match="side_stream: expected None for numpy arrays"):
        flashkit.cascade_attention(
            q, k_pages, v_pages, shared, lens, suffix, suffix_lens, side_stream=1
        )


# --- torch ------------------------------------------------------------------------------------


def _torch():
    return pytest.importorskip("torch")


def torch_decode_case(rng):
    """Four requests over a 320-token prefix (pages of 16, GQA 8 / 2, d 128): prefix, suffix_lens,
    k_pages, v_pages, shared, suffix, plain (as make_cascade) and q."""
    prefix = 320
    suffix_lens = np.array([1, 40, 77, 130], dtype=np.int32)
    k_pages, v_pages, shared, suffix, plain = make_cascade(rng, prefix, suffix_lens, 16, 2, 128)
    q = randn(rng, 4, 1, 8, 128, dtype=np.float32)
    return prefix, suffix_lens, k_pages, v_pages, shared, suffix, plain, q


def test_torch_cascade_op_registered():
    torch = _torch()
    assert hasattr(torch.ops.flashkit, "cascade_fwd")


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_torch_cascade_matches_paged_attention(rng, device):
    torch = _torch()
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    prefix, suffix_lens, k_pages, v_pages, shared, suffix, plain, q = torch_decode_case(rng)

    def t(x, dtype=torch.bfloat16):
        x = torch.from_numpy(x)
        return (x.to(dtype) if x.is_floating_point() else x).to(device)

    kp, vp, qt = t(k_pages), t(v_pages), t(q)
    out, lse = flashkit.cascade_attention(
        qt,
        kp,
        vp,
        t(shared),
        t(np.array([prefix], dtype=np.int32)),
        t(suffix),
        t(suffix_lens),
        return_lse=True,
    )
    seq_lens = t((suffix_lens + prefix).astype(np.int32))
    want, want_lse = flashkit.paged_attention(qt, kp, vp, t(plain), seq_lens, return_lse=True)
    assert out.dtype == torch.bfloat16 and out.device.type == device
    torch.testing.assert_close(out.float(), want.float(), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse, want_lse, atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize("kind", ["numpy", "torch-cpu", "torch-cuda"])
def test_cascade_writes_lse_only_when_asked(rng, monkeypatch, kind):
    """Without return_lse the extension gets no lse array (an eager decode step saves the
    allocation), and out is bit-identical to the call that asks for lse."""
    suffix_lens = np.array([3, 19], dtype=np.int32)
    k_pages, v_pages, shared, suffix, _ = make_cascade(rng, 48, suffix_lens, 16, 2, 64)
    q = randn(rng, 2, 1, 4, 64, dtype=np.float32)
    arrays = [q, k_pages, v_pages, shared, np.array([48], dtype=np.int32), suffix, suffix_lens]
    if kind != "numpy":
        torch = _torch()
        device = kind.split("-")[1]
        if device == "cuda" and not torch.cuda.is_available():
            pytest.skip("no CUDA device")
        dtype = torch.float32 if device == "cpu" else torch.bfloat16
        arrays = [
            torch.from_numpy(a).to(device, dtype if a.dtype == np.float32 else None) for a in arrays
        ]
    lse_args = []
    call = flashkit._flashkit.cascade_attention

    def recording(*args):
        lse_args.append(args[10])
        return call(*args)

    monkeypatch.setattr(flashkit._flashkit, "cascade_attention", recording)
    out, lse = flashkit.cascade_attention(*arrays, return_lse=True)
    out_alone = flashkit.cascade_attention(*arrays)
    assert len(lse_args) == 2 and lse_args[0] is not None and lse_args[1] is None
    assert lse.shape == (2, 4, 1)
    if kind == "numpy":
        np.testing.assert_array_equal(out_alone, out)
    else:
        assert torch.equal(out_alone, out)


def test_torch_cascade_side_stream_must_be_a_cuda_stream(rng):
    torch = _torch()
    suffix_lens = np.array([5, 9], dtype=np.int32)
    k_pages, v_pages, shared, suffix, _ = make_cascade(rng, 8, suffix_lens, 4, 1, 32)
    q = randn(rng, 2, 1, 4, 32, dtype=np.float32)
    lens = np.array([8], dtype=np.int32)
    arrays = [torch.from_numpy(a) for a in (q, k_pages, v_pages, shared, lens, suffix, suffix_lens)]
    with pytest.raises(ValueError, match="side_stream: expected a torch.cuda.Stream"):
        flashkit.cascade_attention(*arrays, side_stream=1)


def test_torch_cascade_on_a_side_stream(rng, monkeypatch):
    """The side stream reaches the extension on both paths (the eager body and the custom op);
    the result matches plain paged attention, and the eager and op calls agree bit for bit."""
    torch = _torch()
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    prefix, suffix_lens, k_pages, v_pages, shared, suffix, plain, q = torch_decode_case(rng)

    def t(x):
        x = torch.from_numpy(x)
        return (x.to(torch.bfloat16) if x.is_floating_point() else x).cuda()

    prefix_len = np.array([prefix], dtype=np.int32)
    arrays = [t(a) for a in (q, k_pages, v_pages, shared, prefix_len, suffix, suffix_lens)]
    side = torch.cuda.Stream()
    seen = []
    call = flashkit._flashkit.cascade_attention

    def recording(*args):
        seen.append(args[-1].side_stream)
        return call(*args)

    monkeypatch.setattr(flashkit._flashkit, "cascade_attention", recording)
    out = flashkit.cascade_attention(*arrays, side_stream=side)
    q_, kp, vp, st, sl, sx, sxl = arrays
    scalars = (None, True, 0.0, "auto")  # the softmax scale 1 / sqrt(d), as the eager call
    op_out, _ = torch.ops.flashkit.cascade_fwd(q_, kp, vp, st, sl, kp, vp, sx, sxl, *scalars, 0)
    op_side, _ = torch.ops.flashkit.cascade_fwd(
        q_, kp, vp, st, sl, kp, vp, sx, sxl, *scalars, side.cuda_stream
    )
    assert seen == [side.cuda_stream, 0, side.cuda_stream]
    assert torch.equal(op_side, out)
    want = flashkit.paged_attention(
        q_, kp, vp, t(plain), t((suffix_lens + prefix).astype(np.int32))
    )
    torch.testing.assert_close(out.float(), want.float(), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(op_out.float(), out.float(), atol=2e-2, rtol=2e-2)
