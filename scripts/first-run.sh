#!/usr/bin/env bash
# First run on a fresh Debian machine: installs what is missing (C toolchain, Rust), builds the
# `unmask` CLI and starts `unmask chat` on the embedded default model (CPU backend). Extra
# arguments go to `unmask chat`, e.g. `--backend vnpu --device sm8750` for simulated NPU timing.
# Non-interactive use works too: `echo "What is 2+3?" | bash scripts/first-run.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cc >/dev/null || need_apt+=(build-essential)
command -v curl >/dev/null || need_apt+=(curl ca-certificates)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "== installing ${need_apt[*]} (apt)" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "${need_apt[@]}"
fi
if ! command -v cargo >/dev/null; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    echo "== installing Rust (rustup, stable)" >&2
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
fi
echo "== building unmask (release; the first build takes several minutes, ~35 min on a busy 2-core machine)" >&2
cargo build --release -q -p unmask-cli
bin="${CARGO_TARGET_DIR:-target}/release/unmask"
echo "== $bin chat $* (each reply is recorded in the data folder: \`$bin runs list\`)" >&2
exec "$bin" chat "$@"
