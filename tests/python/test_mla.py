"""MLA from Python: mla_decode, mla_append and FlashMLA's flash_mla_with_kvcache. The main check
is MLA's identity: the absorbed decode (queries through W_UK, latent outputs through W_UV) equals
plain multi-head attention over the expanded keys [W_UK c ; k_rope] and values W_UV c, from the
fp64 numpy reference. Torch tests at the end skip themselves without torch."""

import numpy as np
import pytest

import flashkit
import np_reference
from conftest import op_recorder, randn
from test_paged import cu, make_cache


class Model:
    """A small MLA layer: projections, a paged latent cache and queries."""

    def __init__(self, rng, seq_lens, q_lens, page_size=8, heads=4, latent=32, rope=8, nope=16):
        self.heads, self.latent, self.rope, self.nope, self.dv = heads, latent, rope, nope, 12
        self.w_uk = randn(rng, heads, nope, latent) / np.sqrt(latent)
        self.w_uv = randn(rng, heads, self.dv, latent) / np.sqrt(latent)
        width = latent + rope
        pages, _, self.table = make_cache(rng, seq_lens, page_size, 1, width)
        self.pages = np.ascontiguousarray(pages[:, :, 0, :])
        self.seq_lens = np.asarray(seq_lens, dtype=np.int32)
        self.q_lens = list(q_lens)
        total = sum(q_lens)
        self.q_nope = randn(rng, total, heads, nope)
        self.q_rope = randn(rng, total, heads, rope).astype(np.float32).astype(np.float64)
        q_latent = np.einsum("hnl,thn->thl", self.w_uk, self.q_nope)
        self.q = np.concatenate([q_latent, self.q_rope], axis=-1).astype(np.float32)
        self.scale = 1.0 / np.sqrt(nope + rope)

    def rows(self):
        """Each sequence's cached rows in token order, packed [total_k, width]."""
        ps = self.pages.shape[1]
        return np.stack(
            [
                self.pages[self.table[b, t // ps], t % ps]
                for b, n in enumerate(self.seq_lens)
                for t in range(n)
            ]
        ).astype(np.float64)

    def expanded(self, causal):
        """Plain MHA over the expanded keys and values: [total_q, heads, dv]."""
        rows = self.rows()
        c, k_rope = rows[:, : self.latent], rows[:, self.latent :]
        k_nope = np.einsum("hnl,tl->thn", self.w_uk, c)
        k = np.concatenate([k_nope, np.repeat(k_rope[:, None], self.heads, axis=1)], axis=-1)
        v = np.einsum("hel,tl->the", self.w_uv, c)
        q = np.concatenate([self.q_nope, self.q_rope], axis=-1)
        out, _ = np_reference.attention(
            q,
            k,
            v,
            scale=self.scale,
            causal=causal,
            cu_seqlens_q=cu(self.q_lens),
            cu_seqlens_k=cu(self.seq_lens),
        )
        return out

    def project(self, latent_out):
        return np.einsum("hel,thl->the", self.w_uv, np.asarray(latent_out, dtype=np.float64))


@pytest.mark.parametrize("causal", [True, False])
def test_absorbed_decode_equals_expanded_attention(rng, causal):
    m = Model(rng, seq_lens=[2, 19, 70], q_lens=[2, 2, 2])
    q = m.q.reshape(3, 2, m.heads, -1)
    out = flashkit.mla_decode(
        q, m.pages, m.table, m.seq_lens, softmax_scale=m.scale, latent_dim=m.latent, causal=causal
    )
    assert out.shape == (3, 2, m.heads, m.latent) and out.dtype == np.float32
    got = m.project(out.reshape(-1, m.heads, m.latent))
    np.testing.assert_allclose(got, m.expanded(causal), atol=2e-5, rtol=0)


def test_packed_queries_splits_and_lse(rng):
    m = Model(rng, seq_lens=[5, 40, 3], q_lens=[1, 4, 3], page_size=4)
    args = (m.q, m.pages, m.table, m.seq_lens)
    kwargs = dict(softmax_scale=m.scale, latent_dim=m.latent, causal=True, return_lse=True)
    kwargs["cu_seqlens_q"] = cu(m.q_lens)
    _, ref = flashkit.mla_decode(*args, algo="reference", **kwargs)
    assert ref.shape == (m.heads, sum(m.q_lens))
    for splits in (1, 4):
        out, lse = flashkit.mla_decode(*args, num_splits=splits, **kwargs)
        np.testing.assert_allclose(m.project(out), m.expanded(True), atol=2e-5, rtol=0)
        np.testing.assert_allclose(lse, ref, atol=1e-5, rtol=0)


def test_append_then_decode(rng):
    m = Model(rng, seq_lens=[6, 13], q_lens=[1, 1])
    empty = np.full_like(m.pages, np.nan)  # every row read must have been appended
    for b, n in enumerate(m.seq_lens):
        rows = m.rows()[sum(m.seq_lens[:b]) : sum(m.seq_lens[: b + 1])][None].astype(np.float32)
        flashkit.mla_append(rows, np.array([0], np.int32), empty, m.table[b : b + 1])
    assert np.isnan(empty).sum() > 0  # slots past each sequence stay untouched
    kwargs = dict(softmax_scale=m.scale, latent_dim=m.latent)
    q = m.q[:, None]
    np.testing.assert_array_equal(
        flashkit.mla_decode(q, empty, m.table, m.seq_lens, **kwargs),
        flashkit.mla_decode(q, m.pages, m.table, m.seq_lens, **kwargs),
    )


def test_flash_mla_with_kvcache_is_mla_decode(rng):
    m = Model(rng, seq_lens=[7, 30], q_lens=[1, 1])
    q = m.q[:, None]
    out, lse = flashkit.flash_mla_with_kvcache(
        q, m.pages[:, :, None, :], m.table, m.seq_lens, m.latent, None, None
    )
    want, want_lse = flashkit.mla_decode(
        q,
        m.pages,
        m.table,
        m.seq_lens,
        softmax_scale=(m.latent + m.rope) ** -0.5,  # FlashMLA's default
        latent_dim=m.latent,
        return_lse=True,
    )
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(lse, want_lse)
    assert lse.shape == (2, m.heads, 1)


def test_errors_name_the_argument(rng):
    m = Model(rng, seq_lens=[3, 6], q_lens=[1, 1], page_size=4)
    q = m.q[:, None]
    kwargs = dict(softmax_scale=m.scale, latent_dim=m.latent)
    with pytest.raises(ValueError, match="q: expected a rank-4"):
        flashkit.mla_decode(m.q, m.pages, m.table, m.seq_lens, **kwargs)
    with pytest.raises(ValueError, match="pages: expected a rank-3"):
        flashkit.mla_decode(q, m.pages[:, :, None], m.table, m.seq_lens, **kwargs)
    with pytest.raises(ValueError, match=r"softmax_scale: expected a value"):
        flashkit.mla_decode(q, m.pages, m.table, m.seq_lens, softmax_scale=None, latent_dim=32)
    with pytest.raises(ValueError, match=r"latent_dim: expected 1\.\.40"):
        flashkit.mla_decode(q, m.pages, m.table, m.seq_lens, softmax_scale=1.0, latent_dim=41)
    with pytest.raises(ValueError, match=r"q\.shape\[3\]: expected 40"):
        flashkit.mla_decode(q[..., :-1], m.pages, m.table, m.seq_lens, **kwargs)
    long = np.array([3, 100], dtype=np.int32)
    with pytest.raises(ValueError, match=r"cache\.seq_lens\[1\]"):
        flashkit.mla_decode(q, m.pages, m.table, long, **kwargs)
    with pytest.raises(ValueError, match="algo: expected auto or reference"):
        flashkit.mla_decode(q, m.pages, m.table, m.seq_lens, algo="fa3", **kwargs)
    with pytest.raises(ValueError, match=r"rows\.shape\[2\]"):
        flashkit.mla_append(q[:, 0, :1, :-1], np.zeros(2, np.int32), m.pages, m.table)
    with pytest.raises(ValueError, match="one KV head"):
        flashkit.flash_mla_with_kvcache(
            q, np.repeat(m.pages[:, :, None], 2, axis=2), m.table, m.seq_lens, m.latent
        )


# --- torch ---------------------------------------------------------------------------------------


def _torch():
    return pytest.importorskip("torch")


def test_torch_matches_numpy_through_the_custom_ops(rng):
    torch = _torch()
    m = Model(rng, seq_lens=[4, 21], q_lens=[2, 2])
    q = m.q.reshape(2, 2, m.heads, -1)
    kwargs = dict(softmax_scale=m.scale, latent_dim=m.latent, causal=True, return_lse=True)
    want, want_lse = flashkit.mla_decode(q, m.pages, m.table, m.seq_lens, **kwargs)
    rows = torch.from_numpy(randn(rng, 2, 1, m.latent + m.rope, dtype=np.float32))
    start = torch.tensor([4, 21], dtype=torch.int32)
    tensors = [torch.from_numpy(x) for x in (q, m.pages, m.table, m.seq_lens)]
    for mode in (None, op_recorder()):
        pages = tensors[1].clone()
        with mode or torch.no_grad():
            out, lse = flashkit.mla_decode(tensors[0], pages, *tensors[2:], **kwargs)
            flashkit.mla_append(rows, start, pages, tensors[2])
        np.testing.assert_array_equal(out.numpy(), want)
        np.testing.assert_array_equal(lse.numpy(), want_lse)
        for b, pos in enumerate((4, 21)):
            page = m.table[b, pos // 8]
            assert torch.equal(pages[page, pos % 8], rows[b, 0])
    assert {"flashkit.mla_fwd.default", "flashkit.mla_append.default"} <= mode.ops


def test_torch_cuda_tensors_are_refused_by_name(rng):
    torch = _torch()
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU to hold CUDA tensors")
    m = Model(rng, seq_lens=[4], q_lens=[1])
    q, pages, table, lens = (
        torch.from_numpy(x).cuda() for x in (m.q[:, None], m.pages, m.table, m.seq_lens)
    )
    with pytest.raises(ValueError, match="q.device: expected cpu"):
        flashkit.mla_decode(q, pages, table, lens, softmax_scale=m.scale, latent_dim=m.latent)


def test_deepseek_decode_step_with_decoupled_rope(rng):
    """A DeepSeek-style layer end to end from flashkit's pieces: the rotary part of each new
    key is rotated at its position before mla_append, the queries' rotary part at theirs
    (bottom-right: the last q_len positions), and the absorbed decode equals plain causal MHA
    whose keys and queries carry the same decoupled rotary parts."""
    heads, latent, rope, nope, page = 4, 32, 8, 16, 8
    lens = np.array([5, 12], dtype=np.int32)  # cached tokens before this step
    new = 2  # tokens decoded this step
    m = Model(rng, seq_lens=list(lens + new), q_lens=[new, new], page_size=page)
    angle = np.arange(32)[:, None] * 10000.0 ** (-2.0 * np.arange(rope // 2) / rope)
    cos, sin = np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)

    # The cache: every token's latent, and its rotary key rotated at its own position.
    raw = m.rows()  # [total_k, width]: rotary columns not yet rotated
    pages = np.full_like(m.pages, np.nan)
    start = 0
    for b, n in enumerate(lens + new):
        rows = raw[start : start + n].astype(np.float32)[None].copy()
        rows[..., latent:] = flashkit.apply_rotary(rows[:, :, None, latent:], cos, sin)[:, :, 0]
        flashkit.mla_append(rows, np.array([0], np.int32), pages, m.table[b : b + 1])
        start += n
    # The queries: absorbed latent part, and the rotary part rotated at positions len .. len + 1.
    q = m.q.reshape(2, new, heads, -1).copy()
    q[..., latent:] = flashkit.apply_rotary(q[..., latent:], cos, sin, seqlen_offsets=lens)
    out = flashkit.mla_decode(
        q, pages, m.table, lens + new, softmax_scale=m.scale, latent_dim=latent, causal=True
    )

    # The same layer as plain MHA: rotary parts rotated at the same positions.
    positions = np.concatenate([np.arange(n) for n in lens + new])
    m.pages = pages  # the rows as cached, rotary keys rotated
    q_positions = np.concatenate([lens[b] + np.arange(new) for b in range(2)])
    c, s = cos[q_positions][:, None], sin[q_positions][:, None]
    x1, x2 = m.q_rope[..., : rope // 2], m.q_rope[..., rope // 2 :]
    m.q_rope = np.concatenate([x1 * c - x2 * s, x1 * s + x2 * c], axis=-1)
    want = m.expanded(causal=True)
    cached = m.rows()  # each key's rotary part rotated at its own position, latent untouched
    c, s = cos[positions], sin[positions]
    k1, k2 = raw[:, latent : latent + rope // 2], raw[:, latent + rope // 2 :]
    np.testing.assert_allclose(
        cached[:, latent:], np.hstack([k1 * c - k2 * s, k1 * s + k2 * c]), atol=1e-6
    )
    np.testing.assert_array_equal(cached[:, :latent], raw[:, :latent])
    np.testing.assert_allclose(m.project(out.reshape(-1, heads, latent)), want, atol=2e-5, rtol=0)


def test_cache_manager_appends_decodes_and_forks(rng):
    cache = flashkit.MlaCacheManager(
        num_pages=16, page_size=4, latent_dim=32, rope_dim=8, dtype=np.float32
    )
    seq = cache.create()
    prompt = randn(rng, 1, 10, 40, dtype=np.float32)
    cache.append([seq], prompt)
    child = cache.fork(seq)  # shares all 3 pages; its append copies the shared last one
    parent_pages = cache.pages.copy()
    extra = randn(rng, 1, 1, 40, dtype=np.float32)
    cache.append([child], extra)
    table, lens = cache.tables([seq, child])
    assert list(lens) == [10, 11]
    np.testing.assert_array_equal(cache.pages[table[0, :3]], parent_pages[table[0, :3]])
    assert table[1, 2] != table[0, 2]  # the child's last page is its own copy

    q = randn(rng, 2, 1, 4, 40, dtype=np.float32)
    out = cache.decode([seq, child], q, softmax_scale=0.2)
    rows = [prompt[0], np.concatenate([prompt[0], extra[0]])]
    for b in range(2):  # plain MQA over the sequence's rows, values their first 32 columns
        k = rows[b][:, None].astype(np.float64)
        want, _ = np_reference.attention(q[b : b + 1], k[None], k[None, :, :, :32], scale=0.2)
        np.testing.assert_allclose(out[b], want[0], atol=2e-6, rtol=0)


def test_torch_e4m3_cache_manager(rng):
    torch = _torch()
    rows = torch.from_numpy(randn(rng, 1, 9, 40, dtype=np.float32))
    q = torch.from_numpy(randn(rng, 1, 1, 4, 40, dtype=np.float32))
    outs = []
    for dtype in (torch.float32, torch.float8_e4m3fn):
        cache = flashkit.MlaCacheManager(16, 4, latent_dim=32, rope_dim=8, dtype=dtype)
        if cache.scale is not None:
            cache.scale.fill_(float(rows.abs().max()) / 448)  # rows span e4m3's range
        seq = cache.create()
        cache.append([seq], rows)
        outs.append(cache.decode([seq], q, softmax_scale=0.2))
    assert cache.pages.dtype == torch.float8_e4m3fn
    # e4m3 keeps 3 mantissa bits: each value within max|rows| / 16 (its page's scale is
    # max|rows| / 448), and the keys' rounding shifts the weights a little; over seeds 0-4 the
    # outputs differed by at most 0.15 with max|rows| 3-4.
    bound = float(rows.abs().max()) / 8
    np.testing.assert_allclose(outs[1].numpy(), outs[0].numpy(), atol=bound, rtol=0)
    assert not torch.equal(outs[0], outs[1])
