#!/usr/bin/env bash
# Builds llama.cpp (the peer tarball in ../shared/peers) CPU-only into /tmp, then compiles
# tools/reference/llamacpp_logits.cpp against that libllama. Nothing of llama.cpp enters the tree.
#
#   tools/reference/build_llamacpp_cpu.sh            # -> /tmp/llamacpp-ref/{src,build}, /tmp/llamacpp-ref/llamacpp_logits
#   LLAMACPP_REF=/some/dir JOBS=2 tools/reference/build_llamacpp_cpu.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
tarball="${LLAMACPP_TARBALL:-$repo/../shared/peers/llama.cpp-82bb485.tar.xz}"
root="${LLAMACPP_REF:-/tmp/llamacpp-ref}"
jobs="${JOBS:-2}"

mkdir -p "$root"
if [[ ! -f "$root/src/CMakeLists.txt" ]]; then
    rm -rf "$root/src" && mkdir -p "$root/src"
    tar -xJf "$tarball" -C "$root/src" --strip-components=1
fi

cmake -S "$root/src" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_COMMON=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=ON
cmake --build "$root/build" --target llama -j "$jobs"

libdir="$(dirname "$(find "$root/build" -name 'libllama.so' | head -n1)")"
g++ -std=c++17 -O2 -Wall -Wextra "$here/llamacpp_logits.cpp" \
    -I "$root/src/include" -I "$root/src/ggml/include" \
    -L "$libdir" -lllama -Wl,-rpath,"$libdir" \
    $(find "$root/build" -name 'libggml*.so' -printf '-L%h ' | sort -u) \
    $(find "$root/build" -name 'libggml*.so' -printf '-Wl,-rpath,%h ' | sort -u) -lggml -lggml-base \
    -o "$root/llamacpp_logits"
echo "built $root/llamacpp_logits"
