#!/usr/bin/env python3
"""Peers of the prefill forward grid (BENCH.md): torch SDPA with the cuDNN and the flash (FA2)
backends, same grid, same protocol (CUDA events, warm-up, median of 30, random bf16 inputs).

This is the hook for the peer rows until flashkit's Python package exists: then flashkit and the
peers run in one process on the same tensors, as BENCH.md asks. Until then this runs in its own
process on inputs of the same shapes and distribution, and writes its own file:

    python3 bench/peers/torch_sdpa.py --out prefill_fwd_peers.json [--commit SHA] [--quick]
"""
import argparse
import datetime
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

PEERS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "fa2": SDPBackend.FLASH_ATTENTION}


def median_ms(fn, warmup=3, reps=30):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(reps)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in events)
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    ns = [1024, 8192] if args.quick else [512, 1024, 2048, 4096, 8192, 16384]
    rows = []
    for d in (64, 128, 256):
        for causal in (False, True):
            for n in ns:
                b, h = 16384 // n, 2048 // d
                q, k, v = (torch.rand(b, h, n, d, device="cuda", dtype=torch.bfloat16) * 2 - 1
                           for _ in range(3))
                ref = None
                for impl, backend in PEERS.items():
                    try:
                        with sdpa_kernel([backend]):
                            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                            ref = out if ref is None else ref
                            ms = median_ms(lambda: F.scaled_dot_product_attention(
                                q, k, v, is_causal=causal))
                    except RuntimeError as e:  # a backend that refuses this config
                        print(f"{impl} d={d} n={n} causal={causal}: {str(e).splitlines()[0]}")
                        continue
                    flops = 4 * b * h * n * n * d / (2 if causal else 1)
                    rows.append({"impl": impl,
                                 "config": {"dtype": "bf16", "d": d, "n": n, "causal": causal,
                                            "batch": b, "heads": h},
                                 "ms": ms, "tflops": flops / (ms * 1e-3) / 1e12,
                                 "max_abs_diff_vs_first_peer": float((out - ref).abs().max())})
                del q, k, v
    doc = {"suite": "prefill_fwd_peers", "commit": args.commit,
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "device": torch.cuda.get_device_name(0),
           "versions": {"torch": torch.__version__,
                        "cudnn": str(torch.backends.cudnn.version())},
           "rows": rows}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
