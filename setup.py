"""Builds gpu_accel's extension modules with CMake: only the target _C (the library layers it links, no tests, no
server, no CLI) and, in a CUDA configuration, _flash (the torch front's flash kernels), then installs them beside
the package's Python sources (python/gpu_accel).

Environment:
  GA_PYTHON_BUILD_DIR  reuse this CMake build folder (e.g. build, already configured by tools/setup.sh): only
                       `cmake --build DIR --target _C` runs, a no-op when it is up to date. Default: a fresh
                       folder under setuptools' build_temp, configured here.
  GA_CMAKE_ARGS        extra CMake arguments for a fresh folder (e.g. "-DGA_CUDA=OFF").
  GA_JOBS              parallel compile jobs (default 2).
"""

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        m = re.search(r"project\(gpu_accel VERSION ([0-9.]+)", f.read())
    if not m:
        raise RuntimeError("setup.py: no project(gpu_accel VERSION ...) in CMakeLists.txt")
    return m.group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        reuse = os.environ.get("GA_PYTHON_BUILD_DIR")
        build_dir = os.path.abspath(reuse) if reuse else os.path.abspath(os.path.join(self.build_temp, "cmake"))
        jobs = os.environ.get("GA_JOBS", "2")
        if reuse:
            if not os.path.isfile(os.path.join(build_dir, "CMakeCache.txt")):
                raise RuntimeError(f"GA_PYTHON_BUILD_DIR={reuse} is not a configured CMake build folder")
        else:
            args = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release", "-DGA_BUILD_PYTHON=ON",
                    "-DGA_BUILD_TESTS=OFF", "-DGA_BUILD_SERVER=OFF", f"-DPython_EXECUTABLE={sys.executable}"]
            if shutil.which("ninja"):
                args += ["-G", "Ninja"]
            args += shlex.split(os.environ.get("GA_CMAKE_ARGS", ""))
            subprocess.check_call(args)
        # A CUDA configuration also has _flash (the torch front's kernels), which lands beside _C in the package.
        targets = ["_C"]
        if os.path.isdir(os.path.join(build_dir, "python", "CMakeFiles", "_flash.dir")):
            targets.append("_flash")
        subprocess.check_call(["cmake", "--build", build_dir, "--target", *targets, "-j", jobs])
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        for module in targets:
            built = glob.glob(os.path.join(build_dir, "python", "gpu_accel", f"{module}*.so"))
            if len(built) != 1:
                raise RuntimeError(f"setup.py: expected one {module}*.so in {build_dir}/python/gpu_accel, "
                                   f"found {built}")
            dest = target if module == "_C" else os.path.join(os.path.dirname(target), os.path.basename(built[0]))
            shutil.copyfile(built[0], dest)


setup(
    version=project_version(),
    packages=["gpu_accel"],
    package_dir={"": "python"},
    ext_modules=[Extension("gpu_accel._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    # setuptools' own folders stay out of CMake's build/ (git ignores /build*/).
    options={"build": {"build_base": "build-setuptools"}},
    zip_safe=False,
)
