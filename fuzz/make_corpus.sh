#!/usr/bin/env bash
# Seeds the GGUF fuzz corpus from the shared test files.
#
# usage: fuzz/make_corpus.sh BUILD_DIR OUT_DIR [SHARED_DIR]
#   BUILD_DIR  the fuzz build (holds bin/gguf_make_seeds)
#   OUT_DIR    where the seed files go (created; existing seeds are replaced)
#   SHARED_DIR the shared test data (default: ../shared beside the checkout)
#
# Seeds: shrunk but valid copies of a real model, the dequant fixtures of every quant type and a few
# vocab files (gguf_make_seeds keeps every key and tensor header, cuts arrays and tensor data), plus
# raw prefixes of a real file (a header followed by missing data, the most common corruption).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: make_corpus.sh BUILD_DIR OUT_DIR [SHARED_DIR]}
out=${2:?usage: make_corpus.sh BUILD_DIR OUT_DIR [SHARED_DIR]}
shared=${3:-$root/../shared}
mkdir -p "$out"
sources=("$shared/models/tinyllamas/stories260K.gguf" "$shared/fixtures/quant/fixture-Q4_K.gguf")
sources+=("$shared"/fixtures/quant/dequant-*.gguf)
sources+=("$shared/vocab/ggml-vocab-llama-spm.gguf" "$shared/vocab/ggml-vocab-gpt-2.gguf"
          "$shared/vocab/ggml-vocab-bert-bge.gguf")
"$build/bin/gguf_make_seeds" "$out" "${sources[@]}"
for n in 24 512 4096 16384; do
  head -c "$n" "$shared/models/tinyllamas/stories260K.gguf" > "$out/stories260K.prefix-$n.seed"
done
echo "make_corpus: $(ls "$out" | wc -l) seeds in $out"
