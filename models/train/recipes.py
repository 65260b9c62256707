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
`/work/ckpt/<model>/last.pt`, `--resume` continues with the exact data order (batch contents and
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


def llada_run(st, rows, val):
    stage2 = [r for r in rows if int(r["total_step"]) > 4500]
    t2 = float(stage2[-1]["elapsed_s"]) if stage2 else 0
    return f"""Stage 1 (earlier session, unchanged): 4,500 steps, 6,032 s on one CPU thread.
Stage 2 (this run): {st['this_run_steps']} steps ({st['total_steps_trained']} in total), {_fmt(t2)} of wall time
on one torch thread of the shared 2-core machine (the other engineers' builds kept the load average
at 10-20, so the run got roughly a fifth to a quarter of one core). Total training compute is well
inside the 2 CPU-hour budget. {_losses(stage2 or rows, val, 'LLaDA-weighted losses')}"""


RECIPES = {
    "tiny-llada": {
        "title": "Unmask's embedded default model (tiny dLLM)",
        "intro": """A tiny masked-diffusion language model with the **LLaDA architecture and weight layout**,
trained from scratch on CPU by `models/train/`. It is what `unmask chat` runs with no network and
the instrument the decoding and NPU work is measured on. Size: 4.45 M parameters, chosen for
steps per second on the shared 2-core CPU (below the 10-25 M the issue suggests): at the
0.07-0.19 steps/s this run measured, a larger model would have seen too few task examples to learn them.""",
        "chat": LLADA_CHAT,
        "recipe": DLLM_OBJECTIVE + """

* **Stage 1** (earlier session, `train_dllm.py` at commit 208eb2c, 4,500 steps): 32 sequences per
  step, 70 % of the steps half prose windows, then 30 % SFT-heavy; all tasks uniform, answer
  regions padded to 16-64 tokens. Result: chat format learned, word counting 0.92, the other tasks 0.
* **Stage 2** (this session, `train.py --init-from` the stage-1 weights, fresh optimizer, seed 2,
  peak lr 1.5e-3 after 100 warmup steps, the task mixture above, 48 chat examples per step).
  The run was re-planned twice to fit the CPU it actually got (resumed from its checkpoints,
  same data order): steps 0-100 with 6 prose windows + 4 "pt" examples per step (planned for
  1,600 steps); steps 100-300 with 3 prose windows + 2 "pt" (re-planned for 750 steps); steps
  300-410 SFT phase with 3 prose windows and 45 SFT examples, the cosine schedule shortened to
  end at step 410 (lr 3.3e-4 -> 7.5e-5). Stage 2 saw ~19.7 k task examples and ~0.2 M prose tokens.

""" + OPTIM,
        "run": llada_run,
        "reproduce": """From the repository root, `OMP_NUM_THREADS=1`, Python 3.11 with torch, tokenizers, safetensors, numpy:

```sh
python models/train/data.py                 # models/data/{val,test}.jsonl (seeded)
# stage 1 = the previously shipped weights (kept as tests/golden/llamacpp/tiny-llada-v0)
S1=tests/golden/llamacpp/tiny-llada-v0; A="--arch llada --init-from $S1 --lr 1.5e-3 --warmup 100 --chat 48 --sft-frac 0.5 --seed 2 --out models/tiny-llada"
python models/train/train.py $A --steps 1600 --prose1 6 --pt1 4 --prose2 3 --stop-step 100
python models/train/train.py $A --resume --steps 750 --prose1 3 --pt1 2 --prose2 2 --stop-step 300
python models/train/train.py $A --resume --steps 410 --prose1 3 --pt1 2 --prose2 3
python models/train/eval.py --model models/tiny-llada --n-per-task 6   # PyTorch eval + goldens for the Rust tests
UNMASK_QUALITY_MODELS=tiny-llada bench/run quality                      # the numbers above (our engine)
```
""",
        "limits": """Tiny, briefly trained, English-only, 19th-century-and-older prose (~37 % King James Bible).
Prose continuations are fluent-looking fragments at best. **It does not meet the issue's
targets** (>= 90 % on 3-digit addition and list reversal): with the CPU this session could get,
stage 2 was far too short. Continue it with the same code (e.g. the last command with a larger
`--steps`, or on a GPU with `--device cuda`) before using it to compare decoders.""",
    },
}


def run_text(start, losses):
    def f(st, rows, val):
        return f"""{st['this_run_steps']} steps from the {start} weights, {_fmt(_time(st, rows))} of wall time on one
torch thread of the shared 2-core machine (load average 10-20 from the other engineers' builds).
{_losses(rows, val, losses)}"""
    return f


ar_run = run_text("converted", "next-token losses")


AR_OBJECTIVE = """Next-token cross-entropy. Prose windows (128 tokens) and "pt" chat examples train every token;
"sft" examples train only the answer and its `<|eot_id|>` (the prompt is context only).
Chat examples are sorted by length and run in forwards of 16; only positions with a target go
through the LM head."""

RECIPES["tiny-ar"] = {
    "title": "autoregressive twin of tiny-llada (Llama architecture)",
    "intro": """A tiny causal LM with the **Llama architecture and HF layout** (`LlamaForCausalLM`), the same
size, tokenizer, chat template and data as `tiny-llada`. It is the AR baseline every decoding
comparison needs (same model, causal instead of masked diffusion) and the target model for
speculative AR decoding with `tiny-draft`.""",
    "chat": LLADA_CHAT + "\n\nThe Rust engine renders the same LLaDA/Llama-3 template for Llama models; the answer ends with `<|eot_id|>`.",
    "arch_note": """Initialisation: LLaDA's math without the causal mask is Llama's, so the weights start as
`tiny-llada`'s under Llama names (`train/upcycle.py --to llama`, a pure rename); training with
causal attention then turns it into an AR model. This reuses the dLLM's prose and task training
instead of spending the CPU budget learning English from scratch a second time.""",
    "recipe": AR_OBJECTIVE + """

100 steps from the converted weights, seed 3: 48 chat examples per step (2 "pt" + 4 prose
windows for the first 50 steps, then 3 prose windows + 48 SFT), peak lr 1e-3 after 15 warmup
steps, cosine to 5 %.

""" + OPTIM,
    "run": ar_run,
    "reproduce": """```sh
python models/train/upcycle.py --to llama --dense models/tiny-llada --out /work/ckpt/ar-from-dllm
python models/train/train.py --arch llama --init-from /work/ckpt/ar-from-dllm --steps 100 --lr 1e-3 --warmup 15 \\
  --prose1 4 --pt1 2 --prose2 3 --chat 48 --sft-frac 0.5 --seed 3 --ckpt-every 50 --eval-every 50 --out models/tiny-ar
python models/train/eval.py --model models/tiny-ar --n-per-task 6
UNMASK_QUALITY_MODELS=tiny-ar bench/run quality
```
""",
    "limits": """Tiny and very briefly trained (100 steps of causal training); the same limits as tiny-llada.""",
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

80 steps from the cut weights, seed 4, the AR twin's mixture, peak lr 1.5e-3 after 8 warmup steps.

""" + OPTIM,
    "run": run_text("cut", "next-token losses"),
    "reproduce": """```sh
python models/train/upcycle.py --to draft --keep-layers 2 --dense models/tiny-ar --out /work/ckpt/draft-init
python models/train/train.py --arch llama --init-from /work/ckpt/draft-init --steps 80 --lr 1.5e-3 --warmup 8 \\
  --prose1 4 --pt1 2 --prose2 3 --chat 48 --sft-frac 0.5 --seed 4 --ckpt-every 50 --eval-every 40 --out models/tiny-draft
python models/train/eval.py --model models/tiny-draft --n-per-task 6
UNMASK_QUALITY_MODELS=tiny-draft bench/run quality
```
""",
    "limits": """A draft: its own answers are worse than tiny-ar's; what matters is how often tiny-ar accepts its tokens.""",
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

30 steps from the upcycled weights, seed 5: 32 chat examples per step (2 "pt") + 2 prose windows,
peak lr 1e-3 after 4 warmup steps, cosine to 5 %, aux-loss weight 0.01.

""" + OPTIM,
    "run": run_text("upcycled", "LLaDA-weighted losses"),
    "reproduce": """```sh
python models/train/upcycle.py --dense models/tiny-llada --out /work/ckpt/moe-init
python models/train/train.py --arch llada_moe --init-from /work/ckpt/moe-init --steps 30 --lr 1e-3 --warmup 4 \\
  --prose1 2 --pt1 2 --prose2 2 --chat 32 --sft-frac 0.5 --seed 5 --ckpt-every 10 --eval-every 15 --log-every 5 \\
  --out models/tiny-llada-moe
python models/train/eval.py --model models/tiny-llada-moe --n-per-task 6
UNMASK_QUALITY_MODELS=tiny-llada-moe UNMASK_QUALITY_PER_TASK=10 bench/run quality
```
""",
    "limits": """Tiny, briefly trained; the same limits as tiny-llada.""",
}
