#!/usr/bin/env bash
# Cross-tests the aarch64 int8 kernels (engine/src/kernels/int8_aarch64.rs) on an x86_64 machine:
# builds tests/aarch64-kernels (which includes that exact file) with Debian's rustc and arm64 std,
# links statically with the aarch64 cross gcc and runs the test binary under qemu-aarch64:
#   1. `-cpu max`        : NEON + dotprod + i8mm  -> scalar, sdot and smmla kernels all run;
#   2. `-cpu cortex-a76` : dotprod, no i8mm       -> detection must report i8mm absent;
#   3. `-cpu cortex-a72` : neither                -> detection must report both absent.
# Idempotent: installs the Debian packages only when missing. Skips (exit 0, with a message) only
# when they cannot be installed. `UNMASK_AARCH64_CHECK_ENGINE=1` also `cargo check`s the whole
# engine crate for aarch64 (slow: all dependencies, ~10 min on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."

target=aarch64-unknown-linux-gnu
rustc_deb=/usr/bin/rustc
rustlib=/usr/lib/rustlib/$target

have_tools() {
  [ -x "$rustc_deb" ] && [ -d "$rustlib" ] && command -v aarch64-linux-gnu-gcc >/dev/null &&
    command -v qemu-aarch64 >/dev/null && [ -f /usr/aarch64-linux-gnu/lib/libc.a ]
}

if ! have_tools; then
  echo "test-aarch64: installing Debian rustc-web + arm64 std, aarch64 gcc, qemu-user"
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    dpkg --add-architecture arm64 || true
  fi
  export DEBIAN_FRONTEND=noninteractive
  if ! { apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null &&
    apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends \
      rustc-web libstd-rust-web-dev:arm64 gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user >/dev/null; }; then
    echo "test-aarch64: SKIPPED: the Debian packages for the aarch64 cross test could not be installed"
    exit 0
  fi
fi
if ! have_tools; then
  echo "test-aarch64: SKIPPED: cross toolchain incomplete after install ($rustc_deb, $rustlib, aarch64-linux-gnu-gcc, qemu-aarch64)"
  exit 0
fi

# rustc-web and libstd-rust-web-dev:arm64 come from one Debian source version, so they match.
echo "test-aarch64: $("$rustc_deb" --version); $(qemu-aarch64 --version | head -1)"

export RUSTC="$rustc_deb"
export CARGO_TARGET_DIR="$PWD/target/aarch64-kernels"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
# Static: qemu-user 7.2 (Debian 12) hangs in the dynamically linked glibc's pthread_create, and
# the test harness spawns a thread per test.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static"

run_on() { # cpu expected-features
  echo "test-aarch64: qemu-aarch64 -cpu $1 (expect: $2)"
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -cpu $1" UNMASK_EXPECT_AARCH64="$2" \
    timeout 600 cargo test --manifest-path tests/aarch64-kernels/Cargo.toml --target "$target" 2>&1
}

run_on max dotprod,i8mm
run_on cortex-a76 dotprod
run_on cortex-a72 none

if [ "${UNMASK_AARCH64_CHECK_ENGINE:-0}" = 1 ]; then
  echo "test-aarch64: cargo check of the engine for $target"
  CARGO_TARGET_DIR="$PWD/target/aarch64-check" cargo check -p unmask-engine --lib --tests --target "$target" 2>&1
fi
