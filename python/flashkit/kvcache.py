"""Paged KV cache: attention of new queries against cached pages (decode, chunked prefill),
cascade attention over a prefix shared by a batch, writing new tokens into pages, and
KVCacheManager, which owns the pages of a cache.

Layouts are vLLM's and FlashAttention's: pages [num_pages, page_size, kv_heads, head_dim] with
page_size a power of two in 1..256, block_table int32 [batch, max_pages] (sequence b's token t
lives in page block_table[b, t // page_size] at slot t % page_size), seq_lens int32 [batch]
counting every cached token. The queries are the last q_len tokens of their sequences (already
in the cache), so causal masking is bottom-right aligned. e4m3 pages (torch.float8_e4m3fn) come
with f32 scales [num_pages, kv_heads]: value = stored * scale.

numpy arrays run on the CPU backend; torch tensors (CPU or CUDA) go through the custom ops
flashkit::paged_fwd, flashkit::cascade_fwd and flashkit::append_kv, so torch.compile and CUDA
graphs work.
"""

from __future__ import annotations

import functools

import numpy as np

from . import _arrays, _flashkit
from ._numpy_backend import max_seqlen
from ._settings import cascade_options, make_settings
from .rotary import apply_rotary

if _arrays.torch is not None:
    from . import _paged_torch

_MAX_PAGE_SIZE = 256


def plan_paged_split(batch, q_len, heads_q, heads_kv, head_dim_v, max_seq_len, processors):
    """(num_splits, workspace_elems): how many parts the keys of every sequence are split into
    so that batch * heads_kv * num_splits fills `processors` (GPU SMs or CPU threads), and the f32
    workspace that needs."""
    return _flashkit.plan_paged_split(
        batch, q_len, heads_q, heads_kv, head_dim_v, max_seq_len, processors
    )


@functools.lru_cache(maxsize=256)
def _hashable_paged_settings(softmax_scale, causal, window_size, softcap):
    return make_settings(
        softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap
    )


def _paged_settings(softmax_scale, causal, window_size, softcap):
    """make_settings of a paged call, memoised for hashable arguments (a decode step repeats
    them every call)."""
    plain = (type(x) in (int, float) for x in (softmax_scale or 0.0, softcap))
    if type(window_size) is tuple and type(causal) is bool and all(plain):
        return _hashable_paged_settings(softmax_scale, causal, window_size, softcap)
    return make_settings(
        softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap
    )


def _options(softmax_scale, causal, window_size, softcap, max_seqlen_q, num_splits, algo):
    s = _paged_settings(softmax_scale, causal, window_size, softcap)
    o = _flashkit.PagedOptions()
    o.softmax_scale = s.softmax_scale
    o.causal = s.causal
    o.window_left = s.window_left
    o.window_right = s.window_right
    o.softcap = s.softcap
    o.max_seqlen_q = int(max_seqlen_q)
    o.num_splits = int(num_splits)
    o.algo = algo
    return o


def paged_attention(
    q,
    k_pages,
    v_pages,
    block_table,
    seq_lens,
    *,
    k_scale=None,
    v_scale=None,
    cu_seqlens_q=None,
    max_seqlen_q=None,
    softmax_scale=None,
    causal=True,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    num_splits=0,
    return_lse=False,
    algo="auto",
):
    """Attention of q against the paged cache.

    q [batch, q_len, heads_q, d], or packed [total_q, heads_q, d] with cu_seqlens_q (int32
    [batch + 1]) when sequences add different numbers of tokens. window_size, softcap,
    alibi_slopes and softmax_scale as in flashkit.attention. num_splits: 0 lets flashkit choose,
    1 runs the unsplit kernel, > 1 splits every sequence's keys and merges the parts. algo:
    "auto" or "reference" (the fp64 oracle, CPU only).

    Returns out (like q), and with return_lse also lse (f32 [batch, heads_q, q_len], or
    [heads_q, total_q] packed).
    """
    kind = _arrays.array_kind(
        q=q,
        k_pages=k_pages,
        v_pages=v_pages,
        block_table=block_table,
        seq_lens=seq_lens,
        k_scale=k_scale,
        v_scale=v_scale,
        cu_seqlens_q=cu_seqlens_q,
        alibi_slopes=alibi_slopes,
    )
    packed = cu_seqlens_q is not None
    _arrays.expect_ndim("q", q, *_arrays.token_layout(packed))
    for name, pages in (("k_pages", k_pages), ("v_pages", v_pages)):
        _arrays.expect_ndim(name, pages, 4, "[num_pages, page_size, kv_heads, head_dim]")
    if packed and max_seqlen_q is None:
        if kind == "torch":  # reading a CUDA tensor would synchronize the device
            raise ValueError("max_seqlen_q: expected an int with torch cu_seqlens_q, got None")
        max_seqlen_q = max_seqlen(cu_seqlens_q)
    arrays = (q, k_pages, v_pages, block_table, seq_lens, k_scale, v_scale, cu_seqlens_q)
    if kind == "torch":
        s = _paged_settings(softmax_scale, causal, window_size, softcap)
        out, lse = _paged_torch.forward(
            arrays,
            alibi_slopes,
            s,
            int(max_seqlen_q or 0),
            int(num_splits),
            algo,
            return_lse,
        )
    else:
        o = _options(
            softmax_scale, causal, window_size, softcap, max_seqlen_q or 0, num_splits, algo
        )
        out = np.empty(_arrays.out_shape(q, v_pages), dtype=q.dtype)
        lse = np.empty(_arrays.lse_shape(q, packed), dtype=np.float32) if return_lse else None
        _flashkit.paged_attention(
            q,
            k_pages,
            v_pages,
            block_table,
            seq_lens,
            out,
            lse,
            k_scale,
            v_scale,
            cu_seqlens_q,
            alibi_slopes,
            None,
            o,
        )
    return (out, lse) if return_lse else out


def append_kv(
    k_new, v_new, start_pos, k_pages, v_pages, block_table, *, k_scale=None, v_scale=None
):
    """Writes k_new / v_new [batch, n_new, kv_heads, d] into the pages, in place, at token
    positions start_pos[b] .. start_pos[b] + n_new - 1 of each sequence (start_pos int32
    [batch]). e4m3 pages store value / scale, rounded to nearest even and saturated at 448."""
    kind = _arrays.array_kind(
        k_new=k_new,
        v_new=v_new,
        start_pos=start_pos,
        k_pages=k_pages,
        v_pages=v_pages,
        block_table=block_table,
        k_scale=k_scale,
        v_scale=v_scale,
    )
    for name, x in (("k_new", k_new), ("v_new", v_new)):
        _arrays.expect_ndim(name, x, 4, "[batch, n_new, kv_heads, head_dim]")
    if kind == "torch":
        _paged_torch.append(
            k_new, v_new, start_pos, k_pages, v_pages, block_table, k_scale, v_scale
        )
    else:
        _flashkit.append_kv(
            k_new, v_new, start_pos, k_pages, v_pages, block_table, k_scale, v_scale
        )


# --- cascade (shared-prefix) attention ---------------------------------------------------------


def _side_stream(stream, q) -> int:
    """A cascade call's side stream as a cudaStream_t integer (0: none), checked against q."""
    if stream is None:
        return 0
    torch = _arrays.torch
    if not isinstance(stream, torch.cuda.Stream):
        raise ValueError(f"side_stream: expected a torch.cuda.Stream or None, got {stream!r}")
    if not q.is_cuda:
        return 0  # CPU calls run on no stream
    if stream.device != q.device:
        raise ValueError(
            f"side_stream: expected a stream on q's device {q.device}, got one on {stream.device}"
        )
    return stream.cuda_stream


def cascade_attention(
    q,
    k_pages,
    v_pages,
    shared_block_table,
    shared_seq_len,
    suffix_block_table,
    suffix_seq_lens,
    *,
    suffix_k_pages=None,
    suffix_v_pages=None,
    softmax_scale=None,
    causal=True,
    softcap=0.0,
    return_lse=False,
    algo="auto",
    side_stream=None,
):
    """Attention of requests that share a prompt prefix: the prefix's pages are attended once
    for the whole batch, each request's own suffix separately, and the two results merged. Equal
    to paged_attention over each request's prefix + suffix.

    q [batch, q_len, heads_q, d]: each request's newest q_len tokens (the end of its suffix);
    with q_len > 1 one stride over batch and tokens (a contiguous q). The prefix: its pages in
    k_pages / v_pages, shared_block_table int32 [1, max_pages] (or [max_pages]) and
    shared_seq_len int32 [1] (its length; 0 allowed). The suffixes: suffix_block_table int32
    [batch, max_pages] and suffix_seq_lens int32 [batch], in the same pool unless
    suffix_k_pages / suffix_v_pages are given; a suffix starts at slot 0 of its own page.
    causal (bottom-right) applies within the suffix: every query sees the whole prefix. softcap
    and softmax_scale apply to both. On CUDA the prefix runs on tensor cores (f16 / bf16 pages,
    head dims 64, 128, 256) and the call allocates (with torch) and synchronizes nothing else,
    so it can be captured in a CUDA graph. algo: "auto" or "reference" (CPU only).

    side_stream (CUDA, optional): a torch.cuda.Stream on q's device. Where the prefix level
    leaves at least half of the GPU idle (short prefixes, small batches), the suffix level runs
    on it beside the prefix level, forked from and joined back into the current stream (still
    capturable). On sm90 a call without one does the same on a stream of the library's own;
    elsewhere it runs the two levels in turn, and its result may then differ from the
    side-stream call's in the last bits (the prefix level's keys split differently). Ignored for
    CPU tensors.

    Returns out (like q), and with return_lse also lse (f32 [batch, heads_q, q_len]).
    """
    suffix_k_pages = k_pages if suffix_k_pages is None else suffix_k_pages
    suffix_v_pages = v_pages if suffix_v_pages is None else suffix_v_pages
    kind = _arrays.array_kind(
        q=q,
        k_pages=k_pages,
        v_pages=v_pages,
        shared_block_table=shared_block_table,
        shared_seq_len=shared_seq_len,
        suffix_block_table=suffix_block_table,
        suffix_seq_lens=suffix_seq_lens,
        suffix_k_pages=suffix_k_pages,
        suffix_v_pages=suffix_v_pages,
    )
    _arrays.expect_ndim("q", q, 4, "[batch, q_len, heads_q, head_dim]")
    for name, pages in (
        ("k_pages", k_pages),
        ("v_pages", v_pages),
        ("suffix_k_pages", suffix_k_pages),
        ("suffix_v_pages", suffix_v_pages),
    ):
        _arrays.expect_ndim(name, pages, 4, "[num_pages, page_size, kv_heads, head_dim]")
    if len(shared_block_table.shape) == 1:
        shared_block_table = shared_block_table.reshape(1, -1)
    if len(shared_seq_len.shape) == 0:
        shared_seq_len = shared_seq_len.reshape(1)
    if not isinstance(algo, str):
        raise ValueError(f"algo: expected 'auto' or 'reference', got {algo!r}")
    scalars = (
        make_settings(softmax_scale=softmax_scale).softmax_scale,
        bool(causal),
        float(softcap),
        algo,
    )
    arrays = (
        q,
        k_pages,
        v_pages,
        shared_block_table,
        shared_seq_len,
        suffix_k_pages,
        suffix_v_pages,
        suffix_block_table,
        suffix_seq_lens,
    )
    if kind == "torch":
        side = _side_stream(side_stream, q)
        out, lse = _paged_torch.cascade(arrays, scalars, return_lse, side)
    else:
        if side_stream is not None:
            raise ValueError(
                f"side_stream: expected None for numpy arrays (a torch.cuda.Stream applies to "
                f"CUDA tensors), got {side_stream!r}"
            )
        out = np.empty(_arrays.out_shape(q, v_pages), dtype=q.dtype)
        lse = (
            np.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=np.float32) if return_lse else None
        )
        workspace = np.empty(
            _flashkit.cascade_workspace_elems(q.shape[0], q.shape[1], q.shape[2], v_pages.shape[3]),
            dtype=np.float32,
        )
        _flashkit.cascade_attention(*arrays, out, lse, workspace, cascade_options(scalars, 0))
    return (out, lse) if return_lse else out


# --- FlashAttention's flash_attn_with_kvcache on top of the two --------------------------------


def _int32(x, like_torch: bool, device=None):
    if like_torch:
        t = _arrays.torch
        if t.is_tensor(x):
            return x if x.dtype == t.int32 else x.to(t.int32)
        return t.tensor(x, dtype=t.int32, device=device)
    return np.ascontiguousarray(x, dtype=np.int32)


def _cache_as_pages(name, cache, max_page=_MAX_PAGE_SIZE):
    """A contiguous cache [batch, seqlen, kv_heads, d] viewed (not copied: appends must land in
    it) as pages of the largest power-of-two size <= max_page that divides seqlen."""
    b, s, h, d = cache.shape
    page = 1
    while page < max_page and s % (2 * page) == 0:
        page *= 2
    shape = (b * (s // page), page, h, d)
    error = ValueError(
        f"{name}: expected a cache whose [batch, seqlen] dims can be viewed as pages in place "
        f"(contiguous rows), got a strided view of shape {tuple(cache.shape)}"
    )
    if _arrays.is_torch(cache):
        try:
            return cache.view(shape), page
        except RuntimeError as e:
            raise error from e
    pages = cache.reshape(shape)
    if pages.size and pages.ctypes.data != cache.ctypes.data:  # reshape had to copy
        raise error
    return pages, page


def _contiguous_block_table(batch, cache_rows, per_seq, cache_batch_idx, torch_arrays, device):
    """The block table of a contiguous cache viewed as pages (row r: pages r * per_seq ..):
    sequence b reads row cache_batch_idx[b], or row b. Indices on the host are checked; a device
    tensor is trusted, as block tables are (reading it would synchronize)."""
    if cache_batch_idx is None:
        if cache_rows != batch:
            raise ValueError(
                f"k_cache: expected batch {batch} (the batch of q) without block_table or "
                f"cache_batch_idx, got {cache_rows}"
            )
        table = np.arange(batch * per_seq).reshape(batch, per_seq)
        return _int32(table, torch_arrays, device)  # one host-to-device copy
    rows = _int32(cache_batch_idx, torch_arrays, device)
    if tuple(rows.shape) != (batch,):
        raise ValueError(
            f"cache_batch_idx: expected shape ({batch},) (the batch of q), got {tuple(rows.shape)}"
        )
    on_host = not torch_arrays or rows.device.type == "cpu"
    if on_host and batch > 0 and not (0 <= int(rows.min()) and int(rows.max()) < cache_rows):
        raise ValueError(
            f"cache_batch_idx: expected rows in [0, {cache_rows}) of k_cache, got "
            f"{[int(r) for r in rows]}"
        )
    if torch_arrays:
        rows = rows.to(device)
    columns = _int32(np.arange(per_seq), torch_arrays, device)
    return rows[:, None] * per_seq + columns[None, :]


def _skip_left_padding(block_table, cache_seqlens, cache_leftpad, torch_arrays, device):
    """A one-token-page table and cached lengths that start each sequence at cache_leftpad[b]
    (FlashAttention's left-padded cache: keys cache_leftpad[b] .. cache_seqlens[b] - 1 of the row,
    new tokens appended at cache_seqlens[b]). Host values are checked; device ones trusted."""
    batch, row_len = block_table.shape
    leftpad = _int32(cache_leftpad, torch_arrays, device)
    if tuple(leftpad.shape) != (batch,):
        raise ValueError(
            f"cache_leftpad: expected shape ({batch},) (the batch of q), got "
            f"{tuple(leftpad.shape)}"
        )
    lens_on_host = not torch_arrays or cache_seqlens.device.type == "cpu"
    if (not torch_arrays or leftpad.device.type == "cpu") and lens_on_host and batch > 0:
        bad = (leftpad < 0) | (leftpad > cache_seqlens)
        if bool(bad.any()):
            raise ValueError(
                f"cache_leftpad: expected 0 <= cache_leftpad[b] <= cache_seqlens[b], got "
                f"{[int(x) for x in leftpad]} against {[int(x) for x in cache_seqlens]}"
            )
    if torch_arrays:
        leftpad = leftpad.to(device)
        last = block_table[:, :1] + (row_len - 1)
        table = _arrays.torch.minimum(block_table + leftpad[:, None], last)
    else:
        table = np.minimum(block_table + leftpad[:, None], block_table[:, :1] + (row_len - 1))
    # Slots past a row's end repeat its last one: the lengths stop before them.
    return table, cache_seqlens - leftpad


def attention_with_kvcache(
    q,
    k_cache,
    v_cache,
    k,
    v,
    cache_seqlens,
    block_table,
    cache_batch_idx,
    cache_leftpad,
    *,
    softmax_scale,
    causal,
    window_size,
    softcap,
    alibi_slopes,
    num_splits,
    return_softmax_lse,
    rotary=None,
):
    """flash_attn_with_kvcache's semantics (see flashkit.flash_attn_with_kvcache); rotary:
    (cos, sin, interleaved) or None."""
    torch_arrays = _arrays.array_kind(q=q, k_cache=k_cache, v_cache=v_cache) == "torch"
    _arrays.expect_ndim("q", q, 4, "[batch, seqlen_q, heads, head_dim]")
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        _arrays.expect_ndim(
            name, cache, 4, "[batch or num_blocks, seqlen or page_size, kv_heads, d]"
        )
    batch = q.shape[0]
    device = q.device if torch_arrays else None
    if block_table is None:  # a contiguous cache per sequence: view it as pages in order
        # Keys starting at cache_leftpad[b] need pages of one token, so a sequence may start on
        # any row.
        max_page = 1 if cache_leftpad is not None else _MAX_PAGE_SIZE
        k_pages, page = _cache_as_pages("k_cache", k_cache, max_page)
        v_pages, _ = _cache_as_pages("v_cache", v_cache, max_page)
        per_seq = k_cache.shape[1] // page
        block_table = _contiguous_block_table(
            batch, k_cache.shape[0], per_seq, cache_batch_idx, torch_arrays, device
        )
    else:
        for name, value in (("cache_batch_idx", cache_batch_idx), ("cache_leftpad", cache_leftpad)):
            if value is not None:
                raise ValueError(
                    f"{name}: expected None with block_table (the table already maps sequences "
                    "to pages)"
                )
        k_pages, v_pages, page = k_cache, v_cache, k_cache.shape[1]
    if cache_seqlens is None:  # the whole cache
        cache_seqlens = block_table.shape[1] * page
    if isinstance(cache_seqlens, int):
        cache_seqlens = [cache_seqlens] * batch
    cache_seqlens = _int32(cache_seqlens, torch_arrays, device)
    if rotary is not None:
        if k is None:
            raise ValueError(
                "rotary_cos: expected None without k and v (the rotation applies to the appended "
                "keys and their queries), got a table"
            )
        local = tuple(window_size) != (-1, -1)
        q, k = _rotate_new_tokens(q, k, cache_seqlens, rotary, causal or local)
    if cache_leftpad is not None:
        block_table, cache_seqlens = _skip_left_padding(
            block_table, cache_seqlens, cache_leftpad, torch_arrays, device
        )
    seq_lens = cache_seqlens
    if k is not None:
        append_kv(k, v, cache_seqlens, k_pages, v_pages, block_table)
        seq_lens = cache_seqlens + k.shape[1]  # stays int32 (numpy and torch alike)
    return paged_attention(
        q,
        k_pages,
        v_pages,
        block_table,
        seq_lens,
        softmax_scale=softmax_scale,
        causal=causal,
        window_size=window_size,
        softcap=softcap,
        alibi_slopes=alibi_slopes,
        num_splits=num_splits,
        return_lse=return_softmax_lse,
    )


def _rotate_new_tokens(q, k, cache_seqlens, rotary, per_token_queries):
    """q and k rotated as FlashAttention's flash_attn_with_kvcache does: new key i of sequence
    b at position cache_seqlens[b] + i (its slot in the cache, left padding included); queries
    likewise under a causal or local mask, else all at cache_seqlens[b]."""
    cos, sin, interleaved = rotary
    k = apply_rotary(k, cos, sin, seqlen_offsets=cache_seqlens, interleaved=interleaved)
    if per_token_queries:
        return apply_rotary(q, cos, sin, seqlen_offsets=cache_seqlens, interleaved=interleaved), k
    shape = (q.shape[0], q.shape[1])
    if _arrays.is_torch(q):
        at_length = cache_seqlens[:, None].expand(shape)
    else:
        at_length = np.broadcast_to(cache_seqlens[:, None], shape)
    return apply_rotary(q, cos, sin, position_ids=at_length, interleaved=interleaved), k


# --- the cache manager ------------------------------------------------------------------------


class PagedSequences:
    """The sequences of a paged cache and the BlockAllocator that hands them pages: what
    KVCacheManager and MlaCacheManager share. Subclasses own the page arrays (`_pages`, those
    copy-on-write copies) and say whether they are torch tensors (`_torch`, `_device`)."""

    def __init__(self, num_pages, page_size):
        self.allocator = _flashkit.BlockAllocator(num_pages, page_size)
        self._pages = ()
        self._torch, self._device = False, None

    def create(self) -> int:
        return self.allocator.create()

    def fork(self, seq: int) -> int:
        return self.allocator.fork(seq)

    def free(self, seq: int) -> None:
        self.allocator.free(seq)

    def length(self, seq: int) -> int:
        return self.allocator.length(seq)

    def tables(self, seqs):
        """(block_table int32 [len(seqs), max_pages], seq_lens int32 [len(seqs)]) as arrays of
        the pages' kind and device."""
        t = self.allocator.tables(list(seqs))
        table = np.asarray(t["padded"], dtype=np.int32).reshape(len(seqs), t["max_pages"])
        lens = np.asarray(t["seq_lens"], dtype=np.int32)
        if self._torch:
            return _int32(table, True, self._device), _int32(lens, True, self._device)
        return table, lens

    def _grow(self, seqs, new_tokens):
        """Allocates room for new_tokens more tokens in each sequence (a shared last page is
        copied first, in every page array). Returns (block_table, start positions)."""
        seqs = list(seqs)
        starts = [self.allocator.length(s) for s in seqs]
        for s in seqs:
            _, copies = self.allocator.append(s, int(new_tokens))
            for src, dst in copies:
                for arr in self._pages:
                    if arr is not None:
                        arr[dst] = arr[src]
        table, _ = self.tables(seqs)
        return table, _int32(starts, self._torch, self._device)


class KVCacheManager(PagedSequences):
    """The pages of a paged KV cache and the allocator that hands them to sequences.

        cache = KVCacheManager(num_pages=1024, page_size=16, kv_heads=8, head_dim=128)
        seq = cache.create()
        cache.append([seq], k, v)                # k, v [1, n_new, kv_heads, head_dim]
        out = cache.attention([seq], q)          # q [1, q_len, heads_q, head_dim]
        child = cache.fork(seq)                  # shares every page; copy-on-write on append

    dtype: a numpy dtype (numpy pages, CPU), or a torch dtype with `device` (torch pages); a
    torch float8_e4m3fn cache gets per-page-per-head scales (k_scale, v_scale) that start at
    `fp8_scale` and may be set by the caller before a page is written.
    """

    def __init__(
        self, num_pages, page_size, kv_heads, head_dim, dtype=np.float16, device=None, fp8_scale=1.0
    ):
        super().__init__(num_pages, page_size)
        shape = (num_pages, page_size, kv_heads, head_dim)
        self.k_scale = self.v_scale = None
        torch = _arrays.torch
        self._torch = torch is not None and isinstance(dtype, torch.dtype)
        if self._torch:
            self.k_pages = torch.zeros(shape, dtype=dtype, device=device)
            self.v_pages = torch.zeros(shape, dtype=dtype, device=device)
            self._device = self.k_pages.device
            if dtype == torch.float8_e4m3fn:
                scales = (num_pages, kv_heads)
                self.k_scale = torch.full(scales, fp8_scale, dtype=torch.float32, device=device)
                self.v_scale = torch.full(scales, fp8_scale, dtype=torch.float32, device=device)
        else:
            self.k_pages = np.zeros(shape, dtype=dtype)
            self.v_pages = np.zeros(shape, dtype=dtype)
        self._pages = (self.k_pages, self.v_pages, self.k_scale, self.v_scale)

    def append(self, seqs, k, v) -> None:
        """Appends k, v [len(seqs), n_new, kv_heads, head_dim] at the end of each sequence:
        pages are allocated (shared last pages copied first), then the tokens written."""
        table, start = self._grow(seqs, k.shape[1])
        append_kv(
            k,
            v,
            start,
            self.k_pages,
            self.v_pages,
            table,
            k_scale=self.k_scale,
            v_scale=self.v_scale,
        )

    def attention(self, seqs, q, **kwargs):
        """paged_attention of q (the last q_len tokens of each sequence, appended already)
        against the sequences' pages; keyword arguments as in flashkit.paged_attention."""
        table, lens = self.tables(seqs)
        return paged_attention(
            q,
            self.k_pages,
            self.v_pages,
            table,
            lens,
            k_scale=self.k_scale,
            v_scale=self.v_scale,
            **kwargs,
        )
