"""Several runs of one prefill suite as one record: each row's time the median over the runs.

    python -m flashkit.bench_merge run1.json run2.json run3.json --out prefill_fwd.json

A single run of `python -m flashkit.bench` takes the median of --iters timings per config, but
configs still move by several per cent between runs of the same build minutes apart (clocks,
the state the previous configs left), flashkit's rows and the peers' alike. The median over
whole runs of the suite damps that. Every run must be of the same suite, commit and device; a
row keeps its per-run times (`ms_runs`) and the worst correctness error any run saw.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from .bench import add_rate, ratios

MERGEABLE = ("prefill_fwd", "prefill_bwd")
GPU_STATE = ("sm_clock_mhz", "power_w")  # per row where NVML was read (flashkit._nvml)


def _key(row) -> str:
    return json.dumps([row["impl"], row["config"]], sort_keys=True)


def merge_runs(runs: list) -> dict:
    """The record of `runs` (results as the bench driver writes them), in the same schema."""
    if len(runs) < 2:
        raise ValueError(f"runs: expected at least 2 results to merge, got {len(runs)}")
    first = runs[0]
    for field in ("suite", "commit", "device"):
        values = sorted({str(r.get(field)) for r in runs})
        if len(values) != 1:
            raise ValueError(f"runs: expected one {field} across the runs, got {values}")
    if first["suite"] not in MERGEABLE:
        raise ValueError(f"runs: expected a suite in {MERGEABLE}, got {first['suite']!r}")
    keys = [_key(row) for row in first["rows"]]
    for i, run in enumerate(runs[1:], start=2):
        if sorted(_key(row) for row in run["rows"]) != sorted(keys):
            raise ValueError(f"runs: run {i} has other (impl, config) rows than run 1")

    by_key = [{_key(row): row for row in run["rows"]} for run in runs]
    rows = []
    for key in keys:
        versions = [b[key] for b in by_key]
        row = {"impl": versions[0]["impl"], "config": versions[0]["config"]}
        timed = [v["ms"] for v in versions if "ms" in v]
        errors = [v["max_rel_err"] for v in versions if "max_rel_err" in v]
        if errors:
            row["max_rel_err"] = max(errors)
        if timed:
            row["ms"] = statistics.median(timed)
            row["ms_runs"] = timed
            add_rate(first["suite"], row["config"], row)
        for field in GPU_STATE:
            readings = [v[field] for v in versions if field in v]
            if readings:
                row[field] = statistics.median(readings)
        failed = [v["error"] for v in versions if "error" in v]
        if failed:
            row["error"] = failed[0]
        rows.append(row)

    merged = {k: v for k, v in first.items() if k not in ("rows", "ratios", "date", "ceilings")}
    merged["dates"] = [r["date"] for r in runs]
    merged["protocol"] = dict(first["protocol"])
    merged["protocol"]["runs"] = len(runs)
    merged["protocol"]["statistic"] = "median over the runs of each run's median"
    merged["ceilings"] = {
        name: statistics.median(r["ceilings"][name] for r in runs) for name in first["ceilings"]
    }
    merged["rows"] = rows
    merged["ratios"] = ratios(first["suite"], rows)
    merged["ratios_per_run"] = [ratios(first["suite"], r["rows"]) for r in runs]
    return merged


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m flashkit.bench_merge", description=__doc__.split("\n")[0]
    )
    p.add_argument("runs", nargs="+", help="JSON results of python -m flashkit.bench")
    p.add_argument("--out", required=True, help="JSON file to write")
    args = p.parse_args(argv)
    runs = []
    for path in args.runs:
        with open(path) as f:
            runs.append(json.load(f))
    try:
        merged = merge_runs(runs)
    except ValueError as e:
        p.error(str(e))
    with open(args.out, "w") as f:
        json.dump(merged, f, indent=1)
    for name, g in merged["ratios"].items():
        each = ", ".join(f"{r[name]['geomean']:.3f}" for r in merged["ratios_per_run"] if name in r)
        line = f"geomean flashkit / {name}: {g['geomean']:.3f} over {g['configs']} configs"
        print(f"{line} (runs: {each})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
