"""fp64 numpy attention and its gradients, written from the definitions (not from flashkit's
code), for the tests to compare against. Layouts as in flashkit: q [batch, seqlen_q, heads_q, d],
k/v [batch, seqlen_k, heads_kv, d], lse [batch, heads_q, seqlen_q]."""

from __future__ import annotations

import numpy as np


def _visible(nq, nk, causal, bottom_right, window, prefix_len):
    """[nq, nk] bool: which keys each query sees."""
    i = np.arange(nq)[:, None]
    j = np.arange(nk)[None, :]
    diag = i + (nk - nq if bottom_right else 0)
    ok = np.ones((nq, nk), dtype=bool)
    if causal:
        ok &= j <= diag
    if window[0] >= 0:
        ok &= j >= diag - window[0]
    if window[1] >= 0:
        ok &= j <= diag + window[1]
    return ok | (j < prefix_len), diag


def _scores(q, k, scale, softcap, slopes, diag, j):
    """Raw scores [h, nq, nk] of one sequence, the capped/biased ones, and tanh (for grads)."""
    raw = scale * np.einsum("ihd,jhd->hij", q, k)
    th = None
    s = raw
    if softcap > 0:
        th = np.tanh(raw / softcap)
        s = softcap * th
    if slopes is not None:
        s = s - slopes[:, None, None] * np.abs(diag - j)[None]
    return s, th


def _expand_kv(x, heads_q):
    return np.repeat(x, heads_q // x.shape[1], axis=1)


def _one_sequence(q, k, v, dout, o):
    """Forward (and backward when dout is given) of one sequence; q [nq, h, d], k/v [nk, h, d]
    already expanded to heads_q. Returns out, lse and (dq, dk, dv) or None."""
    nq, nk = q.shape[0], k.shape[0]
    vis, diag = _visible(nq, nk, o["causal"], o["bottom_right"], o["window"], o["prefix_len"])
    j = np.arange(nk)[None, :]
    s, th = _scores(q, k, o["scale"], o["softcap"], o["slopes"], diag, j)
    s = np.where(vis[None], s, -np.inf)
    m = s.max(axis=-1, keepdims=True) if nk else np.full(s.shape[:-1] + (1,), -np.inf)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m_safe)
    denom = e.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(denom > 0, e / denom, 0.0)
        lse = np.where(denom[..., 0] > 0, np.log(denom[..., 0]) + m_safe[..., 0], -np.inf)
    out = np.einsum("hij,jhd->ihd", p, v)
    if dout is None:
        return out, lse, None
    dv = np.einsum("hij,ihd->jhd", p, dout)
    dp = np.einsum("ihd,jhd->hij", dout, v)
    ds = p * (dp - np.einsum("ihd,ihd->hi", dout, out)[..., None])
    if th is not None:
        ds = ds * (1.0 - th**2)
    dq = o["scale"] * np.einsum("hij,jhd->ihd", ds, k)
    dk = o["scale"] * np.einsum("hij,ihd->jhd", ds, q)
    return out, lse, (dq, dk, dv)


def _fold_kv_grad(g, heads_kv):
    """Sum the expanded heads' gradient back onto the shared KV head (GQA)."""
    n, hq, d = g.shape
    return g.reshape(n, heads_kv, hq // heads_kv, d).sum(axis=2)


def attention(
    q,
    k,
    v,
    *,
    dout=None,
    scale=None,
    causal=False,
    bottom_right=True,
    window=(-1, -1),
    softcap=0.0,
    alibi=None,
    prefix_len=0,
    cu_seqlens_q=None,
    cu_seqlens_k=None,
):
    """Returns (out, lse) and, when dout is given, also (dq, dk, dv). With cu_seqlens the inputs
    are packed [total, heads, d] and lse is [heads, total_q]."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    if dout is not None:
        dout = np.asarray(dout, dtype=np.float64)
    varlen = cu_seqlens_q is not None
    if not varlen:  # a batch is a packed tensor of equal-length sequences
        b, nq, nk = q.shape[0], q.shape[1], k.shape[1]
        cu_seqlens_q, cu_seqlens_k = np.arange(b + 1) * nq, np.arange(b + 1) * nk
        q, k, v = (x.reshape(-1, *x.shape[2:]) for x in (q, k, v))
        if dout is not None:
            dout = dout.reshape(-1, *dout.shape[2:])
    hq, hk = q.shape[1], k.shape[1]
    base = {
        "scale": 1.0 / np.sqrt(q.shape[-1]) if scale is None else float(np.float32(scale)),
        "causal": causal,
        "bottom_right": bottom_right,
        "window": window,
        "softcap": float(np.float32(softcap)),
        "prefix_len": prefix_len,
    }
    out = np.zeros(q.shape[:-1] + (v.shape[-1],))
    lse = np.full((hq, q.shape[0]), -np.inf)
    grads = [np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)]
    for bi in range(len(cu_seqlens_q) - 1):
        qs = slice(cu_seqlens_q[bi], cu_seqlens_q[bi + 1])
        ks = slice(cu_seqlens_k[bi], cu_seqlens_k[bi + 1])
        slopes = None
        if alibi is not None:
            a = np.asarray(alibi, dtype=np.float64)
            slopes = a if a.ndim == 1 else a[bi]
        o = dict(base, slopes=slopes)
        kk, vv = _expand_kv(k[ks], hq), _expand_kv(v[ks], hq)
        res = _one_sequence(q[qs], kk, vv, None if dout is None else dout[qs], o)
        out[qs], lse[:, qs] = res[0], res[1]
        if res[2] is not None:
            dq, dk, dv = res[2]
            grads[0][qs] = dq
            grads[1][ks] = _fold_kv_grad(dk, hk)
            grads[2][ks] = _fold_kv_grad(dv, hk)
    if not varlen:
        b = len(cu_seqlens_q) - 1
        out = out.reshape(b, -1, *out.shape[1:])
        lse = lse.reshape(hq, b, -1).transpose(1, 0, 2)
        grads = [g.reshape(b, -1, *g.shape[1:]) for g in grads]
    if dout is None:
        return out, lse
    return out, lse, tuple(grads)
