"""The GPU's SM clock and board power through NVML (the driver's libnvidia-ml, by ctypes: no
Python package needed), for the benchmarks' records. On the H200 one build's rows moved by
several per cent between machines that ran power-limited (665 W at 1890 MHz) and ones that did
not (1965 MHz), and nvidia-smi's 200 ms samples could not say which config ran at which clock
(docs/kernels/sm90_fwd.md, v37)."""

from __future__ import annotations

import ctypes

NVML_SUCCESS = 0
NVML_CLOCK_SM = 1


def gpu_state_reader(torch=None, device: int = 0):
    """A callable returning {"sm_clock_mhz", "power_w"} of CUDA device `device` now, or None
    where NVML cannot be loaded or does not find the device (no driver: the CPU machines)."""
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if lib.nvmlInit_v2() != NVML_SUCCESS:
        return None
    handle = ctypes.c_void_p()
    bus_id = _pci_bus_id(torch, device)
    if bus_id is not None:
        found = lib.nvmlDeviceGetHandleByPciBusId_v2(bus_id.encode(), ctypes.byref(handle))
    else:  # NVML's order is the PCI order; CUDA's can differ only with several devices
        found = lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(device), ctypes.byref(handle))
    if found != NVML_SUCCESS:
        return None

    def read():
        clock, milliwatts = ctypes.c_uint(), ctypes.c_uint()
        if lib.nvmlDeviceGetClockInfo(handle, NVML_CLOCK_SM, ctypes.byref(clock)) != 0:
            return None
        if lib.nvmlDeviceGetPowerUsage(handle, ctypes.byref(milliwatts)) != 0:
            return None
        return {"sm_clock_mhz": float(clock.value), "power_w": milliwatts.value / 1000.0}

    return read


def _pci_bus_id(torch, device: int):
    """The CUDA device's PCI address as NVML takes it (domain:bus:device.0), where torch's
    device properties carry it."""
    if torch is None:
        return None
    props = torch.cuda.get_device_properties(device)
    parts = [getattr(props, f"pci_{name}_id", None) for name in ("domain", "bus", "device")]
    if any(p is None for p in parts):
        return None
    return f"{parts[0]:08x}:{parts[1]:02x}:{parts[2]:02x}.0"
