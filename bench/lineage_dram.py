#!/usr/bin/env python3
"""Measured DRAM bytes for the rows of a `flashkit bench --json` lineage file, next to the bytes
its traffic model predicts (`bytes_modelled`).

Each row's measurement is re-run alone under Nsight Compute, which reads the DRAM counters of
every kernel the process launches with the caches flushed between kernels (ncu's default), so a
naive run's S and P count as the HBM round trips the model says they are:

    ncu --csv --print-units base --metrics dram__bytes_read.sum,dram__bytes_write.sum \\
        flashkit bench --device cuda --algo A --n N ... --repeats 1

`--repeats 1` makes the bench call attention_forward twice (a warm-up whose output is checked,
then one timed run), so a row's bytes are the sum over all kernels divided by 2. The row gains
`bytes_measured` and `measured_over_modelled`; the file is rewritten in place.

    python3 bench/lineage_dram.py --flashkit build/apps/flashkit/flashkit --json lineage.json
"""
import argparse
import csv
import json
import shutil
import subprocess
import sys

METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")
# attention_forward calls per measurement under --repeats 1: the warm-up, then one timed run.
CALLS_PER_MEASUREMENT = 2
_UNITS = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
          "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def parse_ncu_csv(text):
    """(kernel id, metric, bytes) for every metric line of `ncu --csv` output; the profiler's own
    ==PROF== lines and the program's output are skipped."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    if not lines:
        return []
    rows = list(csv.DictReader(lines))
    out = []
    for r in rows:
        if r.get("Metric Name") not in METRICS:
            continue
        unit = r.get("Metric Unit", "byte")
        if unit not in _UNITS:
            raise ValueError(f"ncu metric unit: expected one of {sorted(_UNITS)}, got {unit!r}")
        value = float(r["Metric Value"].replace(",", ""))
        out.append((r["ID"], r["Metric Name"], value * _UNITS[unit]))
    return out


def bytes_per_call(records, calls=CALLS_PER_MEASUREMENT):
    """DRAM bytes (read + write) of one attention_forward call: every kernel's, summed, over the
    calls the measurement made."""
    if not records:
        raise ValueError("ncu reported no DRAM metric: no kernel ran, or the counters are locked")
    return sum(value for _, _, value in records) / calls


# The lineage bench's rows and the --algo that re-runs each.
IMPL_ALGOS = {"flashkit-naive": "naive", "flashkit-fa1": "fa1", "flashkit-fa2": "fa2"}


def bench_command(flashkit, row):
    """The flashkit bench invocation that repeats one lineage row's measurement alone."""
    c = row["config"]
    algo = IMPL_ALGOS[row["impl"]]
    cmd = [flashkit, "bench", "--device", "cuda", "--algo", algo, "--n", str(c["n"]),
           "--d", str(c["d"]), "--heads", str(c["heads"]), "--batch", str(c["batch"]),
           "--dtype", c["dtype"], "--repeats", "1"]
    if c.get("causal"):
        cmd.append("--causal")
    return cmd


def measure(ncu, flashkit, row):
    cmd = [ncu, "--csv", "--print-units", "base", "--metrics", ",".join(METRICS)]
    cmd += bench_command(flashkit, row)
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {done.returncode}: {done.stderr[-400:]}")
    return bytes_per_call(parse_ncu_csv(done.stdout))


def annotate(doc, measure_row):
    """Adds bytes_measured / measured_over_modelled to every row that ran and has bytes_modelled
    (a skipped row, naive past the device's memory, keeps its modelled bytes only)."""
    for row in doc["rows"]:
        if ("bytes_modelled" not in row or "skipped" in row
                or row["impl"] not in IMPL_ALGOS):
            continue
        measured = measure_row(row)
        row["bytes_measured"] = measured
        row["measured_over_modelled"] = measured / row["bytes_modelled"]
    doc.setdefault("protocol", {})["bytes_measured"] = (
        "ncu dram__bytes_read.sum + dram__bytes_write.sum over every kernel of the row's "
        "measurement re-run alone (--repeats 1: 2 calls), caches flushed between kernels")
    return doc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flashkit", required=True, help="the flashkit command-line program")
    ap.add_argument("--json", required=True, help="flashkit bench --json output, rewritten")
    ap.add_argument("--ncu", default="ncu", help="Nsight Compute's command line (default: ncu)")
    args = ap.parse_args()
    ncu = shutil.which(args.ncu)
    if ncu is None:
        sys.exit(f"lineage_dram: {args.ncu} not found; the rows keep their modelled bytes only")
    with open(args.json) as f:
        doc = json.load(f)
    annotate(doc, lambda row: measure(ncu, args.flashkit, row))
    with open(args.json, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    for row in doc["rows"]:
        if "bytes_measured" in row:
            c = row["config"]
            print(f"{row['impl']:16s} N={c['n']:<6d}"
                  f"  modelled {row['bytes_modelled'] / 1e6:10.1f} MB"
                  f"  measured {row['bytes_measured'] / 1e6:10.1f} MB"
                  f"  ratio {row['measured_over_modelled']:.2f}")


if __name__ == "__main__":
    main()
