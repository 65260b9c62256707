"""Golden decoding trajectories of the tiny random models, for `engine/tests/decode_trajectories.rs`.

The decoding loops themselves are `models/train/decoding.py` (the project's one Python reference
decoder, also used by the PyTorch eval of the embedded models); this script runs them over the
tiny golden models in `tests/golden/{llada,dream}` with the float64 NumPy forward pass of
`np_reference.py`, and writes the trajectories: for every step that commits something, which
positions were committed and with which token ids. Tie rules, `min_gap` and the skipped
zero-commit steps are described in `models/train/decoding.py`.

Usage (from anywhere; numpy + safetensors): python3 tests/reference/decode_reference.py
writes tests/golden/decode/{llada,llada_shifted,dream}_trajectories.json (one thread; deterministic
bytes); `llada_shifted` is the same LLaDA model read with `shift_logits` (row p-1 predicts token p)
"""
import json
import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one thread: bit-stable float64 sums

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)
import np_reference  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

# The decoder, re-exported under the names this script has always had.
from models.train.decoding import (  # noqa: E402,F401
    EOS, EOT, MASK, dream_confidence, dream_generate, dream_transfer_count, f32_linspace,
    llada_generate, num_transfer_tokens, order_by_confidence, softmax, top2_gap)


class Model:
    """A tiny checkpoint loaded once; `logits(ids)` is a bidirectional float64 forward."""

    def __init__(self, name):
        self.dir = os.path.join(ROOT, "tests", "golden", name)
        self.cfg = json.load(open(os.path.join(self.dir, "config.json")))
        self.W = {k: v.astype(np.float64) for k, v in load_file(os.path.join(self.dir, "model.safetensors")).items()}
        self.prompts = load_file(os.path.join(self.dir, "golden.safetensors"))["input_ids"].astype(np.int64)

    def logits(self, ids):
        ids = np.asarray(ids, dtype=np.int64)
        if self.cfg["model_type"] == "llada":
            return np_reference._forward_llada(self.cfg, self.W, ids)
        return np_reference._forward_hf(self.cfg, self.W, ids, causal=False)


# ----------------------------------------------------------------------------------- cases


def prompt_of(model, index, length):
    return [int(t) for t in model.prompts[index][:length]]


def llada_cases(model, shift=False):
    cases = []
    configs = [
        dict(gen_length=16, block_length=8, steps=16),
        dict(gen_length=16, block_length=16, steps=8),
        dict(gen_length=24, block_length=8, steps=12),
        dict(gen_length=16, block_length=8, steps=4),
        dict(gen_length=16, block_length=8, steps=16, logits_eos_inf=True),
        dict(gen_length=16, block_length=8, steps=16, confidence_eos_eot_inf=True, eot=EOT),
        # The random models never pick EOS, so these point "EOS"/"EOT" at tokens they do pick:
        # the logit ban and the confidence quirk (confidence 0 for such tokens) then change the
        # trajectory.
        dict(gen_length=16, block_length=8, steps=16, logits_eos_inf=True, eos=64),
        dict(gen_length=16, block_length=8, steps=8, confidence_eos_eot_inf=True, eos=3, eot=64),
        dict(gen_length=16, block_length=8, steps=16, threshold=0.1),
        dict(gen_length=24, block_length=24, steps=24, threshold=0.2),
    ]
    for pi, plen in [(0, 12), (1, 12), (2, 6)]:
        prompt = prompt_of(model, pi, plen)
        for c in configs:
            tokens, steps, gap = llada_generate(model, prompt, **c, shift=shift)
            cases.append({"prompt": prompt, "settings": c, "tokens": tokens, "steps": steps, "min_gap": gap})
    return cases


def dream_cases(model):
    cases = []
    configs = [
        dict(gen_length=16, steps=16, alg="maskgit_plus"),
        dict(gen_length=16, steps=8, alg="maskgit_plus"),
        dict(gen_length=16, steps=5, alg="topk_margin"),
        dict(gen_length=16, steps=16, alg="topk_margin"),
        dict(gen_length=16, steps=8, alg="entropy"),
        dict(gen_length=24, steps=10, alg="entropy"),
        dict(gen_length=16, steps=8, alg="maskgit_plus", block_length=8),
        dict(gen_length=16, steps=16, alg="maskgit_plus", threshold=0.3),
    ]
    for pi, plen in [(0, 12), (1, 12), (2, 6)]:
        prompt = prompt_of(model, pi, plen)
        for c in configs:
            tokens, steps, gap = dream_generate(model, prompt, **c)
            cases.append({"prompt": prompt, "settings": c, "tokens": tokens, "steps": steps, "min_gap": gap})
    return cases


def main():
    out_dir = os.path.join(ROOT, "tests", "golden", "decode")
    os.makedirs(out_dir, exist_ok=True)
    # `llada_shifted`: the same LLaDA model read with `shift_logits` (row p-1 predicts token p).
    for name, dir_name, make in [("llada", "llada", llada_cases),
                                 ("llada_shifted", "llada", lambda m: llada_cases(m, shift=True)),
                                 ("dream", "dream", dream_cases)]:
        model = Model(dir_name)
        cases = make(model)
        doc = {"model": f"tests/golden/{dir_name}", "mask_id": MASK, "eos_id": EOS, "temperature": 0.0,
               "generator": "tests/reference/decode_reference.py", "cases": cases}
        if name == "llada_shifted":
            doc["shift_logits"] = True
        path = os.path.join(out_dir, f"{name}_trajectories.json")
        with open(path, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")
        gaps = [c["min_gap"] for c in cases]
        multi = sum(1 for c in cases for s in c["steps"] if len(s["commits"]) > 1)
        print(f"{path}: {len(cases)} cases, smallest deciding gap {min(gaps):.2e}, multi-commit steps {multi}")


if __name__ == "__main__":
    main()
