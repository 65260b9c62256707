"""Train the tiny LLaDA masked-diffusion LM on CPU.

Objective (LLaDA): per sequence t ~ U(eps, 1), each maskable token is replaced
by <|mdm_mask|> with probability t; cross-entropy on masked positions only,
weighted by 1/t, normalised by the number of maskable tokens of the sequence
(= sequence length for pretraining, = answer length for SFT), averaged over
the batch.

Each step has two sub-batches (two forward passes, summed loss):
  * prose: windows of `seq_len` tokens from train-split passages (all maskable)
  * chat:  chat-formatted task examples.  An example is either "pretrain"
           (whole sequence maskable) or "sft" (prompt never masked, only the
           answer region = answer + <|eot_id|> + <|endoftext|> padding).
Mixture: phase 1 (first 1-sft_frac of steps): prose 50%, chat-pretrain 25%,
sft 25%; phase 2: prose 20%, sft 80%.

Batch contents and masks are a pure function of (seed, step), so resuming
reproduces the exact data order.  Checkpoints (model + optimizer + step + rng)
go to --ckpt-dir; the HF-format export goes to --out.

Reproduce:  python models/train/train_dllm.py --steps 4000
Resume:     python models/train/train_dllm.py --steps 4000 --resume
Continue from the shipped model (new optimizer / schedule):
            python models/train/train_dllm.py --init-from models/tiny-llada --steps 20000 --seed 2
"""
import argparse
import csv
import datetime as dt
import hashlib
import json
import math
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
from model import LLaDATiny, TinyConfig, load_hf, save_hf  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

EPS = 1e-3
MASK_ID, EOS_ID = 2, 1
DEFAULT_OUT = os.path.join(data.MODELS, "tiny-llada")
GEN_CFG = {"gen_length": 32, "block_length": 32, "steps": 32, "temperature": 0.0,
           "remasking": "low_confidence"}


def parse_args(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--d-model", type=int, default=192)
    ap.add_argument("--n-layers", type=int, default=6)
    ap.add_argument("--n-heads", type=int, default=4)
    ap.add_argument("--mlp-hidden", type=int, default=576)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--sft-frac", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=data.TRAIN_SEED)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ckpt-dir", default="/work/ckpt/tiny-llada")
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--tokenizer", default=os.path.join(DEFAULT_OUT, "tokenizer.json"))
    ap.add_argument("--resume", action="store_true", help="resume from <ckpt-dir>/last.pt")
    ap.add_argument("--init-from", default=None, help="HF dir with model.safetensors to start from")
    ap.add_argument("--stop-at", default=None, help="UTC HH:MM; save and exit when reached")
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--ckpt-every", type=int, default=250)
    return ap.parse_args(argv)


# ---------------------------------------------------------------- data
class Batcher:
    def __init__(self, tok: Tokenizer, seq_len, seed, cache_dir):
        self.tok, self.seq_len, self.seed = tok, seq_len, seed
        self.stream = self._prose_stream("train", cache_dir)
        self.tasks = data.TaskSampler()

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
        starts = rng.integers(0, len(s) - self.seq_len, size=n)
        return torch.from_numpy(np.stack([s[i:i + self.seq_len] for i in starts]).astype(np.int64))

    def encode_chat(self, msg, ans, region_len):
        p = self.tok.encode(data.chat_prompt(msg)).ids
        a = self.tok.encode(data.chat_answer(ans)).ids
        region = max(region_len, len(a))
        return p, a + [EOS_ID] * (region - len(a))

    def chat(self, rng, kinds):
        """kinds: list of 'pt' / 'sft'. Returns ids [n,L], maskable [n,L] (bool)."""
        seqs = []
        for kind in kinds:
            _, msg, ans = self.tasks.sample(rng)
            region = int(rng.integers(16, 65))   # answer region length incl. EOS padding
            p, a = self.encode_chat(msg, ans, region)
            seqs.append((p, a, kind))
        return self.pack(seqs)

    def pack(self, seqs):
        L = min(self.seq_len, max(len(p) + len(a) for p, a, _ in seqs))
        ids = torch.full((len(seqs), L), EOS_ID, dtype=torch.long)
        maskable = torch.zeros((len(seqs), L), dtype=torch.bool)
        for i, (p, a, kind) in enumerate(seqs):
            full = (p + a)[:L]
            ids[i, :len(full)] = torch.tensor(full)
            if kind == "pt":
                maskable[i, :] = True
            else:
                maskable[i, len(p):] = True   # answer region + trailing EOS padding
        return ids, maskable

    def step_batch(self, step, batch, sft_phase):
        rng = np.random.default_rng([self.seed, step])
        if sft_phase:
            n_prose = round(batch * 0.2)
            kinds = ["sft"] * (batch - n_prose)
        else:
            n_prose = batch // 2
            n_pt = (batch - n_prose) // 2
            kinds = ["pt"] * n_pt + ["sft"] * (batch - n_prose - n_pt)
        parts = []
        if n_prose:
            x = self.prose(rng, n_prose)
            parts.append((x, torch.ones_like(x, dtype=torch.bool)))
        if kinds:
            parts.append(self.chat(rng, kinds))
        return parts


def diffusion_loss(model, ids, maskable, gen):
    """LLaDA loss. Returns (sum over sequences of per-sequence loss, n sequences, masked acc stats)."""
    b, L = ids.shape
    t = torch.rand(b, generator=gen)
    p_mask = ((1 - EPS) * t + EPS)[:, None].expand(b, L)
    masked = (torch.rand(b, L, generator=gen) < p_mask) & maskable
    noisy = torch.where(masked, torch.full_like(ids, MASK_ID), ids)
    logits = model(noisy)
    if masked.any():
        ce = F.cross_entropy(logits[masked], ids[masked], reduction="none") / p_mask[masked]
        per_tok = torch.zeros(b, L)
        per_tok[masked] = ce
        per_seq = per_tok.sum(1) / maskable.sum(1).clamp(min=1)
        correct = (logits[masked].argmax(-1) == ids[masked]).sum().item()
    else:
        per_seq = logits.sum() * 0.0 + torch.zeros(b)
        correct = 0
    return per_seq.sum(), b, correct, int(masked.sum().item())


# ---------------------------------------------------------------- schedule / optim
def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    prog = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
    return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * prog)))


def make_optimizer(model, args):
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if p.dim() == 2 and "wte" not in n else no_decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": args.wd},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=args.lr, betas=(0.9, 0.95), eps=1e-8)


# ---------------------------------------------------------------- eval
@torch.no_grad()
def val_losses(model, batcher, val_stream, val_rows, args):
    model.eval()
    rng = np.random.default_rng([args.seed, 10**9])
    gen = torch.Generator().manual_seed(args.seed + 17)
    x = batcher.prose(rng, 32, stream=val_stream)
    lp, n, c1, m1 = diffusion_loss(model, x, torch.ones_like(x, dtype=torch.bool), gen)
    seqs = []
    for r in val_rows[::4]:
        p, a = batcher.encode_chat(r["message"], r["answer"], 32)
        seqs.append((p, a, "sft"))
    tot, cnt, c2, m2 = 0.0, 0, 0, 0
    for i in range(0, len(seqs), 50):
        ids, mk = batcher.pack(seqs[i:i + 50])
        l, k, c, m = diffusion_loss(model, ids, mk, gen)
        tot, cnt, c2, m2 = tot + l.item(), cnt + k, c2 + c, m2 + m
    model.train()
    return lp.item() / n, tot / cnt, c1 / max(1, m1), c2 / max(1, m2)


# ---------------------------------------------------------------- main
def export(model, args, step_total, extra):
    save_hf(model, args.out)
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump(GEN_CFG, f, indent=2)
        f.write("\n")
    with open(os.path.join(args.out, "trainer_state.json"), "w") as f:
        json.dump({"total_steps_trained": step_total, **extra}, f, indent=2)
        f.write("\n")


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    torch.manual_seed(args.seed)
    os.makedirs(args.ckpt_dir, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    tok = Tokenizer.from_file(args.tokenizer)

    prior_steps = 0
    if args.init_from:
        model = load_hf(args.init_from)
        st = os.path.join(args.init_from, "trainer_state.json")
        if os.path.exists(st):
            prior_steps = json.load(open(st)).get("total_steps_trained", 0)
        print(f"init from {args.init_from} (prior steps {prior_steps})", flush=True)
    else:
        cfg = TinyConfig(d_model=args.d_model, n_layers=args.n_layers, n_heads=args.n_heads,
                         n_kv_heads=args.n_heads, mlp_hidden_size=args.mlp_hidden,
                         vocab_size=tok.get_vocab_size(), max_sequence_length=256)
        model = LLaDATiny(cfg)
    opt = make_optimizer(model, args)
    start = 0
    ck_path = os.path.join(args.ckpt_dir, "last.pt")
    if args.resume:
        ck = torch.load(ck_path, weights_only=False)
        model = LLaDATiny(TinyConfig(**ck["cfg"]))
        model.load_state_dict(ck["model"])
        opt = make_optimizer(model, args)
        opt.load_state_dict(ck["opt"])
        torch.set_rng_state(ck["torch_rng"])
        start, prior_steps = ck["step"], ck.get("prior_steps", 0)
        print(f"resumed from {ck_path} at step {start}", flush=True)
    cfg = model.cfg
    print(f"params {model.num_params():,}  cfg {cfg}", flush=True)

    batcher = Batcher(tok, args.seq_len, args.seed, args.ckpt_dir)
    val_stream = batcher._prose_stream("val", args.ckpt_dir)
    val_rows = data.heldout_set("val")
    print(f"train prose tokens {len(batcher.stream):,}  val prose tokens {len(val_stream):,}", flush=True)

    log_path = os.path.join(args.out, "train_log.csv")
    new_log = not os.path.exists(log_path) or (start == 0 and not args.init_from)
    logf = open(log_path, "w" if new_log else "a", newline="")
    w = csv.writer(logf)
    if new_log:
        w.writerow(["step", "total_step", "elapsed_s", "lr", "loss", "loss_prose", "loss_chat",
                    "val_prose", "val_sft", "val_prose_acc", "val_sft_acc"])
    stop_at = None
    if args.stop_at:
        hh, mm = map(int, args.stop_at.split(":"))
        now = dt.datetime.now(dt.timezone.utc)
        stop_at = now.replace(hour=hh, minute=mm, second=0, microsecond=0)

    def save(step, final=False):
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                    "cfg": cfg.__dict__, "torch_rng": torch.get_rng_state(), "args": vars(args),
                    "prior_steps": prior_steps}, ck_path + ".tmp")
        os.replace(ck_path + ".tmp", ck_path)
        export(model, args, prior_steps + step,
               {"this_run_steps": step, "this_run_planned_steps": args.steps, "final": final,
                "args": {k: v for k, v in vars(args).items()}})

    model.train()
    t0 = time.time()
    acc = {"loss": 0.0, "prose": 0.0, "chat": 0.0, "n": 0}
    step = start
    while step < args.steps:
        lr = lr_at(step, args)
        for g in opt.param_groups:
            g["lr"] = lr
        sft_phase = step >= int(args.steps * (1 - args.sft_frac))
        parts = batcher.step_batch(step, args.batch, sft_phase)
        gen = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
        opt.zero_grad(set_to_none=True)
        total_n = sum(p[0].shape[0] for p in parts)
        sub = []
        for ids, mk in parts:
            s, n, _, _ = diffusion_loss(model, ids, mk, gen)
            (s / total_n).backward()
            sub.append(s.item() / n)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        lp = sub[0] if len(parts) == 2 else float("nan")
        lc = sub[-1]
        acc["loss"] += sum(s * p[0].shape[0] for s, p in zip(sub, parts)) / total_n
        acc["prose"] += lp
        acc["chat"] += lc
        acc["n"] += 1
        do_eval = step % args.eval_every == 0 or step == args.steps
        if step % args.log_every == 0 or do_eval:
            n = acc["n"]
            vals = ["", "", "", ""]
            if do_eval:
                vals = [f"{v:.4f}" for v in val_losses(model, batcher, val_stream, val_rows, args)]
            el = time.time() - t0
            w.writerow([step, prior_steps + step, f"{el:.0f}", f"{lr:.2e}", f"{acc['loss']/n:.4f}",
                        f"{acc['prose']/n:.4f}", f"{acc['chat']/n:.4f}", *vals])
            logf.flush()
            print(f"step {step} {el:.0f}s lr {lr:.2e} loss {acc['loss']/n:.4f} prose {acc['prose']/n:.4f} "
                  f"chat {acc['chat']/n:.4f} {'val ' + ' '.join(vals) if do_eval else ''} "
                  f"({(step - start) / el:.3f} st/s)", flush=True)
            acc = {"loss": 0.0, "prose": 0.0, "chat": 0.0, "n": 0}
        if step % args.ckpt_every == 0:
            save(step)
        if stop_at and dt.datetime.now(dt.timezone.utc) >= stop_at:
            print(f"stop-at {args.stop_at} reached at step {step}", flush=True)
            break
    save(step, final=True)
    logf.close()
    print(f"done: {step} steps in {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
