"""The package itself: version, build facts, error types."""

import pathlib
import re

import gpu_accel

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_version_matches_cmake_project():
    text = (ROOT / "CMakeLists.txt").read_text()
    assert gpu_accel.__version__ == re.search(r"project\(gpu_accel VERSION ([0-9.]+)", text).group(1)


def test_build_info():
    info = gpu_accel.build_info()
    assert info["version"] == gpu_accel.__version__
    assert isinstance(info["cuda"], bool)
    assert isinstance(info["cuda_archs"], list)
    assert info["cuda"] == bool(info["cuda_archs"])
    assert isinstance(info["git_commit"], str) and info["git_commit"]


def test_error_hierarchy():
    assert issubclass(gpu_accel.Error, RuntimeError)
    assert issubclass(gpu_accel.ArgumentError, gpu_accel.Error)
    assert issubclass(gpu_accel.ArgumentError, ValueError)
