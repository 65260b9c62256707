#!/usr/bin/env python3
"""llama.cpp oracle for our GGUF path: logits of `models/tiny-llada` exported to GGUF (F32, Q8_0),
evaluated by llama.cpp itself (PyPI `llama-cpp-python`, which builds llama.cpp from source and runs
`llada` GGUFs with non-causal attention). Writes tests/golden/llamacpp/tiny-llada.safetensors,
checked by engine/tests/gguf_llamacpp.rs.

    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=ON -DGGML_BLAS=OFF -DLLAMA_CURL=OFF" \
      CMAKE_BUILD_PARALLEL_LEVEL=2 pip install --no-cache-dir llama-cpp-python==0.3.36
    cargo build -p unmask-cli            # or pass existing GGUFs (f32, q8_0) as arguments
    python tests/reference/llamacpp_reference.py [tiny-llada-f32.gguf tiny-llada-q8_0.gguf]

Without arguments the GGUFs are exported into the cargo target folder with `unmask models export` (binary from
$UNMASK_BIN, default $CARGO_TARGET_DIR/debug/unmask or target/debug/unmask).
"""
import os
import subprocess
import sys

import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer

import llama_cpp

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# The oracle model (the first trained tiny-llada, f32); set UNMASK_ORACLE_MODEL to record another.
MODEL = os.environ.get("UNMASK_ORACLE_MODEL", os.path.join(ROOT, "tests", "golden", "llamacpp", "tiny-llada-v0"))
OUT_DIR = os.path.join(ROOT, "tests", "golden", "llamacpp")
MASK = 2
SEQ = 22  # 2 sequences x 22 positions x 4096 x f32 x 2 files = 1.44 MB
QUESTIONS = ["What is 2+3?", "Hi!"]


def chat(q):
    return ("<|startoftext|><|start_header_id|>user<|end_header_id|>\n\n" + q +
            "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")


def sequences():
    tok = Tokenizer.from_file(os.path.join(MODEL, "tokenizer.json"))
    out = []
    for q in QUESTIONS:
        ids = tok.encode(chat(q), add_special_tokens=False).ids
        assert len(ids) < SEQ, (q, len(ids))
        out.append(ids + [MASK] * (SEQ - len(ids)))  # prompt followed by mask tokens
    return out


def export(dtype):
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    os.makedirs(target, exist_ok=True)
    path = os.path.join(target, f"tiny-llada-{dtype.replace('-', '_')}.gguf")
    exe = os.environ.get("UNMASK_BIN", os.path.join(target, "debug", "unmask"))
    subprocess.run([exe, "models", "export", "--model", MODEL, path, "--dtype", dtype], check=True)
    return path


def llama_logits(path, seqs):
    llm = llama_cpp.Llama(model_path=path, logits_all=True, n_ctx=256, n_batch=256, n_ubatch=256,
                          n_threads=2, n_threads_batch=2, verbose=False)
    assert llm.n_vocab() == 4096
    res = []
    for ids in seqs:
        # `Llama.eval` first trims the KV cache, but llama.cpp builds `llada` without one (the
        # whole sequence is one non-causal batch), so decode the batch directly: one sequence,
        # positions 0..n-1, logits requested at every position.
        llm._batch.set_batch(batch=ids, n_past=0, logits_all=True)
        llm._ctx.decode(llm._batch)
        res.append(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(len(ids), 4096)).copy())
    del llm
    return np.stack(res)


def main():
    if len(sys.argv) == 3:
        f32_path, q8_path = sys.argv[1:]
    else:
        f32_path, q8_path = export("f32"), export("q8-0")
    seqs = sequences()
    # Bidirectionality: changing the last token must change position 0's logits.
    probe = [list(s) for s in seqs[:1]] * 2
    probe[1] = probe[1][:-1] + [17]
    logits = {}
    for name, path in (("f32", f32_path), ("q8_0", q8_path)):
        pl = llama_logits(path, probe)
        d0 = float(np.abs(pl[0, 0] - pl[1, 0]).max())
        print(f"{name}: position-0 change when the last token changes: {d0:.3e}")
        assert d0 > 1e-3, "llama.cpp ran the model causally"
        logits[name] = llama_logits(path, seqs)
        again = llama_logits(path, seqs)
        print(f"{name}: rerun max |diff| {float(np.abs(again - logits[name]).max()):.3e}")
    scale = float(np.abs(logits["f32"]).max())
    print(f"max |logit| {scale:.3f}; q8_0 vs f32 (llama.cpp): max |diff|/max|logit| "
          f"{float(np.abs(logits['q8_0'] - logits['f32']).max()) / scale:.3e}")
    os.makedirs(OUT_DIR, exist_ok=True)
    out = os.path.join(OUT_DIR, "tiny-llada.safetensors")
    save_file({
        "input_ids": np.array(seqs, dtype=np.int64),
        "logits_f32": logits["f32"],
        "logits_q8_0": logits["q8_0"],
    }, out, metadata={"llama_cpp_python": llama_cpp.__version__})
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")


if __name__ == "__main__":
    main()
