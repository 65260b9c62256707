#!/usr/bin/env bash
# End-to-end test of the real app window: the Tauri app (WebKitGTK, bundled ui/dist) under Xvfb,
# driven over WebDriver by tauri-driver + WebKitWebDriver from ui/e2e-app/ (selenium-webdriver):
# send a message and watch the canvas, open the run's profile, compare two runs, import a model,
# delete a conversation. Nothing is mocked: the embedded model generates, the store records.
# Expects the UI built (scripts/test-ui.sh does that); installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
out="$target/app-e2e"
mkdir -p "$out"

need=()
for p in libwebkit2gtk-4.1-dev webkit2gtk-driver xvfb xauth; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "app-e2e: installing ${need[*]}"
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
fi

# tauri-driver from crates.io, pinned, kept in the target folder so later runs reuse it.
driver="$target/tools/bin/tauri-driver"
if [ ! -x "$driver" ]; then
  echo "app-e2e: installing tauri-driver 2.1.0"
  CARGO_TARGET_DIR="$target/tools-build" cargo install tauri-driver --version 2.1.0 --locked --root "$target/tools"
fi

if [ ! -f ui/dist/index.html ]; then
  npm ci --no-audit --no-fund --prefer-offline && npm run build
fi
# Same build as scripts/app-smoke.sh (test profile, bundled frontend), so CI builds it once.
TAURI_CONFIG='{"build":{"frontendDist":"../ui/dist"}}' \
  cargo test -p unmask-app --features custom-protocol --no-run

export UNMASK_APP_BINARY="$target/debug/unmask-app"
export TAURI_DRIVER="$driver"
export UNMASK_IMPORT_MODEL="$PWD/models/tiny-ar"
export UNMASK_APP_SHOT_DIR="${UNMASK_APP_SHOT_DIR:-$out/screenshots}"
export UNMASK_APP_E2E_LOG="$out/driver.log"
cd ui
set +e
timeout 900 xvfb-run -a -s "-screen 0 1280x860x24" npx vitest run --config e2e-app/vitest.config.ts
rc=$?
set -e
if [ "$rc" -ne 0 ]; then
  echo "app-e2e: FAILED (exit $rc); tauri-driver log in $UNMASK_APP_E2E_LOG"
  tail -n 30 "$UNMASK_APP_E2E_LOG" 2>/dev/null || true
  exit 1
fi
echo "app-e2e: OK (screenshots in $UNMASK_APP_SHOT_DIR)"
