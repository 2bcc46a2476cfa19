"""flashkit.info(): version, build options and devices."""

import flashkit


def test_info():
    info = flashkit.info()
    assert info["version"] == flashkit.__version__
    assert info["version"].count(".") == 2
    build = info["build"]
    assert set(build) == {"cuda", "cuda_archs", "cpu_isa", "compiler", "build_type"}
    assert isinstance(build["cuda"], bool)
    devices = info["devices"]
    assert devices[0]["backend"] == "cpu"
    assert all(d["backend"] in ("cpu", "cuda") for d in devices)
    if not build["cuda"]:
        assert len(devices) == 1
