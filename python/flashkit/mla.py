"""Multi-head latent attention (MLA, DeepSeek-V2/V3) decode against a paged latent cache.

MLA caches one row per token for all heads: the latent c (latent_dim, 512 in DeepSeek-V3) then
the rotated rotary key k_rope (64). With W_UK absorbed into the queries (q_latent[h] =
W_UK[h]^T q_nope[h]) every query head attends to the rows themselves: keys are whole rows
(latent_dim + rope_dim) and values their first latent_dim columns. The output is the latent
sum_j p_j c_j per head, which the model multiplies by W_UV[h].

Pages are [num_pages, page_size, latent_dim + rope_dim] (FlashMLA's k_cache without its size-1
head dim), block_table int32 [batch, max_pages], seq_lens int32 [batch]; e4m3 pages come with
f32 scales [num_pages] (value = stored * scale). MLA runs on the CPU backend (numpy arrays or
CPU torch tensors, the latter through the custom ops flashkit::mla_fwd and flashkit::mla_append);
CUDA tensors raise a FlashkitError naming q.device.
"""

from __future__ import annotations

import numpy as np

from . import _arrays, _flashkit
from .kvcache import PagedSequences

if _arrays.torch is not None:
    from . import _mla_torch


def _expect_pages(pages, name="pages"):
    _arrays.expect_ndim(name, pages, 3, "[num_pages, page_size, latent_dim + rope_dim]")


def mla_decode(
    q,
    pages,
    block_table,
    seq_lens,
    *,
    softmax_scale,
    latent_dim=512,
    scale=None,
    cu_seqlens_q=None,
    max_seqlen_q=None,
    causal=False,
    num_splits=0,
    return_lse=False,
    algo="auto",
):
    """Absorbed MLA attention of q against the latent cache.

    q [batch, q_len, heads, latent_dim + rope_dim] (q_latent then the rotated q_rope of each
    sequence's last q_len tokens, already appended), or packed [total_q, heads, ...] with
    cu_seqlens_q (int32 [batch + 1]). softmax_scale is required: the model's
    1/sqrt(qk_nope_dim + rope_dim) (times DeepSeek's YaRN factor). causal is bottom-right, for
    several tokens decoded at once. num_splits: 0 lets flashkit choose, 1 unsplit, > 1 splits
    every sequence's keys. algo: "auto" or "reference" (the fp64 oracle).

    Returns out (q's shape with latent_dim columns), and with return_lse also lse (f32
    [batch, heads, q_len], or [heads, total_q] packed).
    """
    kind = _arrays.array_kind(
        q=q,
        pages=pages,
        block_table=block_table,
        seq_lens=seq_lens,
        scale=scale,
        cu_seqlens_q=cu_seqlens_q,
    )
    packed = cu_seqlens_q is not None
    rank = 3 if packed else 4
    layout = "[total_q, heads, width] (packed)" if packed else "[batch, q_len, heads, width]"
    _arrays.expect_ndim("q", q, rank, layout)
    _expect_pages(pages)
    if packed and max_seqlen_q is None:  # host memory: MLA runs on the CPU
        lengths = cu_seqlens_q[1:] - cu_seqlens_q[:-1]
        max_seqlen_q = int(lengths.max()) if len(lengths) else 0
    scalars = (int(max_seqlen_q or 0), int(latent_dim), softmax_scale, bool(causal))
    scalars += (int(num_splits), algo)
    arrays = (q, pages, block_table, seq_lens, scale, cu_seqlens_q)
    if kind == "torch":
        out, lse = _mla_torch.decode(arrays, scalars, return_lse)
    else:
        out = np.empty((*q.shape[:-1], int(latent_dim)), dtype=q.dtype)
        lse = np.empty(_arrays.lse_shape(q, packed), dtype=np.float32) if return_lse else None
        _flashkit.mla_decode(
            q, pages, block_table, seq_lens, out, lse, scale, cu_seqlens_q, *scalars
        )
    return (out, lse) if return_lse else out


def mla_append(rows, start_pos, pages, block_table, *, scale=None):
    """Writes rows [batch, n_new, latent_dim + rope_dim] (each token's latent, then its rotated
    k_rope) into the pages, in place, at token positions start_pos[b] .. start_pos[b] + n_new - 1
    (start_pos int32 [batch]). e4m3 pages store value / scale[page], rounded to nearest even and
    saturated at 448."""
    kind = _arrays.array_kind(
        rows=rows, start_pos=start_pos, pages=pages, block_table=block_table, scale=scale
    )
    _arrays.expect_ndim("rows", rows, 3, "[batch, n_new, latent_dim + rope_dim]")
    _expect_pages(pages)
    if kind == "torch":
        _mla_torch.append(rows, start_pos, pages, block_table, scale)
    else:
        _flashkit.mla_append(rows, start_pos, pages, block_table, scale)


def flash_mla_with_kvcache(
    q,
    k_cache,
    block_table,
    cache_seqlens,
    head_dim_v,
    tile_scheduler_metadata=None,
    num_splits=None,
    softmax_scale=None,
    causal=False,
):
    """FlashMLA's decode call: q [batch, q_len, heads, width], k_cache [num_blocks, block_size,
    1, width], block_table int32 [batch, max_blocks], cache_seqlens int32 [batch], head_dim_v the
    latent width. softmax_scale defaults to width ** -0.5 as in FlashMLA (DeepSeek models pass
    their own). tile_scheduler_metadata and num_splits are FlashMLA's schedule, which flashkit
    plans by itself: they are accepted and not read. Returns (out [batch, q_len, heads,
    head_dim_v], lse f32 [batch, heads, q_len])."""
    del tile_scheduler_metadata, num_splits  # flashkit plans its own key splits
    _arrays.expect_ndim("k_cache", k_cache, 4, "[num_blocks, block_size, 1, width]")
    if k_cache.shape[2] != 1:
        raise ValueError(
            f"k_cache: expected one KV head (shape[2] == 1), got shape {tuple(k_cache.shape)}"
        )
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5
    return mla_decode(
        q,
        k_cache[:, :, 0, :],
        block_table,
        cache_seqlens,
        softmax_scale=softmax_scale,
        latent_dim=head_dim_v,
        causal=causal,
        return_lse=True,
    )


class MlaCacheManager(PagedSequences):
    """The pages of an MLA latent cache and the allocator that hands them to sequences (fork,
    copy-on-write and freeing as in KVCacheManager).

        cache = MlaCacheManager(num_pages=4096, page_size=64, latent_dim=512, rope_dim=64)
        seq = cache.create()
        cache.append([seq], rows)    # rows [1, n_new, 576]: latents, then the rotated k_rope
        out = cache.decode([seq], q, softmax_scale=scale)   # q [1, q_len, heads, 576]

    dtype: a numpy dtype (numpy pages), or a torch dtype with `device`; a torch float8_e4m3fn
    cache gets one scale per page (`scale`, starting at `fp8_scale`, settable before a page is
    written).
    """

    def __init__(
        self,
        num_pages,
        page_size,
        latent_dim=512,
        rope_dim=64,
        dtype=np.float16,
        device=None,
        fp8_scale=1.0,
    ):
        super().__init__(num_pages, page_size)
        self.latent_dim = int(latent_dim)
        shape = (num_pages, page_size, self.latent_dim + int(rope_dim))
        self.scale = None
        torch = _arrays.torch
        self._torch = torch is not None and isinstance(dtype, torch.dtype)
        if self._torch:
            self.pages = torch.zeros(shape, dtype=dtype, device=device)
            self._device = self.pages.device
            if dtype == torch.float8_e4m3fn:
                self.scale = torch.full((num_pages,), fp8_scale, dtype=torch.float32, device=device)
        else:
            self.pages = np.zeros(shape, dtype=dtype)
        self._pages = (self.pages, self.scale)

    def append(self, seqs, rows) -> None:
        """Appends rows [len(seqs), n_new, latent_dim + rope_dim] at the end of each
        sequence: pages are allocated (shared last pages copied first), then the rows written."""
        table, start = self._grow(seqs, rows.shape[1])
        mla_append(rows, start, self.pages, table, scale=self.scale)

    def decode(self, seqs, q, *, softmax_scale, **kwargs):
        """mla_decode of q (the absorbed queries of each sequence's last q_len tokens, appended
        already) against the sequences' pages; keyword arguments as in flashkit.mla_decode."""
        table, lens = self.tables(seqs)
        return mla_decode(
            q,
            self.pages,
            table,
            lens,
            softmax_scale=softmax_scale,
            latent_dim=self.latent_dim,
            scale=self.scale,
            **kwargs,
        )
