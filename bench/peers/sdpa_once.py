"""One BENCH.md prefill config through torch SDPA's cuDNN or FA2 backend, a few calls: the target
for a profiler reading the peer kernel's launch shape and throughput, to set beside ours from
`flashkit_cuda_bench --suite prefill_fwd --only D,N,CAUSAL --only-automatic`.

    ncu --clock-control none --section LaunchStats --section Occupancy --section SpeedOfLight \\
        -k regex:sdpa --launch-skip 2 --launch-count 1 \\
        python3 bench/peers/sdpa_once.py --d 64 --n 512 [--causal] [--backend cudnn]

The grid is BENCH.md's: bf16, batch * N = 16384 tokens, 2048 / d heads, random inputs.
"""

import argparse

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "fa2": SDPBackend.FLASH_ATTENTION}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--d", type=int, choices=(64, 128, 256), required=True)
    parser.add_argument("--n", type=int, required=True, help="sequence length, 512..16384")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--backend", choices=sorted(BACKENDS), default="cudnn")
    parser.add_argument("--calls", type=int, default=3)
    args = parser.parse_args()
    if not 512 <= args.n <= 16384 or 16384 % args.n:
        parser.error(f"--n: expected a divisor of 16384 from 512 up, got {args.n}")
    batch, heads = 16384 // args.n, 2048 // args.d
    q, k, v = (
        torch.randn(batch, heads, args.n, args.d, device="cuda", dtype=torch.bfloat16)
        for _ in range(3)
    )
    with sdpa_kernel([BACKENDS[args.backend]]):
        for _ in range(args.calls):
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=args.causal)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
