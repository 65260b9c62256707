#!/usr/bin/env bash
# Runs every test of the project. `.ci/run` calls exactly this.
# Optional test inputs are fetched first (tokenizer vectors, SmolLM2 GGUF); tests that need them
# skip with a message when the fetch is impossible (no network).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
# A one-shot build gains nothing from incremental state, which would add gigabytes to target/.
export CARGO_INCREMENTAL=0

# The app crate (src-tauri, a workspace member) needs the Tauri/WebKitGTK system packages to build;
# the smoke test below also needs Xvfb and ImageMagick. Only missing packages are installed.
tauri_pkgs=(libwebkit2gtk-4.1-dev libayatana-appindicator3-dev librsvg2-dev libxdo-dev libssl-dev xvfb xauth imagemagick)
missing=()
for p in "${tauri_pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
# python3 runs the docs check below (standard library only).
command -v python3 >/dev/null || missing+=(python3)
# The server's tests (cli/tests/serve.rs) drive it with curl and make a venv for the `openai` package.
command -v curl >/dev/null || missing+=(curl)
python3 -c 'import ensurepip' 2>/dev/null || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]}"
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi

# docs/benchmarks.md is generated from bench/results/*.json: fail early when it is stale.
python3 scripts/gen-benchmarks.py --check

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

# The real app window under Xvfb, generating once with the embedded model (src-tauri).
bash scripts/app-smoke.sh

# The real app window driven over WebDriver (tauri-driver + WebKitWebDriver): chat, profile,
# compare, import, delete, with the embedded model generating (reuses the smoke test's build).
bash scripts/app-e2e.sh
