#!/usr/bin/env bash
# UI tests (ui/): type check, Vitest unit tests, production build, and end-to-end tests in headless
# Chromium (Debian's package, driven by playwright-core) against the built UI with Tauri IPC mocked.
# Idempotent: installs chromium only when missing, `npm ci` from the committed package-lock.json.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v npm >/dev/null 2>&1; then
  echo "error: Node.js >= 20.19 with npm is needed for the UI tests" >&2
  exit 1
fi
if [ -z "${CHROMIUM:-}" ] && [ ! -x /usr/bin/chromium ]; then
  echo "installing chromium (for the UI end-to-end tests)"
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium
fi

npm ci --no-audit --no-fund --prefer-offline
npm run check
npm test
npm run build
npm run e2e
