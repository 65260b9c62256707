#!/usr/bin/env bash
# Runs every test of the project. `.ci/run` calls exactly this.
# Optional test inputs are fetched first (tokenizer vectors, SmolLM2 GGUF); tests that need them
# skip with a message when the fetch is impossible (no network).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

# The app UI (ui/): svelte-check, Vitest, vite build, e2e in headless Chromium (about 2 min).
bash scripts/test-ui.sh

fetch_dir="${UNMASK_FETCH_DIR:-target/test-inputs}"
mkdir -p "$fetch_dir"
if [ -x tests/fetch-test-inputs.sh ]; then
  tests/fetch-test-inputs.sh "$fetch_dir" || echo "warning: optional test inputs could not be fetched; those tests will skip"
fi
[ -d "$fetch_dir/vocab" ] && export UNMASK_VOCAB_DIR="$fetch_dir/vocab"
smol=$(ls "$fetch_dir"/smollm2/*.gguf 2>/dev/null | head -1 || true)
[ -n "$smol" ] && export UNMASK_SMOLLM2_GGUF="$smol"

# aarch64 int8 kernels, cross-built and run under qemu (installs its Debian packages itself;
# about a minute once installed).
scripts/test-aarch64.sh

cargo test --workspace --no-fail-fast 2>&1
