"""The host side of a call: microseconds of CPU time per eager call, flashkit against torch SDPA,
on problems so small that the GPU never paces the loop (suite `host` of `python -m
flashkit.bench`).

A kernel of a BENCH.md N = 512 config runs 100-250 us; when the Python call that launches it
takes longer, eager callers (no CUDA graph) see the host's time, not the kernel's. Each row is the
wall time of `CALLS` back-to-back calls divided by their number, median of `REPEATS`, after a
warm-up; the device is synchronised only around each batch of calls. `flashkit-op` calls the
torch custom op (`torch.ops.flashkit.fwd`), what torch.compile traces; `flashkit` the public
functions, which skip the op's dispatch in plain eager mode.
"""

from __future__ import annotations

import statistics
import time

CALLS, REPEATS, WARMUP = 500, 7, 100
# One sequence of 128 tokens, 8 query heads over 2 KV heads (GQA), d 128, bf16; decode: one
# query token against 1024 cached tokens in pages of 16.
PREFILL = {"dtype": "bf16", "batch": 1, "n": 128, "heads": 8, "heads_kv": 2, "d": 128}
DECODE = {
    "dtype": "bf16",
    "batch": 1,
    "kv_len": 1024,
    "heads": 8,
    "heads_kv": 2,
    "d": 128,
    "page_size": 16,
}


def host_us(torch, fn) -> float:
    """Median over REPEATS of the wall time per call of CALLS calls, in microseconds."""
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / CALLS * 1e6)
    return statistics.median(times)


def _sdpa(torch, q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), enable_gqa=True
    ).transpose(1, 2)


def _calls(torch, flashkit):
    """{(impl, call): fn} on the PREFILL and DECODE problems."""
    from flashkit._settings import make_settings

    c, bf16 = PREFILL, torch.bfloat16
    q = torch.randn(c["batch"], c["n"], c["heads"], c["d"], device="cuda", dtype=bf16)
    k, v = (
        torch.randn(c["batch"], c["n"], c["heads_kv"], c["d"], device="cuda", dtype=bf16)
        for _ in range(2)
    )
    qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
    dout = torch.randn_like(q)
    settings = make_settings()

    def training_step(attend):
        def step():
            attend(qg, kg, vg).backward(dout)

        return step

    d = DECODE
    pages = d["batch"] * d["kv_len"] // d["page_size"]
    k_pages, v_pages = (
        torch.randn(pages, d["page_size"], d["heads_kv"], d["d"], device="cuda", dtype=bf16)
        for _ in range(2)
    )
    table = torch.randperm(pages, device="cuda").to(torch.int32).view(d["batch"], -1)
    seq_lens = torch.full((d["batch"],), d["kv_len"], device="cuda", dtype=torch.int32)
    q1 = torch.randn(d["batch"], 1, d["heads"], d["d"], device="cuda", dtype=bf16)
    k_cache, v_cache = (
        torch.randn(d["batch"], d["kv_len"], d["heads_kv"], d["d"], device="cuda", dtype=bf16)
        for _ in range(2)
    )
    return {
        ("flashkit", "fwd"): lambda: flashkit.flash_attn_func(q, k, v),
        ("flashkit-op", "fwd"): lambda: torch.ops.flashkit.fwd(
            q, k, v, None, None, None, *settings
        ),
        ("sdpa", "fwd"): lambda: _sdpa(torch, q, k, v),
        ("flashkit", "fwd_bwd"): training_step(flashkit.flash_attn_func),
        ("sdpa", "fwd_bwd"): training_step(lambda a, b, c: _sdpa(torch, a, b, c)),
        ("flashkit", "decode"): lambda: flashkit.flash_attn_with_kvcache(
            q1, k_pages, v_pages, cache_seqlens=seq_lens, block_table=table
        ),
        ("sdpa", "decode"): lambda: _sdpa(torch, q1, k_cache, v_cache),
    }


def run_host_suite(torch, flashkit, result) -> None:
    """Appends one row per (impl, call) to result["rows"]: host_us, and the ratio to sdpa's."""
    rows = result["rows"]
    for (impl, call), fn in _calls(torch, flashkit).items():
        config = dict(DECODE if call == "decode" else PREFILL, call=call)
        rows.append({"impl": impl, "config": config, "host_us": host_us(torch, fn)})
    add_ratios(rows)


def add_ratios(rows) -> None:
    """vs_sdpa of every row: its host time over sdpa's for the same call."""
    sdpa = {r["config"]["call"]: r["host_us"] for r in rows if r["impl"] == "sdpa"}
    for r in rows:
        r["vs_sdpa"] = r["host_us"] / sdpa[r["config"]["call"]]


def host_summary(result) -> str:
    lines = [f"{'impl':<12} {'call':<8} {'host us':>8} {'vs sdpa':>8}"]
    for r in result["rows"]:
        lines.append(
            f"{r['impl']:<12} {r['config']['call']:<8} {r['host_us']:8.1f} {r['vs_sdpa']:7.2f}x"
        )
    return "\n".join(lines)
