"""bench/lineage_dram.py without a GPU: ncu's CSV read back into bytes per call, the command that
repeats one lineage row, and the annotation of a lineage file."""
import pytest
from conftest import load_script

lineage_dram = load_script("bench/lineage_dram.py")

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
          '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
          '"Metric Value"')


def metric_line(kernel_id, name, unit, value):
    return (f'"{kernel_id}","4242","flashkit","127.0.0.1","void k<(int)1>(Params)","1","7",'
            f'"(128, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","{name}",'
            f'"{unit}","{value}"')


def ncu_output(lines):
    return "\n".join(["==PROF== Connected to process 4242 (flashkit)", "   d      n  naive ms",
                      HEADER, *lines, "==PROF== Disconnected from process 4242"])


def test_reads_every_kernels_dram_bytes_and_skips_other_output():
    text = ncu_output([
        metric_line(0, "dram__bytes_read.sum", "byte", "1,048,576"),
        metric_line(0, "dram__bytes_write.sum", "byte", "524288"),
        metric_line(1, "dram__bytes_read.sum", "Mbyte", "2.5"),
        metric_line(1, "dram__bytes_write.sum", "KiB", "4"),
        metric_line(1, "sm__cycles_elapsed.avg", "cycle", "99"),
    ])
    records = lineage_dram.parse_ncu_csv(text)
    assert [r[:2] for r in records] == [("0", "dram__bytes_read.sum"),
                                         ("0", "dram__bytes_write.sum"),
                                         ("1", "dram__bytes_read.sum"),
                                         ("1", "dram__bytes_write.sum")]
    assert [r[2] for r in records] == [1048576.0, 524288.0, 2.5e6, 4096.0]
    # Two calls per measurement (warm-up and one timed run).
    total = 1048576 + 524288 + 2.5e6 + 4096
    assert lineage_dram.bytes_per_call(records) == pytest.approx(total / 2)


def test_unknown_unit_and_missing_metrics_are_errors():
    furlongs = ncu_output([metric_line(0, "dram__bytes_read.sum", "furlong", "1")])
    with pytest.raises(ValueError, match="unit"):
        lineage_dram.parse_ncu_csv(furlongs)
    with pytest.raises(ValueError, match="no DRAM metric"):
        lineage_dram.bytes_per_call(lineage_dram.parse_ncu_csv("==PROF== no kernels\n"))


def row(impl, n, causal=False):
    return {"impl": impl, "bytes_modelled": 1000.0,
            "config": {"dtype": "bf16", "d": 64, "n": n, "causal": causal, "batch": 1, "heads": 1}}


def test_bench_command_repeats_one_row_alone():
    assert lineage_dram.bench_command("fk", row("flashkit-naive", 4096)) == [
        "fk", "bench", "--device", "cuda", "--algo", "naive", "--n", "4096", "--d", "64",
        "--heads", "1", "--batch", "1", "--dtype", "bf16", "--repeats", "1"]
    assert lineage_dram.bench_command("fk", row("flashkit-fa2", 512, causal=True))[-1] == "--causal"
    assert lineage_dram.bench_command("fk", row("flashkit-fa1", 512))[5] == "fa1"


def test_annotate_adds_measured_bytes_and_their_ratio():
    skipped = dict(row("flashkit-naive", 131072), skipped="needs 128.0 GiB")
    doc = {"rows": [row("flashkit-naive", 1024), row("flashkit-fa1", 512), row("flashkit-fa2", 1024),
                    {"impl": "flashkit-fa2", "config": {}}, skipped]}
    measured = []

    def measure(r):
        measured.append(r["config"]["n"])
        return {"flashkit-naive": 1500.0, "flashkit-fa1": 2000.0}.get(r["impl"], 900.0)

    lineage_dram.annotate(doc, measure)
    naive, fa1, fa2, unmodelled, skipped = doc["rows"]
    assert measured == [1024, 512, 1024]  # neither the unmodelled nor the skipped row re-ran
    assert (fa1["bytes_measured"], fa1["measured_over_modelled"]) == (2000.0, 2.0)
    assert (naive["bytes_measured"], naive["measured_over_modelled"]) == (1500.0, 1.5)
    assert (fa2["bytes_measured"], fa2["measured_over_modelled"]) == (900.0, 0.9)
    assert "bytes_measured" not in unmodelled and "bytes_measured" not in skipped
    assert "ncu" in doc["protocol"]["bytes_measured"]
