"""Per-model text of the model cards (card.py fills in the measured numbers)."""

LLADA_CHAT = """LLaDA / Llama-3 style; generation starts right after the assistant header:

```
<|startoftext|><|start_header_id|>user<|end_header_id|>\\n\\n{msg}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\\n\\n
```

Special tokens (fixed ids): `<|startoftext|>`0 (BOS) `<|endoftext|>`1 (EOS and pad)
`<|mdm_mask|>`2 (mask) `<|start_header_id|>`3 `<|end_header_id|>`4 `<|eot_id|>`5 `<role>`6
`</role>`7 `<|role_end|>`8 `<|pad|>`9; `config.json` has `"eot_token_id": 5`."""

DLLM_OBJECTIVE = """LLaDA's objective: per sequence t ~ U(0, 1) (floored at 1e-3); each maskable token is replaced
by `<|mdm_mask|>` with probability t; cross-entropy on masked tokens weighted by 1/t, divided by
the number of maskable tokens of the sequence, averaged over the batch. Prose windows (128 tokens)
and "pt" chat examples are fully maskable (pretraining); "sft" examples never mask the prompt,
and their answer region = answer + end-of-turn + `<|endoftext|>` padding to 16 tokens (80 %) or a
random 8-48 (20 %) is maskable (LLaDA SFT with EOS padding). Chat examples are sorted by length
and run in forwards of 16 (little padding); only masked positions go through the LM head."""

OPTIM = """AdamW (betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices except the input embedding), linear
warmup then cosine to 5 % of the peak lr, grad clip 1.0, f32, 1 torch thread,
`torch.set_flush_denormal(True)`; checkpoints (model + optimizer + step + RNG) every 100 steps in
`models/ckpt/<model>/last.pt` (git-ignored; `--ckpt-dir`), `--resume` continues with the exact data order (batch contents and
masks are a function of (seed, step))."""


def _time(st, rows):
    return int(float(rows[-1]["elapsed_s"])) if rows else st.get("train_seconds", 0)


def _fmt(s):
    s = int(s)
    return f"{s // 3600} h {s % 3600 // 60:02d} min" if s >= 3600 else f"{s // 60} min"


def _losses(rows, val, what):
    tail = [r for r in rows[-5:]]
    lc = sum(float(r["loss_chat"]) for r in tail) / len(tail)
    lp = [float(r["loss_prose"]) for r in tail if r["loss_prose"] not in ("", "nan")]
    s = f"Final {what} (mean of the last {len(tail)} log rows): chat/SFT {lc:.3f}"
    if lp:
        s += f", prose {sum(lp) / len(lp):.3f}"
    if val:
        s += (f"; validation at step {val['step']}: prose {float(val['val_prose']):.3f}, SFT {float(val['val_sft']):.3f}, "
              f"token accuracy prose {float(val['val_prose_acc']) * 100:.1f} %, SFT answer region "
              f"{float(val['val_sft_acc']) * 100:.1f} %")
    return s + ". The full curve is in `train_log.csv`."


TINY_V2_MIX = "copy=0.15,reverse=0.16,sort=0.13,add=0.14,sub=0.12,kv=0.1,count=0.12,chat=0.08"


def tiny_llada_run(st, rows, val):
    t = _time(st, rows)
    return f"""Three stages on one 2-core VM (Xeon, AVX512-BF16, no AMX), 2026-12-05 to 07:

| stage | steps | wall time | CPU-hours |
|---|---|---|---|
| AR stage v2 (`models/stages/tiny-ar-v2`: four runs from `models/tiny-ar`, two torch threads) | 14,535 | ~3 h 0 min | ~6.0 |
| diffusion adaptation (one torch thread, beside another run) | 2,600 | 1 h 19 min | 1.3 |
| multi-turn adaptation (this export; two torch threads) | {st['this_run_steps']:,} | {_fmt(t)} | {2 * t / 3600:.1f} |

Plus `models/tiny-ar`'s own training before the AR stage (its card). Each run fits a session;
every one of them can resume from its checkpoint (`--resume`) with the same data order.
`train_log.csv` holds both diffusion runs (`total_step` counts on across them).
{_losses(rows, val, 'LLaDA-weighted losses')}"""


RECIPES = {
    "tiny-llada": {
        "title": "Unmask's embedded default model (tiny dLLM)",
        "intro": """A tiny masked-diffusion language model with the **LLaDA architecture and weight layout**,
trained on CPU by `models/train/`. It is what `unmask generate` and `unmask chat` run with no
network and the instrument the decoding and NPU work is measured on. Size: 4.45 M parameters,
chosen for steps per second on the 2-core CPU. This is the second version: trained on the v2
skill families (`train/skills.py`: any words, reworded instructions, 1-4 digit arithmetic,
counting, chat intents), it answers the prompts people type rather than only the formats of the
first version's generator, and (after a last multi-turn stage) answers a message in a conversation
as it answers it on its own. Its decoding (`generation_config.json`): a 32-token canvas in blocks
of 4, one token per step, stopping after the block that ends the answer (64 tokens, the training
canvas, scored 0.45 against 0.43 on 40 unseen prompts per family, within noise, and halves the
local server's throughput: `bench/run serve` 35 against 77 requests/s with 16 clients).""",
        "arch_note": """Recipe: **AR training first, then conversion to the LLaDA layout with the logit shift, then the
LLaDA objective.** `models/stages/tiny-ar-v2` (Llama layout, four runs from `models/tiny-ar` on
the v2 skill families; its README and `models/README.md` have the runs) was converted by
`train/upcycle.py --to llada --shift`: the same weights in LLaDA's layout with
`"shift_logits": true` in `config.json`, so the output row of position p-1 predicts token p, as
the AR head was trained to (Dream's convention; the engine and the PyTorch decoder pick rows so,
and GGUF exports keep it). Measured against the plain conversion (row p predicts p) with the same
adaptation: 0.29 vs 0.25 on the unseen set (`models/README.md`).""",
        "chat": LLADA_CHAT,
        "recipe": DLLM_OBJECTIVE.replace("padding to 16 tokens (80 %) or a\nrandom 8-48 (20 %)",
                                         "padding to the 64-token canvas (80 %) or a\nrandom 8 to 3x the canvas (20 %)") + f"""

Diffusion adaptation from the converted weights: seed 25, `--skills 0.95` with the AR stage's
mix ({TINY_V2_MIX}), 48 chat examples per step (the first 20 % with 4 "pt" + 2 prose windows,
then 48 SFT + 2 prose windows), canvas 64, peak lr 1e-3 after 100 warmup steps, cosine to 5 %
over 2,600 steps. A variant that masked half the sequences the way semi-autoregressive decoding
sees them (`--block-mask 0.5`) scored lower side by side (0.35 against 0.43 on the unseen set)
and was not used.

Multi-turn adaptation from those weights (the adapted model answered first turns only: asked
after one earlier exchange it scored 0.06 against 0.43 with the PyTorch decoder, 40 unseen
prompts per family, because every training example had been a single turn): 1,500 steps, seed
27, the same mix, 48 SFT examples + 2 prose windows per step, peak lr 4e-4 after 20 warmup steps,
cosine to 5 %, and `--multi-turn 0.4 --max-history 3`: 40 % of the examples follow 1-3 earlier
exchanges drawn like any example, a fifth of whose answers belong to another message (as a wrong
reply would), rendered as the engine renders a conversation. Afterwards, same prompts: 0.42 as a
second turn and 0.42 as a first (`train/eval.py --history 1`, 32 tokens in blocks of 4).

""" + OPTIM,
        "run": tiny_llada_run,
        "eval_note": """The PyTorch eval above is on the unseen set (`models/data/unseen.jsonl`, held-out words and
wordings) with the shipped decoding; its predictions are the goldens of
`engine/tests/embedded_model.rs`. Measured on the weights before the multi-turn stage: on the
first 100 unseen prompts per family (800 prompts) the PyTorch decoder scored 0.431 overall in
blocks of 4 and 0.405 in blocks of 32; left-to-right
decoding (blocks of 1) did not fix the list families (reverse / sort / copy 0.10 / 0.10 / 0.10
against 0.10 / 0.08 / 0.10 in blocks of 4 on the first 50 each): their errors are misspelt
unseen words, not the order in which positions are filled.""",
        "reproduce": f"""From the repository root, Python 3.11 with torch, tokenizers, safetensors, numpy; the AR stage's
commands are in `models/stages/tiny-ar-v2/README.md`.

```sh
python -m models.train.upcycle --to llada --shift --dense models/stages/tiny-ar-v2 --out models/ckpt/tiny-llada-v3-init
python -m models.train.train --arch llada --init-from models/ckpt/tiny-llada-v3-init \\
  --out models/tiny-llada --ckpt-dir models/ckpt/tiny-llada-v3 --steps 2600 --warmup 100 \\
  --lr 1e-3 --prose1 2 --pt1 4 --prose2 2 --chat 48 --sft-frac 0.8 --skills 0.95 --region 64 \\
  --skills-mix {TINY_V2_MIX} \\
  --seed 25 --threads 1
python -m models.train.train --arch llada --init-from models/tiny-llada \
  --out models/tiny-llada --ckpt-dir models/ckpt/tiny-llada-mt --steps 1500 --warmup 20 \
  --lr 4e-4 --prose1 2 --pt1 0 --prose2 2 --chat 48 --sft-frac 1.0 --skills 0.95 --region 64 \
  --multi-turn 0.4 --max-history 3 --skills-mix {TINY_V2_MIX} \
  --seed 27 --threads 2
# then set generation_config.json to gen_length 32, block_length 4, steps 32 (train.py writes 16)
# (the first run's train_log.csv rows go before the second's)
python -m models.train.eval --model models/tiny-llada --data models/data/unseen.jsonl --n-per-task 6
python -m models.train.eval --model models/tiny-llada --data models/data/unseen.jsonl --n-per-task 40 --history 1 --no-write
UNMASK_QUALITY_MODELS=tiny-llada,small-llada UNMASK_QUALITY_PER_FAMILY=100 UNMASK_QUALITY_LONG_PER_FAMILY=20 \
  UNMASK_QUALITY_TURN2_PER_FAMILY=50 bench/run quality
python -m models.train.card tiny-llada
```
""",
        "limits": """Tiny (4.45 M parameters) and trained for about 8.5 CPU-hours, English-only, 19th-century-and-older
prose. Far from the goal of 0.95 per unseen family (tables above): arithmetic, lookups, counting
and the chat intents are usable; reversing, sorting and copying lists of unseen words mostly fail
because made-up and rare words are misspelt mid-list. Answers are short (the long-answer
families are `small-llada`'s). On the first version's test-split formats ("Reverse: ...",
"Sort: ..." with the generator's common words, `continue` / `next` prose tasks) it scores below
the first version, which had been trained on exactly those formats. In a conversation each
message is answered on its own: it uses nothing said in earlier turns (follow-up questions such
as "and 3+3?" or "what about c?" are not a skill it was trained on), and its 256-token context
holds about six short exchanges (`unmask chat` and the app then leave the oldest out). The first
version's weights and card are in the git history.""",
    },
}


def run_text(start, losses, where="one\ntorch thread of the 2-core machine"):
    def f(st, rows, val):
        return f"""{st['this_run_steps']} steps from the {start} weights, {_fmt(_time(st, rows))} of wall time on {where}.
{_losses(rows, val, losses)}"""
    return f




AR_OBJECTIVE = """Next-token cross-entropy. Prose windows (128 tokens) and "pt" chat examples train every token;
"sft" examples train only the answer and its `<|eot_id|>` (the prompt is context only).
Chat examples are sorted by length and run in forwards of 16; only positions with a target go
through the LM head."""

def ar_run(st, rows, val):
    t = float(rows[-1]["elapsed_s"]) if rows else st.get("train_seconds", 0)
    return f"""{st['this_run_steps']} steps in the second December run ({st['total_steps_trained']} in total), {_fmt(t)} of wall time
on two torch threads of the 2-core machine (~2.8 steps/s); the first December run took 44 min on one thread.
{_losses(rows, val, 'next-token losses')}"""


RECIPES["tiny-ar"] = {
    "title": "autoregressive twin of tiny-llada (Llama architecture)",
    "intro": """A tiny causal LM with the **Llama architecture and HF layout** (`LlamaForCausalLM`), the same
size, tokenizer, chat template and data as `tiny-llada`. It is the AR baseline every decoding
comparison needs (same model, causal instead of masked diffusion), the target model for
speculative AR decoding with `tiny-draft`, and (at its step 1,350) the starting point of
`tiny-llada` itself.""",
    "chat": LLADA_CHAT + "\n\nThe Rust engine renders the same LLaDA/Llama-3 template for Llama models; the answer ends with `<|eot_id|>`.",
    "arch_note": """Initialisation: the earlier sessions' dLLM under Llama names (`train/upcycle.py --to llama`, a
pure rename: LLaDA's math without the causal mask is Llama's) trained 100 causal steps; this
session continued that model (the previous `models/tiny-ar`, commit 5712436).""",
    "recipe": AR_OBJECTIVE + """

December run, seed 3, task mixture `--mix` above: 64 SFT chat examples + 2 prose windows per
step, peak lr 1e-3 after 100 warmup steps, cosine to 5 %; planned for 5,000 steps, re-planned at
step 1,750 (resumed from its checkpoint, same data order) to 3,500 so that tiny-llada could have
both cores. Then a second December run (the numbers below): 2,800 steps from those weights on two
threads, seed 7, `--mix` add 0.50, reverse 0.12, sub 0.10, sort 0.08, kv 0.05, copy 0.04, next
0.04, continue 0.04, count 0.03, fresh optimizer, peak lr 1.5e-3 after 50 warmup steps (the
draft's lr, which had learned sums quickly), cosine to 5 %: addition 0.24 -> 1.00.

""" + OPTIM,
    "run": ar_run,
    "reproduce": """```sh
M="add=0.35,reverse=0.2,sub=0.1,sort=0.08,copy=0.05,kv=0.05,count=0.05,next=0.06,continue=0.06"
git show 5712436:models/tiny-ar/model.safetensors > /dev/null   # the starting weights (previous tiny-ar)
A="--arch llama --init-from models/tiny-ar --out models/ckpt/stage/tiny-ar --chat 64 --prose1 2 --pt1 0 --prose2 2 --sft-frac 1.0 --mix $M --lr 1e-3 --warmup 100 --seed 3 --eval-every 500 --log-every 50 --ckpt-every 250"
python -m models.train.train $A --steps 5000 --stop-step 1750   # (its step-1250 export started tiny-llada)
python -m models.train.train $A --steps 3500 --resume
cp models/ckpt/stage/tiny-ar/* models/tiny-ar/
M3="add=0.5,reverse=0.12,sub=0.1,sort=0.08,copy=0.04,kv=0.05,count=0.03,next=0.04,continue=0.04"
python -m models.train.train --arch llama --init-from models/tiny-ar --out models/tiny-ar --steps 2800 --chat 64 --prose1 2 \\
  --pt1 0 --prose2 2 --sft-frac 1.0 --mix $M3 --threads 2 --lr 1.5e-3 --warmup 50 --seed 7 --eval-every 700 --log-every 50 --ckpt-every 200
python -m models.train.eval --model models/tiny-ar --n-per-task 6
UNMASK_QUALITY_MODELS=tiny-ar bench/run quality
```
""",
    "limits": """Tiny and briefly trained; the same limits as tiny-llada.""",
}

RECIPES["tiny-draft"] = {
    "title": "draft model for speculative AR decoding",
    "intro": """A 2-layer causal LM (Llama architecture) with `tiny-ar`'s tokenizer, width and chat template:
the draft for speculative decoding with `tiny-ar` as target. Its transformer costs a third of
`tiny-ar`'s per token (2 of 6 layers); embeddings and LM head are the same size, so the
parameter count is 57 % of tiny-ar's.""",
    "chat": LLADA_CHAT,
    "arch_note": """Initialisation: `tiny-ar`'s embeddings, first two layers, final norm and LM head
(`train/upcycle.py --to draft --keep-layers 2`), then trained with the AR objective so the cut
model predicts well on its own (layer-dropped drafts share the target's representation, which
helps acceptance).""",
    "recipe": AR_OBJECTIVE + """

1,500 steps from the cut weights (of the December tiny-ar), seed 5, the AR twin's `--mix`, 64 SFT
chat examples + 2 prose windows per step, peak lr 1.5e-3 after 50 warmup steps, cosine to 5 %.

""" + OPTIM,
    "run": run_text("cut", "next-token losses"),
    "reproduce": """```sh
M="add=0.35,reverse=0.2,sub=0.1,sort=0.08,copy=0.05,kv=0.05,count=0.05,next=0.06,continue=0.06"
python -m models.train.upcycle --to draft --keep-layers 2 --dense models/tiny-ar --out models/ckpt/draft-init
python -m models.train.train --arch llama --init-from models/ckpt/draft-init --steps 1500 --lr 1.5e-3 --warmup 50 \\
  --chat 64 --prose1 2 --pt1 0 --prose2 2 --sft-frac 1.0 --mix $M --seed 5 --ckpt-every 250 --eval-every 500 --log-every 50 --out models/tiny-draft
python -m models.train.eval --model models/tiny-draft --n-per-task 6
UNMASK_QUALITY_MODELS=tiny-draft bench/run quality
```
""",
    "limits": """A draft: what matters is how often tiny-ar accepts its tokens. Its own answers are worse than
tiny-ar's (addition 0.80 after 1,500 steps at lr 1.5e-3, when tiny-ar was still at 0.24 -
which led to tiny-ar's second December run at that lr (addition 1.00).""",
}

RECIPES["tiny-llada-moe"] = {
    "title": "tiny LLaDA-MoE (mixture-of-experts dLLM)",
    "intro": """A tiny masked-diffusion LM with the **LLaDA-MoE architecture and HF layout**
(`LLaDAMoEModelLM`): every layer a routed MoE (8 SwiGLU experts, top-2, softmax router without
renormalisation), per-head RMSNorm on q and k, bidirectional attention, LLaDA-MoE's role-tag chat
template. It exercises the engine's MoE path (routing, expert gather, QK norm) on a model that
generates real text.""",
    "chat": """LLaDA-MoE's role tags (as the Rust engine renders them), generation after `<role>ASSISTANT</role>`:

```
<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>{msg}<|role_end|><role>ASSISTANT</role>
```

The answer ends with `<|role_end|>` (id 8, `eot_token_id` in config.json) followed by
`<|endoftext|>` padding; mask `<|mdm_mask|>` 2, EOS 1 (same tokenizer as tiny-llada).""",
    "arch_note": """Initialisation (sparse upcycling, `train/upcycle.py`): embeddings, attention and norms from
`tiny-llada`; every expert a copy of the layer's dense MLP plus 10 % noise, down projections
scaled by 8/2 so the near-uniform initial top-2 mixture reproduces the dense output; router
N(0, 1e-3); q/k norm weights set to the dense model's mean per-head q/k RMS. Then trained with
the dLLM recipe below, which also teaches it the LLaDA-MoE template. Load-balancing loss:
Switch-style `n_experts * sum_e(fraction of routed slots_e * mean router prob_e)`, weight 0.01.""",
    "recipe": DLLM_OBJECTIVE + """

2,000 steps from the upcycled weights (of the current tiny-llada), seed 5, tiny-llada's task
mixture: 32 chat examples per step, for the first 400 steps 2 of them "pt" + 2 prose windows,
then 32 SFT + 2 prose windows; peak lr 1e-3 after 50 warmup steps, cosine to 5 %, aux-loss
weight 0.01, two torch threads (~1.4 steps/s alone on the machine).

""" + OPTIM,
    "run": run_text("upcycled", "LLaDA-weighted losses",
                    "two\ntorch threads of the 2-core machine (partly shared with a Rust benchmark run)"),
    "reproduce": """```sh
M="add=0.45,reverse=0.15,sub=0.1,sort=0.08,copy=0.05,kv=0.05,count=0.04,next=0.04,continue=0.04"
python -m models.train.upcycle --dense models/tiny-llada --out models/ckpt/moe-init2
python -m models.train.train --arch llada_moe --init-from models/ckpt/moe-init2 --steps 2000 --threads 2 \\
  --chat 32 --prose1 2 --pt1 2 --prose2 2 --sft-frac 0.8 --mix $M --lr 1e-3 --warmup 50 --seed 5 \\
  --eval-every 250 --log-every 25 --ckpt-every 100 --out models/tiny-llada-moe
python -m models.train.eval --model models/tiny-llada-moe --n-per-task 6
UNMASK_QUALITY_MODELS=tiny-llada-moe bench/run quality
```
""",
    "limits": """Tiny, briefly trained; the same limits as tiny-llada (prose fragments; sorting 0.48 and key-value
lookup 0.30 weak). Addition 1.00 and reversal 0.86 on 50 held-out examples each (Rust engine).
The 30-step version before it (December's first) answered nothing right: the LLaDA-MoE template
and routing need on the order of 1,000 steps to learn.""",
}

SKILLS_MIX = "copy=0.25,reverse=0.2,sort=0.1,add=0.1,sub=0.08,kv=0.1,count=0.05,chat=0.07"
LONG_MIX = ("copy=0.13,reverse=0.1,sort=0.05,add=0.06,sub=0.05,kv=0.06,count=0.03,chat=0.05,"
            "long_reverse=0.09,long_sort=0.08,long_count=0.09,long_add_steps=0.1,long_copy=0.11")


def small_llada_run(st, rows, val):
    t = _time(st, rows)
    return f"""Three runs on one 2-core VM (AVX512-BF16, no AMX; `--bf16`, two torch threads), 2026-12-05:

| stage | steps | wall time | steps/s alone |
|---|---|---|---|
| AR pre-training (`small-ar`, from scratch) | 2,935 (two sessions of one 3,000-step schedule) | 13,788 s | 0.25-0.26 |
| diffusion adaptation (short answers, canvas 64) | 1,300 of 1,500 | 5,611 s | 0.255 |
| long-answer adaptation (canvas 64 / 256) | {st['this_run_steps']:,} | {t:,} s | ~0.13 |

About {(13788 + 5611 + t) / 3600:.1f} h of wall time on two cores, i.e. {2 * (13788 + 5611 + t) / 3600:.1f} CPU-hours,
each run within a session (the AR stage resumed once from its checkpoint with the same data order).
{_losses(rows, val, 'LLaDA-weighted losses of the last run')}"""


RECIPES["small-llada"] = {
    "title": "the bigger embedded dLLM (LLaDA architecture, 18.5 M parameters)",
    "intro": """A masked-diffusion LM with the **LLaDA architecture and weight layout**, four times tiny-llada's
size, trained on CPU by `models/train/` for what tiny-llada cannot do: words it has never seen,
reworded instructions, the chat replies, and answers of 64-256 tokens (long lists, counting,
column addition written out, copying a paragraph). Context 512 tokens. Its default decoding
(`generation_config.json`) is a 64-token canvas in blocks of 32, one token per step; long answers
need `--gen-length 256`.""",
    "arch_note": """Recipe that worked for tiny-llada, at this size: **AR pre-training, then conversion to the LLaDA
layout (`train/upcycle.py --to llada`, a rename: Llama's math without the causal mask), then the
LLaDA objective.** The AR stage (`models/stages/small-ar`, its README) trained from scratch on
prose plus chat examples of which 85 % are the v2 skill families (`train/skills.py`: words from
three pools with a quarter held out, two instruction wordings per family with one held out).""",
    "chat": LLADA_CHAT,
    "recipe": DLLM_OBJECTIVE.replace("padding to 16 tokens (80 %) or a\nrandom 8-48 (20 %)",
                                     "padding to the canvas (80 %) or a\nrandom 8 to 3x the canvas (20 %)") + f"""

Diffusion adaptation from the converted AR weights: seed 13, `--skills 0.85` with the AR stage's
mix ({SKILLS_MIX}), 64 chat examples per step (the first 40 % with 4 "pt" + 4 prose windows,
then 64 SFT + 2 prose windows), canvas 64, peak lr 5e-4 after 100 warmup steps, cosine to 5 %
over 1,500 steps (stopped at 1,300, lr near its floor). Then the long-answer adaptation from
those weights: a fresh optimizer, seed 17, `--skills 0.9` with {LONG_MIX}, 48 SFT chat examples
+ 2 prose windows per step, canvas 64 for the short families and 256 for the long ones
(`--region-long 256`; examples past the 512-token context are trimmed or redrawn), peak lr 3e-4
after 30 warmup steps, cosine to 5 % over 500 steps. bf16 autocast (f32 master weights and AdamW).

""" + OPTIM.replace("f32, 1 torch thread", "f32 master weights, 2 torch threads"),
    "run": small_llada_run,
    "eval_note": """The PyTorch eval above is on the unseen set (`models/data/unseen.jsonl`, held-out words and
wordings), with the model's own decoding (64 tokens, blocks of 32, 64 steps); its predictions are
the goldens of `engine/tests/embedded_model.rs`.""",
    "reproduce": f"""From the repository root, Python 3.11 with torch, tokenizers, safetensors, numpy; the AR stage's
commands are in `models/stages/small-ar/README.md`.

```sh
python -m models.train.upcycle --to llada --dense models/stages/small-ar --out models/ckpt/small-llada-init
python -m models.train.train --arch llada --init-from models/ckpt/small-llada-init \\
  --out models/ckpt/stage/small-llada --ckpt-dir models/ckpt/small-llada --steps 1500 --warmup 100 \\
  --lr 5e-4 --prose1 4 --pt1 4 --prose2 2 --chat 64 --sft-frac 0.6 --skills 0.85 --region 64 \\
  --skills-mix {SKILLS_MIX} \\
  --seed 13 --threads 2 --bf16 --eval-every 500 --ckpt-every 100 --stop-step 1300
python -m models.train.train --arch llada --init-from models/ckpt/stage/small-llada \\
  --out models/small-llada --ckpt-dir models/ckpt/small-llada-long --steps 500 --warmup 30 \\
  --lr 3e-4 --prose1 2 --pt1 0 --prose2 2 --chat 48 --sft-frac 1.0 --skills 0.9 --region 64 --region-long 256 \\
  --skills-mix {LONG_MIX} \\
  --seed 17 --threads 2 --bf16 --eval-every 250 --ckpt-every 50 --log-every 10
python -m models.train.eval --model models/small-llada --data models/data/unseen.jsonl --n-per-task 6 --threads 2
UNMASK_QUALITY_MODELS=tiny-llada,small-llada UNMASK_QUALITY_PER_FAMILY=50 UNMASK_QUALITY_LONG_PER_FAMILY=20 bench/run quality
python -m models.train.card small-llada
```
""",
    "limits": """Small and briefly trained (3.8 h of the AR objective and 2.7 h of the diffusion objective on
two cores), English-only, 19th-century-and-older prose. Exact match on unseen words is far from
the goal (tables above); copying and reversing unseen made-up words garbles them. No long answer
is exactly right yet: it writes the right kind of text (counting up from the first number, the
column-addition steps, the paragraph's first sentence) but loses the thread after a few dozen
tokens and often fills the canvas instead of ending. On the v1 test split's formats it is worse
than the first tiny-llada (3-digit addition in one 16-token block); the second tiny-llada scores
higher on the unseen set and gives ten times its right answers per second (`bench/run quality`,
both in one run), so tiny-llada is the default. Trained on single turns only, it answers a
conversation's later messages much worse than first ones (the second-turn table above);
tiny-llada's multi-turn stage (`train.py --multi-turn`) is the fix it has not had yet.""",
}
