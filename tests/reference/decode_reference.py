"""Independent reference of the dLLM decoding loops, for golden trajectories.

Written from the published algorithm descriptions (LLaDA `generate.py`, Dream `_sample`,
Fast-dLLM `get_transfer_index`; see docs/shared `dllm-decoding.md` §2-§4), not from the Rust code.
The forward pass is the float64 NumPy model in `np_reference.py`, run over the tiny random
models in `tests/golden/{llada,dream}`.

Everything here is at temperature 0 (no randomness), so a trajectory is a pure function of the
model. For every step that commits something we record which positions were committed and
with which token ids; the Rust test `engine/tests/decode_trajectories.rs` must reproduce them
step by step. Steps that commit nothing (a zero entry of the transfer schedule) are not
recorded: the Rust engine skips their forward, which cannot change the result.

Tie rules (both sides): argmax takes the lowest token id; top-k orders by confidence
descending, ties by lower position first. Each record carries `min_gap`, the smallest
margin that decided anything (top-1 vs top-2 logit of a committed token; the confidence gap
at the top-k cut); f32 vs f64 forward noise is ~1e-6, so cases with tiny gaps are reported.

Usage: OMP_NUM_THREADS=1 /work/venv/bin/python tests/reference/decode_reference.py
writes tests/golden/decode/{llada,dream}_trajectories.json
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
import np_reference  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

MASK = 255
EOS = 254
EOT = 253  # the tiny models have no EOT; tests pass 253 explicitly when they need one


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


def softmax(x):
    x = x - np.max(x)
    e = np.exp(x)
    return e / e.sum()


def top2_gap(row):
    s = np.sort(row)[::-1]
    return float(s[0] - s[1])


def order_by_confidence(conf, positions):
    """Positions sorted by confidence descending, ties by position ascending."""
    return sorted(positions, key=lambda p: (-conf[p], p))


def num_transfer_tokens(n_mask, steps):
    """LLaDA get_num_transfer_tokens: base = n // steps, the first n % steps steps get one more."""
    base, rem = divmod(n_mask, steps)
    return [base + (1 if i < rem else 0) for i in range(steps)]


# ----------------------------------------------------------------------------------- LLaDA


def llada_generate(model, prompt, gen_length, block_length, steps, threshold=None,
                   logits_eos_inf=False, confidence_eos_eot_inf=False, eos=EOS, eot=None):
    """LLaDA generate.py at temperature 0 with low_confidence remasking; with `threshold`
    the Fast-dLLM rule (commit top-1 plus every masked block position with conf >= threshold,
    loop until the block is full)."""
    x = np.array(list(prompt) + [MASK] * gen_length, dtype=np.int64)
    lp = len(prompt)
    assert gen_length % block_length == 0
    num_blocks = gen_length // block_length
    assert steps % num_blocks == 0
    spb = steps // num_blocks
    record = []
    min_gap = np.inf
    step = 0
    for b in range(num_blocks):
        bs, be = lp + b * block_length, lp + (b + 1) * block_length
        schedule = num_transfer_tokens(int((x[bs:be] == MASK).sum()), spb)
        i = 0
        while True:
            masked = [p for p in range(bs, be) if x[p] == MASK]
            if not masked:
                break
            if threshold is None and i >= spb:
                break
            k = schedule[i] if threshold is None else len(masked)
            i += 1
            if k == 0:
                continue  # generate.py still runs a forward here; it commits nothing
            logits = model.logits(x)
            conf = {}
            tok = {}
            for p in masked:
                row = logits[p].copy()
                if logits_eos_inf:
                    row[eos] = -np.inf
                t = int(np.argmax(row))
                min_gap = min(min_gap, top2_gap(row))
                if confidence_eos_eot_inf:
                    # temperature 0: the noisy logits alias the clean ones, so both writes land.
                    row[eos] = -np.inf
                    if eot is not None:
                        row[eot] = -np.inf
                conf[p] = float(softmax(row)[t])
                tok[p] = t
            order = order_by_confidence(conf, masked)
            if threshold is None:
                chosen = order[:k]
                # Exact ties at confidence 0 (banned tokens) are decided by position on both sides.
                if k < len(order) and not conf[order[k - 1]] == conf[order[k]] == 0.0:
                    min_gap = min(min_gap, conf[order[k - 1]] - conf[order[k]])
            else:
                chosen = [order[0]] + [p for p in order[1:] if conf[p] >= threshold]
                for p in order[1:]:
                    min_gap = min(min_gap, abs(conf[p] - threshold))
            for p in chosen:
                x[p] = tok[p]
            record.append({"step": step, "block": [bs, be],
                           "commits": [[int(p), int(tok[p])] for p in sorted(chosen)]})
            step += 1
    return x[lp:].tolist(), record, float(min_gap)


# ----------------------------------------------------------------------------------- Dream


def f32_linspace(start, end, n):
    """torch.linspace's scalar formula in float32 (first half from start, second from end)."""
    start, end = np.float32(start), np.float32(end)
    step = np.float32((end - start) / np.float32(n - 1))
    half = n // 2
    return [np.float32(start + step * np.float32(i)) if i < half
            else np.float32(end - step * np.float32(n - 1 - i)) for i in range(n)]


def dream_transfer_count(n_mask, i, steps, timesteps):
    """int(n_mask * (1 - s/t)) in float32, everything on the last step."""
    if i == steps - 1:
        return n_mask
    t, s = timesteps[i], timesteps[i + 1]
    ratio = np.float32(np.float32(1.0) - np.float32(s / t))
    return int(np.float32(np.float32(n_mask) * ratio))


def dream_confidence(row, alg):
    """Dream sample_tokens at temperature 0 (no top-p / top-k): token = argmax prob."""
    p = softmax(row)
    t = int(np.argmax(p))
    if alg == "maskgit_plus":
        c = float(p[t])
    elif alg == "topk_margin":
        s = np.sort(p)[::-1]
        c = float(s[0] - s[1])
    elif alg == "entropy":
        c = float(np.sum(p * np.log(p + 1e-10)))
    else:
        raise ValueError(alg)
    return t, c


def dream_generate(model, prompt, gen_length, steps, alg, eps=1e-3, block_length=None, threshold=None):
    """Dream _sample at temperature 0, alg_temp None; logits shifted (token p from row p-1).
    Blocks (block_length < gen_length) run the timestep schedule per block; the published
    Dream is the single-block case. With `threshold`, the Fast-dLLM rule replaces the schedule."""
    block_length = block_length or gen_length
    x = np.array(list(prompt) + [MASK] * gen_length, dtype=np.int64)
    lp = len(prompt)
    num_blocks = gen_length // block_length
    spb = steps // num_blocks
    timesteps = f32_linspace(1.0, eps, spb + 1)
    record = []
    min_gap = np.inf
    step = 0
    for b in range(num_blocks):
        bs, be = lp + b * block_length, lp + (b + 1) * block_length
        i = 0
        while True:
            masked = [p for p in range(bs, be) if x[p] == MASK]
            if not masked or (threshold is None and i >= spb):
                break
            k = dream_transfer_count(len(masked), i, spb, timesteps) if threshold is None else len(masked)
            i += 1
            if k == 0:
                continue
            raw = model.logits(x)
            shifted = np.concatenate([raw[:1], raw[:-1]], axis=0)
            conf, tok = {}, {}
            for p in masked:
                tok[p], conf[p] = dream_confidence(shifted[p], alg)
                min_gap = min(min_gap, top2_gap(shifted[p]))
            order = order_by_confidence(conf, masked)
            if threshold is None:
                chosen = order[:k]
                if k < len(order):
                    min_gap = min(min_gap, conf[order[k - 1]] - conf[order[k]])
            else:
                chosen = [order[0]] + [p for p in order[1:] if conf[p] >= threshold]
                for p in order[1:]:
                    min_gap = min(min_gap, abs(conf[p] - threshold))
            for p in chosen:
                x[p] = tok[p]
            record.append({"step": step, "block": [bs, be],
                           "commits": [[int(p), int(tok[p])] for p in sorted(chosen)]})
            step += 1
    return x[lp:].tolist(), record, float(min_gap)


# ----------------------------------------------------------------------------------- cases


def prompt_of(model, index, length):
    return [int(t) for t in model.prompts[index][:length]]


def llada_cases(model):
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
            tokens, steps, gap = llada_generate(model, prompt, **c)
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
    for name, make in [("llada", llada_cases), ("dream", dream_cases)]:
        model = Model(name)
        cases = make(model)
        doc = {"model": f"tests/golden/{name}", "mask_id": MASK, "eos_id": EOS, "temperature": 0.0,
               "generator": "tests/reference/decode_reference.py", "cases": cases}
        path = os.path.join(out_dir, f"{name}_trajectories.json")
        with open(path, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")
        gaps = [c["min_gap"] for c in cases]
        multi = sum(1 for c in cases for s in c["steps"] if len(s["commits"]) > 1)
        print(f"{path}: {len(cases)} cases, smallest deciding gap {min(gaps):.2e}, multi-commit steps {multi}")


if __name__ == "__main__":
    main()
