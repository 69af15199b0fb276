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


def test_import_does_not_import_torch():
    # The torch front is imported when a tensor comes, never by `import gpu_accel` (CI has no torch).
    import subprocess
    import sys

    code = "import sys, gpu_accel; assert 'torch' not in sys.modules, 'import gpu_accel imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_flash_attn_api_is_exported():
    for name in ("flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func", "flash_attn_with_kvcache"):
        assert callable(getattr(gpu_accel, name)) and name in gpu_accel.__all__
