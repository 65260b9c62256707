#!/usr/bin/env python3
"""Build tiny random-initialised models of every architecture Unmask supports and
record reference logits, so the Rust engine can be tested without PyTorch.

Usage (from the repository root):

    python3 -m venv .venv
    .venv/bin/pip install torch transformers safetensors numpy gguf
    .venv/bin/python tests/reference/make_tiny_models.py            # all models
    .venv/bin/python tests/reference/make_tiny_models.py llada qwen3 # a subset

Writes `tests/golden/<name>/{config.json, model.safetensors, golden.safetensors}` for
name in llada, dream, llada_moe, llama, qwen2, qwen3, qwen3_moe, plus the GGUF export of the
tiny llama model under `tests/golden/gguf/` (`gguf`: Q8_0 only; set UNMASK_GGUF_F32=1 to also
write the uncommitted 430 KB `tiny-llama-f32.gguf`) and an F32 llama.cpp-style `qwen3moe`
GGUF of the qwen3_moe model there (`gguf_qwen3_moe`, merged expert tensors). See
`tests/golden/README.md` for the layout.

Everything is seeded and runs on one CPU thread; running it twice gives identical
bytes. Each model's transformers logits are cross-checked against the independent
NumPy float64 forward pass in `np_reference.py` (which reads the files as saved, in
each family's own checkpoint format) before anything is kept.

Tested with torch 2.15.0, transformers 5.24.0, safetensors, numpy 2.4.6, gguf 0.19.0.
"""
import json
import os
import sys

import numpy as np
import torch

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

from safetensors.torch import save_file  # noqa: E402
from transformers import (  # noqa: E402
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import np_reference  # noqa: E402

GOLDEN = os.path.normpath(os.path.join(HERE, "..", "golden"))

SEED = 20261130
VOCAB, HIDDEN, LAYERS, HEADS, INTER = 256, 64, 2, 4, 128
SEQ, N_PROMPTS, N_GREEDY = 12, 3, 16
MAX_POS = 128
# special ids of the tiny vocab; prompts are drawn from [0, FIRST_SPECIAL)
FIRST_SPECIAL = 250
BOS_ID, PAD_ID, EOS_ID, MASK_ID = 252, 253, 254, 255


# ----------------------------------------------------------------------------- helpers

def randomize_(model, seed):
    """Overwrite every parameter with seeded, deliberately non-trivial values.

    * matrices: N(0, 1/fan_in) so activations stay O(1) and attention is not uniform
    * embeddings: N(0, 1); lm_head: N(0, 9/hidden) so logits have std ~3 (clear argmax)
    * RMSNorm weights (incl. per-head q/k norms): 1 + 0.1 N(0, 1)
    * biases: 0.5 N(0, 1)
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            z = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith("bias"):
                p.copy_(0.5 * z)
            elif p.ndim == 1:  # every 1-D non-bias parameter here is an RMSNorm weight
                assert "norm" in name, name
                p.copy_(1.0 + 0.1 * z)
            elif "embed_tokens" in name:
                p.copy_(z)
            elif name.startswith("lm_head"):
                p.copy_(z * 3.0 / p.shape[-1] ** 0.5)
            else:  # Linear [out, in] or stacked experts [E, out, in]
                p.copy_(z / p.shape[-1] ** 0.5)


def make_bidirectional_(model):
    """Force full (non-causal) attention. Two independent switches:
    config.is_causal=False makes transformers build a bidirectional mask (None when
    there is no padding, and then eager attention adds no mask), and module.is_causal
    =False stops the SDPA path from setting is_causal=True. The callers also verify
    the effect numerically (position 0 must depend on the last token)."""
    model.config.is_causal = False
    model.model.config.is_causal = False
    n = 0
    for m in model.modules():
        if hasattr(m, "is_causal"):
            m.is_causal = False
            n += 1
    assert n == LAYERS, n


def prompts(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, FIRST_SPECIAL, (N_PROMPTS, SEQ), generator=g, dtype=torch.int64)


@torch.no_grad()
def hf_logits(model, ids):
    return model(input_ids=ids).logits.float()


@torch.no_grad()
def check_mask_semantics(model, ids, bidirectional):
    """Changing the last token must change position 0 iff attention is bidirectional."""
    a = hf_logits(model, ids[:1])
    ids2 = ids[:1].clone()
    ids2[0, -1] = (ids2[0, -1] + 1) % FIRST_SPECIAL
    b = hf_logits(model, ids2)
    d0 = (a[0, 0] - b[0, 0]).abs().max().item()
    if bidirectional:
        assert d0 > 1e-3, f"position 0 unchanged ({d0}): attention is still causal"
    else:
        assert d0 == 0.0, f"position 0 changed ({d0}): attention is not causal"
    return d0


def check_against_numpy(out_dir, ids, logits, causal=None):
    worst = 0.0
    for p in range(ids.shape[0]):
        ref = np_reference.forward(out_dir, ids[p].numpy(), causal=causal)
        got = logits[p].double().numpy()
        worst = max(worst, float(np.abs(ref - got).max() / np.abs(ref).max()))
    assert worst < 1e-5, f"{out_dir}: transformers vs numpy mismatch {worst:.3e}"
    return worst


@torch.no_grad()
def greedy(model, ids0):
    """16 greedy tokens after prompt 0 with HF generate (KV cache), cross-checked with a
    no-cache argmax loop. EOS stopping is disabled; we assert EOS never appears so the
    result is the same with or without EOS handling."""
    gc = GenerationConfig(max_new_tokens=N_GREEDY, do_sample=False, eos_token_id=None,
                          pad_token_id=PAD_ID, bos_token_id=None)
    out = model.generate(input_ids=ids0[None], generation_config=gc)[0, SEQ:]
    assert out.shape == (N_GREEDY,), out.shape
    seq = ids0.clone()
    margins = []
    for _ in range(N_GREEDY):
        lg = hf_logits(model, seq[None])[0, -1]
        top2 = torch.topk(lg, 2).values
        margins.append((top2[0] - top2[1]).item())
        seq = torch.cat([seq, lg.argmax().view(1)])
    manual = seq[SEQ:]
    assert torch.equal(manual, out), (manual, out)
    assert EOS_ID not in out.tolist()
    return out, min(margins)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def save_st(path, tensors):
    save_file({k: v.detach().contiguous() for k, v in tensors.items()}, path, metadata={"format": "pt"})


def save_golden(out_dir, ids, logits, greedy_ids=None):
    t = {"input_ids": ids.to(torch.int64), "logits": logits.to(torch.float32)}
    if greedy_ids is not None:
        t["greedy_ids"] = greedy_ids.to(torch.int64)
    save_st(os.path.join(out_dir, "golden.safetensors"), t)


def hf_common(**kw):
    return dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=LAYERS,
                num_attention_heads=HEADS, max_position_embeddings=MAX_POS, tie_word_embeddings=False,
                hidden_act="silu", attn_implementation="eager", **kw)


def state(model):
    return {k: v.detach().float().clone() for k, v in model.state_dict().items()}


# ----------------------------------------------------------------------------- dLLMs

def build_llada(out_dir, seed):
    theta, eps = 500000.0, 1e-5
    cfg = LlamaConfig(**hf_common(num_key_value_heads=HEADS, rms_norm_eps=eps, attention_bias=False,
                                  mlp_bias=False, rope_parameters={"rope_type": "default", "rope_theta": theta}))
    model = LlamaForCausalLM(cfg).eval()
    randomize_(model, seed)
    make_bidirectional_(model)
    ids = prompts(seed + 1)
    d0 = check_mask_semantics(model, ids, bidirectional=True)
    logits = hf_logits(model, ids)

    sd, t = state(model), "model.transformer."
    w = {t + "wte.weight": sd["model.embed_tokens.weight"],
         t + "ln_f.weight": sd["model.norm.weight"],
         t + "ff_out.weight": sd["lm_head.weight"]}
    ren = {"input_layernorm": "attn_norm", "self_attn.q_proj": "q_proj", "self_attn.k_proj": "k_proj",
           "self_attn.v_proj": "v_proj", "self_attn.o_proj": "attn_out", "post_attention_layernorm": "ff_norm",
           "mlp.gate_proj": "ff_proj", "mlp.up_proj": "up_proj", "mlp.down_proj": "ff_out"}
    for i in range(LAYERS):
        for hf, ll in ren.items():
            w[f"{t}blocks.{i}.{ll}.weight"] = sd[f"model.layers.{i}.{hf}.weight"]
    assert len(w) == len(sd)
    config = {
        "architectures": ["LLaDAModelLM"], "model_type": "llada",
        "d_model": HIDDEN, "n_heads": HEADS, "n_kv_heads": HEADS, "n_layers": LAYERS,
        "mlp_hidden_size": INTER, "mlp_ratio": INTER // HIDDEN, "vocab_size": VOCAB, "embedding_size": VOCAB,
        "max_sequence_length": MAX_POS, "rope_theta": theta, "rms_norm_eps": eps,
        "mask_token_id": MASK_ID, "eos_token_id": EOS_ID, "pad_token_id": EOS_ID, "bos_token_id": BOS_ID,
        "block_type": "llama", "activation_type": "silu", "layer_norm_type": "rms",
        "include_bias": False, "include_qkv_bias": False, "bias_for_layer_norm": False,
        "attention_layer_norm": False, "weight_tying": False, "scale_logits": False,
        "rope": True, "rope_full_precision": True, "alibi": False, "use_cache": False,
        "torch_dtype": "float32",
    }
    write_json(os.path.join(out_dir, "config.json"), config)
    save_st(os.path.join(out_dir, "model.safetensors"), w)
    err = check_against_numpy(out_dir, ids, logits)
    save_golden(out_dir, ids, logits)
    return dict(pos0_delta=d0, np_err=err)


def build_dream(out_dir, seed):
    theta, eps = 1000000.0, 1e-6
    cfg = Qwen2Config(**hf_common(num_key_value_heads=2, rms_norm_eps=eps, use_sliding_window=False,
                                  rope_parameters={"rope_type": "default", "rope_theta": theta}))
    model = Qwen2ForCausalLM(cfg).eval()
    randomize_(model, seed)
    make_bidirectional_(model)
    ids = prompts(seed + 1)
    d0 = check_mask_semantics(model, ids, bidirectional=True)
    logits = hf_logits(model, ids)
    sd = state(model)
    assert "model.layers.0.self_attn.q_proj.bias" in sd and "model.layers.0.self_attn.o_proj.bias" not in sd
    config = {
        "architectures": ["DreamModel"], "model_type": "Dream",
        "hidden_size": HIDDEN, "intermediate_size": INTER, "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS, "num_key_value_heads": 2, "hidden_act": "silu",
        "vocab_size": VOCAB, "max_position_embeddings": MAX_POS, "max_window_layers": LAYERS,
        "rms_norm_eps": eps, "rope_theta": theta, "rope_scaling": None,
        "use_sliding_window": False, "sliding_window": None, "tie_word_embeddings": False,
        "attention_dropout": 0.0, "initializer_range": 0.02, "use_cache": False,
        "mask_token_id": MASK_ID, "pad_token_id": EOS_ID, "eos_token_id": EOS_ID, "bos_token_id": BOS_ID,
        "torch_dtype": "float32",
    }
    write_json(os.path.join(out_dir, "config.json"), config)
    save_st(os.path.join(out_dir, "model.safetensors"), sd)
    err = check_against_numpy(out_dir, ids, logits)
    save_golden(out_dir, ids, logits)
    return dict(pos0_delta=d0, np_err=err)


def build_llada_moe(out_dir, seed):
    theta, eps, E, K, MI = 50000.0, 1e-6, 4, 2, 64
    cfg = Qwen3MoeConfig(**hf_common(num_key_value_heads=HEADS, rms_norm_eps=eps, head_dim=HIDDEN // HEADS,
                                     attention_bias=False, use_sliding_window=False,
                                     num_experts=E, num_experts_per_tok=K, moe_intermediate_size=MI,
                                     norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[],
                                     rope_parameters={"rope_type": "default", "rope_theta": theta}))
    model = Qwen3MoeForCausalLM(cfg).eval()
    randomize_(model, seed)
    make_bidirectional_(model)
    for layer in model.model.layers:
        assert layer.mlp.gate.norm_topk_prob is False and layer.mlp.gate.top_k == K
        assert not hasattr(layer.mlp, "shared_expert")
    ids = prompts(seed + 1)
    d0 = check_mask_semantics(model, ids, bidirectional=True)
    logits = hf_logits(model, ids)

    sd, w = state(model), {}
    for k, v in sd.items():
        if ".mlp.experts.gate_up_proj" in k:  # transformers 5 fuses experts: [E, 2*MI, H], gate rows first
            pre = k.replace("gate_up_proj", "")
            assert v.shape == (E, 2 * MI, HIDDEN)
            for e in range(E):
                w[f"{pre}{e}.gate_proj.weight"] = v[e, :MI].clone()
                w[f"{pre}{e}.up_proj.weight"] = v[e, MI:].clone()
        elif ".mlp.experts.down_proj" in k:  # [E, H, MI]
            pre = k.replace("down_proj", "")
            for e in range(E):
                w[f"{pre}{e}.down_proj.weight"] = v[e].clone()
        else:
            w[k] = v
    assert sd["model.layers.0.mlp.gate.weight"].shape == (E, HIDDEN)
    assert sd["model.layers.0.self_attn.q_norm.weight"].shape == (HIDDEN // HEADS,)
    config = {
        "architectures": ["LLaDAMoEModelLM"], "model_type": "llada_moe",
        "hidden_size": HIDDEN, "intermediate_size": INTER, "moe_intermediate_size": MI,
        "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "num_hidden_layers": LAYERS,
        "num_experts": E, "num_experts_per_tok": K, "norm_topk_prob": False, "moe_layer_freq": 1,
        "rope_theta": theta, "rope_scaling": None, "rms_norm_eps": eps, "vocab_size": VOCAB,
        "max_position_embeddings": MAX_POS, "mask_token_id": MASK_ID, "qk_layernorm": True,
        "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False, "use_cache": False,
        "eos_token_id": EOS_ID, "pad_token_id": EOS_ID, "bos_token_id": BOS_ID, "torch_dtype": "float32",
    }
    write_json(os.path.join(out_dir, "config.json"), config)
    save_st(os.path.join(out_dir, "model.safetensors"), w)
    err = check_against_numpy(out_dir, ids, logits)
    # record how often the top-k choice was close (router near-ties make engines disagree)
    save_golden(out_dir, ids, logits)
    return dict(pos0_delta=d0, np_err=err, router_min_gap=router_min_gap(model, ids, K))


@torch.no_grad()
def router_min_gap(model, ids, k):
    """Smallest gap between the k-th and (k+1)-th router probability over all tokens/layers."""
    gaps = []
    hooks = [l.mlp.gate.register_forward_hook(
        lambda m, i, o: gaps.append(
            (lambda p: (p[:, k - 1] - p[:, k]).min().item())(
                torch.softmax(o[0].float(), -1).sort(-1, descending=True).values)))
        for l in model.model.layers]
    hf_logits(model, ids)
    for h in hooks:
        h.remove()
    return min(gaps)


# ----------------------------------------------------------------------------- AR models

def _finish_ar(model, out_dir, seed, name):
    randomize_(model, seed)
    ids = prompts(seed + 1)
    check_mask_semantics(model, ids, bidirectional=False)
    logits = hf_logits(model, ids)
    model.save_pretrained(out_dir, safe_serialization=True)
    # real Hub checkpoints carry a top-level rope_theta (transformers 5 writes only
    # rope_parameters); add it, plus torch_dtype, so the Rust parser sees both styles.
    p = os.path.join(out_dir, "config.json")
    c = json.load(open(p))
    c["rope_theta"] = c["rope_parameters"]["rope_theta"]
    c["torch_dtype"] = "float32"
    c.pop("transformers_version", None)
    write_json(p, c)
    gp = os.path.join(out_dir, "generation_config.json")
    if os.path.exists(gp):
        os.remove(gp)
    from safetensors import safe_open
    with safe_open(os.path.join(out_dir, "model.safetensors"), "pt") as f:
        keys = list(f.keys())
        assert all(f.get_tensor(k).dtype == torch.float32 for k in keys)
    assert "lm_head.weight" in keys, "expected an untied lm_head"
    err = check_against_numpy(out_dir, ids, logits, causal=True)
    g, margin = greedy(model, ids[0])
    save_golden(out_dir, ids, logits, g)
    return dict(np_err=err, greedy_min_margin=margin)


def build_llama(out_dir, seed):
    cfg = LlamaConfig(**hf_common(num_key_value_heads=2, rms_norm_eps=1e-5, attention_bias=False, mlp_bias=False,
                                  bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
                                  rope_parameters={"rope_type": "default", "rope_theta": 500000.0}))
    return _finish_ar(LlamaForCausalLM(cfg).eval(), out_dir, seed, "llama")


def build_qwen2(out_dir, seed):
    cfg = Qwen2Config(**hf_common(num_key_value_heads=2, rms_norm_eps=1e-6, use_sliding_window=False,
                                  max_window_layers=LAYERS, bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
                                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}))
    return _finish_ar(Qwen2ForCausalLM(cfg).eval(), out_dir, seed, "qwen2")


def build_qwen3(out_dir, seed):
    # head_dim 32 != hidden/heads (16), like real Qwen3 (q_proj out = heads*head_dim = 128 != hidden)
    cfg = Qwen3Config(**hf_common(num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6, attention_bias=False,
                                  use_sliding_window=False, max_window_layers=LAYERS,
                                  bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
                                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}))
    return _finish_ar(Qwen3ForCausalLM(cfg).eval(), out_dir, seed, "qwen3")


def build_qwen3_moe(out_dir, seed):
    # Qwen3 attention (explicit head_dim 32, GQA 4/2, per-head q/k norm) with every layer MoE:
    # 4 experts, top-2, top-k weights renormalised (norm_topk_prob true, as Qwen3-30B-A3B)
    E, K, MI = 4, 2, 64
    cfg = Qwen3MoeConfig(**hf_common(num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6, attention_bias=False,
                                     use_sliding_window=False, num_experts=E, num_experts_per_tok=K,
                                     moe_intermediate_size=MI, norm_topk_prob=True, decoder_sparse_step=1,
                                     mlp_only_layers=[], bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
                                     rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}))
    model = Qwen3MoeForCausalLM(cfg).eval()
    for layer in model.model.layers:
        assert layer.mlp.gate.norm_topk_prob is True and layer.mlp.gate.top_k == K
        assert not hasattr(layer.mlp, "shared_expert")
    info = _finish_ar(model, out_dir, seed, "qwen3_moe")
    # save_pretrained writes the published per-expert layout, not transformers 5's fused experts
    from safetensors import safe_open
    with safe_open(os.path.join(out_dir, "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        assert f.get_tensor("model.layers.0.mlp.gate.weight").shape == (E, HIDDEN)
        assert f.get_tensor("model.layers.0.mlp.experts.0.gate_proj.weight").shape == (MI, HIDDEN)
        assert f.get_tensor("model.layers.0.mlp.experts.0.down_proj.weight").shape == (HIDDEN, MI)
    assert not any("gate_up_proj" in k for k in keys)
    assert all(f"model.layers.{i}.mlp.experts.{e}.{p}_proj.weight" in keys
               for i in range(LAYERS) for e in range(E) for p in ("gate", "up", "down"))
    info["router_min_gap"] = router_min_gap(model, prompts(seed + 1), K)
    return info


# ----------------------------------------------------------------------------- GGUF export

def llama_cpp_permute(w, n_head):
    """llama.cpp convert_hf_to_gguf `LlamaModel.permute` for Q (n_head) and K (n_kv_head):
    within each head, HF rotate-half order [x0..x_{d/2-1}, x_{d/2}..x_{d-1}] becomes the
    interleaved order [x0, x_{d/2}, x1, x_{d/2+1}, ...], so llama.cpp's NORM RoPE
    (adjacent pairs) computes the same thing as HF's rotate-half RoPE."""
    out_dim = w.shape[0]
    return (w.reshape(n_head, 2, out_dim // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def build_llama_gguf(out_dir, llama_dir):
    import gguf
    from gguf.quants import dequantize, quantize
    from safetensors.numpy import load_file

    cfg = json.load(open(os.path.join(llama_dir, "config.json")))
    sd = load_file(os.path.join(llama_dir, "model.safetensors"))
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg["hidden_size"] // nh
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
           "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
           "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
           "mlp.down_proj": "ffn_down"}
    for i in range(cfg["num_hidden_layers"]):
        for hf, gg in per.items():
            names[f"model.layers.{i}.{hf}.weight"] = f"blk.{i}.{gg}.weight"
    assert set(names) == set(sd)

    def tensors():  # GGUF order: token_embd, blk.0.., ..., output_norm, output
        order = ["model.embed_tokens.weight"] + [k for k in names if k.startswith("model.layers.")] + \
                ["model.norm.weight", "lm_head.weight"]
        for k in order:
            w = sd[k].astype(np.float32)
            if k.endswith("self_attn.q_proj.weight"):
                w = llama_cpp_permute(w, nh)
            elif k.endswith("self_attn.k_proj.weight"):
                w = llama_cpp_permute(w, nkv)
            yield k, names[k], np.ascontiguousarray(w)

    dq_sd = {}
    variants = [("q8_0", gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0)]
    if os.environ.get("UNMASK_GGUF_F32") == "1":  # not committed (430 KB); see tests/golden/README.md
        variants.insert(0, ("f32", gguf.GGMLQuantizationType.F32, gguf.LlamaFileType.ALL_F32))
    for qname, qtype, ftype in variants:
        path = os.path.join(out_dir, f"tiny-llama-{qname}.gguf")
        wr = gguf.GGUFWriter(path, "llama")
        wr.add_name(f"unmask-tiny-llama-{qname}")
        wr.add_context_length(cfg["max_position_embeddings"])
        wr.add_embedding_length(cfg["hidden_size"])
        wr.add_block_count(cfg["num_hidden_layers"])
        wr.add_feed_forward_length(cfg["intermediate_size"])
        wr.add_head_count(nh)
        wr.add_head_count_kv(nkv)
        wr.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
        wr.add_rope_freq_base(cfg["rope_theta"])
        wr.add_rope_dimension_count(hd)
        wr.add_vocab_size(cfg["vocab_size"])
        wr.add_bos_token_id(cfg["bos_token_id"])
        wr.add_eos_token_id(cfg["eos_token_id"])
        wr.add_file_type(ftype)
        for hfk, gk, w in tensors():
            if w.ndim == 2 and qtype != gguf.GGMLQuantizationType.F32:
                q = quantize(w, qtype)
                wr.add_tensor(gk, q, raw_dtype=qtype)
                if qname == "q8_0":
                    dq = dequantize(q, qtype).reshape(w.shape)
                    # undo the permutation so the HF model can run with the dequantised weights
                    if hfk.endswith("q_proj.weight"):
                        dq = llama_cpp_permute_inverse(dq, nh)
                    elif hfk.endswith("k_proj.weight"):
                        dq = llama_cpp_permute_inverse(dq, nkv)
                    dq_sd[hfk] = dq
            else:
                wr.add_tensor(gk, w)
                if qname == "q8_0":
                    dq_sd[hfk] = sd[hfk]
        wr.write_header_to_file()
        wr.write_kv_data_to_file()
        wr.write_tensors_to_file()
        wr.close()

    # logits of the same HF llama with the Q8_0-dequantised weights
    cfg_hf = LlamaConfig.from_pretrained(llama_dir, attn_implementation="eager")
    model = LlamaForCausalLM(cfg_hf).eval()
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in dq_sd.items()}, strict=True)
    from safetensors.torch import load_file as load_pt
    gold = load_pt(os.path.join(llama_dir, "golden.safetensors"))
    ids = gold["input_ids"]
    logits = hf_logits(model, ids)
    g, margin = greedy(model, ids[0])
    save_st(os.path.join(out_dir, "golden.safetensors"),
            {"input_ids": ids, "logits_q8_0": logits, "greedy_ids_q8_0": g})
    rel = ((logits - gold["logits"]).abs().max() / gold["logits"].abs().max()).item()
    # independent check: numpy forward straight from the GGUF with interleaved RoPE
    for qname, ref_logits in (("q8_0", logits), ("f32", gold["logits"])):
        path = os.path.join(out_dir, f"tiny-llama-{qname}.gguf")
        if not os.path.exists(path):
            continue
        for p in range(ids.shape[0]):
            ref = np_reference.forward_gguf_llama(path, ids[p].numpy())
            e = np.abs(ref - ref_logits[p].double().numpy()).max() / np.abs(ref).max()
            assert e < 1e-5, (qname, p, e)
    return dict(q8_vs_f32_rel=rel, greedy_min_margin=margin,
                greedy_same_as_f32=bool(torch.equal(g, gold["greedy_ids"])))


def llama_cpp_permute_inverse(w, n_head):
    out_dim = w.shape[0]
    return (w.reshape(n_head, out_dim // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def build_qwen3_moe_gguf(out_dir, src_dir):
    """F32 GGUF of the qwen3_moe model as llama.cpp's converter writes a `qwen3moe`: no Q/K
    permutation (NEOX RoPE), router `ffn_gate_inp`, experts merged per projection into
    `ffn_{gate,up}_exps` (ne {n_embd, n_ff_exp, n_expert}) and `ffn_down_exps`
    (ne {n_ff_exp, n_embd, n_expert}); no `expert_weights_norm` key (llama.cpp's graph always
    renormalises). Same weights, so the same logits as `qwen3_moe/golden.safetensors`."""
    import gguf
    from safetensors.numpy import load_file

    cfg = json.load(open(os.path.join(src_dir, "config.json")))
    sd = load_file(os.path.join(src_dir, "model.safetensors"))
    E = cfg.get("num_experts") or cfg["num_local_experts"]
    assert cfg["norm_topk_prob"] is True
    per = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
           "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
           "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "ffn_norm", "mlp.gate": "ffn_gate_inp"}
    tensors, used = [("token_embd.weight", sd["model.embed_tokens.weight"])], {"model.embed_tokens.weight"}
    for i in range(cfg["num_hidden_layers"]):
        for hf, gg in per.items():
            k = f"model.layers.{i}.{hf}.weight"
            tensors.append((f"blk.{i}.{gg}.weight", sd[k]))
            used.add(k)
        for p in ("gate", "up", "down"):
            ks = [f"model.layers.{i}.mlp.experts.{e}.{p}_proj.weight" for e in range(E)]
            tensors.append((f"blk.{i}.ffn_{p}_exps.weight", np.stack([sd[k] for k in ks])))
            used.update(ks)
    tensors += [("output_norm.weight", sd["model.norm.weight"]), ("output.weight", sd["lm_head.weight"])]
    used.update(["model.norm.weight", "lm_head.weight"])
    assert used == set(sd), set(sd) - used

    path = os.path.join(out_dir, "tiny-qwen3moe-f32.gguf")
    wr = gguf.GGUFWriter(path, "qwen3moe")
    wr.add_name("unmask-tiny-qwen3moe-f32")
    wr.add_context_length(cfg["max_position_embeddings"])
    wr.add_embedding_length(cfg["hidden_size"])
    wr.add_block_count(cfg["num_hidden_layers"])
    wr.add_feed_forward_length(cfg["intermediate_size"])
    wr.add_head_count(cfg["num_attention_heads"])
    wr.add_head_count_kv(cfg["num_key_value_heads"])
    wr.add_key_length(cfg["head_dim"])
    wr.add_value_length(cfg["head_dim"])
    wr.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    wr.add_rope_freq_base(cfg["rope_theta"])
    wr.add_expert_count(E)
    wr.add_expert_used_count(cfg["num_experts_per_tok"])
    wr.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    wr.add_vocab_size(cfg["vocab_size"])
    wr.add_bos_token_id(cfg["bos_token_id"])
    wr.add_eos_token_id(cfg["eos_token_id"])
    wr.add_pad_token_id(cfg["pad_token_id"])
    wr.add_file_type(gguf.LlamaFileType.ALL_F32)
    for name, w in tensors:
        wr.add_tensor(name, np.ascontiguousarray(w.astype(np.float32)))
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()

    # independent check: numpy forward straight from the GGUF against the transformers logits
    from safetensors.torch import load_file as load_pt
    gold = load_pt(os.path.join(src_dir, "golden.safetensors"))
    worst = 0.0
    for p in range(gold["input_ids"].shape[0]):
        ref = np_reference.forward_gguf_qwen3moe(path, gold["input_ids"][p].numpy())
        got = gold["logits"][p].double().numpy()
        worst = max(worst, float(np.abs(ref - got).max() / np.abs(ref).max()))
    assert worst < 1e-5, f"{path}: numpy GGUF forward vs transformers mismatch {worst:.3e}"
    return dict(np_err=worst, tensors=len(tensors))


# ----------------------------------------------------------------------------- main

BUILDERS = {  # name -> (builder, seed offset)
    "llada": (build_llada, 100),
    "dream": (build_dream, 200),
    "llada_moe": (build_llada_moe, 300),
    "llama": (build_llama, 400),
    "qwen2": (build_qwen2, 500),
    "qwen3": (build_qwen3, 600),
    "qwen3_moe": (build_qwen3_moe, 700),
}
GGUF_BUILDERS = {  # name -> (builder, source model); both write into tests/golden/gguf/
    "gguf": (build_llama_gguf, "llama"),
    "gguf_qwen3_moe": (build_qwen3_moe_gguf, "qwen3_moe"),
}


def main(argv):
    names = argv or list(BUILDERS) + list(GGUF_BUILDERS)
    for name in names:
        out = os.path.join(GOLDEN, "gguf" if name in GGUF_BUILDERS else name)
        os.makedirs(out, exist_ok=True)
        if name in GGUF_BUILDERS:
            fn, src = GGUF_BUILDERS[name]
            info = fn(out, os.path.join(GOLDEN, src))
        else:
            fn, off = BUILDERS[name]
            info = fn(out, SEED + off)
        print(f"{name}: " + ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                      for k, v in info.items()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
