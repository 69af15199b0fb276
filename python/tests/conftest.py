"""Shared fixtures: the repository, the build folder (GA_BUILD_DIR, default build) and its gpu-accel CLI, and the
stories260K model. tools/test.sh runs this suite with PYTHONPATH=<build>/python (the package in the build tree)."""

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("GA_BUILD_DIR", "build"))
if not BUILD.is_absolute():
    BUILD = ROOT / BUILD
MODEL = ROOT / "models" / "stories260K.gguf"


@pytest.fixture(scope="session")
def cli():
    path = BUILD / "bin" / "gpu-accel"
    if not path.exists():
        if os.environ.get("GA_REQUIRE_TEST_DATA") == "1":
            pytest.fail(f"{path} was not built")
        pytest.skip(f"{path} was not built (set GA_BUILD_DIR)")
    return path


@pytest.fixture(scope="session")
def model_path():
    assert MODEL.exists(), f"{MODEL} is part of the repository"
    return MODEL


@pytest.fixture(scope="session")
def llm(model_path):
    import gpu_accel

    # the CLI's defaults (device cpu, all cores), so its output is comparable
    return gpu_accel.LLM(model_path, device="cpu")
