"""Prompt-lookup drafting, measured offline on a target's greedy answers.

Reads the output of `engine/examples/greedy_outputs.rs` (one `{"id", "prompt_ids", "output_ids"}`
per line) and replays each answer as synchronous speculative decoding would with a drafter that
needs no model: at each round it finds the most recent earlier occurrence of the last n tokens of
the context (prompt + answer so far; n from `--n-max` down to `--n-min`) and proposes the up to k
tokens that followed it; the verifier accepts the leading proposals that equal the answer and adds
one token of its own. Reports tokens per verification (the round count a verifier would run) and
acceptance, overall and per task family (the id's prefix before the last '-').

    python -m models.train.lookup_drafts outputs.jsonl [--k 2 4 6] [--n-min 1] [--n-max 3]
"""

import argparse
import collections
import json


def propose(ctx, k, n_min, n_max):
    """Tokens after the most recent earlier match of the context's last n tokens (longest n first)."""
    end = len(ctx)
    for n in range(n_max, n_min - 1, -1):
        if end < n + 1:
            continue
        suffix = ctx[end - n:]
        for s in range(end - n - 1, -1, -1):
            if ctx[s:s + n] == suffix:
                return ctx[s + n:s + n + k]
    return []


def replay(prompt, answer, k, n_min, n_max):
    """(tokens, verifications, proposed, accepted) for one answer."""
    i = rounds = proposed = accepted = 0
    while i < len(answer):
        # The verifier's own token of the round must still fit, as in the engine.
        d = propose(prompt + answer[:i], k, n_min, n_max)[:max(0, len(answer) - i - 1)]
        ok = 0
        for j, t in enumerate(d):
            if answer[i + j] != t:
                break
            ok += 1
        proposed, accepted, rounds = proposed + len(d), accepted + ok, rounds + 1
        i += ok + 1
    return len(answer), rounds, proposed, accepted


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outputs", help="greedy_outputs.rs output (jsonl)")
    ap.add_argument("--k", type=int, nargs="+", default=[2, 4, 6], help="most proposals per round")
    ap.add_argument("--n-min", type=int, default=1)
    ap.add_argument("--n-max", type=int, default=3)
    a = ap.parse_args(argv)
    rows = [json.loads(line) for line in open(a.outputs) if line.strip()]
    for k in a.k:
        by = collections.defaultdict(lambda: [0, 0, 0, 0])
        for r in rows:
            fam = str(r["id"]).rsplit("-", 1)[0]
            for j, v in enumerate(replay(r["prompt_ids"], r["output_ids"], k, a.n_min, a.n_max)):
                by[fam][j] += v
        tot = [sum(v[j] for v in by.values()) for j in range(4)]
        fams = " ".join(f"{f} {v[0] / max(v[1], 1):.2f}" for f, v in sorted(by.items()))
        print(f"k={k} n={a.n_min}-{a.n_max}: {tot[0] / max(tot[1], 1):.2f} tokens per verification, "
              f"acceptance {tot[3] / max(tot[2], 1):.2f} ({len(rows)} answers) | {fams}")


if __name__ == "__main__":
    main()
