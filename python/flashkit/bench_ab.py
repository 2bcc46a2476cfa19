"""Builds of flashkit compared in the suite's own harness: runs of one suite, each made with one
build's Python module, as a table of each impl's median time per build.

    python -m flashkit.bench_ab v36=a.0.json v37=b.0.json v36=a.1.json v37=b.1.json ...

Each LABEL=FILE is one run (`python -m flashkit.bench --only ...`); a label's runs are its rounds.
scripts/ab-suite makes them on the GPU machine, the builds' processes alternating. Per config
and impl: the median over a build's runs, and the change in speed against the first label's
build (+ is faster), and the GPU's SM clock where the runs read it. The peers run in every
process too: their changes are the machine's drift between the builds' processes, the control
for flashkit's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys


def _config_key(config) -> str:
    return json.dumps(config, sort_keys=True)


def _config_tag(config) -> str:
    """d,N,causal for the prefill grid; the config's other values for the other suites."""
    if {"d", "n", "causal"} <= config.keys():
        return f"{config['d']},{config['n']},{int(config['causal'])}"
    return " ".join(f"{v}" for k, v in config.items() if k not in ("dtype", "d"))


def compare(runs: list) -> dict:
    """{"builds": [labels], "rows": [...]} from (label, result) pairs: one row per config and impl
    with each build's median ms, its runs, and its speed change against the first build."""
    if not runs:
        raise ValueError("runs: expected at least one LABEL=FILE, got none")
    builds = list(dict.fromkeys(label for label, _ in runs))
    if len(builds) < 2:
        raise ValueError(f"runs: expected at least two builds to compare, got {builds}")
    suites = sorted({result["suite"] for _, result in runs})
    if len(suites) != 1:
        raise ValueError(f"runs: expected one suite across the runs, got {suites}")
    times = {}  # (config key, impl) -> build -> [ms]
    clocks = {}  # (config key, impl) -> build -> [MHz], where the runs read the GPU's clock
    configs = {}
    for label, result in runs:
        for row in result["rows"]:
            if "ms" not in row:
                continue
            key = (_config_key(row["config"]), row["impl"])
            configs[key[0]] = row["config"]
            times.setdefault(key, {}).setdefault(label, []).append(row["ms"])
            if "sm_clock_mhz" in row:
                clocks.setdefault(key, {}).setdefault(label, []).append(row["sm_clock_mhz"])
    rows = []
    for (config, impl), per_build in times.items():  # in the first run's order
        row = {"config": configs[config], "impl": impl, "ms": {}, "ms_runs": per_build}
        for label in builds:
            if label in per_build:
                row["ms"][label] = statistics.median(per_build[label])
        clock = clocks.get((config, impl), {})
        if clock:
            row["sm_clock_mhz"] = {label: statistics.median(v) for label, v in clock.items()}
        base = row["ms"].get(builds[0])
        row["speedup"] = {
            label: base / ms - 1.0 for label, ms in row["ms"].items() if base and label != builds[0]
        }
        rows.append(row)
    return {"suite": suites[0], "builds": builds, "rows": rows}


def table(comparison: dict) -> str:
    builds = comparison["builds"]
    head = f"{'config':<12} {'impl':<13}" + "".join(f" {b[:12]:>12}" for b in builds)
    head += "".join(f" {'vs ' + builds[0][:9]:>12}" for _ in builds[1:])
    with_clock = any("sm_clock_mhz" in row for row in comparison["rows"])
    if with_clock:
        head += "".join(f" {'MHz ' + b[:8]:>12}" for b in builds)
    lines = [head, "(microseconds, median over each build's runs; + is faster)"]
    for row in comparison["rows"]:
        c = row["config"]
        cells = [
            f" {row['ms'][b] * 1e3:>12.1f}" if b in row["ms"] else f" {'-':>12}" for b in builds
        ]
        changes = [
            f" {row['speedup'][b]:>+12.1%}" if b in row["speedup"] else f" {'-':>12}"
            for b in builds[1:]
        ]
        if with_clock:
            clock = row.get("sm_clock_mhz", {})
            changes += [f" {clock[b]:>12.0f}" if b in clock else f" {'-':>12}" for b in builds]
        lines.append(f"{_config_tag(c):<12} {row['impl']:<13}" + "".join(cells) + "".join(changes))
    return "\n".join(lines)


def _labelled(text: str) -> tuple:
    label, sep, path = text.partition("=")
    if not sep or not label or not path:
        raise argparse.ArgumentTypeError(f"expected LABEL=FILE, got {text!r}")
    with open(path) as f:
        return label, json.load(f)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m flashkit.bench_ab", description=__doc__.split("\n")[0]
    )
    p.add_argument("runs", nargs="+", type=_labelled, metavar="LABEL=FILE")
    p.add_argument("--out", help="the comparison as JSON too")
    args = p.parse_args(argv)
    try:
        comparison = compare(args.runs)
    except ValueError as e:
        p.error(str(e))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(comparison, f, indent=1)
    print(table(comparison))
    return 0


if __name__ == "__main__":
    sys.exit(main())
