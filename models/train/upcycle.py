"""Initialisations derived from a dense LLaDA checkpoint (the shipped tiny-llada).

`--to llada_moe` (default) -- sparse upcycling: a LLaDA-MoE model initialised from the dense model.

Every expert starts as a copy of the layer's dense SwiGLU MLP (plus small noise so experts can
diverge; down_proj scaled by n_experts / top_k so that, with the near-uniform initial router, the
top-k mixture ~ reproduces the dense output); the router starts near zero; embeddings, attention
and norms are copied under LLaDA-MoE's names. LLaDA-MoE has per-head RMSNorm on q and k, which
the dense model lacks: its weights start at the mean per-head RMS of q (resp. k) measured on
training prose, so attention logits keep roughly their scale. Training (train.py --init-from)
then adapts everything, including the LLaDA-MoE chat template.

`--to draft` -- a Llama model cut to its first `--keep-layers` layers (embeddings, final norm and
LM head kept): the starting point of the speculative-decoding draft, taken from the AR twin.

`--to llama` -- the same weights under Llama names (LLaDA's math minus the causal mask is Llama's),
as the starting point of the AR twin; training then makes it causal.

`--to llada` -- the reverse: a Llama (AR) checkpoint under LLaDA names, as the starting point of a
dLLM (AR-to-diffusion adaptation, as Dream initialises from Qwen; here without logit shift, so the
LLaDA layout and decoding stay exact); training then makes it bidirectional and mask-predicting.
With `--shift` the logits stay shifted as Dream's (row p-1 predicts token p, `shift_logits` in
config.json, read by the engine and decoded as LLaDA), so the AR model's next-token head keeps its
meaning: after 2,000 adaptation steps it scored above the plain conversion (models/README.md).

Usage (from the repository root; models/ckpt/ is git-ignored):
       python -m models.train.upcycle --dense models/tiny-llada --out models/ckpt/moe-init
       python -m models.train.upcycle --to llama --dense DIR --out models/ckpt/ar-init
       python -m models.train.upcycle --to llada --dense AR_DIR --out models/ckpt/dllm-from-ar
"""
import argparse
import json
import os

import numpy as np
import torch
from tokenizers import Tokenizer

from . import data, paths
from .model import TinyConfig, build, load_hf, save_hf


def main():
    ap = argparse.ArgumentParser(description="Initialise a model from another one (see the module docstring).")
    ap.add_argument("--dense", default=os.path.join(paths.MODELS, "tiny-llada"), help="source model directory")
    ap.add_argument("--out", default=os.path.join(paths.CKPT_ROOT, "moe-init"),
                    help="output directory (default models/ckpt/moe-init, git-ignored)")
    ap.add_argument("--corpus", default=None,
                    help="Gutenberg corpus folder, read by --to llada_moe for the q/k norm init "
                         "(default: $UNMASK_CORPUS_DIR or shared/data/corpus/gutenberg beside the repository)")
    ap.add_argument("--n-experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--noise", type=float, default=0.1, help="relative std of the expert noise")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--to", choices=["llada_moe", "llama", "llada", "draft"], default="llada_moe")
    ap.add_argument("--keep-layers", type=int, default=2)
    ap.add_argument("--shift", action="store_true",
                    help="--to llada: keep the AR head's meaning (row p-1 predicts token p, Dream's shift)")
    a = ap.parse_args()
    if a.corpus:
        data.set_corpus_dir(a.corpus)
    if a.to == "llama":
        return to_llama(a)
    if a.to == "llada":
        return to_llada(a)
    if a.to == "draft":
        return to_draft(a)
    torch.manual_seed(a.seed)
    dense = load_hf(a.dense).eval()
    dc = dense.cfg
    tok = Tokenizer.from_file(os.path.join(a.dense, "tokenizer.json"))
    cfg = TinyConfig(arch="llada_moe", d_model=dc.d_model, n_heads=dc.n_heads, n_kv_heads=dc.n_kv_heads,
                     n_layers=dc.n_layers, mlp_hidden_size=dc.mlp_hidden_size, vocab_size=dc.vocab_size,
                     max_sequence_length=dc.max_sequence_length, rope_theta=dc.rope_theta,
                     rms_norm_eps=dc.rms_norm_eps, eot_token_id=tok.token_to_id(data.ROLE_END),
                     n_experts=a.n_experts, top_k=a.top_k, expert_hidden=dc.mlp_hidden_size)
    moe = build(cfg)
    # q/k RMS per layer on a few training prose windows (through the dense model).
    doc = data.prose_documents("train")[3][:20000]
    ids = torch.tensor([tok.encode(doc).ids[:512]]).view(4, 128)
    rms = {}
    hooks = []
    for i, blk in enumerate(dense.model.transformer.blocks):
        def hook(mod, inp, out, i=i, which=None):
            pass
        for which in ("q_proj", "k_proj"):
            def h(mod, inp, out, i=i, which=which):
                hd = dc.head_dim
                rms[(i, which)] = out.view(-1, hd).pow(2).mean(-1).sqrt().mean().item()
            hooks.append(getattr(blk, which).register_forward_hook(h))
    with torch.no_grad():
        dense(ids)
    for h in hooks:
        h.remove()
    t = dense.model.transformer
    scale = a.n_experts / a.top_k
    with torch.no_grad():
        m = moe.model
        m.embed_tokens.weight.copy_(t.wte.weight)
        m.norm.weight.copy_(t.ln_f.weight)
        moe.lm_head.weight.copy_(t.ff_out.weight)
        for i, (blk, layer) in enumerate(zip(t.blocks, m.layers)):
            layer.input_layernorm.weight.copy_(blk.attn_norm.weight)
            layer.post_attention_layernorm.weight.copy_(blk.ff_norm.weight)
            at = layer.self_attn
            at.q_proj.weight.copy_(blk.q_proj.weight)
            at.k_proj.weight.copy_(blk.k_proj.weight)
            at.v_proj.weight.copy_(blk.v_proj.weight)
            at.o_proj.weight.copy_(blk.attn_out.weight)
            at.q_norm.weight.fill_(rms[(i, "q_proj")])
            at.k_norm.weight.fill_(rms[(i, "k_proj")])
            layer.mlp.gate.weight.normal_(0.0, 1e-3)
            for ex in layer.mlp.experts:
                for dst, src, s in ((ex.gate_proj, blk.ff_proj, 1.0), (ex.up_proj, blk.up_proj, 1.0),
                                    (ex.down_proj, blk.ff_out, scale)):
                    w = src.weight * s
                    dst.weight.copy_(w + a.noise * w.std() * torch.randn_like(w))
    save_hf(moe, a.out, dtype=torch.float32)
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        with open(os.path.join(a.dense, f), "rb") as fi, open(os.path.join(a.out, f), "wb") as fo:
            fo.write(fi.read())
    with open(os.path.join(a.out, "trainer_state.json"), "w") as f:
        json.dump({"total_steps_trained": 0, "upcycled_from": paths.rel(a.dense),
                   "qk_norm_init": {f"{k[0]}.{k[1]}": v for k, v in rms.items()}}, f, indent=2)
    with torch.no_grad():
        x = ids[:2]
        print("dense vs upcycled logits corr:",
              np.corrcoef(dense(x).flatten().numpy(), moe(x).flatten().numpy())[0, 1])
    print(f"params {moe.num_params():,} -> {a.out}")


def copy_tokenizer(src, dst):
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        with open(os.path.join(src, f), "rb") as fi, open(os.path.join(dst, f), "wb") as fo:
            fo.write(fi.read())


def to_draft(a):
    ar = load_hf(a.dense)
    assert ar.cfg.arch == "llama", "the draft is cut from a Llama model"
    cfg = TinyConfig(**{**ar.cfg.__dict__, "n_layers": a.keep_layers})
    draft = build(cfg)
    sd = {k: v for k, v in ar.state_dict().items()
          if not k.startswith("model.layers.") or int(k.split(".")[2]) < a.keep_layers}
    draft.load_state_dict(sd, strict=True)
    save_hf(draft, a.out, dtype=torch.float32)
    copy_tokenizer(a.dense, a.out)
    with open(os.path.join(a.out, "trainer_state.json"), "w") as f:
        json.dump({"total_steps_trained": 0, "cut_from": paths.rel(a.dense),
                   "kept_layers": a.keep_layers}, f, indent=2)
    print(f"params {draft.num_params():,} -> {a.out}")


def same_modules(layer, blk):
    """(Llama module, LLaDA module) pairs of one layer holding the same weight."""
    return ((layer.input_layernorm, blk.attn_norm), (layer.post_attention_layernorm, blk.ff_norm),
            (layer.self_attn.q_proj, blk.q_proj), (layer.self_attn.k_proj, blk.k_proj),
            (layer.self_attn.v_proj, blk.v_proj), (layer.self_attn.o_proj, blk.attn_out),
            (layer.mlp.gate_proj, blk.ff_proj), (layer.mlp.up_proj, blk.up_proj),
            (layer.mlp.down_proj, blk.ff_out))


def model_pairs(ar, dllm):
    """(Llama module, LLaDA module) pairs of two dense models holding the same weight."""
    t, m = dllm.model.transformer, ar.model
    yield from ((m.embed_tokens, t.wte), (m.norm, t.ln_f), (ar.lm_head, t.ff_out))
    for blk, layer in zip(t.blocks, m.layers):
        yield from same_modules(layer, blk)


def to_llama(a):
    dense = load_hf(a.dense)
    dc = dense.cfg
    cfg = TinyConfig(**{**dc.__dict__, "arch": "llama"})
    ar = build(cfg)
    with torch.no_grad():
        for dst, src in model_pairs(ar, dense):
            dst.weight.copy_(src.weight)
    save_hf(ar, a.out, dtype=torch.float32)
    copy_tokenizer(a.dense, a.out)
    with open(os.path.join(a.out, "trainer_state.json"), "w") as f:
        json.dump({"total_steps_trained": 0, "converted_from": paths.rel(a.dense)}, f, indent=2)
    print(f"params {ar.num_params():,} -> {a.out}")


def to_llada(a):
    ar = load_hf(a.dense)
    ac = ar.cfg
    tok = Tokenizer.from_file(os.path.join(a.dense, "tokenizer.json"))
    cfg = TinyConfig(**{**ac.__dict__, "arch": "llada", "eot_token_id": tok.token_to_id(data.EOT),
                        "shift_logits": a.shift})
    dllm = build(cfg)
    with torch.no_grad():
        for src, dst in model_pairs(ar, dllm):
            dst.weight.copy_(src.weight)
    save_hf(dllm, a.out, dtype=torch.float32)
    copy_tokenizer(a.dense, a.out)
    prior = {}
    st = os.path.join(a.dense, "trainer_state.json")
    if os.path.exists(st):
        prior = json.load(open(st))
    with open(os.path.join(a.out, "trainer_state.json"), "w") as f:
        json.dump({"total_steps_trained": 0, "converted_from": paths.rel(a.dense),
                   "source_total_steps": prior.get("total_steps_trained")}, f, indent=2)
    print(f"params {dllm.num_params():,} -> {a.out}")


if __name__ == "__main__":
    main()
