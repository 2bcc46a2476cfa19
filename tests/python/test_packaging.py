"""The wheel builds from the repository in a fresh virtual environment and imports there.
Slow (a full CPU-only build): selected with `pytest -m packaging`."""

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.packaging


def run(*cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def test_wheel_builds_installs_and_imports(tmp_path):
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", str(venv))
    python = str(venv / "bin" / "python")
    env = dict(os.environ, FLASHKIT_CUDA="OFF")
    try:
        run(python, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path), str(REPO), env=env)
    except subprocess.CalledProcessError as e:
        pytest.fail(f"wheel build failed:\n{e.stdout[-4000:]}\n{e.stderr[-4000:]}")
    (wheel,) = tmp_path.glob("flashkit-*.whl")

    # The wheel holds the package and its metadata only, not the C++ install tree.
    names = zipfile.ZipFile(wheel).namelist()
    assert all(n.startswith(("flashkit/", "flashkit-")) for n in names), names
    assert any(n.startswith("flashkit/_flashkit.") for n in names)

    run(python, "-m", "pip", "install", str(wheel))
    probe = (
        "import numpy as np, flashkit\n"
        "q = np.ones((1, 4, 2, 8), np.float32)\n"
        "out = flashkit.attention(q, q, q, causal=True)\n"
        "assert out.shape == q.shape and np.allclose(out, 1)\n"
        "print(flashkit.info()['version'])\n"
    )
    result = run(python, "-c", probe, cwd=tmp_path)  # cwd away from the source tree
    version = re.search(
        r"project\(flashkit VERSION ([0-9.]+)", (REPO / "CMakeLists.txt").read_text()
    )
    assert result.stdout.strip() == version.group(1)
