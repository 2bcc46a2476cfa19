"""Runs of one suite merged into one record (no GPU needed: the inputs are results on disk)."""

import json

import pytest

from flashkit import bench_merge

CFG = {"dtype": "bf16", "d": 64, "n": 512, "causal": False, "batch": 32, "heads": 32}
FLOPS = 4 * 32 * 32 * 512**2 * 64


def run(flashkit_ms, cudnn_ms, date, *, commit="abc", err=1e-3, matmul=800.0):
    return {
        "suite": "prefill_fwd",
        "commit": commit,
        "date": date,
        "device": "NVIDIA H200",
        "protocol": {"iters": 20, "warmup": 5, "statistic": "median"},
        "ceilings": {"matmul_tflops": matmul, "read_gbs": 4200.0},
        "rows": [
            {"impl": "cudnn", "config": CFG, "ms": cudnn_ms, "tflops": FLOPS / cudnn_ms / 1e9},
            {
                "impl": "flashkit",
                "config": CFG,
                "ms": flashkit_ms,
                "tflops": FLOPS / flashkit_ms / 1e9,
                "max_rel_err": err,
            },
            {"impl": "efficient", "config": CFG, "error": "No available kernel"},
        ],
    }


def test_rows_take_the_median_run_and_rates_follow():
    runs = [run(0.30, 0.20, "d1", err=1e-3), run(0.20, 0.26, "d2", err=4e-3), run(0.25, 0.22, "d3")]
    m = bench_merge.merge_runs(runs)
    fk, cudnn, eff = (
        {r["impl"]: r for r in m["rows"]}[i] for i in ("flashkit", "cudnn", "efficient")
    )
    assert fk["ms"] == pytest.approx(0.25) and fk["ms_runs"] == [0.30, 0.20, 0.25]
    assert fk["tflops"] == pytest.approx(FLOPS / 0.25 / 1e9)
    assert fk["max_rel_err"] == pytest.approx(4e-3)  # the worst run's
    assert cudnn["ms"] == pytest.approx(0.22)
    assert "ms" not in eff and eff["error"] == "No available kernel"
    assert m["ratios"]["cudnn"]["geomean"] == pytest.approx(0.22 / 0.25)
    assert [r["cudnn"]["geomean"] for r in m["ratios_per_run"]] == pytest.approx(
        [0.20 / 0.30, 0.26 / 0.20, 0.22 / 0.25]
    )
    assert m["protocol"]["runs"] == 3 and m["dates"] == ["d1", "d2", "d3"]
    assert m["ceilings"]["matmul_tflops"] == pytest.approx(800.0)
    assert "date" not in m


def test_refuses_runs_that_are_not_one_suite_build_and_device():
    with pytest.raises(ValueError, match="commit"):
        bench_merge.merge_runs([run(0.2, 0.2, "d1"), run(0.2, 0.2, "d2", commit="def")])
    with pytest.raises(ValueError, match="at least 2"):
        bench_merge.merge_runs([run(0.2, 0.2, "d1")])
    other = run(0.2, 0.2, "d2")
    other["rows"] = other["rows"][:2]
    with pytest.raises(ValueError, match="other \\(impl, config\\) rows"):
        bench_merge.merge_runs([run(0.2, 0.2, "d1"), other])
    decode = [run(0.2, 0.2, "d1"), run(0.2, 0.2, "d2")]
    for r in decode:
        r["suite"] = "decode"
    with pytest.raises(ValueError, match="suite in"):
        bench_merge.merge_runs(decode)


def test_command_line_writes_the_record(tmp_path, capsys):
    paths = []
    for i, ms in enumerate((0.30, 0.20, 0.25)):
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_text(json.dumps(run(ms, 0.22, f"d{i}")))
    out = tmp_path / "merged.json"
    assert bench_merge.main([*map(str, paths), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["rows"][1]["ms"] == pytest.approx(0.25)
    assert "geomean flashkit / cudnn: 0.880" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        bench_merge.main([str(paths[0]), "--out", str(out)])


def test_gpu_state_of_the_runs_merges_to_its_median():
    runs = [run(0.30, 0.20, "d1"), run(0.20, 0.26, "d2"), run(0.25, 0.22, "d3")]
    for r, clock in zip(runs, (1965.0, 1890.0, 1905.0)):
        r["rows"][1].update(sm_clock_mhz=clock, power_w=clock / 3)
    del runs[2]["rows"][1]["power_w"]  # a run without the reading leaves it out
    fk = {r["impl"]: r for r in bench_merge.merge_runs(runs)["rows"]}["flashkit"]
    assert fk["sm_clock_mhz"] == pytest.approx(1905.0)
    assert fk["power_w"] == pytest.approx((1965.0 + 1890.0) / 6)
    cudnn = {r["impl"]: r for r in bench_merge.merge_runs(runs)["rows"]}["cudnn"]
    assert "sm_clock_mhz" not in cudnn
