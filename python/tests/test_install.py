"""pip install --no-build-isolation . works offline: installed with the build folder reused (GA_PYTHON_BUILD_DIR,
so nothing compiles again) into a temporary --target folder, the package imports from there."""

import importlib.util
import os
import subprocess
import sys

import pytest

from conftest import BUILD, ROOT


def test_pip_install_offline(tmp_path):
    # find_spec, not import: importing setuptools into this process would patch distutils under pytest.
    missing = [m for m in ("pip", "setuptools", "wheel") if importlib.util.find_spec(m) is None]
    if missing:
        if os.environ.get("GA_REQUIRE_TEST_DATA") == "1":
            pytest.fail(f"pip install needs {missing} (python3-pip, python3-setuptools, python3-wheel)")
        pytest.skip(f"pip install needs {missing}")
    target = tmp_path / "site"
    env = dict(os.environ, GA_PYTHON_BUILD_DIR=str(BUILD), PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "--no-index",
                    "--target", str(target), str(ROOT)], check=True, env=env, cwd=tmp_path)
    env = dict(os.environ, PYTHONPATH=str(target))
    out = subprocess.run([sys.executable, "-c", "import gpu_accel; print(gpu_accel.__file__); "
                          "print(gpu_accel.build_info()['version'] == gpu_accel.__version__)"],
                         check=True, env=env, cwd=tmp_path, capture_output=True, text=True).stdout.split()
    assert out[0].startswith(str(target))
    assert out[1] == "True"
