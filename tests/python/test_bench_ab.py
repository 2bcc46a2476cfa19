"""Comparing builds' runs of a prefill suite (python -m flashkit.bench_ab)."""

import json

import pytest

from flashkit import bench_ab


def run(flashkit_ms, cudnn_ms, causal=True):
    config = {"dtype": "bf16", "d": 64, "n": 1024, "causal": causal, "batch": 16, "heads": 32}
    return {
        "suite": "prefill_fwd",
        "rows": [
            {"impl": "cudnn", "config": config, "ms": cudnn_ms},
            {"impl": "flashkit", "config": config, "ms": flashkit_ms},
            {"impl": "flashkit-fa2", "config": config, "error": "mismatch against cudnn"},
        ],
    }


def test_medians_per_build_and_speed_against_the_first():
    runs = [
        ("old", run(0.30, 0.20)),
        ("new", run(0.25, 0.21)),
        ("old", run(0.31, 0.20)),
        ("new", run(0.24, 0.20)),
        ("old", run(0.36, 0.21)),
        ("new", run(0.26, 0.20)),
    ]
    c = bench_ab.compare(runs)
    assert c["builds"] == ["old", "new"]
    rows = {r["impl"]: r for r in c["rows"]}
    assert set(rows) == {"cudnn", "flashkit"}  # rows without a time are left out
    assert rows["flashkit"]["ms"] == pytest.approx({"old": 0.31, "new": 0.25})
    assert rows["flashkit"]["speedup"]["new"] == pytest.approx(0.31 / 0.25 - 1)
    assert rows["cudnn"]["speedup"]["new"] == pytest.approx(0.0)
    assert rows["flashkit"]["ms_runs"]["old"] == [0.30, 0.31, 0.36]
    text = bench_ab.table(c)
    assert "64,1024,1" in text and "+24.0%" in text and "MHz" not in text
    runs[1][1]["rows"][1]["sm_clock_mhz"] = 1890.0
    runs[3][1]["rows"][1]["sm_clock_mhz"] = 1910.0
    c = bench_ab.compare(runs)
    assert {r["impl"]: r for r in c["rows"]}["flashkit"]["sm_clock_mhz"] == {"new": 1900.0}
    assert "MHz new" in bench_ab.table(c) and " 1900" in bench_ab.table(c)


def test_refuses_what_it_cannot_compare(tmp_path):
    with pytest.raises(ValueError, match="at least two builds"):
        bench_ab.compare([("old", run(0.3, 0.2)), ("old", run(0.3, 0.2))])
    other = run(0.3, 0.2)
    other["suite"] = "prefill_bwd"
    with pytest.raises(ValueError, match="one suite"):
        bench_ab.compare([("old", run(0.3, 0.2)), ("new", other)])
    path = tmp_path / "r.json"
    path.write_text(json.dumps(run(0.3, 0.2)))
    with pytest.raises(SystemExit):
        bench_ab.main([str(path)])  # no LABEL=
    out = tmp_path / "ab.json"
    assert bench_ab.main([f"a={path}", f"b={path}", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["builds"] == ["a", "b"]


def test_decode_rows_compare_by_their_whole_config():
    def decode(ms):
        config = {"dtype": "bf16", "kv_dtype": "bf16", "d": 128, "batch": 1, "kv_len": 32768}
        return {"suite": "decode", "rows": [{"impl": "flashkit", "config": config, "ms": ms}]}

    c = bench_ab.compare([("a", decode(0.040)), ("b", decode(0.032))])
    assert c["rows"][0]["speedup"]["b"] == pytest.approx(0.25)
    assert "bf16 1 32768" in bench_ab.table(c)
