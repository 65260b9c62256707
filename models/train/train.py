"""Train Unmask's tiny models (one script for all four; PyTorch, CPU by default).

  --arch llada      masked-diffusion LM, LLaDA layout (tiny-llada)
  --arch llama      causal LM, Llama layout (tiny-ar, tiny-draft)
  --arch llada_moe  masked-diffusion LM, LLaDA-MoE layout (tiny-llada-moe): per-head QK norm,
                    softmax top-k router, Switch-style load-balancing loss (--aux-coef)

Diffusion objective (LLaDA): per sequence t ~ U(0, 1) (floored at 1e-3), each maskable token is
replaced by <|mdm_mask|> with probability t; cross-entropy on masked positions weighted by 1/t,
normalised by the number of maskable tokens of the sequence, averaged over the batch.
`--block-mask F` masks a fraction F of the sequences as semi-autoregressive decoding sees them
instead (clean left context, a block of 4-32 tokens masked at ratio t, everything after it
masked) and scores only the block's masked tokens (their mean loss); validation stays uniform.
With `"shift_logits": true` row p-1 predicts token p (position 0 is never masked).
AR objective: next-token cross-entropy, mean over the sequence's loss tokens.

Each step has two sub-batches (two forward passes, one optimizer step):
  * prose: `--prose-len`-token windows of train-split Gutenberg passages (all tokens trained)
  * chat:  chat-formatted synthetic tasks.  "pt" examples train every token (dLLM: all maskable);
           "sft" examples never mask the prompt (dLLM: answer + end-of-turn + <|endoftext|>
           padding to a canvas of `--region` tokens is maskable; AR: loss on answer + end-of-turn).
  phase 1 (first 1 - sft_frac of the steps): --prose1 prose windows, --pt1 pt, rest sft;
  phase 2: --prose2 prose windows, rest sft.
Batch contents and masks are a pure function of (seed, step): --resume reproduces the data order.
Checkpoints (f32 model + optimizer + step + rng) go to --ckpt-dir; the bf16 HF-format export to --out.

Only the positions that carry loss go through the LM head (identical loss, less compute).

Usage (from the repository root): python -m models.train.train --arch llada --out models/tiny-llada ...
Paths recorded in trainer_state.json are relative to the repository when they lie inside it.
"""
import argparse
import csv
import datetime as dt
import hashlib
import json
import math
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from tokenizers import Tokenizer  # noqa: E402

from . import data, paths, skills  # noqa: E402
from .model import TinyConfig, build, load_hf, save_hf  # noqa: E402

EPS = 1e-3
MASK_ID, EOS_ID = 2, 1
DEFAULT_TOKENIZER = os.path.join(paths.MODELS, "tiny-llada", "tokenizer.json")
PATH_ARGS = ("ckpt_dir", "out", "tokenizer", "init_from", "corpus")
DLLM_GEN_CFG = {"gen_length": 16, "block_length": 16, "steps": 16, "temperature": 0.0,
                "remasking": "low_confidence"}
AR_GEN_CFG = {"gen_length": 16, "temperature": 0.0}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="Train one of the tiny models (see the module docstring).")
    ap.add_argument("--arch", choices=["llada", "llama", "llada_moe"], default="llada")
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--prose1", type=int, default=12, help="prose windows per step, phase 1")
    ap.add_argument("--pt1", type=int, default=8, help="whole-sequence chat examples per step, phase 1")
    ap.add_argument("--prose2", type=int, default=6, help="prose windows per step, phase 2")
    ap.add_argument("--chat", type=int, default=48, help="chat examples per step")
    ap.add_argument("--prose-len", type=int, default=128)
    ap.add_argument("--region", type=int, default=16, help="dLLM SFT canvas (answer + padding) length")
    ap.add_argument("--region-long", type=int, default=None,
                    help="canvas of the long-answer families (default: --region)")
    ap.add_argument("--bucket", type=int, default=16, help="chat examples per forward (length-sorted)")
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--n-layers", type=int, default=8)
    ap.add_argument("--n-heads", type=int, default=4)
    ap.add_argument("--n-kv-heads", type=int, default=None)
    ap.add_argument("--mlp-hidden", type=int, default=768)
    ap.add_argument("--n-experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--expert-hidden", type=int, default=256)
    ap.add_argument("--aux-coef", type=float, default=0.01)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--max-seq", type=int, default=256,
                    help="context of a new model (the long-answer families need 512)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--mix", default=None,
                    help="task mixture overrides, e.g. add=0.4,reverse=0.2 (others keep data.TASK_WEIGHTS)")
    ap.add_argument("--skills", type=float, default=0.0,
                    help="fraction of chat examples drawn from the v2 skills (skills.py: any words, "
                         "paraphrased instructions, 1-4 digit arithmetic, chat intents); the rest from data.py")
    ap.add_argument("--skills-mix", default=None,
                    help="v2 family weights, e.g. reverse=0.2,chat=0.1 (others keep skills.TRAIN_WEIGHTS)")
    ap.add_argument("--multi-turn", type=float, default=0.0,
                    help="fraction of chat examples preceded by 1..--max-history earlier turns (drawn like "
                         "any example; some answers swapped for another's, as a wrong reply would be), so a "
                         "later turn of a conversation is answered as a first one")
    ap.add_argument("--max-history", type=int, default=3)
    ap.add_argument("--sft-frac", type=float, default=0.4)
    ap.add_argument("--block-mask", type=float, default=0.0,
                    help="dLLM: fraction of training sequences masked as semi-autoregressive decoding sees "
                         "them (clean left context, a partly masked block, everything after it masked), "
                         "scored on the block; validation stays uniform")
    ap.add_argument("--seed", type=int, default=data.TRAIN_SEED)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--bf16", action="store_true",
                    help="bf16 autocast for the forward/backward (f32 master weights and optimizer); on CPUs "
                         "with AMX this is several times faster")
    ap.add_argument("--ckpt-dir", default=None,
                    help="checkpoints and token caches (default models/ckpt/<out dir name>, git-ignored)")
    ap.add_argument("--out", default=os.path.join(paths.MODELS, "tiny-llada"))
    ap.add_argument("--tokenizer", default=DEFAULT_TOKENIZER)
    ap.add_argument("--corpus", default=None,
                    help="Gutenberg corpus folder (default: $UNMASK_CORPUS_DIR or shared/data/corpus/gutenberg "
                         "beside the repository)")
    ap.add_argument("--resume", action="store_true", help="resume from <ckpt-dir>/last.pt")
    ap.add_argument("--init-from", default=None, help="HF dir with model.safetensors to start from")
    ap.add_argument("--stop-at", default=None, help="UTC HH:MM; save and exit when reached")
    ap.add_argument("--stop-step", type=int, default=None, help="save and exit after this step")
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--ckpt-every", type=int, default=100)
    a = ap.parse_args(argv)
    if not 0.0 <= a.block_mask <= 1.0:
        ap.error(f"--block-mask must be in [0, 1], got {a.block_mask}")
    if not 0.0 <= a.multi_turn <= 1.0:
        ap.error(f"--multi-turn must be in [0, 1], got {a.multi_turn}")
    if a.max_history < 1:
        ap.error(f"--max-history must be at least 1, got {a.max_history}")
    if a.ckpt_dir is None:
        a.ckpt_dir = os.path.join(paths.CKPT_ROOT, os.path.basename(os.path.normpath(a.out)))
    if a.n_kv_heads is None:
        a.n_kv_heads = a.n_heads
    return a


def parse_mix(spec):
    """'add=0.4,reverse=0.2' -> {"add": 0.4, "reverse": 0.2}; unknown tasks are an error."""
    if not spec:
        return None
    out = {}
    for part in spec.split(","):
        name, _, w = part.partition("=")
        if name not in data.TASKS:
            raise SystemExit(f"--mix: unknown task {name!r} (tasks: {', '.join(data.TASKS)})")
        out[name] = float(w)
    return out


def parse_skills_mix(spec):
    """'reverse=0.2,chat=0.1' over skills.TRAIN_WEIGHTS; unknown families are an error."""
    out = dict(skills.TRAIN_WEIGHTS)
    for part in (spec.split(",") if spec else []):
        name, _, w = part.partition("=")
        if name not in skills.FAMILIES + skills.LONG_FAMILIES:
            raise SystemExit(f"--skills-mix: unknown family {name!r} "
                             f"(families: {', '.join(skills.FAMILIES + skills.LONG_FAMILIES)})")
        out[name] = float(w)
    return out


def template_of(arch):
    return "llada_moe" if arch == "llada_moe" else "llada"


# ---------------------------------------------------------------- data
class Batcher:
    def __init__(self, tok: Tokenizer, args, cache_dir, max_len):
        self.tok, self.args, self.seed = tok, args, args.seed
        self.max_len = max_len
        self.diffusion = args.arch != "llama"
        self.template = template_of(args.arch)
        self.eot = tok.token_to_id(data.ROLE_END if self.template == "llada_moe" else data.EOT)
        self.stream = self._prose_stream("train", cache_dir)
        self.tasks = data.TaskSampler(parse_mix(args.mix))
        self.skills = skills.SkillSampler(parse_skills_mix(args.skills_mix)) if args.skills > 0 else None

    def _prose_stream(self, split, cache_dir):
        h = hashlib.sha1(self.tok.to_str().encode()).hexdigest()[:12]
        path = os.path.join(cache_dir, f"prose_{split}_{h}.npy")
        if os.path.exists(path):
            return np.load(path)
        ids = []
        for doc in data.prose_documents(split):
            ids.extend(self.tok.encode(doc).ids)
            ids.append(EOS_ID)
        arr = np.asarray(ids, dtype=np.int32)
        os.makedirs(cache_dir, exist_ok=True)
        np.save(path, arr)
        return arr

    def prose(self, rng, n, stream=None):
        s = self.stream if stream is None else stream
        L = self.args.prose_len
        starts = rng.integers(0, len(s) - L, size=n)
        x = torch.from_numpy(np.stack([s[i:i + L] for i in starts]).astype(np.int64))
        return x, torch.ones_like(x, dtype=torch.bool)

    def encode_chat(self, msg, ans, region_len, history=()):
        p = self.tok.encode(data.chat_prompt(msg, self.template, history)).ids
        a = self.tok.encode(data.chat_answer(ans, self.template)).ids
        if self.diffusion:
            a = a + [EOS_ID] * (max(region_len, len(a)) - len(a))
        return p, a

    def region_len(self, rng, family=None):
        # Mostly the eval/chat canvas; sometimes other lengths so other canvases work too.
        region = self.args.region
        if family in skills.LONG_FAMILIES and self.args.region_long:
            region = self.args.region_long
        if rng.random() < 0.8:
            return region
        return int(rng.integers(8, 3 * region + 1))

    def example(self, rng):
        if self.skills is not None and rng.random() < self.args.skills:
            return self.skills.sample(rng)
        return self.tasks.sample(rng)

    def history(self, rng):
        """Earlier turns of a conversation; a fifth of their answers belong to another message, as a
        wrong reply would, so the last message is answered on its own whatever came before."""
        if self.args.multi_turn <= 0 or rng.random() >= self.args.multi_turn:
            return ()  # no draw at 0: single-turn recipes keep their exact data
        turns = [self.example(rng)[1:] for _ in range(int(rng.integers(1, self.args.max_history + 1)))]
        return tuple((m, self.example(rng)[2] if rng.random() < 0.2 else a) for m, a in turns)

    def chat(self, rng, kinds):
        """Chat examples in length buckets (sorted, `--bucket` per forward) so little is padded."""
        seqs = []
        for kind in kinds:
            while True:
                family, msg, ans = self.example(rng)
                history = self.history(rng)
                p, a = self.encode_chat(msg, ans, self.region_len(rng, family), history)
                if len(p) + len(a) <= self.max_len:
                    break
                # A canvas past the model's context is trimmed to it, or the example redrawn.
                bare = len(self.encode_chat(msg, ans, 0)[1])
                if len(p) + bare <= self.max_len:
                    a = a[:self.max_len - len(p)]
                    break
            seqs.append((p, a, kind))
        seqs.sort(key=lambda s: len(s[0]) + len(s[1]))
        k = self.args.bucket
        return [self.pack(seqs[i:i + k]) for i in range(0, len(seqs), k)]

    def pack(self, seqs):
        """ids [n, L] (EOS padded) and the positions that carry loss (dLLM: maskable)."""
        L = max(len(p) + len(a) for p, a, _ in seqs)
        ids = torch.full((len(seqs), L), EOS_ID, dtype=torch.long)
        lossy = torch.zeros((len(seqs), L), dtype=torch.bool)
        for i, (p, a, kind) in enumerate(seqs):
            full = p + a
            ids[i, :len(full)] = torch.tensor(full)
            if self.diffusion:
                # pt: everything; sft: the answer region incl. the batch's trailing EOS padding
                lossy[i, 0 if kind == "pt" else len(p):] = True
            else:
                lossy[i, (1 if kind == "pt" else len(p)):len(full)] = True
        return ids, lossy

    def step_batch(self, step, sft_phase):
        a = self.args
        rng = np.random.default_rng([self.seed, step])
        n_prose = a.prose2 if sft_phase else a.prose1
        n_pt = 0 if sft_phase else a.pt1
        kinds = ["pt"] * n_pt + ["sft"] * (a.chat - n_pt)
        prose = [self.prose(rng, n_prose)] if n_prose else []
        return prose, (self.chat(rng, kinds) if kinds else [])


BLOCK_SIZES = (4, 8, 16, 32)


def block_decode_masks(maskable, t, gen):
    """Masks shaped like semi-autoregressive decoding: per sequence, a block of B maskable tokens
    (B from BLOCK_SIZES) starting at a random maskable token is masked at ratio t, every maskable
    token after it is masked, the ones before it are clean. Returns (masked, scored): the input
    mask and the block's masked tokens (the only rows decoding commits from)."""
    b, L = maskable.shape
    masked = torch.zeros(b, L, dtype=torch.bool)
    scored = torch.zeros(b, L, dtype=torch.bool)
    for i in range(b):
        idx = maskable[i].nonzero().flatten()
        if idx.numel() == 0:
            continue
        size = BLOCK_SIZES[int(torch.randint(len(BLOCK_SIZES), (1,), generator=gen))]
        start = int(torch.randint(idx.numel(), (1,), generator=gen))
        block = idx[start:start + size]
        pick = torch.rand(block.numel(), generator=gen) < t[i]
        if not pick.any():
            pick[int(torch.randint(block.numel(), (1,), generator=gen))] = True
        masked[i, block[pick]] = True
        scored[i, block[pick]] = True
        masked[i, idx[start + size:]] = True
    return masked, scored


def diffusion_loss(model, ids, maskable, gen, device, block_frac=0.0):
    """LLaDA loss. Returns (sum over sequences of per-sequence loss, n, correct, n masked).

    With `block_frac` > 0 that fraction of sequences is masked as semi-autoregressive decoding
    sees a canvas (`block_decode_masks`: clean left context, the current block partly masked,
    everything after it masked) and scored on the block only: the mean loss of the block's masked
    tokens (a 1/t weight there would be unbounded: a block of 4 at t = 0.01 still has its one
    forced mask), the scale of the uniform loss (mean token loss per sequence in expectation)."""
    b, L = ids.shape
    t = torch.rand(b, generator=gen)
    p_mask = ((1 - EPS) * t + EPS)[:, None].expand(b, L)
    masked = (torch.rand(b, L, generator=gen) < p_mask) & maskable
    scored = masked.clone()
    denom = maskable.sum(1).clamp(min=1).float()
    inv_weight = p_mask * denom[:, None]
    if block_frac > 0:
        as_block = torch.rand(b, generator=gen) < block_frac
        if as_block.any():
            bm, bs = block_decode_masks(maskable[as_block], p_mask[as_block, 0], gen)
            masked[as_block], scored[as_block] = bm, bs
            inv_weight = inv_weight.clone()
            inv_weight[as_block] = bs.sum(1, keepdim=True).clamp(min=1).float()
    if model.cfg.shift_logits:
        masked[:, 0] = False   # row p-1 predicts token p: position 0 (BOS) has no row to come from
        scored[:, 0] = False
    if not scored.any():   # keep every sequence's loss defined
        last = maskable[0].nonzero()[-1]
        masked[0, last] = scored[0, last] = True
    noisy = torch.where(masked, torch.full_like(ids, MASK_ID), ids)
    scored_d = scored.to(device)
    rows_d = scored_d
    if model.cfg.shift_logits:
        rows = torch.zeros_like(scored)
        rows[:, :-1] = scored[:, 1:]
        rows_d = rows.to(device)
    logits = model(noisy.to(device), rows=rows_d)
    tgt = ids.to(device)[scored_d]
    weight = (1.0 / inv_weight).to(device)[scored_d]
    ce = F.cross_entropy(logits.float(), tgt, reduction="none") * weight
    seq_of = torch.arange(b, device=device)[:, None].expand(b, L)[scored_d]
    per_seq = torch.zeros(b, device=device).index_add_(0, seq_of, ce)
    correct = (logits.argmax(-1) == tgt).sum().item()
    return per_seq.sum(), b, correct, int(scored.sum().item())


def ar_loss(model, ids, lossy, device):
    """Next-token loss at positions p with lossy[p] (predicted from row p-1)."""
    b, L = ids.shape
    rows = torch.zeros_like(lossy)
    rows[:, :-1] = lossy[:, 1:]
    rows_d = rows.to(device)
    logits = model(ids.to(device), rows=rows_d)
    tgt = ids[:, 1:][lossy[:, 1:]].to(device)
    ce = F.cross_entropy(logits.float(), tgt, reduction="none")
    seq_of = torch.arange(b, device=device)[:, None].expand(b, L)[rows_d]
    per_seq = torch.zeros(b, device=device).index_add_(0, seq_of, ce) / lossy[:, 1:].to(device).sum(1).clamp(min=1)
    correct = (logits.argmax(-1) == tgt).sum().item()
    return per_seq.sum(), b, correct, int(tgt.numel())


def part_loss(model, args, ids, lossy, gen, device, block_frac=0.0):
    if args.arch == "llama":
        return ar_loss(model, ids, lossy, device)
    return diffusion_loss(model, ids, lossy, gen, device, block_frac)


# ---------------------------------------------------------------- schedule / optim
def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    prog = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
    return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * prog)))


def make_optimizer(model, args):
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        emb = "wte" in n or "embed_tokens" in n
        (decay if p.dim() == 2 and not emb else no_decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": args.wd},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=args.lr, betas=(0.9, 0.95), eps=1e-8)


# ---------------------------------------------------------------- eval
@torch.no_grad()
def val_losses(model, batcher, val_stream, val_rows, args, device):
    model.eval()
    rng = np.random.default_rng([args.seed, 10**9])
    gen = torch.Generator().manual_seed(args.seed + 17)
    x, mk = batcher.prose(rng, 32, stream=val_stream)
    lp, n, c1, m1 = part_loss(model, args, x, mk, gen, device)
    seqs = []
    for r in val_rows[::4]:
        p, a = batcher.encode_chat(r["message"], r["answer"], args.region)
        seqs.append((p, a, "sft"))
    tot, cnt, c2, m2 = 0.0, 0, 0, 0
    for i in range(0, len(seqs), 50):
        ids, mk = batcher.pack(seqs[i:i + 50])
        l, k, c, m = part_loss(model, args, ids, mk, gen, device)
        tot, cnt, c2, m2 = tot + l.item(), cnt + k, c2 + c, m2 + m
    model.train()
    return lp.item() / n, tot / cnt, c1 / max(1, m1), c2 / max(1, m2)


# ---------------------------------------------------------------- main
def export(model, args, step_total, extra):
    save_hf(model, args.out)
    gen_cfg = AR_GEN_CFG if args.arch == "llama" else DLLM_GEN_CFG
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump(gen_cfg, f, indent=2)
        f.write("\n")
    with open(os.path.join(args.out, "trainer_state.json"), "w") as f:
        json.dump({"total_steps_trained": step_total, **extra}, f, indent=2)
        f.write("\n")


def new_model(args, tok):
    cfg = TinyConfig(arch=args.arch, d_model=args.d_model, n_layers=args.n_layers, n_heads=args.n_heads,
                     n_kv_heads=args.n_kv_heads, mlp_hidden_size=args.mlp_hidden,
                     vocab_size=tok.get_vocab_size(), max_sequence_length=args.max_seq, rope_theta=args.rope_theta,
                     eot_token_id=tok.token_to_id(data.ROLE_END if args.arch == "llada_moe" else data.EOT))
    if args.arch == "llada_moe":
        cfg.n_experts, cfg.top_k, cfg.expert_hidden = args.n_experts, args.top_k, args.expert_hidden
        cfg.mlp_hidden_size = args.expert_hidden
    return build(cfg)


def main():
    args = parse_args()
    if args.corpus:
        data.set_corpus_dir(args.corpus)
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    torch.manual_seed(args.seed)
    os.makedirs(args.ckpt_dir, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    tok = Tokenizer.from_file(args.tokenizer)
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        src = os.path.join(os.path.dirname(args.tokenizer), f)
        dst = os.path.join(args.out, f)
        if os.path.exists(src) and os.path.abspath(src) != os.path.abspath(dst):
            with open(src, "rb") as fi, open(dst, "wb") as fo:
                fo.write(fi.read())

    prior_steps = 0
    if args.init_from:
        model = load_hf(args.init_from)
        st = os.path.join(args.init_from, "trainer_state.json")
        if os.path.exists(st):
            prior_steps = json.load(open(st)).get("total_steps_trained", 0)
        print(f"init from {args.init_from} (prior steps {prior_steps})", flush=True)
    else:
        model = new_model(args, tok)
    model.to(device)
    opt = make_optimizer(model, args)
    start = 0
    ck_path = os.path.join(args.ckpt_dir, "last.pt")
    if args.resume:
        ck = torch.load(ck_path, weights_only=False, map_location=device)
        model = build(TinyConfig(**ck["cfg"])).to(device)
        model.load_state_dict(ck["model"])
        opt = make_optimizer(model, args)
        opt.load_state_dict(ck["opt"])
        torch.set_rng_state(ck["torch_rng"])
        start, prior_steps = ck["step"], ck.get("prior_steps", 0)
        print(f"resumed from {ck_path} at step {start}", flush=True)
    cfg = model.cfg
    print(f"params {model.num_params():,}  cfg {cfg}", flush=True)

    batcher = Batcher(tok, args, args.ckpt_dir, cfg.max_sequence_length)
    val_stream = batcher._prose_stream("val", args.ckpt_dir)
    val_rows = data.heldout_set("val")
    print(f"train prose tokens {len(batcher.stream):,}  val prose tokens {len(val_stream):,}", flush=True)

    log_path = os.path.join(args.out, "train_log.csv")
    new_log = not os.path.exists(log_path) or (start == 0 and not args.init_from)
    logf = open(log_path, "w" if new_log else "a", newline="")
    w = csv.writer(logf)
    if new_log:
        w.writerow(["step", "total_step", "elapsed_s", "lr", "loss", "loss_prose", "loss_chat", "aux",
                    "val_prose", "val_sft", "val_prose_acc", "val_sft_acc"])
    stop_at = None
    if args.stop_at:
        hh, mm = map(int, args.stop_at.split(":"))
        now = dt.datetime.now(dt.timezone.utc)
        stop_at = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
        if stop_at <= now:   # a time already past today means tomorrow's
            stop_at += dt.timedelta(days=1)

    elapsed_before = 0.0
    if args.resume:
        elapsed_before = ck.get("elapsed_s", 0.0)

    def save(step, elapsed, final=False):
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                    "cfg": cfg.__dict__, "torch_rng": torch.get_rng_state(), "args": vars(args),
                    "prior_steps": prior_steps, "elapsed_s": elapsed}, ck_path + ".tmp")
        os.replace(ck_path + ".tmp", ck_path)
        export(model, args, prior_steps + step,
               {"this_run_steps": step, "this_run_planned_steps": args.steps, "final": final,
                "train_seconds": round(elapsed), "params": model.num_params(),
                "args": {k: (paths.rel(v) if k in PATH_ARGS else v) for k, v in vars(args).items()}})

    model.train()
    t0 = time.time()
    acc = {"loss": 0.0, "prose": 0.0, "chat": 0.0, "aux": 0.0, "n": 0}
    step = start
    while step < args.steps:
        lr = lr_at(step, args)
        for g in opt.param_groups:
            g["lr"] = lr
        sft_phase = step >= int(args.steps * (1 - args.sft_frac))
        prose_parts, chat_parts = batcher.step_batch(step, sft_phase)
        gen = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
        opt.zero_grad(set_to_none=True)
        parts = prose_parts + chat_parts
        total_n = sum(p[0].shape[0] for p in parts)
        sums, aux_sum = [], 0.0
        for ids, mk in parts:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16):
                s, n, _, _ = part_loss(model, args, ids, mk, gen, device, args.block_mask)
            loss = s / total_n
            aux = model.aux_loss
            if aux is not None:
                loss = loss + args.aux_coef * aux * (n / total_n)
                aux_sum += aux.item() * n / total_n
            loss.backward()
            sums.append(s.item())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        n_pr = sum(p[0].shape[0] for p in prose_parts)
        lp = sum(sums[:len(prose_parts)]) / n_pr if n_pr else float("nan")
        acc["loss"] += sum(sums) / total_n
        acc["prose"] += lp
        acc["chat"] += sum(sums[len(prose_parts):]) / max(1, total_n - n_pr)
        acc["aux"] += aux_sum
        acc["n"] += 1
        do_eval = step % args.eval_every == 0 or step == args.steps
        el = time.time() - t0
        if step % args.log_every == 0 or do_eval:
            n = acc["n"]
            vals = ["", "", "", ""]
            if do_eval:
                vals = [f"{v:.4f}" for v in val_losses(model, batcher, val_stream, val_rows, args, device)]
            w.writerow([step, prior_steps + step, f"{elapsed_before + el:.0f}", f"{lr:.2e}",
                        f"{acc['loss']/n:.4f}", f"{acc['prose']/n:.4f}", f"{acc['chat']/n:.4f}",
                        f"{acc['aux']/n:.4f}", *vals])
            logf.flush()
            print(f"step {step} {el:.0f}s lr {lr:.2e} loss {acc['loss']/n:.4f} prose {acc['prose']/n:.4f} "
                  f"chat {acc['chat']/n:.4f} aux {acc['aux']/n:.3f} {'val ' + ' '.join(vals) if do_eval else ''} "
                  f"({(step - start) / el:.3f} st/s)", flush=True)
            acc = {"loss": 0.0, "prose": 0.0, "chat": 0.0, "aux": 0.0, "n": 0}
        if step % args.ckpt_every == 0:
            save(step, elapsed_before + el)
        if stop_at and dt.datetime.now(dt.timezone.utc) >= stop_at:
            print(f"stop-at {args.stop_at} reached at step {step}", flush=True)
            break
        if args.stop_step is not None and step >= args.stop_step:
            print(f"stop-step {args.stop_step} reached", flush=True)
            break
    save(step, elapsed_before + time.time() - t0, final=step >= args.steps)
    logf.close()
    print(f"done: {step} steps in {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
