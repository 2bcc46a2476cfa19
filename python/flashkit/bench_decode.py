"""The decode suite of `python -m flashkit.bench --suite decode`: flashkit's paged decode kernels
against torch SDPA's backends on the same KV laid out contiguously (BENCH.md's decode configs),
in GB/s of KV read, with the read ceiling measured in the same run."""

from __future__ import annotations

import json
import math
import os

from .bench import PEERS, sdpa_runner

# Decode: one query token, GQA 32/8, d 128, (batch, kv_len).
DECODE = ((1, 32768), (16, 8192), (64, 4096), (128, 2048))
DECODE_PAGE = 16
# flashkit's decode kernels by name (FLASHKIT_DECODE_KERNEL), timed next to the default choice;
# mma8 needs 192 KB of shared memory per CTA, so on smaller devices its rows carry the refusal.
DECODE_KERNELS = ("cuda_cores", "mma2", "mma3", "mma4", "mma8")


def decode_configs(quick: bool):
    for batch, kv_len in DECODE[1:3] if quick else DECODE:
        yield {
            "dtype": "bf16",
            "kv_dtype": "bf16",
            "d": 128,
            "batch": batch,
            "kv_len": kv_len,
            "heads_q": 32,
            "heads_kv": 8,
            "page_size": DECODE_PAGE,
        }


try:  # the decode suite's read ceiling; the bench runs without Triton too
    import triton
    import triton.language as tl

    @triton.jit
    def _read_sum(x_ptr, out_ptr, BLOCK: tl.constexpr, STEPS: tl.constexpr):
        base = tl.program_id(0).to(tl.int64) * BLOCK * STEPS
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for i in range(STEPS):
            acc += tl.load(x_ptr + base + i * BLOCK + tl.arange(0, BLOCK)).to(tl.float32)
        tl.store(out_ptr + tl.program_id(0), tl.sum(acc, axis=0))

except Exception:
    _read_sum = None


def decode_read_ceiling(torch, timer, read_gib) -> float:
    """GB/s of a plain streaming read: a Triton kernel whose programs each sum 128 KB of bf16 in
    16-byte loads, over a buffer far larger than L2 (torch's sum, measure_ceilings' read, runs a
    few percent under a hand-written read). 0 when Triton is missing or fails."""
    if _read_sum is None:
        return 0.0
    block, steps = 4096, 16
    n = int(read_gib * 2**30) // 2 // (block * steps) * (block * steps)
    buf = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(n // (block * steps), device="cuda", dtype=torch.float32)
    grid = (out.numel(),)
    try:
        _read_sum[grid](buf, out, BLOCK=block, STEPS=steps)
        if not torch.allclose(out.sum(), buf.sum(dtype=torch.float32), rtol=1e-3, atol=1.0):
            return 0.0
        ms = timer(lambda: _read_sum[grid](buf, out, BLOCK=block, STEPS=steps), [()])
    except Exception:  # no working Triton on this machine: the suite-wide ceiling stands
        return 0.0
    return buf.numel() * 2 / ms / 1e6


class DecodeData:
    """One decode config's inputs: q [batch, 1, heads_q, d]; K/V [batch, kv_len, heads_kv, d]
    contiguous (what the SDPA peers read, as BHSD views); the same values in shuffled pages of
    `page_size` tokens with their block table (what flashkit reads); and on demand the e4m3 pages
    with per-page-per-head scales and their dequantised contiguous copy."""

    def __init__(self, torch, cfg):
        self.torch = torch
        b, n, h, d = cfg["batch"], cfg["kv_len"], cfg["heads_kv"], cfg["d"]
        bf16 = torch.bfloat16
        self.q = torch.randn(b, 1, cfg["heads_q"], d, device="cuda", dtype=bf16)
        self.k = torch.randn(b, n, h, d, device="cuda", dtype=bf16)
        self.v = torch.randn(b, n, h, d, device="cuda", dtype=bf16)
        self.seq_lens = torch.full((b,), n, device="cuda", dtype=torch.int32)
        self.paged = {}

    def pages(self, page_size):
        """(k_pages, v_pages, block_table): page j of sequence b holds tokens j * page_size..,
        stored at a random page id (as an allocator would leave them)."""
        if page_size not in self.paged:
            torch = self.torch
            b, n, h, d = self.k.shape
            per_seq = n // page_size
            perm = torch.randperm(b * per_seq, device="cuda")
            paged = []
            for x in (self.k, self.v):
                p = torch.empty((b * per_seq, page_size, h, d), device="cuda", dtype=x.dtype)
                p[perm] = x.reshape(b * per_seq, page_size, h, d)
                paged.append(p)
            table = perm.reshape(b, per_seq).to(torch.int32)
            self.paged[page_size] = (*paged, table, perm)
        return self.paged[page_size][:3]

    def fp8_pages(self, page_size):
        """(k_pages, v_pages, k_scale, v_scale, block_table) in e4m3 (scale = page-head amax /
        448), and the dequantised K/V in contiguous order (the values flashkit reads)."""
        torch = self.torch
        k_pages, v_pages, table = self.pages(page_size)
        perm = self.paged[page_size][3]
        out, dequantised = [], []
        for p in (k_pages, v_pages):
            scale = (p.float().abs().amax(dim=(1, 3)) / 448.0).clamp_min(1e-12)
            stored = (p.float() / scale[:, None, :, None]).to(torch.float8_e4m3fn)
            out += [stored, scale.contiguous()]
            values = (stored.float() * scale[:, None, :, None])[perm]
            dequantised.append(values.reshape(self.k.shape))
        return (out[0], out[2], out[1], out[3], table), dequantised


def decode_reference(torch, q, k, v):
    """f32 attention of the one query token against every key, GQA by head groups, per sequence
    (a batch at a time would need f32 copies of the whole cache)."""
    b, _, heads_q, d = q.shape
    group = heads_q // k.shape[2]
    out = torch.empty(q.shape, device="cuda", dtype=torch.float32)
    for i in range(b):
        qi = q[i, 0].float()  # [heads_q, d]
        ki = k[i].float().transpose(0, 1).repeat_interleave(group, 0)  # [heads_q, n, d]
        vi = v[i].float().transpose(0, 1).repeat_interleave(group, 0)
        p = torch.softmax(torch.einsum("hd,hnd->hn", qi, ki) / math.sqrt(d), dim=-1)
        out[i, 0] = torch.einsum("hn,hnd->hd", p, vi)
    return out


def decode_error(torch, got, want) -> dict:
    """Max error relative to the reference's largest magnitude, and the relative L2 error."""
    diff = got.float() - want
    return {
        "max_rel_err": float(diff.abs().max() / want.abs().max().clamp_min(1e-6)),
        "l2_rel_err": float(diff.norm() / want.norm().clamp_min(1e-6)),
    }


def decode_time(torch, timer, fn):
    """(median ms, how): fn captured in a CUDA graph and replayed, so that the Python call and
    launch overheads (tens of microseconds next to a 30-us batch-1 step) stay out; eager when a
    call cannot be captured."""
    fn()
    torch.cuda.synchronize()
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        torch.cuda.synchronize()
        return timer(graph.replay, [()]), "cuda_graph"
    except Exception:  # a peer that cannot be captured is timed as it is called
        torch.cuda.synchronize()
        return timer(fn, [()]), "eager"


def flashkit_decode(flashkit, x, page_size, num_splits=0):
    k_pages, v_pages, table = x.pages(page_size)
    return lambda: flashkit.flash_attn_with_kvcache(
        x.q, k_pages, v_pages, cache_seqlens=x.seq_lens, block_table=table, num_splits=num_splits
    )


def with_decode_kernel(kernel, fn):
    """fn run with FLASHKIT_DECODE_KERNEL=kernel (read at each call, so a captured graph keeps
    the kernel it was captured with)."""

    def run():
        previous = os.environ.get("FLASHKIT_DECODE_KERNEL")
        os.environ["FLASHKIT_DECODE_KERNEL"] = kernel
        try:
            return fn()
        finally:
            if previous is None:
                del os.environ["FLASHKIT_DECODE_KERNEL"]
            else:
                os.environ["FLASHKIT_DECODE_KERNEL"] = previous

    return run


def decode_row(torch, timer, impl, cfg, fn, want, kv_bytes, extra=None) -> dict:
    """Checks fn against the reference, then times it; a failure becomes the row's error."""
    row = {"impl": impl, "config": cfg, **(extra or {})}
    try:
        row.update(decode_error(torch, fn(), want))
        if row["max_rel_err"] > 2e-2:
            row["error"] = "mismatch against the f32 reference"
            return row
        row["ms"], row["timing"] = decode_time(torch, timer, fn)
        row["gbs"] = kv_bytes / row["ms"] / 1e6
    except Exception as e:  # a peer may refuse a shape; record why
        row["error"] = f"{type(e).__name__}: {e}"[:300]
    return row


def run_decode_config(torch, timer, flashkit, cfg, rows, quick):
    x = DecodeData(torch, cfg)
    page = cfg["page_size"]
    kv_bytes = 2 * x.k.numel() * 2
    want = decode_reference(torch, x.q, x.k, x.v)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    plan, _ = flashkit.plan_paged_split(
        cfg["batch"], 1, cfg["heads_q"], cfg["heads_kv"], cfg["d"], cfg["kv_len"], sms
    )
    ours = flashkit_decode(flashkit, x, page)
    bf16_row = decode_row(torch, timer, "flashkit", cfg, ours, want, kv_bytes, {"num_splits": plan})
    rows.append(bf16_row)
    for kernel in DECODE_KERNELS:
        rows.append(
            decode_row(
                torch,
                timer,
                f"flashkit-{kernel}",
                cfg,
                with_decode_kernel(kernel, ours),
                want,
                kv_bytes,
                {"num_splits": plan},
            )
        )
    if plan > 1 and not quick:  # what more splits than the plan's would give
        for splits in (2 * plan, 4 * plan):
            rows.append(
                decode_row(
                    torch,
                    timer,
                    f"flashkit-splits{splits}",
                    cfg,
                    flashkit_decode(flashkit, x, page, splits),
                    want,
                    kv_bytes,
                    {"num_splits": splits},
                )
            )
    if not quick:
        cfg256 = dict(cfg, page_size=256)
        rows.append(
            decode_row(
                torch,
                timer,
                "flashkit",
                cfg256,
                flashkit_decode(flashkit, x, 256),
                want,
                kv_bytes,
                {"num_splits": plan},
            )
        )
        x.paged.pop(256)

    # Peers on the contiguous K/V; one that refuses GQA runs on K/V expanded to every query
    # head (4x the bytes it reads: gbs still counts the GQA cache, gbs_read what it moved).
    for name in PEERS:
        sdpa = sdpa_runner(torch, name)
        row = decode_row(
            torch, timer, name, cfg, lambda: sdpa(x.q, x.k, x.v, False), want, kv_bytes
        )
        if "error" in row and "mismatch" not in row["error"]:
            group = cfg["heads_q"] // cfg["heads_kv"]
            k4, v4 = (t.repeat_interleave(group, dim=2) for t in (x.k, x.v))
            refused = row["error"]
            row = decode_row(
                torch,
                timer,
                name,
                cfg,
                lambda: sdpa(x.q, k4, v4, False),
                want,
                kv_bytes,
                {"kv_expanded": True, "gqa_error": refused},
            )
            if "gbs" in row:
                row["gbs_read"] = row["gbs"] * group
            del k4, v4
        rows.append(row)

    # e4m3 pages of the same values: time, and the accuracy given up against the bf16 cache.
    (k8, v8, ks, vs, table), (k_deq, v_deq) = x.fp8_pages(page)
    want8 = decode_reference(torch, x.q, k_deq, v_deq)
    del k_deq, v_deq
    cfg8 = dict(cfg, kv_dtype="e4m3")
    bytes8 = 2 * x.k.numel() + 2 * ks.numel() * 4

    def fp8():
        return flashkit.paged_attention(x.q, k8, v8, table, x.seq_lens, k_scale=ks, v_scale=vs)

    fp8_impls = [("flashkit", fp8)]
    fp8_impls += [(f"flashkit-{k}", with_decode_kernel(k, fp8)) for k in DECODE_KERNELS]
    for impl, fn in fp8_impls:
        row = decode_row(torch, timer, impl, cfg8, fn, want8, bytes8, {"num_splits": plan})
        if "ms" in row:
            loss = decode_error(torch, fn(), want)
            row["err_vs_bf16_cache"] = loss
            if impl == "flashkit" and "ms" in bf16_row:
                row["speedup_vs_bf16"] = bf16_row["ms"] / row["ms"]
                row["bf16_err"] = {
                    "max_rel_err": bf16_row["max_rel_err"],
                    "l2_rel_err": bf16_row["l2_rel_err"],
                }
        rows.append(row)


def run_decode_suite(torch, timer, quick, read_gib, result) -> None:
    import flashkit

    torch.manual_seed(0)
    ceilings = result["ceilings"]
    ceilings["read_gbs_torch_sum"] = ceilings["read_gbs"]
    ceilings["read_gbs_triton"] = decode_read_ceiling(torch, timer, read_gib)
    ceilings["read_gbs"] = max(ceilings["read_gbs"], ceilings["read_gbs_triton"])
    for cfg in decode_configs(quick):
        run_decode_config(torch, timer, flashkit, cfg, result["rows"], quick)
        torch.cuda.empty_cache()
    read = result["ceilings"]["read_gbs"]
    for row in result["rows"]:
        if "gbs" in row:
            row["read_ratio"] = row["gbs"] / read
    result["decode_summary"] = decode_ratios(result["rows"])


def decode_ratios(rows) -> list:
    """Per BENCH.md config: flashkit's GB/s, its share of the read ceiling, the ratio to cuDNN
    and to the best peer, and the e4m3 speedup."""
    out = []
    for cfg in {json.dumps(r["config"], sort_keys=True) for r in rows}:
        c = json.loads(cfg)
        if c["kv_dtype"] != "bf16" or c["page_size"] != DECODE_PAGE:
            continue
        same = {r["impl"]: r for r in rows if r["config"] == c}
        fk = same.get("flashkit", {})
        if "ms" not in fk:
            continue
        peers = [r for n, r in same.items() if n in PEERS and "ms" in r]
        best = min(peers, key=lambda r: r["ms"]) if peers else None
        cudnn = same.get("cudnn", {})
        fp8 = next(
            (
                r
                for r in rows
                if r["impl"] == "flashkit" and r["config"] == dict(c, kv_dtype="e4m3")
            ),
            {},
        )
        out.append(
            {
                "batch": c["batch"],
                "kv_len": c["kv_len"],
                "gbs": fk["gbs"],
                "read_ratio": fk.get("read_ratio"),
                "vs_cudnn": cudnn["ms"] / fk["ms"] if "ms" in cudnn else None,
                "best_peer": best["impl"] if best else None,
                "vs_best_peer": best["ms"] / fk["ms"] if best else None,
                "fp8_speedup": fp8.get("speedup_vs_bf16"),
                "fp8_l2_rel_err_vs_bf16_cache": fp8.get("err_vs_bf16_cache", {}).get("l2_rel_err"),
            }
        )
    return sorted(out, key=lambda r: r["batch"])


def decode_summary(result) -> str:
    lines = [
        f"{'batch x kv_len':<16} {'GB/s':>7} {'ceil':>6} {'vs cuDNN':>9} {'vs best':>8} "
        f"{'fp8 x':>6} {'fp8 l2 err':>10}"
    ]
    fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
    for s in result["decode_summary"]:
        lines.append(
            f"{str(s['batch']) + ' x ' + str(s['kv_len']):<16} {s['gbs']:>7.0f} "
            f"{fmt(s['read_ratio'], '.1%'):>6} {fmt(s['vs_cudnn'], '.2f'):>9} "
            f"{fmt(s['vs_best_peer'], '.2f'):>8} {fmt(s['fp8_speedup'], '.2f'):>6} "
            f"{fmt(s['fp8_l2_rel_err_vs_bf16_cache'], '.2e'):>10}"
        )
    lines.append(f"{'impl':<22} {'config':<34} {'GB/s':>7} {'ms':>8}  note")
    for r in result["rows"]:
        c = r["config"]
        tag = f"b{c['batch']} n{c['kv_len']} {c['kv_dtype']} p{c['page_size']}"
        gbs = f"{r['gbs']:.0f}" if "gbs" in r else "-"
        ms = f"{r['ms']:.4f}" if "ms" in r else "-"
        note = r.get("error", "")[:60] or r.get("timing", "")
        lines.append(f"{r['impl']:<22} {tag:<34} {gbs:>7} {ms:>8}  {note}")
    return "\n".join(lines)
