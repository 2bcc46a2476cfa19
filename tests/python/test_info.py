"""flashkit.info(): version, build options and devices; the scratch memory flashkit keeps."""

import flashkit


def test_info():
    info = flashkit.info()
    assert info["version"] == flashkit.__version__
    assert info["version"].count(".") == 2
    build = info["build"]
    assert set(build) == {"cuda", "cuda_archs", "nccl", "cpu_isa", "compiler", "build_type"}
    assert isinstance(build["cuda"], bool)
    devices = info["devices"]
    assert devices[0]["backend"] == "cpu"
    assert all(d["backend"] in ("cpu", "cuda") for d in devices)
    if not build["cuda"]:
        assert len(devices) == 1


def test_scratch_memory_before_any_cuda_call():
    """Nothing is reserved before a CUDA call needed scratch, and releasing then is a no-op; a CUDA
    build keeps up to 1 GiB per device (tests/gpu/test_scratch_pool.cpp checks the pool)."""
    mem = flashkit.scratch_memory()
    assert set(mem) == {"reserved_bytes", "keep_bytes"}
    assert mem["keep_bytes"] == (1 << 30 if flashkit.info()["build"]["cuda"] else 0)
    if not flashkit.info()["build"]["cuda"]:
        assert mem["reserved_bytes"] == 0
    flashkit.release_scratch_memory()
    assert flashkit.scratch_memory()["keep_bytes"] == mem["keep_bytes"]
