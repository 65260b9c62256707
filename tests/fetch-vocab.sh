#!/usr/bin/env bash
# Fetches llama.cpp's tokenizer test vocabularies (ggml-vocab-*.gguf with .inp/.out reference ids)
# from the llama-cpp-python sdist into target/vocab (not committed). Used by engine/tests/gguf.rs:
#   UNMASK_VOCAB_DIR=target/vocab cargo test -p unmask-engine --test gguf vocab
set -euo pipefail
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="${1:-$ROOT/target/vocab}"
PYTHON="${PYTHON:-python3}"
if [ -x "$ROOT/../venv/bin/python" ] && ! "$PYTHON" -m pip --version >/dev/null 2>&1; then PYTHON="$ROOT/../venv/bin/python"; fi
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
# `pip download` of an sdist prepares its metadata in an isolated build environment. With
# `--no-binary :all:` that restriction also covers the backend's build requirements (cmake,
# ninja), which pip then compiles from source for many minutes; so only this package is
# fetched as source and the build tools come as wheels.
"$PYTHON" -m pip download --no-deps --no-binary llama-cpp-python "llama-cpp-python==$VERSION" -d "$TMP" >&2
SDIST="$(ls "$TMP"/llama_cpp_python-*.tar.gz "$TMP"/llama-cpp-python-*.tar.gz 2>/dev/null | head -n1)"
[ -n "$SDIST" ] || { echo "no sdist downloaded" >&2; exit 1; }
mkdir -p "$DEST"
# Only the vocabulary files and their reference cases.
tar -xzf "$SDIST" -C "$TMP" --wildcards "llama_cpp_python-$VERSION/vendor/llama.cpp/models/ggml-vocab-*"
find "$TMP" -path '*/vendor/llama.cpp/models/ggml-vocab-*' -type f -exec cp {} "$DEST"/ \;
echo "vocabularies in $DEST:" >&2
ls "$DEST" >&2
