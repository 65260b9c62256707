"""Seeded data for the tiny LLaDA model.

Prose: paragraphs ("passages") of the Gutenberg books, unwrapped. Each passage
is assigned to a split by a hash of (book, passage index):
  crc32 % 100 in [0, 2)  -> val,  [2, 4) -> test,  else -> train.
Training never sees val/test passages.

Synthetic tasks (exact answers): add, sub, reverse, sort, copy, kv, count,
continue, next.  Train examples come from an RNG seeded with (TRAIN_SEED, step, ...);
val / test sets come from separate seeds (VAL_SEED / TEST_SEED) and are written
to models/data/{val,test}.jsonl.  Training generation rejects any prompt that
appears in val or test.  "continue" examples use train passages for training
and test/val passages for the held-out sets.

Usage (from the repository root):
    python -m models.train.data [--corpus DIR] [--out-dir models/data]   # writes {val,test}.jsonl
The corpus folder defaults to $UNMASK_CORPUS_DIR, else shared/data/corpus/gutenberg beside the
repository (see paths.py); other modules call set_corpus_dir() with their --corpus argument.
"""
import argparse
import glob
import json
import os
import re
import zlib

import numpy as np

from . import paths

MODELS = paths.MODELS
DATA_DIR = paths.DATA_DIR
CORPUS_DIR = paths.default_corpus_dir()

TRAIN_SEED = 1234
VAL_SEED = 777001
TEST_SEED = 999001
N_PER_TASK_HELDOUT = 50

TASKS = ["add", "sub", "reverse", "sort", "copy", "kv", "count", "continue", "next"]
# Training mixture (sums to 1): weighted toward the tasks that need the most examples.
TASK_WEIGHTS = {"add": 0.32, "sub": 0.14, "reverse": 0.14, "sort": 0.10, "copy": 0.05, "kv": 0.06,
                "count": 0.05, "continue": 0.04, "next": 0.10}

# ---------------------------------------------------------------- chat format
BOS, EOS, MASK, SH, EH, EOT = (
    "<|startoftext|>", "<|endoftext|>", "<|mdm_mask|>",
    "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")
SPECIAL_TOKENS = [BOS, EOS, MASK, SH, EH, EOT, "<role>", "</role>", "<|role_end|>", "<|pad|>"]


ROLE, ROLE_CLOSE, ROLE_END = "<role>", "</role>", "<|role_end|>"
TEMPLATES = ("llada", "llada_moe")


def chat_prompt(msg, template="llada", history=()):
    """Prompt part of the family's chat template (generation starts right after), with earlier
    `history` turns ((user message, assistant answer) pairs) rendered before it exactly as the Rust
    engine's `ChatTemplate::render` does.
    llada: LLaDA's Llama-3 style headers (also used by the Llama twins, as the Rust engine does);
    llada_moe: LLaDA-MoE's role tags with its default system turn."""
    if template == "llada_moe":
        turns = "".join(f"{ROLE}HUMAN{ROLE_CLOSE}{u}{ROLE_END}{ROLE}ASSISTANT{ROLE_CLOSE}{a}{ROLE_END}"
                        for u, a in history)
        return (f"{ROLE}SYSTEM{ROLE_CLOSE}detailed thinking off{ROLE_END}{turns}"
                f"{ROLE}HUMAN{ROLE_CLOSE}{msg}{ROLE_END}{ROLE}ASSISTANT{ROLE_CLOSE}")
    turns = "".join(f"{SH}user{EH}\n\n{u}{EOT}{SH}assistant{EH}\n\n{a}{EOT}" for u, a in history)
    return f"{BOS}{turns}{SH}user{EH}\n\n{msg}{EOT}{SH}assistant{EH}\n\n"


def chat_answer(ans, template="llada"):
    """Answer part; the dLLM trainer appends <|endoftext|> padding up to the canvas length."""
    return f"{ans}{ROLE_END if template == 'llada_moe' else EOT}"


# ---------------------------------------------------------------- prose
def split_of(book, idx):
    h = zlib.crc32(f"{book}:{idx}".encode()) % 100
    if h < 2:
        return "val"
    if h < 4:
        return "test"
    return "train"


_passage_cache = None


def set_corpus_dir(path):
    """Read the Gutenberg books from `path` (a folder of *.txt) from now on."""
    global CORPUS_DIR, _passage_cache, _words_cache
    CORPUS_DIR = path
    _passage_cache = _words_cache = None


def load_passages():
    """Returns list of dicts {book, idx, split, text}; text is the unwrapped paragraph."""
    global _passage_cache
    if _passage_cache is not None:
        return _passage_cache
    out = []
    books = sorted(glob.glob(os.path.join(CORPUS_DIR, "*.txt")))
    if not books:
        raise SystemExit(f"no corpus: {CORPUS_DIR} has no *.txt (pass --corpus DIR or set UNMASK_CORPUS_DIR)")
    for path in books:
        book = os.path.basename(path)[:-4]
        with open(path, encoding="utf-8", errors="replace") as f:
            raw = f.read().replace("\r\n", "\n")
        paras = re.split(r"\n\s*\n", raw)
        idx = 0
        for p in paras:
            text = " ".join(p.split())
            if not text:
                continue
            out.append({"book": book, "idx": idx, "split": split_of(book, idx), "text": text})
            idx += 1
    _passage_cache = out
    return out


def prose_documents(split):
    """One string per book: the book's passages of `split` joined by blank lines."""
    docs = {}
    for p in load_passages():
        if p["split"] == split:
            docs.setdefault(p["book"], []).append(p["text"])
    return ["\n\n".join(v) for _, v in sorted(docs.items())]


# ---------------------------------------------------------------- word list
_words_cache = None


def word_list():
    """Common lowercase words (3-7 letters) from train passages, deterministic order."""
    global _words_cache
    if _words_cache is not None:
        return _words_cache
    counts = {}
    for p in load_passages():
        if p["split"] != "train":
            continue
        for w in re.findall(r"[A-Za-z]+", p["text"]):
            if w.islower() and 3 <= len(w) <= 7:
                counts[w] = counts.get(w, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    _words_cache = [w for w, _ in ranked[:400]]
    return _words_cache


# ---------------------------------------------------------------- tasks
def _words(rng, lo, hi, distinct=True):
    W = word_list()
    n = int(rng.integers(lo, hi + 1))
    if distinct:
        return [W[i] for i in rng.choice(len(W), size=n, replace=False)]
    return [W[i] for i in rng.integers(0, len(W), size=n)]


def gen_task(task, rng, passages=None):
    """Returns (message, answer) for `task` using numpy Generator `rng`."""
    if task == "add":
        a, b = int(rng.integers(100, 1000)), int(rng.integers(100, 1000))
        return f"What is {a}+{b}?", str(a + b)
    if task == "sub":
        a, b = int(rng.integers(100, 1000)), int(rng.integers(100, 1000))
        if b > a:
            a, b = b, a
        return f"What is {a}-{b}?", str(a - b)
    if task == "reverse":
        w = _words(rng, 3, 5)
        return "Reverse: " + " ".join(w), " ".join(reversed(w))
    if task == "sort":
        w = _words(rng, 3, 5)
        return "Sort: " + " ".join(w), " ".join(sorted(w))
    if task == "copy":
        w = _words(rng, 3, 6, distinct=False)
        return "Repeat: " + " ".join(w), " ".join(w)
    if task == "kv":
        n = int(rng.integers(3, 6))
        keys = [chr(ord("a") + int(i)) for i in rng.choice(26, size=n, replace=False)]
        vals = [int(v) for v in rng.integers(0, 10, size=n)]
        q = int(rng.integers(0, n))
        ctx = " ".join(f"{k}={v}" for k, v in zip(keys, vals))
        return f"{ctx}. What is {keys[q]}?", str(vals[q])
    if task == "count":
        w = _words(rng, 2, 9, distinct=False)
        return "How many words: " + " ".join(w), str(len(w))
    if task == "next":
        # "which word comes next" cloze: the word that follows 6-12 words of a passage
        # (the answer is the word without surrounding punctuation)
        while True:
            words = passages[int(rng.integers(0, len(passages)))]
            k = int(rng.integers(6, 13))
            start = int(rng.integers(0, max(1, len(words) - k)))
            nxt = re.sub(r"^\W+|\W+$", "", words[start + k])
            if nxt:
                return "Next word: " + " ".join(words[start:start + k]), nxt
    if task == "continue":
        # passages: list of word lists with >= 14 words
        words = passages[int(rng.integers(0, len(passages)))]
        k = int(rng.integers(6, 11))
        max_start = len(words) - k - 6
        start = int(rng.integers(0, max_start + 1)) if max_start > 0 else 0
        return ("Continue: " + " ".join(words[start:start + k]),
                " ".join(words[start + k:start + k + 6]))
    raise ValueError(task)


def continue_passages(split):
    return [p["text"].split() for p in load_passages()
            if p["split"] == split and len(p["text"].split()) >= 16]


def heldout_set(split, per_task=N_PER_TASK_HELDOUT, seed=None, exclude=()):
    """Deterministic val/test task set: `per_task` distinct prompts per task (messages in
    `exclude` are skipped)."""
    if seed is None:
        seed = VAL_SEED if split == "val" else TEST_SEED
    passages = continue_passages(split)
    rows = []
    for ti, task in enumerate(TASKS):
        rng = np.random.default_rng([seed, ti])
        seen = set(exclude)
        while len([r for r in rows if r["task"] == task]) < per_task:
            if task == "next":
                msg, ans = gen_task(task, rng, passages)
            elif task == "continue":
                # held-out continue prompts start at the beginning of a held-out passage
                words = passages[int(rng.integers(0, len(passages)))]
                k = 8
                msg, ans = "Continue: " + " ".join(words[:k]), " ".join(words[k:k + 6])
            else:
                msg, ans = gen_task(task, rng)
            if msg in seen:
                continue
            seen.add(msg)
            rows.append({"task": task, "message": msg, "prompt": chat_prompt(msg), "answer": ans})
    return rows


class TaskSampler:
    """Training task generator; excludes every val/test message."""

    def __init__(self, weights=None):
        self.passages = continue_passages("train")
        w = {**TASK_WEIGHTS, **(weights or {})}
        self.weights = np.array([w[t] for t in TASKS], dtype=np.float64)
        self.weights /= self.weights.sum()
        self.excluded = {r["message"] for s in ("val", "test") for r in heldout_set(s)}

    def sample(self, rng, task=None):
        while True:
            t = task or TASKS[int(rng.choice(len(TASKS), p=self.weights))]
            msg, ans = gen_task(t, rng, self.passages)
            if msg not in self.excluded:
                return t, msg, ans


def write_task_rows(path, rows):
    """A task set as jsonl: {task, prompt, answer, message} per line (what bench/src/tasks.rs reads)."""
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps({"task": r["task"], "prompt": r["prompt"], "answer": r["answer"],
                                "message": r["message"]}) + "\n")
    print(f"wrote {path}: {len(rows)} rows")


def write_heldout(out_dir=DATA_DIR):
    os.makedirs(out_dir, exist_ok=True)
    for split in ("val", "test"):
        rows = heldout_set(split)
        write_task_rows(os.path.join(out_dir, f"{split}.jsonl"), rows)


# A larger held-out set for paired comparisons (e.g. MoE capacity dropping on vs off): test-split
# passages, its own seed, no message shared with val or test.
EVAL_SEED = 555001
N_PER_TASK_EVAL = 300


def write_eval_set(out_dir=DATA_DIR, per_task=N_PER_TASK_EVAL):
    exclude = {r["message"] for s in ("val", "test") for r in heldout_set(s)}
    rows = heldout_set("test", per_task=per_task, seed=EVAL_SEED, exclude=exclude)
    write_task_rows(os.path.join(out_dir, "eval_large.jsonl"), rows)


def main():
    ap = argparse.ArgumentParser(description="Corpus statistics and the held-out task sets {val,test}.jsonl.")
    ap.add_argument("--corpus", default=CORPUS_DIR, help="folder of Gutenberg *.txt (default: %(default)s)")
    ap.add_argument("--out-dir", default=DATA_DIR, help="where {val,test}.jsonl go (default: models/data)")
    ap.add_argument("--eval-set", action="store_true",
                    help=f"also write eval_large.jsonl ({N_PER_TASK_EVAL} prompts per task, seed {EVAL_SEED})")
    a = ap.parse_args()
    set_corpus_dir(a.corpus)
    if a.eval_set:
        write_eval_set(a.out_dir)
    ps = load_passages()
    for s in ("train", "val", "test"):
        sel = [p for p in ps if p["split"] == s]
        print(s, len(sel), "passages", sum(len(p["text"]) for p in sel), "chars")
    print("words:", word_list()[:20])
    write_heldout(a.out_dir)
    rng = np.random.default_rng(0)
    ts = TaskSampler()
    for _ in range(8):
        print(ts.sample(rng))


if __name__ == "__main__":
    main()
