"""The bench driver imports and parses its arguments anywhere; it runs only with torch + CUDA
(scripts/gpu-check runs it on the GPU machine)."""

import pytest

from flashkit import bench, bench_decode


def test_arguments():
    args = bench.parse_args(["--suite", "prefill_bwd", "--out", "x.json", "--quick"])
    assert (args.suite, args.out, args.quick, args.iters) == ("prefill_bwd", "x.json", True, 30)
    with pytest.raises(SystemExit):
        bench.parse_args(["--suite", "nope", "--out", "x.json"])
    with pytest.raises(SystemExit):
        bench.parse_args(["--suite", "decode", "--out", "x.json", "--iters", "5"])


def test_grid_is_benchmarks_md():
    configs = list(bench.prefill_configs(quick=False))
    assert len(configs) == 3 * 6 * 2
    for c in configs:
        assert c["batch"] * c["n"] == 16384 and c["heads"] * c["d"] == 2048
    assert len(list(bench_decode.decode_configs(quick=False))) == 4


def test_exits_clearly_without_cuda(tmp_path):
    try:
        import torch

        if torch.cuda.is_available():
            pytest.skip("a CUDA device is present: the real run belongs to scripts/gpu-check")
    except ImportError:
        pass
    with pytest.raises(SystemExit, match="needs"):
        bench.main(["--suite", "decode", "--out", str(tmp_path / "x.json")])
    assert not (tmp_path / "x.json").exists()


def test_ratios_are_geometric_means_over_configs_both_ran():
    rows = [
        {"impl": "flashkit", "config": {"n": 1}, "tflops": 100.0},
        {"impl": "fa2", "config": {"n": 1}, "tflops": 200.0},
        {"impl": "cudnn", "config": {"n": 1}, "error": "unsupported"},
        {"impl": "flashkit", "config": {"n": 2}, "tflops": 100.0},
        {"impl": "fa2", "config": {"n": 2}, "tflops": 50.0},
        {"impl": "cudnn", "config": {"n": 2}, "tflops": 400.0},
    ]
    r = bench.ratios("prefill_bwd", rows)
    assert r["fa2"] == pytest.approx({"geomean": 1.0, "configs": 2})
    assert r["cudnn"] == pytest.approx({"geomean": 0.25, "configs": 1})


def test_host_suite_counts_calls_and_ratios():
    from flashkit import bench_host

    class StubCuda:
        syncs = 0

        def synchronize(self):
            StubCuda.syncs += 1

    class StubTorch:
        cuda = StubCuda()

    calls = []
    us = bench_host.host_us(StubTorch, lambda: calls.append(1))
    per_repeat = bench_host.CALLS
    assert len(calls) == bench_host.WARMUP + bench_host.REPEATS * per_repeat
    assert StubCuda.syncs == 1 + bench_host.REPEATS and us > 0
    assert bench.parse_args(["--suite", "host", "--out", "x.json"]).suite == "host"
    rows = [
        {"impl": "flashkit", "config": {"call": "fwd"}, "host_us": 30.0},
        {"impl": "sdpa", "config": {"call": "fwd"}, "host_us": 20.0},
    ]
    bench_host.add_ratios(rows)
    assert [r["vs_sdpa"] for r in rows] == [1.5, 1.0]
    text = bench_host.host_summary({"rows": rows})
    assert "flashkit     fwd          30.0    1.50x" in text


def test_round_orders_put_every_impl_at_every_position():
    orders = bench.round_orders(5, 5)
    assert all(sorted(o) == list(range(5)) for o in orders)
    for position in range(5):
        assert sorted(o[position] for o in orders) == list(range(5))
    assert bench.round_orders(3, 2) == [[0, 1, 2], [1, 2, 0]]


def test_rounds_split_the_timed_calls_and_take_turns():
    turns = []

    class StubTimer:
        iters, rounds = 30, 5
        last_state = None

        def samples(self, fn, inputs, iters):
            value = fn(*inputs[0])
            turns.append(value)
            # impl 2's clock drops from 1980 MHz by 10 MHz a round; impl 0 has no reading
            clock = 1980.0 - 10 * sum(t == 2 for t in turns) if value == 2 else 1980.0
            self.last_state = {"sm_clock_mhz": clock, "power_w": 500.0} if value else None
            return [float(value)] * iters

    def impl(value):
        return lambda q, k, v, causal: value

    impls = {"a": impl(0), "b": impl(1), "c": impl(2)}
    timed = [{"impl": name} for name in impls]
    timings = bench.time_in_rounds(None, StubTimer(), impls, timed, [(None,) * 3], False, False)
    assert timings == [
        {"ms": 0.0},
        {"ms": 1.0, "sm_clock_mhz": 1980.0, "power_w": 500.0},
        {"ms": 2.0, "sm_clock_mhz": 1950.0, "power_w": 500.0},
    ]
    assert turns == [0, 1, 2, 1, 2, 0, 2, 0, 1, 0, 1, 2, 1, 2, 0]
    with pytest.raises(SystemExit):
        bench.parse_args(["--suite", "prefill_fwd", "--out", "x.json", "--rounds", "0"])
    assert bench.parse_args(["--suite", "prefill_fwd", "--out", "x.json"]).rounds == 5


def test_only_and_impls_select_configs_and_impls_of_the_grid(capsys):
    args = bench.parse_args(
        ["--suite", "prefill_fwd", "--out", "x.json", "--only", "64,1024,1", "--only", "128,512,0"]
    )
    assert [(c["d"], c["n"], c["causal"], c["batch"]) for c in args.only] == [
        (64, 1024, True, 16),
        (128, 512, False, 32),
    ]
    assert args.impls == bench.PREFILL_IMPLS
    args = bench.parse_args(["--suite", "prefill_bwd", "--out", "x", "--impls", "cudnn,flashkit"])
    assert args.impls == ("flashkit", "cudnn") and args.only == []
    for bad, what in [
        (["--only", "64,1000,1"], "--only: expected a config of the grid"),
        (["--only", "64,1024"], "--only: expected D,N,CAUSAL"),
        (["--only", "64,1024,2"], "--only: expected a config of the grid"),
        (["--impls", "flashkit"], "--impls: expected at least one peer"),
        (["--impls", "flashkit,cudnnn"], "--impls: expected names from"),
    ]:
        with pytest.raises(SystemExit):
            bench.parse_args(["--suite", "prefill_fwd", "--out", "x.json", *bad])
        assert what in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.parse_args(["--suite", "decode", "--out", "x.json", "--only", "64,1024,1"])
    assert "prefill suites only" in capsys.readouterr().err


def test_gpu_state_reader_reads_nvml_and_gives_none_without_it(monkeypatch):
    from flashkit import _nvml

    class FakeNvml:  # libnvidia-ml's calls as ctypes makes them
        def __init__(self, clock_status=0):
            self.clock_status, self.indices = clock_status, []

        def nvmlInit_v2(self):
            return 0

        def nvmlDeviceGetHandleByIndex_v2(self, index, handle):
            self.indices.append(index.value)
            return 0

        def nvmlDeviceGetClockInfo(self, handle, clock, value):
            assert clock == _nvml.NVML_CLOCK_SM
            value._obj.value = 1905
            return self.clock_status

        def nvmlDeviceGetPowerUsage(self, handle, value):
            value._obj.value = 664500  # milliwatts
            return 0

    fake = FakeNvml()
    monkeypatch.setattr(_nvml.ctypes, "CDLL", lambda name: fake)
    read = _nvml.gpu_state_reader(device=0)
    assert read() == {"sm_clock_mhz": 1905.0, "power_w": 664.5} and fake.indices == [0]
    monkeypatch.setattr(_nvml.ctypes, "CDLL", lambda name: FakeNvml(clock_status=3))
    assert _nvml.gpu_state_reader()() is None  # a failed query: no reading, no made-up one

    def no_driver(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(_nvml.ctypes, "CDLL", no_driver)
    assert _nvml.gpu_state_reader() is None


def test_run_config_checks_and_times_only_the_chosen_impls(monkeypatch):
    """run_config's flow with the GPU parts stubbed: the chosen impls' rows, judged by the peer,
    a mismatch kept out of the timing, the clock readings on the rows."""

    class StubTorch:
        @staticmethod
        def manual_seed(seed):
            pass

    class StubTimer:
        iters, rounds, last_state = 20, 2, None

        def samples(self, fn, inputs, iters):
            out = fn(*inputs[0])
            self.last_state = {"sm_clock_mhz": 1900.0 + out, "power_w": 600.0}
            return [float(out)] * iters

    def runner(value):
        return lambda q, k, v, causal: value

    made = []

    def sdpa(torch, name):
        made.append(name)
        return runner({"cudnn": 1, "fa2": 2, "efficient": 3}[name])

    monkeypatch.setattr(bench, "input_sets", lambda torch, shapes, requires_grad: [(0, 0, 0)])
    monkeypatch.setattr(bench, "sdpa_runner", sdpa)
    monkeypatch.setattr(bench, "flashkit_runner", runner(1))
    monkeypatch.setattr(bench, "flashkit_fa2_runner", runner(5))
    monkeypatch.setattr(bench, "close", lambda got, want: (got == want, abs(got - want)))
    cfg = next(c for c in bench.prefill_configs(False) if c["d"] == 64 and c["n"] == 1024)
    rows = []
    bench.run_config(StubTorch, StubTimer(), "prefill_fwd", cfg, rows, ("flashkit", "cudnn"))
    assert made == ["cudnn"]
    assert [(r["impl"], r["ms"], r["sm_clock_mhz"]) for r in rows] == [
        ("cudnn", 1.0, 1901.0),
        ("flashkit", 1.0, 1901.0),
    ]
    assert rows[1]["max_rel_err"] == 0 and rows[1]["tflops"] > 0
    rows = []
    bench.run_config(StubTorch, StubTimer(), "prefill_fwd", cfg, rows, ("flashkit-fa2", "fa2"))
    assert [r["impl"] for r in rows] == ["fa2", "flashkit-fa2"]
    assert rows[1]["error"] == "mismatch against fa2" and "ms" not in rows[1]

    def failing(q, k, v, causal):
        raise RuntimeError("no kernel for this config")

    monkeypatch.setattr(bench, "sdpa_runner", lambda torch, name: failing)
    rows = []
    bench.run_config(StubTorch, StubTimer(), "prefill_fwd", cfg, rows, bench.PREFILL_IMPLS)
    errors = {r["impl"]: r.get("error", "") for r in rows}
    assert errors["cudnn"] == "RuntimeError: no kernel for this config"
    # no peer ran, so the sm80 kernel judged (flashkit 1 against flashkit-fa2 5)
    assert errors["flashkit"] == "mismatch against flashkit-fa2"
    rows = []
    bench.run_config(StubTorch, StubTimer(), "prefill_bwd", cfg, rows, ("flashkit-fa2", "fa2"))
    assert [r["impl"] for r in rows] == ["fa2"]  # the sm80 forward only runs in prefill_fwd
