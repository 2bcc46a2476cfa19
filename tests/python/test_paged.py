"""Paged KV cache from Python: paged_attention, append_kv, flash_attn_with_kvcache (FlashAttention's
semantics), KVCacheManager and the BlockAllocator binding, against the fp64 numpy reference on
the gathered K/V. Caches use shuffled page ids; unused table slots hold -1. Torch tests at the end
skip themselves without torch."""

import numpy as np
import pytest

import flashkit
import np_reference
from conftest import op_recorder, randn


def make_cache(rng, seq_lens, page_size, kv_heads, d, dtype=np.float32, spare=3):
    """k_pages, v_pages [num_pages, page_size, kv_heads, d] and block_table int32 (-1 unused):
    each sequence owns the next ids of a shuffled pool."""
    counts = [-(-n // page_size) for n in seq_lens]
    num_pages = sum(counts) + spare
    pool = rng.permutation(num_pages)
    table = np.full((len(seq_lens), max(counts + [0]) + 1), -1, dtype=np.int32)
    start = 0
    for b, n in enumerate(counts):
        table[b, :n] = pool[start : start + n]
        start += n
    k_pages = randn(rng, num_pages, page_size, kv_heads, d, dtype=dtype)
    v_pages = randn(rng, num_pages, page_size, kv_heads, d, dtype=dtype)
    return k_pages, v_pages, table


def gather(pages, table, seq_lens):
    """Each sequence's tokens in order, packed [total, kv_heads, d]."""
    page_size = pages.shape[1]
    rows = [
        pages[table[b, t // page_size], t % page_size]
        for b, n in enumerate(seq_lens)
        for t in range(n)
    ]
    return np.stack(rows) if rows else np.zeros((0,) + pages.shape[2:])


def cu(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def reference(q, k_pages, v_pages, table, seq_lens, q_lens=None, **mask):
    """fp64 attention of the queries (the last tokens of each sequence) on the gathered K/V. q is
    [batch, q_len, h, d] (q_lens None) or packed [total_q, h, d]; lse like flashkit's."""
    batched = q_lens is None
    if batched:
        q_lens = [q.shape[1]] * q.shape[0]
        q = q.reshape(-1, *q.shape[2:])
    k, v = gather(k_pages, table, seq_lens), gather(v_pages, table, seq_lens)
    out, lse = np_reference.attention(
        q, k, v, bottom_right=True, cu_seqlens_q=cu(q_lens), cu_seqlens_k=cu(seq_lens), **mask
    )
    if batched:
        b = len(q_lens)
        out = out.reshape(b, -1, *out.shape[1:])
        lse = lse.reshape(lse.shape[0], b, -1).transpose(1, 0, 2)
    return out, lse


TOL = {np.float32: 2e-5, np.float16: 2e-3}


@pytest.mark.parametrize("page_size", [1, 16, 256])
@pytest.mark.parametrize("group", [1, 4])
@pytest.mark.parametrize("q_len", [1, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_paged_attention_matches_reference(rng, page_size, group, q_len, dtype):
    seq_lens = np.array([q_len, 37, 300], dtype=np.int32)
    k_pages, v_pages, table = make_cache(rng, seq_lens, page_size, 2, 32, dtype)
    q = randn(rng, 3, q_len, 2 * group, 32, dtype=dtype)
    out, lse = flashkit.paged_attention(q, k_pages, v_pages, table, seq_lens, return_lse=True)
    want, want_lse = reference(q, k_pages, v_pages, table, seq_lens, causal=True)
    assert out.dtype == dtype and out.shape == q.shape
    np.testing.assert_allclose(out, want, atol=TOL[dtype], rtol=TOL[dtype])
    np.testing.assert_allclose(lse, want_lse, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("num_splits", [1, 4])
@pytest.mark.parametrize(
    "mask",
    [
        dict(window_size=(30, -1)),
        dict(softcap=3.0),
        dict(alibi=True),
        dict(causal=False, window_size=(5, 2)),
    ],
    ids=["window", "softcap", "alibi", "two_sided_window"],
)
def test_masks_and_splits(rng, mask, num_splits):
    seq_lens = np.array([3, 100, 517], dtype=np.int32)
    k_pages, v_pages, table = make_cache(rng, seq_lens, 16, 2, 32)
    q = randn(rng, 3, 3, 8, 32, dtype=np.float32)
    causal = mask.get("causal", True)
    window = mask.get("window_size", (-1, -1))
    softcap = mask.get("softcap", 0.0)
    slopes = rng.uniform(0.01, 0.5, 8).astype(np.float32) if mask.get("alibi") else None
    out = flashkit.paged_attention(
        q,
        k_pages,
        v_pages,
        table,
        seq_lens,
        causal=causal,
        window_size=window,
        softcap=softcap,
        alibi_slopes=slopes,
        num_splits=num_splits,
    )
    want, _ = reference(
        q,
        k_pages,
        v_pages,
        table,
        seq_lens,
        causal=causal,
        window=window,
        softcap=softcap,
        alibi=slopes,
    )
    np.testing.assert_allclose(out, want, atol=2e-5, rtol=2e-5)


def test_packed_queries(rng):
    seq_lens = np.array([1, 40, 17, 300], dtype=np.int32)
    q_lens = [1, 5, 0, 33]
    k_pages, v_pages, table = make_cache(rng, seq_lens, 16, 1, 16)
    q = randn(rng, sum(q_lens), 4, 16, dtype=np.float32)
    out, lse = flashkit.paged_attention(
        q, k_pages, v_pages, table, seq_lens, cu_seqlens_q=cu(q_lens), return_lse=True
    )
    want, want_lse = reference(q, k_pages, v_pages, table, seq_lens, q_lens, causal=True)
    np.testing.assert_allclose(out, want, atol=2e-5, rtol=2e-5)
    np.testing.assert_allclose(lse, want_lse, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attn_varlen_func_over_a_paged_cache(rng, causal):
    """FlashAttention's varlen call with block_table: k, v are pages, cu_seqlens_k the lengths."""
    seq_lens = np.array([1, 40, 17, 300], dtype=np.int32)
    q_lens = [1, 5, 0, 33]
    k_pages, v_pages, table = make_cache(rng, seq_lens, 16, 2, 16)
    q = randn(rng, sum(q_lens), 4, 16, dtype=np.float32)
    out = flashkit.flash_attn_varlen_func(
        q,
        k_pages,
        v_pages,
        cu(q_lens),
        cu(seq_lens),
        33,
        300,
        causal=causal,
        window_size=(50, 0) if causal else (-1, -1),
        block_table=table,
    )
    mask = {"causal": True, "window": (50, 0)} if causal else {}
    want, _ = reference(q, k_pages, v_pages, table, seq_lens, q_lens, **mask)
    np.testing.assert_allclose(out, want, atol=2e-5, rtol=2e-5)


def test_flash_attn_varlen_func_paged_errors_name_the_argument(rng):
    k_pages, v_pages, table = make_cache(rng, [5], 16, 1, 16)
    q = randn(rng, 5, 2, 16, dtype=np.float32)
    with pytest.raises(ValueError, match="^cu_seqlens_k: expected int32"):
        flashkit.flash_attn_varlen_func(q, k_pages, v_pages, cu([5]), None, 5, 5, block_table=table)
    with pytest.raises(ValueError, match=r"^k: expected a rank-4 \[num_blocks"):
        flashkit.flash_attn_varlen_func(
            q, k_pages[0], v_pages, cu([5]), cu([5]), 5, 5, block_table=table
        )


def test_split_and_unsplit_agree(rng):
    seq_lens = np.array([3000], dtype=np.int32)
    k_pages, v_pages, table = make_cache(rng, seq_lens, 64, 1, 64)
    q = randn(rng, 1, 1, 8, 64, dtype=np.float32)
    outs = [
        flashkit.paged_attention(q, k_pages, v_pages, table, seq_lens, num_splits=s)
        for s in (1, 0, 7)
    ]
    for o in outs[1:]:
        np.testing.assert_allclose(o, outs[0], atol=1e-6, rtol=1e-5)


def test_plan_paged_split():
    splits, elems = flashkit.plan_paged_split(1, 1, 32, 8, 128, 32768, 132)
    assert splits > 1 and elems == splits * 32 * 129
    assert flashkit.plan_paged_split(256, 1, 32, 8, 128, 32768, 132) == (1, 0)


# --- flash_attn_with_kvcache ------------------------------------------------------------------


def test_kvcache_appends_then_attends(rng):
    cache_seqlens = np.array([5, 30], dtype=np.int32)
    new = 4
    k_cache, v_cache, table = make_cache(rng, cache_seqlens + new, 16, 2, 32)
    k, v = (randn(rng, 2, new, 2, 32, dtype=np.float32) for _ in range(2))
    q = randn(rng, 2, new, 4, 32, dtype=np.float32)
    before = gather(k_cache, table, cache_seqlens)
    out, lse = flashkit.flash_attn_with_kvcache(
        q,
        k_cache,
        v_cache,
        k,
        v,
        cache_seqlens=cache_seqlens,
        block_table=table,
        causal=True,
        return_softmax_lse=True,
    )
    # The cache now holds the new tokens after the old ones, which are untouched.
    total = cache_seqlens + new
    np.testing.assert_array_equal(gather(k_cache, table, cache_seqlens), before)
    for b in range(2):
        got = gather(k_cache, table[b : b + 1], [total[b]])[cache_seqlens[b] :]
        np.testing.assert_array_equal(got, k[b])
    want, want_lse = reference(q, k_cache, v_cache, table, total, causal=True)
    np.testing.assert_allclose(out, want, atol=2e-5, rtol=2e-5)
    assert lse.shape == (2, 4, new)
    np.testing.assert_allclose(lse, want_lse, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("seqlen_cache", [48, 37])  # pages of 16, and of 1 for an odd length
def test_kvcache_contiguous_cache(rng, seqlen_cache):
    k_cache = randn(rng, 2, seqlen_cache, 1, 16, dtype=np.float32)
    v_cache = randn(rng, 2, seqlen_cache, 1, 16, dtype=np.float32)
    k, v = (randn(rng, 2, 1, 1, 16, dtype=np.float32) for _ in range(2))
    q = randn(rng, 2, 1, 4, 16, dtype=np.float32)
    out = flashkit.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=20, causal=True)
    np.testing.assert_array_equal(k_cache[:, 20], k[:, 0])  # written in place
    want, _ = np_reference.attention(q, k_cache[:, :21], v_cache[:, :21], causal=True)
    np.testing.assert_allclose(out, want, atol=2e-5, rtol=2e-5)


def test_kvcache_cache_batch_idx_picks_the_rows(rng):
    """Sequence b reads and appends to row cache_batch_idx[b] of a contiguous cache."""
    k_cache = randn(rng, 5, 32, 2, 16, dtype=np.float32)
    v_cache = randn(rng, 5, 32, 2, 16, dtype=np.float32)
    before_k, before_v = k_cache.copy(), v_cache.copy()
    k, v = (randn(rng, 3, 2, 2, 16, dtype=np.float32) for _ in range(2))
    q = randn(rng, 3, 2, 4, 16, dtype=np.float32)
    rows, lens = np.array([4, 0, 2], dtype=np.int32), np.array([7, 3, 29], dtype=np.int32)
    out = flashkit.flash_attn_with_kvcache(
        q, k_cache, v_cache, k, v, cache_seqlens=lens, cache_batch_idx=rows, causal=True
    )
    for b, (r, n) in enumerate(zip(rows, lens)):
        np.testing.assert_array_equal(k_cache[r, n : n + 2], k[b])  # written in place
        np.testing.assert_array_equal(v_cache[r, n : n + 2], v[b])
        want, _ = np_reference.attention(
            q[b : b + 1], k_cache[r : r + 1, : n + 2], v_cache[r : r + 1, : n + 2], causal=True
        )
        np.testing.assert_allclose(out[b : b + 1], want, atol=2e-5, rtol=2e-5)
    for r in (1, 3):  # rows no sequence named
        np.testing.assert_array_equal(k_cache[r], before_k[r])
        np.testing.assert_array_equal(v_cache[r], before_v[r])


@pytest.mark.parametrize(
    "rows, message",
    [
        ([0, 1], r"cache_batch_idx: expected shape \(3,\)"),
        ([0, 5, 1], r"cache_batch_idx: expected rows in \[0, 5\)"),
        ([-1, 0, 1], r"cache_batch_idx: expected rows in \[0, 5\)"),
    ],
)
def test_kvcache_bad_cache_batch_idx(rng, rows, message):
    k_cache = randn(rng, 5, 16, 1, 8, dtype=np.float32)
    q = randn(rng, 3, 1, 1, 8, dtype=np.float32)
    with pytest.raises(ValueError, match=message):
        flashkit.flash_attn_with_kvcache(
            q, k_cache, k_cache, cache_seqlens=3, cache_batch_idx=np.array(rows, np.int32)
        )
    k_pages, v_pages, table = make_cache(rng, [3, 3, 3], 16, 1, 8)
    with pytest.raises(ValueError, match="cache_batch_idx: expected None with block_table"):
        flashkit.flash_attn_with_kvcache(
            q, k_pages, v_pages, cache_seqlens=3, block_table=table, cache_batch_idx=np.zeros(3)
        )


@pytest.mark.parametrize("rows", [None, [2, 0, 1]])
def test_kvcache_cache_leftpad_starts_each_sequence_later(rng, rows):
    """Left-padded rows: sequence b's keys are slots cache_leftpad[b] .. cache_seqlens[b] - 1 of
    its row, and the new tokens land at cache_seqlens[b]."""
    k_cache = randn(rng, 3, 24, 2, 16, dtype=np.float32)
    v_cache = randn(rng, 3, 24, 2, 16, dtype=np.float32)
    k, v = (randn(rng, 3, 2, 2, 16, dtype=np.float32) for _ in range(2))
    q = randn(rng, 3, 2, 4, 16, dtype=np.float32)
    pad, lens = np.array([3, 0, 10], np.int32), np.array([9, 5, 10], np.int32)
    idx = None if rows is None else np.array(rows, np.int32)
    out = flashkit.flash_attn_with_kvcache(
        q,
        k_cache,
        v_cache,
        k,
        v,
        cache_seqlens=lens,
        cache_leftpad=pad,
        cache_batch_idx=idx,
        causal=True,
    )
    for b in range(3):
        r, p, n = (b if rows is None else rows[b]), pad[b], lens[b]
        np.testing.assert_array_equal(k_cache[r, n : n + 2], k[b])  # written in place
        want, _ = np_reference.attention(
            q[b : b + 1], k_cache[r : r + 1, p : n + 2], v_cache[r : r + 1, p : n + 2], causal=True
        )
        np.testing.assert_allclose(out[b : b + 1], want, atol=2e-5, rtol=2e-5)


def test_kvcache_bad_cache_leftpad(rng):
    k_cache = randn(rng, 2, 16, 1, 8, dtype=np.float32)
    q = randn(rng, 2, 1, 1, 8, dtype=np.float32)
    for pad, message in (
        ([1], r"cache_leftpad: expected shape \(2,\)"),
        ([4, 0], r"cache_leftpad: expected 0 <= cache_leftpad\[b\] <= cache_seqlens\[b\]"),
        ([-1, 0], r"cache_leftpad: expected 0 <= cache_leftpad"),
    ):
        with pytest.raises(ValueError, match=message):
            flashkit.flash_attn_with_kvcache(
                q, k_cache, k_cache, cache_seqlens=3, cache_leftpad=np.array(pad, np.int32)
            )
    k_pages, v_pages, table = make_cache(rng, [3, 3], 16, 1, 8)
    with pytest.raises(ValueError, match="cache_leftpad: expected None with block_table"):
        flashkit.flash_attn_with_kvcache(
            q, k_pages, v_pages, cache_seqlens=3, block_table=table, cache_leftpad=np.zeros(2)
        )


def test_kvcache_whole_cache_by_default(rng):
    k_cache = randn(rng, 1, 32, 2, 16, dtype=np.float32)
    v_cache = randn(rng, 1, 32, 2, 16, dtype=np.float32)
    q = randn(rng, 1, 2, 2, 16, dtype=np.float32)
    out = flashkit.flash_attn_with_kvcache(q, k_cache, v_cache, causal=True, num_splits=2)
    want, _ = np_reference.attention(q, k_cache, v_cache, causal=True)
    np.testing.assert_allclose(out, want, atol=2e-5, rtol=2e-5)


def test_kvcache_strided_cache_is_refused(rng):
    # The first half of a longer cache: [batch, seqlen] cannot merge into pages of 256.
    k_cache = randn(rng, 2, 1024, 1, 16, dtype=np.float32)[:, :512]
    q = randn(rng, 2, 1, 1, 16, dtype=np.float32)
    with pytest.raises(ValueError, match="k_cache"):
        flashkit.flash_attn_with_kvcache(q, k_cache, k_cache, cache_seqlens=3)


def test_errors_name_the_argument(rng):
    seq_lens = np.array([5, 20], dtype=np.int32)
    k_pages, v_pages, table = make_cache(rng, seq_lens, 4, 1, 8)
    q = randn(rng, 2, 1, 2, 8, dtype=np.float32)
    bad = table.copy()
    bad[1, 2] = k_pages.shape[0]
    with pytest.raises(flashkit.FlashkitError, match="page id out of range") as e:
        flashkit.paged_attention(q, k_pages, v_pages, bad, seq_lens)
    assert e.value.argument == "kv.block_table[1, 2]"
    with pytest.raises(flashkit.FlashkitError, match="longer than its pages") as e:
        flashkit.paged_attention(q, k_pages, v_pages, table, np.array([5, 99], dtype=np.int32))
    assert e.value.argument == "kv.seq_lens[1]"


# --- KVCacheManager and the allocator ---------------------------------------------------------


def test_block_allocator_binding():
    a = flashkit._flashkit.BlockAllocator(8, 4)
    s = a.create()
    new_pages, copies = a.append(s, 6)
    assert len(new_pages) == 2 and copies == [] and a.length(s) == 6
    child = a.fork(s)
    assert all(a.refcount(p) == 2 for p in a.pages(s))
    _, copies = a.append(child, 1)  # the shared, partly filled last page is copied first
    assert len(copies) == 1 and copies[0][0] == a.pages(s)[1]
    t = a.tables([s, child])
    assert t["seq_lens"] == [6, 7] and len(t["padded"]) == 2 * t["max_pages"]
    a.free(child)
    a.free(s)
    assert a.free_pages() == 8


def test_kv_cache_manager_decode_and_fork(rng):
    cache = flashkit.KVCacheManager(
        num_pages=32, page_size=4, kv_heads=2, head_dim=16, dtype=np.float32
    )
    history = {}  # seq -> (k tokens, v tokens) appended so far

    def append(seq, n):
        k, v = randn(rng, 1, n, 2, 16, dtype=np.float32), randn(rng, 1, n, 2, 16, dtype=np.float32)
        cache.append([seq], k, v)
        old = history.get(seq, (np.zeros((0, 2, 16)),) * 2)
        history[seq] = (np.concatenate([old[0], k[0]]), np.concatenate([old[1], v[0]]))

    def check(seqs, q_len):
        q = randn(rng, len(seqs), q_len, 4, 16, dtype=np.float32)
        out = cache.attention(seqs, q, causal=True)
        for i, s in enumerate(seqs):
            want, _ = np_reference.attention(
                q[i : i + 1], history[s][0][None], history[s][1][None], causal=True
            )
            np.testing.assert_allclose(out[i : i + 1], want, atol=2e-5, rtol=2e-5)

    a, b = cache.create(), cache.create()
    append(a, 7)  # prompts of different lengths
    append(b, 2)
    check([a, b], 2)
    for _ in range(3):  # decode steps
        append(a, 1)
        append(b, 1)
        check([a, b], 1)
    child = cache.fork(a)  # shares a's pages; its first write copies the partly filled last page
    history[child] = history[a]
    append(child, 1)
    append(a, 1)
    check([a, child], 1)
    used = 32 - cache.allocator.free_pages()
    cache.free(child)
    assert 32 - cache.allocator.free_pages() < used


# --- torch ------------------------------------------------------------------------------------


def _torch():
    return pytest.importorskip("torch")


def _torch_devices(torch):
    """cpu, and cuda where a GPU and flashkit's CUDA backend are present."""
    has_cuda = torch.cuda.is_available() and flashkit.info()["build"]["cuda"]
    return ["cpu"] + (["cuda"] if has_cuda else [])


def test_torch_kvcache_bf16(rng):
    torch = _torch()
    cache_seqlens = np.array([9, 30], dtype=np.int32)
    k_cache, v_cache, table = make_cache(rng, cache_seqlens + 1, 16, 2, 32)
    k, v = (randn(rng, 2, 1, 2, 32, dtype=np.float32) for _ in range(2))
    q = randn(rng, 2, 1, 4, 32, dtype=np.float32)
    bf16 = lambda x: torch.from_numpy(x).to(torch.bfloat16)  # noqa: E731
    tk, tv = bf16(k_cache), bf16(v_cache)
    out = flashkit.flash_attn_with_kvcache(
        bf16(q),
        tk,
        tv,
        bf16(k),
        bf16(v),
        cache_seqlens=torch.from_numpy(cache_seqlens),
        block_table=torch.from_numpy(table),
        causal=True,
    )
    assert out.dtype == torch.bfloat16
    want, _ = reference(
        bf16(q).double().numpy(),
        tk.double().numpy(),
        tv.double().numpy(),
        table,
        cache_seqlens + 1,
        causal=True,
    )
    np.testing.assert_allclose(out.double().numpy(), want, atol=2e-2, rtol=2e-2)


def test_torch_flash_attn_varlen_func_over_a_paged_cache(rng):
    """The same call with torch tensors: lengths taken from cu_seqlens_k on the device."""
    torch = _torch()
    seq_lens = np.array([9, 70, 33], dtype=np.int32)
    q_lens = [1, 12, 33]
    k_pages, v_pages, table = make_cache(rng, seq_lens, 16, 2, 64)
    q = randn(rng, sum(q_lens), 8, 64, dtype=np.float32)
    want, _ = reference(q, k_pages, v_pages, table, seq_lens, q_lens, causal=True)
    for device in _torch_devices(torch):
        dtype = torch.float32 if device == "cpu" else torch.bfloat16
        t = lambda x: torch.from_numpy(x).to(device)  # noqa: E731
        out = flashkit.flash_attn_varlen_func(
            t(q).to(dtype),
            t(k_pages).to(dtype),
            t(v_pages).to(dtype),
            t(cu(q_lens)),
            t(cu(seq_lens)),
            33,
            70,
            causal=True,
            block_table=t(table),
        )
        assert out.dtype == dtype and out.device.type == device
        tol = 2e-5 if dtype == torch.float32 else 3e-2
        np.testing.assert_allclose(out.double().cpu().numpy(), want, atol=tol, rtol=tol)


@pytest.mark.parametrize("leftpad", [False, True])
def test_torch_kvcache_rows_and_left_padding(rng, leftpad):
    """cache_batch_idx (int64 here) and cache_leftpad as torch tensors on the cache's device."""
    torch = _torch()
    k_cache, v_cache = (randn(rng, 4, 64, 2, 64, dtype=np.float32) for _ in range(2))
    k, v = (randn(rng, 2, 1, 2, 64, dtype=np.float32) for _ in range(2))
    q = randn(rng, 2, 1, 8, 64, dtype=np.float32)
    rows, lens = [3, 1], np.array([20, 40], dtype=np.int32)
    pad = np.array([5, 17] if leftpad else [0, 0], dtype=np.int32)
    for device in _torch_devices(torch):
        dtype = torch.float32 if device == "cpu" else torch.bfloat16
        t = lambda x: torch.from_numpy(x).to(device)  # noqa: E731
        tk, tv = t(k_cache).to(dtype), t(v_cache).to(dtype)
        tq, tk_new = t(q).to(dtype), t(k).to(dtype)
        out = flashkit.flash_attn_with_kvcache(
            tq,
            tk,
            tv,
            tk_new,
            t(v).to(dtype),
            cache_seqlens=t(lens),
            cache_batch_idx=torch.tensor(rows, device=device),
            cache_leftpad=t(pad) if leftpad else None,
            causal=True,
        )
        tol = 2e-5 if dtype == torch.float32 else 3e-2
        for b, (r, p, n) in enumerate(zip(rows, pad, lens)):
            assert torch.equal(tk[r, n], tk_new[b, 0])  # appended at cache_seqlens[b]
            want, _ = np_reference.attention(
                tq[b : b + 1].double().cpu().numpy(),
                tk[r : r + 1, p : n + 1].double().cpu().numpy(),
                tv[r : r + 1, p : n + 1].double().cpu().numpy(),
                causal=True,
            )
            np.testing.assert_allclose(
                out[b : b + 1].double().cpu().numpy(), want, atol=tol, rtol=tol
            )


def test_torch_fp8_cache_manager(rng):
    torch = _torch()
    cache = flashkit.KVCacheManager(
        num_pages=16,
        page_size=16,
        kv_heads=1,
        head_dim=32,
        dtype=torch.float8_e4m3fn,
        device="cpu",
        fp8_scale=0.01,
    )
    s = cache.create()
    k, v = (torch.from_numpy(randn(rng, 1, 40, 1, 32, dtype=np.float32)) for _ in range(2))
    cache.append([s], k, v)
    q = torch.from_numpy(randn(rng, 1, 1, 4, 32, dtype=np.float32)).to(torch.bfloat16)
    out = cache.attention([s], q, causal=True)
    table, lens = cache.tables([s])
    deq = lambda p, sc: (p.float() * sc[:, None, :, None]).double().numpy()  # noqa: E731
    want, _ = reference(
        q.double().numpy(),
        deq(cache.k_pages, cache.k_scale),
        deq(cache.v_pages, cache.v_scale),
        table.numpy(),
        lens.numpy(),
        causal=True,
    )
    np.testing.assert_allclose(out.double().numpy(), want, atol=2e-2, rtol=2e-2)


def test_torch_paged_op_registered():
    torch = _torch()
    assert hasattr(torch.ops.flashkit, "paged_fwd") and hasattr(torch.ops.flashkit, "append_kv")


def test_torch_eager_calls_match_the_custom_ops(rng):
    """Plain eager calls run the ops' bodies without their dispatch: the same pages written, the
    same outputs, bit for bit (and the ops still run where torch must see them)."""
    torch = _torch()
    seq_lens = np.array([9, 30], dtype=np.int32)
    k_pages, v_pages, table = (torch.from_numpy(x) for x in make_cache(rng, seq_lens + 2, 8, 2, 16))
    k_new, v_new = (torch.from_numpy(randn(rng, 2, 2, 2, 16, dtype=np.float32)) for _ in range(2))
    q = torch.from_numpy(randn(rng, 2, 2, 4, 16, dtype=np.float32))
    start, lens = torch.from_numpy(seq_lens), torch.from_numpy(seq_lens + 2)
    table = table.contiguous()

    results = []
    for mode in (None, op_recorder()):
        pages = (k_pages.clone(), v_pages.clone())
        with mode or torch.no_grad():
            flashkit.append_kv(k_new, v_new, start, *pages, table)
            out, lse = flashkit.paged_attention(q, *pages, table, lens, return_lse=True)
        results.append((*pages, out, lse))
    assert {"flashkit.append_kv.default", "flashkit.paged_fwd.default"} <= mode.ops
    assert all(torch.equal(a, b) for a, b in zip(*results))
