#!/usr/bin/env bash
# Real-window smoke test of the Tauri app: builds unmask-app with its bundled frontend (ui/dist
# when it is built, else the placeholder src-tauri/smoke-ui), starts it under Xvfb (WebKitGTK),
# lets it generate once with the embedded model (UNMASK_SMOKE_SCREENSHOT), and checks that the
# run completed and a non-blank screenshot was written to target/app-smoke/screenshot.png.
set -euo pipefail
cd "$(dirname "$0")/.."
out="target/app-smoke"
mkdir -p "$out"

# System packages (idempotent: only what is missing is installed).
need=()
for p in libwebkit2gtk-4.1-dev libayatana-appindicator3-dev librsvg2-dev libxdo-dev libssl-dev xvfb xauth imagemagick; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "app-smoke: installing ${need[*]}"
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
fi

# Frontend: the real UI when it is in the tree, else the placeholder page.
# (scripts/test-ui.sh, which test-all.sh runs first, has built it already; the npm workspace and
# its lockfile are at the repository root.)
if [ -f ui/package.json ] && [ ! -f ui/dist/index.html ] && [ "${UNMASK_SMOKE_SKIP_UI_BUILD:-0}" != 1 ]; then
  npm ci --no-audit --no-fund --prefer-offline && npm run build
fi
if [ -f ui/dist/index.html ]; then dist="../ui/dist"; else dist="smoke-ui"; fi
echo "app-smoke: frontend $dist"

# Built through `cargo test --no-run` (which also links the app binary for the integration tests)
# so that it reuses the test profile's artifacts of `cargo test` instead of a second full build.
TAURI_CONFIG="{\"build\":{\"frontendDist\":\"$dist\"}}" \
  cargo test -p unmask-app --features custom-protocol --no-run

data="$out/data"
rm -rf "$data" "$out/screenshot.png" "$out/screenshot.json"
set +e
UNMASK_DATA_DIR="$PWD/$data" \
UNMASK_SMOKE_SCREENSHOT="$PWD/$out/screenshot.png" \
WEBKIT_DISABLE_COMPOSITING_MODE=1 \
  timeout 600 xvfb-run -a -s "-screen 0 1280x860x24" "${CARGO_TARGET_DIR:-target}/debug/unmask-app" >"$out/app.log" 2>&1
rc=$?
set -e
tail -n 20 "$out/app.log" || true
if [ "$rc" -ne 0 ]; then
  echo "app-smoke: FAILED (exit $rc); log in $out/app.log"
  exit 1
fi
status=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["summary"]["status"])' "$out/screenshot.json")
if [ "$status" != completed ]; then
  echo "app-smoke: FAILED (run status $status)"
  exit 1
fi
colours=$(identify -format '%k' "$out/screenshot.png")
if [ "$colours" -lt 8 ]; then
  echo "app-smoke: FAILED (screenshot has only $colours colours: blank window?)"
  exit 1
fi
echo "app-smoke: OK (run completed, screenshot $out/screenshot.png with $colours colours)"
