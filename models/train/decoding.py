"""The reference dLLM decoding loops (NumPy, float64), Unmask's one Python implementation of them.

Written from the published algorithm descriptions (LLaDA `generate.py`, Dream `_sample`,
Fast-dLLM `get_transfer_index`), not from the Rust code. Two users:

* `tests/reference/decode_reference.py` runs them over the tiny random golden models
  (`tests/golden/{llada,dream}`, float64 NumPy forward) and records the trajectories the Rust test
  `engine/tests/decode_trajectories.rs` must reproduce step by step;
* `models/train/eval.py` runs `llada_generate` over the PyTorch embedded dLLMs; the Rust test
  `engine/tests/embedded_model.rs` checks our decoder against its generated ids.

A model is any object with `logits(ids) -> array [len(ids), vocab]` (one bidirectional forward
over the whole canvas). Everything here is at temperature 0 (no randomness), so a trajectory is
a pure function of the model. For every step that commits something the loops record which
positions were committed and with which token ids. Steps that commit nothing (a zero entry of the
transfer schedule) are not recorded and run no forward: a forward cannot change the result.

Tie rules (shared with the Rust engine): argmax takes the lowest token id; top-k orders by
confidence descending, ties by lower position first. Each trajectory carries `min_gap`, the
smallest margin that decided anything (top-1 vs top-2 logit of a committed token; the confidence
gap at the top-k cut), so cases decided by float noise can be spotted.

The default token ids (mask 255, EOS 254) are the tiny golden models'; callers with other
vocabularies pass `mask_id` / `eos`.
"""
import numpy as np

MASK = 255
EOS = 254
EOT = 253  # the tiny golden models have no EOT; tests pass 253 explicitly when they need one


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
                   logits_eos_inf=False, confidence_eos_eot_inf=False, eos=EOS, eot=None, mask_id=MASK,
                   shift=False):
    """LLaDA generate.py at temperature 0 with low_confidence remasking; with `threshold`
    the Fast-dLLM rule (commit top-1 plus every masked block position with conf >= threshold,
    loop until the block is full). `shift`: the model's `shift_logits` (row p-1 predicts token p,
    as Dream; our AR-converted dLLMs). Returns (generated ids, step records, min_gap)."""
    x = np.array(list(prompt) + [mask_id] * gen_length, dtype=np.int64)
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
        schedule = num_transfer_tokens(int((x[bs:be] == mask_id).sum()), spb)
        i = 0
        while True:
            masked = [p for p in range(bs, be) if x[p] == mask_id]
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
                row = np.asarray(logits[max(p - 1, 0) if shift else p], dtype=np.float64).copy()
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


def dream_generate(model, prompt, gen_length, steps, alg, eps=1e-3, block_length=None, threshold=None,
                   mask_id=MASK):
    """Dream _sample at temperature 0, alg_temp None; logits shifted (token p from row p-1).
    Blocks (block_length < gen_length) run the timestep schedule per block; the published
    Dream is the single-block case. With `threshold`, the Fast-dLLM rule replaces the schedule."""
    block_length = block_length or gen_length
    x = np.array(list(prompt) + [mask_id] * gen_length, dtype=np.int64)
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
            masked = [p for p in range(bs, be) if x[p] == mask_id]
            if not masked or (threshold is None and i >= spb):
                break
            k = dream_transfer_count(len(masked), i, spb, timesteps) if threshold is None else len(masked)
            i += 1
            if k == 0:
                continue
            raw = np.asarray(model.logits(x), dtype=np.float64)
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
