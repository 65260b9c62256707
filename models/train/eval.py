"""PyTorch reference eval for Unmask's tiny models (a cross-check for the Rust engine, which runs
the official numbers: `bench/run quality`).

1. Task exact match on models/data/test.jsonl. The prompt is the example's `message` rendered
   with the model family's chat template (llada and llama: the stored `prompt`; llada_moe: role tags).
   * dLLMs (llada, llada_moe): LLaDA's reference decoding, `decoding.llada_generate` (the project's
     one reference decoder, shared with the golden trajectories of tests/reference/): canvas =
     prompt + gen_length masks, blocks of block_length left to right, steps / n_blocks steps per
     block, get_num_transfer_tokens per step (base = n // steps, the first n % steps steps +1),
     temperature 0 -> argmax, low_confidence remasking (softmax probability of the argmax in
     float64), top-k of the still-masked positions of the current block committed (ties: lower
     position first), never revised. One example at a time; the forward is the PyTorch model's.
   * AR (llama): greedy, one full causal forward per token (no cache), gen_length tokens at most,
     stopping after the first end-of-turn / <|endoftext|>.
   AR examples are batched only with prompts of equal token length (no padding), so each row is the
   unbatched computation. Answer = decoded text before the first end-of-turn / <|endoftext|>, stripped.
2. Prose on held-out (test split) windows, models/data/test_prose.json (written here if missing,
   read by the Rust bench too): dLLMs: masked-token accuracy at mask ratios 0.15 and 0.5 (one
   forward, argmax at masked positions); AR: perplexity (next-token NLL over each window).

Usage (from the repository root): python -m models.train.eval [--model models/tiny-llada] [--n-per-task 50]
Writes <model>/eval_results.json, <model>/eval_predictions.jsonl and, for dLLMs,
<model>/reference_forward.json (logits of one forward pass, for Rust numerical cross-checks).
"""
import argparse
import json
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

from . import data, paths  # noqa: E402
from .decoding import llada_generate  # noqa: E402
from .model import load_hf  # noqa: E402

MASK_ID, EOS_ID = 2, 1
DEFAULT_PROSE = os.path.join(paths.DATA_DIR, "test_prose.json")


class TorchLogits:
    """The `logits(ids)` view of a PyTorch dLLM that decoding.py expects: one forward over the
    whole canvas, float32 logits upcast to float64."""

    def __init__(self, model):
        self.model = model

    @torch.no_grad()
    def logits(self, ids):
        return self.model(torch.tensor([list(ids)], dtype=torch.long))[0].to(torch.float64).numpy()


def generate(model, prompt_ids, gen_length=16, block_length=16, steps=16, temperature=0.0,
             remasking="low_confidence"):
    """LLaDA reference decoding of one prompt (list of ids); returns the gen_length generated ids.
    The settings are a generation_config.json's; the reference decoder is deterministic, so only
    temperature 0 with low-confidence remasking exists."""
    if temperature != 0 or remasking != "low_confidence":
        raise SystemExit(f"the reference eval decodes at temperature 0 with low_confidence remasking, "
                         f"not temperature {temperature} / {remasking}")
    tokens, _, _ = llada_generate(TorchLogits(model), prompt_ids, gen_length, block_length, steps,
                                  mask_id=MASK_ID, eos=EOS_ID, shift=model.cfg.shift_logits)
    return tokens


@torch.no_grad()
def generate_ar(model, prompt, gen_length, stop_ids):
    """Greedy causal decoding; rows stop after their first stop token (later tokens are dropped)."""
    x = prompt.clone()
    done = torch.zeros(x.shape[0], dtype=torch.bool)
    for _ in range(gen_length):
        nxt = model(x)[:, -1].argmax(-1)
        x = torch.cat([x, nxt[:, None]], dim=1)
        done |= torch.isin(nxt, torch.tensor(stop_ids))
        if done.all():
            break
    out = []
    for row in x[:, prompt.shape[1]:].tolist():
        cut = next((i + 1 for i, t in enumerate(row) if t in stop_ids), len(row))
        out.append(row[:cut])
    return out


def extract_answer(tok, gen_ids, stop_ids):
    out = []
    for t in gen_ids:
        if t in stop_ids:
            break
        out.append(t)
    return tok.decode(out, skip_special_tokens=False).strip()


def template_of(cfg):
    return "llada_moe" if cfg.arch == "llada_moe" else "llada"


def prompt_of(row, cfg):
    history = tuple(tuple(t) for t in row.get("history", ()))
    return data.chat_prompt(row["message"], template_of(cfg), history)


def with_history(rows, turns):
    """Each row as the last message of a conversation whose `turns` earlier turns are other rows of
    the set with their right answers (a later turn must be answered as a first one is)."""
    n = len(rows)
    # offsets far apart in the (family-ordered) set, so earlier turns are mostly other families
    src = [[rows[(i + (j + 1) * (n // (turns + 1)) + j) % n] for j in range(turns)] for i in range(n)]
    return [dict(r, history=[(h["message"], h["answer"]) for h in src[i]]) for i, r in enumerate(rows)]


def task_eval(model, tok, rows, gen_cfg):
    cfg = model.cfg
    stop_ids = [cfg.eot_token_id, cfg.eos_token_id]
    enc = [tok.encode(prompt_of(r, cfg)).ids for r in rows]
    groups = {}
    for i, ids in enumerate(enc):
        groups.setdefault(len(ids), []).append(i)
    preds = [None] * len(rows)
    gen_ids = [None] * len(rows)
    for P, idxs in sorted(groups.items()):
        for c in range(0, len(idxs), 64):
            chunk = idxs[c:c + 64]
            if cfg.causal:
                prompt = torch.tensor([enc[i] for i in chunk], dtype=torch.long)
                outs = generate_ar(model, prompt, gen_cfg["gen_length"], stop_ids)
            else:
                outs = [generate(model, enc[i], **gen_cfg) for i in chunk]
            for j, i in enumerate(chunk):
                gen_ids[i] = outs[j]
                preds[i] = extract_answer(tok, outs[j], stop_ids)
    per = {}
    for r, p in zip(rows, preds):
        d = per.setdefault(r["task"], [0, 0])
        d[0] += int(p == r["answer"])
        d[1] += 1
    acc = {t: c / n for t, (c, n) in per.items()}
    acc["overall"] = sum(c for c, _ in per.values()) / sum(n for _, n in per.values())
    return acc, preds, gen_ids


def write_test_prose(tok, path, n_windows=48, seq_len=128, ratios=(0.15, 0.5), seed=0):
    """Held-out prose windows (test split) with fixed mask positions, shared with the Rust bench."""
    ids = []
    for doc in data.prose_documents("test"):
        ids.extend(tok.encode(doc).ids)
        ids.append(EOS_ID)
    stream = np.asarray(ids)
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(stream) - seq_len, size=n_windows)
    windows = [stream[s:s + seq_len].tolist() for s in starts]
    masks = {}
    for r in ratios:
        k = int(round(r * seq_len))
        masks[str(r)] = [sorted(rng.permutation(seq_len)[:k].tolist()) for _ in range(n_windows)]
    doc = {"note": "test-split Gutenberg windows (models/train/eval.py write_test_prose); token ids of "
                   "models/tiny-llada/tokenizer.json; masked positions per mask ratio",
           "seq_len": seq_len, "windows": windows, "masked_positions": masks}
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    return doc


def load_test_prose(tok, path=DEFAULT_PROSE):
    if os.path.exists(path):
        return json.load(open(path))
    return write_test_prose(tok, path)


@torch.no_grad()
def prose_eval(model, prose):
    x = torch.tensor(prose["windows"])
    if model.cfg.causal:
        nll, n = 0.0, 0
        for c in range(0, len(x), 16):
            lg = model(x[c:c + 16])
            nll += F.cross_entropy(lg[:, :-1].reshape(-1, lg.shape[-1]), x[c:c + 16, 1:].reshape(-1),
                                   reduction="sum").item()
            n += x[c:c + 16, 1:].numel()
        return {"perplexity": float(np.exp(nll / n)), "nll": nll / n, "n_tokens": n}
    res = {}
    for r, pos in prose["masked_positions"].items():
        masked = torch.zeros_like(x, dtype=torch.bool)
        for i, p in enumerate(pos):
            masked[i, p] = True
        noisy = torch.where(masked, torch.full_like(x, MASK_ID), x)
        correct, total, nll = 0, 0, 0.0
        for c in range(0, len(x), 16):
            lg = model(noisy[c:c + 16])
            m = masked[c:c + 16]
            correct += (lg[m].argmax(-1) == x[c:c + 16][m]).sum().item()
            nll += F.cross_entropy(lg[m], x[c:c + 16][m], reduction="sum").item()
            total += int(m.sum())
        res[f"mask{r}"] = {"acc": correct / total, "nll": nll / total, "n_tokens": total}
    return res


@torch.no_grad()
def reference_forward(model, tok, prompt, gen_length):
    """One forward pass on prompt + gen_length masks; small numbers for Rust logits cross-checks."""
    ids = tok.encode(prompt).ids + [MASK_ID] * gen_length
    lg = model(torch.tensor([ids]))[0].double()
    return {"prompt": prompt, "input_ids": ids,
            "argmax": lg.argmax(-1).tolist(),
            "logsumexp": [round(v, 6) for v in torch.logsumexp(lg, -1).tolist()],
            "logits_first8": [[round(v, 6) for v in row] for row in lg[:, :8].tolist()],
            "logits_pos_last_full": [round(v, 6) for v in lg[-1].tolist()]}


def main():
    ap = argparse.ArgumentParser(description="PyTorch reference eval of an embedded model (see the module docstring).")
    ap.add_argument("--model", default=os.path.join(paths.MODELS, "tiny-llada"))
    ap.add_argument("--data", default=os.path.join(paths.DATA_DIR, "test.jsonl"), help="held-out task set (jsonl)")
    ap.add_argument("--prose", default=DEFAULT_PROSE,
                    help="held-out prose windows (written from the corpus when missing)")
    ap.add_argument("--corpus", default=None,
                    help="Gutenberg corpus folder, only read to write --prose (default: $UNMASK_CORPUS_DIR or "
                         "shared/data/corpus/gutenberg beside the repository)")
    ap.add_argument("--n-per-task", type=int, default=50)
    ap.add_argument("--gen-length", type=int, default=None)
    ap.add_argument("--block-length", type=int, default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--tag", default="")
    ap.add_argument("--history", type=int, default=0,
                    help="earlier turns before each message (other rows with their answers)")
    args = ap.parse_args()
    if args.corpus:
        data.set_corpus_dir(args.corpus)
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)

    model = load_hf(args.model).eval()
    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    gen_cfg = json.load(open(os.path.join(args.model, "generation_config.json")))
    for k, a in (("gen_length", args.gen_length), ("block_length", args.block_length), ("steps", args.steps)):
        if a is not None:
            gen_cfg[k] = a
    if model.cfg.causal:
        gen_cfg = {"gen_length": gen_cfg["gen_length"]}
    rows = [json.loads(l) for l in open(args.data)]
    counts, sel = {}, []
    for r in rows:
        if counts.get(r["task"], 0) < args.n_per_task:
            counts[r["task"]] = counts.get(r["task"], 0) + 1
            sel.append(r)
    if args.history > 0:
        sel = with_history(sel, args.history)

    t0 = time.time()
    acc, preds, gen_ids = task_eval(model, tok, sel, gen_cfg)
    t_task = time.time() - t0
    t0 = time.time()
    prose = prose_eval(model, load_test_prose(tok, args.prose))
    t_prose = time.time() - t0
    result = {"model": paths.rel(args.model),
              "arch": model.cfg.arch, "params": model.num_params(),
              "data": os.path.relpath(os.path.abspath(args.data), paths.MODELS),
              "gen_config": gen_cfg, "history_turns": args.history, "n_examples": len(sel),
              "task_exact_match": acc,
              ("prose_perplexity" if model.cfg.causal else "prose_masked_token"): prose,
              "seconds": {"tasks": round(t_task, 1), "prose": round(t_prose, 1)}}
    print(json.dumps(result, indent=2))
    if not args.no_write:
        with open(os.path.join(args.model, f"eval_results{args.tag}.json"), "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        with open(os.path.join(args.model, f"eval_predictions{args.tag}.jsonl"), "w") as f:
            for r, p, g in zip(sel, preds, gen_ids):
                f.write(json.dumps({"task": r["task"], "prompt": prompt_of(r, model.cfg), "answer": r["answer"],
                                    "prediction": p, "correct": p == r["answer"],
                                    "generated_ids": g}) + "\n")
        if not model.cfg.causal:
            with open(os.path.join(args.model, f"reference_forward{args.tag}.json"), "w") as f:
                json.dump(reference_forward(model, tok, prompt_of(sel[0], model.cfg), gen_cfg["gen_length"]), f)
                f.write("\n")
    for r, p in list(zip(sel, preds))[::max(1, len(sel) // 18)]:
        print(f"[{r['task']}] {r['message']!r} -> {p!r} (gold {r['answer']!r})")


if __name__ == "__main__":
    main()
