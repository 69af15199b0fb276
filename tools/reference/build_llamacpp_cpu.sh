#!/usr/bin/env bash
# Builds llama.cpp (the peer tarball in ../shared/peers) CPU-only into /tmp, then compiles
# tools/reference/llamacpp_logits.cpp against that libllama. Nothing of llama.cpp enters the tree.
#
#   tools/reference/build_llamacpp_cpu.sh            # -> /tmp/llamacpp-ref/{src,build}, /tmp/llamacpp-ref/llamacpp_logits
#   LLAMACPP_REF=/some/dir JOBS=2 tools/reference/build_llamacpp_cpu.sh
#   EXACT_GELU_DIAG=1 tools/reference/build_llamacpp_cpu.sh   # also /tmp/llamacpp-ref/build-exact-gelu/bin
#
# EXACT_GELU_DIAG=1 (a diagnostic, not used for any data file) also builds libggml-cpu from a second,
# scratch copy of the source in which ggml-cpu/vec.h does not define GGML_GELU_FP16, so GELU is computed
# in float32 instead of through ggml's fp16 lookup table. Run the same program against it with
#   LD_LIBRARY_PATH=/tmp/llamacpp-ref/build-exact-gelu/bin /tmp/llamacpp-ref/llamacpp_logits ...
# (tests/data/arch/README.md: the Gemma rows of the cross-check).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
tarball="${LLAMACPP_TARBALL:-$repo/../shared/peers/llama.cpp-82bb485.tar.xz}"
root="${LLAMACPP_REF:-/tmp/llamacpp-ref}"
jobs="${JOBS:-2}"

extract() {  # extract the tarball into $1 unless it is there already
    if [[ ! -f "$1/CMakeLists.txt" ]]; then
        rm -rf "$1" && mkdir -p "$1"
        tar -xJf "$tarball" -C "$1" --strip-components=1
    fi
}

mkdir -p "$root"
extract "$root/src"

cmake_opts=(-G Ninja -DCMAKE_BUILD_TYPE=Release
    -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_COMMON=OFF
    -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=ON)
cmake -S "$root/src" -B "$root/build" "${cmake_opts[@]}"
cmake --build "$root/build" --target llama -j "$jobs"

libdir="$(dirname "$(find "$root/build" -name 'libllama.so' | head -n1)")"
g++ -std=c++17 -O2 -Wall -Wextra "$here/llamacpp_logits.cpp" \
    -I "$root/src/include" -I "$root/src/ggml/include" \
    -L "$libdir" -lllama -Wl,-rpath,"$libdir" \
    $(find "$root/build" -name 'libggml*.so' -printf '-L%h ' | sort -u) \
    $(find "$root/build" -name 'libggml*.so' -printf '-Wl,-rpath,%h ' | sort -u) -lggml -lggml-base \
    -o "$root/llamacpp_logits"
echo "built $root/llamacpp_logits"

if [[ "${EXACT_GELU_DIAG:-0}" == 1 ]]; then
    extract "$root/src-exact-gelu"
    sed -i 's|^#define GGML_GELU_FP16$|// GGML_GELU_FP16 off: diagnostic build|' "$root/src-exact-gelu/ggml/src/ggml-cpu/vec.h"
    grep -q 'GGML_GELU_FP16 off' "$root/src-exact-gelu/ggml/src/ggml-cpu/vec.h"
    cmake -S "$root/src-exact-gelu" -B "$root/build-exact-gelu" "${cmake_opts[@]}"
    cmake --build "$root/build-exact-gelu" --target ggml-cpu -j "$jobs"
    echo "built $root/build-exact-gelu/bin/libggml-cpu.so (exact GELU, diagnostic)"
fi
