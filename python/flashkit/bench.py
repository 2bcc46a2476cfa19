"""Benchmark driver: flashkit against torch SDPA's cuDNN, flash (FA2) and efficient backends, in
the same process on the same inputs, following bench/BENCH.md's protocol.

    python -m flashkit.bench --suite prefill_fwd --out bench/results/h200/prefill_fwd.json
    python -m flashkit.bench --suite decode --out bench/results/h200/decode.json
    python -m flashkit.bench --suite host --out bench/results/h200/host.json   (bench_host.py)

Per config: fresh random inputs, a correctness check of flashkit against a peer before anything
is timed, then the median of --iters CUDA-event timings, split (prefill suites) over --rounds
rounds in which the impls take turns in a rotating order, each warmed up before its turn. The
ceilings (bf16 matmul TFLOP/s, streaming-read GB/s) are measured in the same run. Needs torch and
a CUDA device.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys
import time

from ._nvml import gpu_state_reader
from .bench_host import host_summary, run_host_suite

SUITES = ("prefill_fwd", "prefill_bwd", "decode", "host")
PEERS = ("cudnn", "fa2", "efficient")
PREFILL_IMPLS = ("flashkit", "flashkit-fa2", *PEERS)  # flashkit-fa2: prefill_fwd only
TOKENS, HIDDEN = 16384, 2048  # prefill grid: batch * seqlen and heads * head_dim
SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128, 256)
# Decode: one query token, GQA 32/8, d 128, (batch, kv_len).
DECODE = ((1, 32768), (16, 8192), (64, 4096), (128, 2048))
DECODE_PAGE = 16
# flashkit's decode kernels by name (FLASHKIT_DECODE_KERNEL), timed next to the default choice;
# mma8 needs 192 KB of shared memory per CTA, so on smaller devices its rows carry the refusal.
DECODE_KERNELS = ("cuda_cores", "mma2", "mma3", "mma4", "mma8")
L2_BYTES = 60 * 2**20


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m flashkit.bench", description=__doc__.split("\n")[0])
    p.add_argument("--suite", choices=SUITES, required=True)
    p.add_argument("--out", required=True, help="JSON file to write (BENCH.md's schema)")
    p.add_argument("--quick", action="store_true", help="a small subset of the grid")
    p.add_argument("--iters", type=int, default=30, help="timed runs per config (>= 20)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="prefill suites: the timed runs split into rounds, the impls taking turns",
    )
    p.add_argument("--read-gib", type=float, default=8.0, help="buffer of the read ceiling")
    p.add_argument(
        "--only",
        action="append",
        metavar="D,N,CAUSAL",
        help="prefill suites: just these configs of the grid (repeatable), e.g. 64,1024,1",
    )
    p.add_argument(
        "--impls",
        default=",".join(PREFILL_IMPLS),
        help="prefill suites: the impls to run, comma-separated; at least one peer judges",
    )
    args = p.parse_args(argv)
    if args.iters < 20:
        p.error("--iters: the protocol takes the median of at least 20 runs")
    if not 1 <= args.rounds <= args.iters:
        p.error(f"--rounds: between 1 and --iters ({args.iters}), got {args.rounds}")
    try:
        args.only = [grid_config(text) for text in args.only or []]
        args.impls = impl_names(args.impls)
    except ValueError as e:
        p.error(str(e))
    prefill = args.suite in ("prefill_fwd", "prefill_bwd")
    if (args.only or args.impls != PREFILL_IMPLS) and not prefill:
        p.error(f"--only / --impls: prefill suites only, got --suite {args.suite}")
    return args


def grid_config(text: str) -> dict:
    """The grid's config named by "D,N,CAUSAL" (causal 0 or 1)."""
    try:
        d, n, causal = (int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"--only: expected D,N,CAUSAL (three integers), got {text!r}") from None
    for cfg in prefill_configs(quick=False):
        if (cfg["d"], cfg["n"], int(cfg["causal"])) == (d, n, causal):
            return cfg
    raise ValueError(
        f"--only: expected a config of the grid (D in {HEAD_DIMS}, N in {SEQLENS}, CAUSAL 0 or "
        f"1), got {text!r}"
    )


def impl_names(text: str) -> tuple:
    """The impls of a comma-separated list, in PREFILL_IMPLS' order."""
    names = [x for x in text.split(",") if x]
    unknown = [x for x in names if x not in PREFILL_IMPLS]
    if unknown:
        raise ValueError(f"--impls: expected names from {PREFILL_IMPLS}, got {unknown}")
    if not any(x in PEERS for x in names):
        raise ValueError(f"--impls: expected at least one peer of {PEERS} to judge, got {names}")
    return tuple(x for x in PREFILL_IMPLS if x in names)


def prefill_configs(quick: bool):
    dims, seqlens = ((128,), (1024, 4096)) if quick else (HEAD_DIMS, SEQLENS)
    for d in dims:
        for n in seqlens:
            for causal in (False, True):
                yield {
                    "dtype": "bf16",
                    "d": d,
                    "n": n,
                    "causal": causal,
                    "batch": TOKENS // n,
                    "heads": HIDDEN // d,
                }


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


class Timer:
    """Median milliseconds of fn over CUDA events, after warm-up; `inputs` rotates input sets so
    that small problems are not served from L2.

    The warm-up is `warmup` calls and at least `warmup_s` seconds of them: after host-side work
    (a reference, data set-up) the GPU idles and its clocks drop, and a few calls of 0.1 ms do
    not bring them back (the decode suite's first e4m3 row read batch 64 at 155 us where the same
    call alone read 134 us, H200).

    With a `state_reader` (flashkit._nvml) each `samples` call also reads the GPU's SM clock and
    power once, after its timed calls are queued and before they finish (`last_state`): which
    clock each impl ran at, per round."""

    def __init__(
        self,
        torch,
        iters: int,
        warmup: int,
        warmup_s: float = 0.05,
        rounds: int = 1,
        state_reader=None,
    ):
        self.torch, self.iters, self.warmup, self.warmup_s = torch, iters, warmup, warmup_s
        self.rounds, self.state_reader, self.last_state = rounds, state_reader, None

    def __call__(self, fn, inputs) -> float:
        return statistics.median(self.samples(fn, inputs, self.iters))

    def samples(self, fn, inputs, iters: int) -> list:
        """Milliseconds of `iters` timed calls of fn, after the warm-up."""
        torch = self.torch
        start, i = time.perf_counter(), 0
        while i < self.warmup or time.perf_counter() - start < self.warmup_s:
            fn(*inputs[i % len(inputs)])
            i += 1
            torch.cuda.synchronize()  # the time is the GPU's, not the launch queue's
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(iters)
        ]
        for i, (start, end) in enumerate(events):
            start.record()
            fn(*inputs[i % len(inputs)])
            end.record()
        self.last_state = self.state_reader() if self.state_reader else None
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in events]


def measure_ceilings(torch, timer: Timer, read_gib: float) -> dict:
    n = 8192
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    ms = timer(lambda x, y: x @ y, [(a, b)])
    del a, b
    buf = torch.randn(int(read_gib * 2**30) // 2, device="cuda", dtype=torch.bfloat16)
    # A read-only reduction; torch's sum gets within ~8 % of a hand-written 16-byte-load kernel.
    read_ms = timer(lambda x: x.sum(dtype=torch.float32), [(buf,)])
    nbytes = buf.numel() * 2
    del buf
    return {"matmul_tflops": 2 * n**3 / ms / 1e9, "read_gbs": nbytes / read_ms / 1e6}


def sdpa_runner(torch, backend_name: str):
    """SDPA pinned to one backend, on BSHD tensors (viewed as the BHSD it takes)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "fa2": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
    }[backend_name]

    def run(q, k, v, causal):
        gqa = q.shape[2] != k.shape[2]
        with sdpa_kernel([backend]):
            out = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2),
                k.transpose(1, 2),
                v.transpose(1, 2),
                is_causal=causal,
                enable_gqa=gqa,
            )
        return out.transpose(1, 2)

    return run


def flashkit_runner(q, k, v, causal):
    from . import flash_attn_func

    return flash_attn_func(q, k, v, causal=causal)


def flashkit_fa2_runner(q, k, v, causal):
    """The sm80 (FA2-class) kernel even where the Hopper one would be picked."""
    from .api import attention

    return attention(q, k, v, causal=causal, algo="fa2")


def close(got, want) -> tuple[bool, float]:
    """bf16 agreement: max error relative to the reference's largest magnitude."""
    got, want = got.detach().float(), want.detach().float()  # outputs of autograd graphs too
    err = float((got - want).abs().max() / want.abs().max().clamp_min(1e-6))
    return err <= 2e-2, err


def input_sets(torch, shapes, requires_grad=False):
    """Enough fresh random input sets that together they exceed L2 (at least one)."""
    nbytes = sum(math.prod(s) * 2 for s in shapes)
    count = max(1, min(8, math.ceil(2 * L2_BYTES / nbytes)))
    return [
        tuple(
            torch.randn(s, device="cuda", dtype=torch.bfloat16).requires_grad_(requires_grad)
            for s in shapes
        )
        for _ in range(count)
    ]


def run_config(torch, timer, suite, cfg, rows, names=PREFILL_IMPLS):
    """Checks then times the impls `names` (at least one peer) on one config; appends rows
    (errors as rows too)."""
    causal = cfg.get("causal", False)
    shape = (cfg["batch"], cfg["n"], cfg["heads"], cfg["d"])
    shapes = [shape] * 3
    backward = suite == "prefill_bwd"
    sets = input_sets(torch, shapes, requires_grad=backward)
    runners = {"flashkit": flashkit_runner, "flashkit-fa2": flashkit_fa2_runner}
    impls = {
        name: runners[name] if name in runners else sdpa_runner(torch, name)
        for name in names
        if name != "flashkit-fa2" or suite == "prefill_fwd"
    }

    def results(fn, q, k, v):
        out = fn(q, k, v, causal)
        if not backward:
            return [out]
        dout = torch.randn_like(out)
        return [out, *torch.autograd.grad(out, (q, k, v), dout)]

    # Correctness first, on the same inputs for everyone; the first peer that runs is the judge.
    reference, outcomes, timed = None, {}, []
    peers = [n for n in PEERS if n in impls]
    for name in (*peers, *(n for n in impls if n.startswith("flashkit"))):
        try:
            torch.manual_seed(1)  # the same dout for every impl
            outcomes[name] = results(impls[name], *sets[0])
            if reference is None and name != "flashkit":
                reference = outcomes[name]
        except Exception as e:  # a peer may not support a config; record why
            outcomes[name] = e
    for name, outcome in outcomes.items():
        row = {"impl": name, "config": cfg}
        if isinstance(outcome, Exception):
            row["error"] = f"{type(outcome).__name__}: {outcome}"[:300]
            rows.append(row)
            continue
        if name.startswith("flashkit") and reference is not None:
            checks = [close(g, w) for g, w in zip(outcome, reference)]
            row["max_rel_err"] = max(err for _, err in checks)
            if not all(ok for ok, _ in checks):
                row["error"] = "mismatch against " + next(
                    n for n in peers if outcomes[n] is reference
                )
                rows.append(row)
                continue
        rows.append(row)
        timed.append(row)
    timings = time_in_rounds(torch, timer, impls, timed, sets, causal, backward)
    for row, timing in zip(timed, timings):
        row.update(timing)
        add_rate(suite, cfg, row)


def round_orders(count: int, rounds: int) -> list:
    """The order of `count` impls in each timing round: round r starts at impl r (mod count), so
    over `count` rounds every impl is timed at every position once. A fixed order timed each impl
    right after the same other one, whatever state (power, clocks, L2) that one left behind."""
    return [[(r + i) % count for i in range(count)] for r in range(rounds)]


def time_in_rounds(torch, timer, impls, timed, sets, causal, backward) -> list:
    """Per timed row, {"ms": the median of its impl's --iters timed calls, split over --rounds
    rounds in which the impls take turns (round_orders)}, with the medians of the GPU state read
    once a round where the timer reads it (sm_clock_mhz, power_w)."""
    calls = [timing_call(torch, impls[row["impl"]], sets, causal, backward) for row in timed]
    per_round = math.ceil(timer.iters / timer.rounds)
    samples = [[] for _ in timed]
    states = [[] for _ in timed]
    for order in round_orders(len(timed), timer.rounds):
        for i in order:
            samples[i] += timer.samples(*calls[i], per_round)
            if timer.last_state:
                states[i].append(timer.last_state)
    return [
        {"ms": statistics.median(s), **median_state(state)} for s, state in zip(samples, states)
    ]


def median_state(states: list) -> dict:
    """Each field's median over the readings ({} without any)."""
    return {key: statistics.median(s[key] for s in states) for key in (states[0] if states else {})}


def timing_call(torch, fn, sets, causal, backward):
    """(callable, its input sets) that the timer runs for one impl."""
    if not backward:
        return (lambda q, k, v: fn(q, k, v, causal)), sets
    # Backward only: one forward per input set, then time the gradient pass.
    graphs = []
    for q, k, v in sets:
        out = fn(q, k, v, causal)
        graphs.append((out, q, k, v, torch.randn_like(out)))
    return (
        lambda out, q, k, v, dout: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    ), graphs


def add_rate(suite, cfg, row) -> None:
    flops = 4 * cfg["batch"] * cfg["heads"] * cfg["n"] ** 2 * cfg["d"]
    flops *= 0.5 if cfg["causal"] else 1.0
    flops *= 2.5 if suite == "prefill_bwd" else 1.0
    row["tflops"] = flops / row["ms"] / 1e9


def ratios(suite, rows) -> dict:
    """flashkit / peer per config for every peer, and the geometric mean of each over the configs
    where both ran: the figures BENCH.md judges by."""
    key = "gbs" if suite == "decode" else "tflops"
    by_config = {}
    for r in rows:
        by_config.setdefault(json.dumps(r["config"], sort_keys=True), {})[r["impl"]] = r
    per_peer = {}
    for impls in by_config.values():
        fk = impls.get("flashkit", {}).get(key)
        for name, r in impls.items():
            if name != "flashkit" and fk and key in r:
                per_peer.setdefault(name, []).append(fk / r[key])
    return {
        name: {"geomean": math.exp(sum(map(math.log, v)) / len(v)), "configs": len(v)}
        for name, v in per_peer.items()
    }


def summary(suite, rows) -> str:
    """flashkit / best peer per config, the figure that counts, then each peer's ratio."""
    key = "gbs" if suite == "decode" else "tflops"
    by_config = {}
    for r in rows:
        by_config.setdefault(json.dumps(r["config"], sort_keys=True), {})[r["impl"]] = r
    lines = [
        f"{'config':<60} {'flashkit':>9} {'best peer':>16} {'ratio':>6} {'/fa2':>6} {'/cudnn':>6}"
    ]
    for cfg, impls in by_config.items():
        fk = impls.get("flashkit", {}).get(key)
        peers = [
            (r[key], n) for n, r in impls.items() if not n.startswith("flashkit") and key in r
        ]
        best = max(peers) if peers else None
        ratio = f"{fk / best[0]:.2f}" if fk and best else "-"
        fk_text = f"{fk:.1f}" if fk else impls.get("flashkit", {}).get("error", "-")[:9]
        best_text = f"{best[0]:.1f} {best[1]}" if best else "-"
        each = [
            f"{fk / impls[n][key]:.2f}" if fk and key in impls.get(n, {}) else "-"
            for n in ("fa2", "cudnn")
        ]
        lines.append(
            f"{cfg[:60]:<60} {fk_text:>9} {best_text:>16} {ratio:>6} {each[0]:>6} {each[1]:>6}"
        )
    for name, g in ratios(suite, rows).items():
        lines.append(f"geomean flashkit / {name}: {g['geomean']:.3f} over {g['configs']} configs")
    return "\n".join(lines)


# --- decode: flashkit's paged kernels against torch SDPA on the same KV laid out contiguously ---


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
        rows.append(decode_row(torch, timer, f"flashkit-{kernel}", cfg,
                               with_decode_kernel(kernel, ours), want, kv_bytes,
                               {"num_splits": plan}))
    if plan > 1 and not quick:  # what more splits than the plan's would give
        for splits in (2 * plan, 4 * plan):
            rows.append(decode_row(torch, timer, f"flashkit-splits{splits}", cfg,
                                   flashkit_decode(flashkit, x, page, splits), want, kv_bytes,
                                   {"num_splits": splits}))
    if not quick:
        cfg256 = dict(cfg, page_size=256)
        rows.append(decode_row(torch, timer, "flashkit", cfg256,
                               flashkit_decode(flashkit, x, 256), want, kv_bytes,
                               {"num_splits": plan}))
        x.paged.pop(256)

    # Peers on the contiguous K/V; one that refuses GQA runs on K/V expanded to every query
    # head (4x the bytes it reads: gbs still counts the GQA cache, gbs_read what it moved).
    for name in PEERS:
        sdpa = sdpa_runner(torch, name)
        row = decode_row(torch, timer, name, cfg, lambda: sdpa(x.q, x.k, x.v, False), want,
                         kv_bytes)
        if "error" in row and "mismatch" not in row["error"]:
            group = cfg["heads_q"] // cfg["heads_kv"]
            k4, v4 = (t.repeat_interleave(group, dim=2) for t in (x.k, x.v))
            refused = row["error"]
            row = decode_row(torch, timer, name, cfg, lambda: sdpa(x.q, k4, v4, False), want,
                             kv_bytes, {"kv_expanded": True, "gqa_error": refused})
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
                row["bf16_err"] = {"max_rel_err": bf16_row["max_rel_err"],
                                   "l2_rel_err": bf16_row["l2_rel_err"]}
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
        fp8 = next((r for r in rows if r["impl"] == "flashkit" and r["config"] ==
                    dict(c, kv_dtype="e4m3")), {})
        out.append({
            "batch": c["batch"], "kv_len": c["kv_len"], "gbs": fk["gbs"],
            "read_ratio": fk.get("read_ratio"),
            "vs_cudnn": cudnn["ms"] / fk["ms"] if "ms" in cudnn else None,
            "best_peer": best["impl"] if best else None,
            "vs_best_peer": best["ms"] / fk["ms"] if best else None,
            "fp8_speedup": fp8.get("speedup_vs_bf16"),
            "fp8_l2_rel_err_vs_bf16_cache": fp8.get("err_vs_bf16_cache", {}).get("l2_rel_err"),
        })
    return sorted(out, key=lambda r: r["batch"])


def decode_summary(result) -> str:
    lines = [f"{'batch x kv_len':<16} {'GB/s':>7} {'ceil':>6} {'vs cuDNN':>9} {'vs best':>8} "
             f"{'fp8 x':>6} {'fp8 l2 err':>10}"]
    fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
    for s in result["decode_summary"]:
        lines.append(
            f"{str(s['batch']) + ' x ' + str(s['kv_len']):<16} {s['gbs']:>7.0f} "
            f"{fmt(s['read_ratio'], '.1%'):>6} {fmt(s['vs_cudnn'], '.2f'):>9} "
            f"{fmt(s['vs_best_peer'], '.2f'):>8} {fmt(s['fp8_speedup'], '.2f'):>6} "
            f"{fmt(s['fp8_l2_rel_err_vs_bf16_cache'], '.2e'):>10}")
    lines.append(f"{'impl':<22} {'config':<34} {'GB/s':>7} {'ms':>8}  note")
    for r in result["rows"]:
        c = r["config"]
        tag = f"b{c['batch']} n{c['kv_len']} {c['kv_dtype']} p{c['page_size']}"
        gbs = f"{r['gbs']:.0f}" if "gbs" in r else "-"
        ms = f"{r['ms']:.4f}" if "ms" in r else "-"
        note = r.get("error", "")[:60] or r.get("timing", "")
        lines.append(f"{r['impl']:<22} {tag:<34} {gbs:>7} {ms:>8}  {note}")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        import torch
    except ImportError:
        sys.exit("flashkit.bench: needs torch (and a CUDA device)")
    if not torch.cuda.is_available():
        sys.exit("flashkit.bench: needs a CUDA device")
    import flashkit

    timer = Timer(
        torch, args.iters, args.warmup, rounds=args.rounds, state_reader=gpu_state_reader(torch)
    )
    result = {
        "suite": args.suite,
        "commit": os.environ.get("FLASHKIT_COMMIT", "unknown"),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(),
        "versions": {
            "torch": torch.__version__,
            "cudnn": str(torch.backends.cudnn.version()),
            "cuda": torch.version.cuda,
            "flashkit": flashkit.__version__,
        },
        "protocol": {
            "iters": args.iters,
            "warmup": args.warmup,
            "warmup_s": timer.warmup_s,
            "rounds": args.rounds,
            "impls": list(args.impls),
            "statistic": "median",
        },
        "ceilings": measure_ceilings(torch, timer, args.read_gib),
        "rows": [],
    }
    if args.suite == "decode":
        run_decode_suite(torch, timer, args.quick, args.read_gib, result)
    elif args.suite == "host":
        run_host_suite(torch, flashkit, result)
    else:
        for cfg in args.only or prefill_configs(args.quick):
            run_config(torch, timer, args.suite, cfg, result["rows"], args.impls)
            torch.cuda.empty_cache()
        result["ratios"] = ratios(args.suite, result["rows"])
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"ceilings: {result['ceilings']}")
    if args.suite == "decode":
        print(decode_summary(result))
    elif args.suite == "host":
        print(host_summary(result))
    else:
        print(summary(args.suite, result["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
