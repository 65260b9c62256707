#!/usr/bin/env bash
# Builds llama.cpp's `llama-diffusion-cli` from the copy vendored in the PyPI sdist of
# llama-cpp-python (the `versus` suite's comparison engine). Cached under target/llamacpp/;
# never committed, never a CI dependency. Prints the binary's path on success (last line).
#   LLAMACPP_PY_VERSION  sdist version (default 0.3.36)
#   LLAMACPP_DIR         cache folder (default target/llamacpp)
# x86_64: AVX-512 (+VNNI/BF16/VBMI) code paths on, native tuning off, AMX codegen off (some
# virtual CPUs report AMX but fault on it).
set -euo pipefail
cd "$(dirname "$0")/../.."
ver="${LLAMACPP_PY_VERSION:-0.3.36}"
dir="${LLAMACPP_DIR:-$PWD/target/llamacpp}"
src="$dir/llama_cpp_python-$ver/vendor/llama.cpp"
build="$dir/build-$ver"
bin="$build/bin/llama-diffusion-cli"
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
mkdir -p "$dir"
if [ ! -d "$src" ]; then
  if [ ! -f "$dir/llama_cpp_python-$ver.tar.gz" ]; then
    echo "build-llamacpp: downloading the llama-cpp-python $ver sdist" >&2
    # --no-binary for this package only: its build dependencies may come as wheels.
    pip download --no-binary llama-cpp-python --no-deps "llama-cpp-python==$ver" -d "$dir" >&2
  fi
  tar xzf "$dir/llama_cpp_python-$ver.tar.gz" -C "$dir"
fi
command -v cmake >/dev/null || { echo "build-llamacpp: cmake missing (apt-get install cmake)" >&2; exit 1; }
flags=(-DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_BLAS=OFF -DLLAMA_BUILD_TESTS=OFF
       -DLLAMA_BUILD_SERVER=OFF -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF)
if [ "$(uname -m)" = x86_64 ]; then
  flags+=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON)
  if grep -q avx512f /proc/cpuinfo; then flags+=(-DGGML_AVX512=ON); fi
  if grep -q avx512_vnni /proc/cpuinfo; then flags+=(-DGGML_AVX512_VNNI=ON); fi
  if grep -q avx512_bf16 /proc/cpuinfo; then flags+=(-DGGML_AVX512_BF16=ON); fi
  if grep -q avx512vbmi /proc/cpuinfo; then flags+=(-DGGML_AVX512_VBMI=ON); fi
  if grep -q avx_vnni /proc/cpuinfo; then flags+=(-DGGML_AVX_VNNI=ON); fi
  flags+=(-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
fi
echo "build-llamacpp: cmake ${flags[*]}" >&2
cmake -S "$src" -B "$build" "${flags[@]}" >&2
cmake --build "$build" --target llama-diffusion-cli -j "${CMAKE_BUILD_PARALLEL_LEVEL:-2}" >&2
echo "$bin"
