"""Independent NumPy (float64) forward pass over the *saved* tiny checkpoints.

This module does not use transformers. It reads `config.json` + `model.safetensors`
exactly as written under `tests/golden/<name>/` (in each model family's own
checkpoint format) and computes per-position logits from the math. The generator
script (`make_tiny_models.py`) uses it to cross-check the transformers logits, so
a mismatch in either (weight renaming, causal vs. bidirectional mask, router
semantics, RoPE convention) is caught before anything is written.

It is also meant to be readable as a spec for the Rust engine:

* RMSNorm: y = x / sqrt(mean(x^2) + eps) * w
* RoPE "rotate-half" (HF/NeoX): per head, pairs (i, i + d/2) for i < d/2,
  inv_freq[i] = theta^(-2i/d), angle = pos * inv_freq[i];
  x'[i] = x[i] cos - x[i+d/2] sin ; x'[i+d/2] = x[i+d/2] cos + x[i] sin
* attention: softmax(q k^T / sqrt(head_dim) [+ causal mask]) v, GQA: q head h
  uses kv head h // (n_heads / n_kv_heads)
* SwiGLU MLP: down(silu(gate x) * up x)
* MoE (LLaDA-MoE): p = softmax(router x) over all experts, take top-k of p,
  NO renormalisation, out = sum_k p_k * expert_k(x)
* MoE (Qwen3-MoE, `norm_topk_prob` true): the same, but the top-k p are divided by
  their sum first; llama.cpp's `qwen3moe` GGUF graph always does this

Usage: python3 np_reference.py tests/golden/llada   (prints max error vs golden)
"""
import json
import os
import sys

import numpy as np
from safetensors.numpy import load_file


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def softmax(x, axis=-1):
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def rope_rotate_half(x, theta):
    """x: [seq, heads, d]. Positions 0..seq-1."""
    seq, _, d = x.shape
    inv_freq = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)  # [d/2]
    ang = np.arange(seq, dtype=np.float64)[:, None] * inv_freq[None, :]  # [seq, d/2]
    cos = np.cos(ang)[:, None, :]
    sin = np.sin(ang)[:, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def rope_interleaved(x, theta):
    """llama.cpp LLAMA_ROPE_TYPE_NORM: adjacent pairs (2i, 2i+1) share inv_freq[i]."""
    seq, _, d = x.shape
    inv_freq = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = np.arange(seq, dtype=np.float64)[:, None] * inv_freq[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    xe, xo = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = xe * cos - xo * sin
    out[..., 1::2] = xo * cos + xe * sin
    return out


def attention(q, k, v, causal):
    """q: [seq, H, d], k/v: [seq, KV, d] -> [seq, H*d]"""
    seq, n_h, d = q.shape
    n_kv = k.shape[1]
    rep = n_h // n_kv
    out = np.zeros((seq, n_h, d))
    for h in range(n_h):
        kh = k[:, h // rep, :]
        vh = v[:, h // rep, :]
        s = q[:, h, :] @ kh.T / np.sqrt(d)
        if causal:
            s = s + np.triu(np.full((seq, seq), -np.inf), k=1)
        out[:, h, :] = softmax(s) @ vh
    return out.reshape(seq, n_h * d)


def lin(x, w, b=None):
    y = x @ w.T
    return y if b is None else y + b


def forward(model_dir, ids, causal=None):
    """ids: int array [seq]. Returns float64 logits [seq, vocab]."""
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    W = {k: v.astype(np.float64) for k, v in load_file(os.path.join(model_dir, "model.safetensors")).items()}
    mt = cfg["model_type"]
    if mt == "llada":
        return _forward_llada(cfg, W, ids)
    if mt == "llada_moe":
        return _forward_moe(cfg, W, ids, causal=False)
    if mt == "qwen3_moe":
        return _forward_moe(cfg, W, ids, causal=True if causal is None else causal)
    # HF Qwen2/Qwen3/Llama naming (Dream, llama, qwen2, qwen3)
    if causal is None:
        causal = mt != "Dream"
    return _forward_hf(cfg, W, ids, causal)


def _forward_llada(cfg, W, ids):
    d_model, n_h, n_kv = cfg["d_model"], cfg["n_heads"], cfg["n_kv_heads"]
    hd = d_model // n_h
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    t = "model.transformer."
    x = W[t + "wte.weight"][ids]
    seq = len(ids)
    for i in range(cfg["n_layers"]):
        b = f"{t}blocks.{i}."
        h = rms_norm(x, W[b + "attn_norm.weight"], eps)
        q = lin(h, W[b + "q_proj.weight"]).reshape(seq, n_h, hd)
        k = lin(h, W[b + "k_proj.weight"]).reshape(seq, n_kv, hd)
        v = lin(h, W[b + "v_proj.weight"]).reshape(seq, n_kv, hd)
        q, k = rope_rotate_half(q, theta), rope_rotate_half(k, theta)
        x = x + lin(attention(q, k, v, causal=False), W[b + "attn_out.weight"])
        h = rms_norm(x, W[b + "ff_norm.weight"], eps)
        x = x + lin(silu(lin(h, W[b + "ff_proj.weight"])) * lin(h, W[b + "up_proj.weight"]), W[b + "ff_out.weight"])
    x = rms_norm(x, W[t + "ln_f.weight"], eps)
    return lin(x, W[t + "ff_out.weight"])


def _attn_hf(cfg, W, b, h, causal, qk_norm):
    seq = h.shape[0]
    n_h, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or cfg["hidden_size"] // n_h
    eps = cfg["rms_norm_eps"]
    theta = cfg["rope_theta"]
    a = b + "self_attn."
    q = lin(h, W[a + "q_proj.weight"], W.get(a + "q_proj.bias")).reshape(seq, n_h, hd)
    k = lin(h, W[a + "k_proj.weight"], W.get(a + "k_proj.bias")).reshape(seq, n_kv, hd)
    v = lin(h, W[a + "v_proj.weight"], W.get(a + "v_proj.bias")).reshape(seq, n_kv, hd)
    if qk_norm:  # per-head RMSNorm over head_dim, before RoPE
        q = rms_norm(q, W[a + "q_norm.weight"], eps)
        k = rms_norm(k, W[a + "k_norm.weight"], eps)
    q, k = rope_rotate_half(q, theta), rope_rotate_half(k, theta)
    return lin(attention(q, k, v, causal), W[a + "o_proj.weight"], W.get(a + "o_proj.bias"))


def _forward_hf(cfg, W, ids, causal):
    eps = cfg["rms_norm_eps"]
    qk_norm = "model.layers.0.self_attn.q_norm.weight" in W
    x = W["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        b = f"model.layers.{i}."
        h = rms_norm(x, W[b + "input_layernorm.weight"], eps)
        x = x + _attn_hf(cfg, W, b, h, causal, qk_norm)
        h = rms_norm(x, W[b + "post_attention_layernorm.weight"], eps)
        m = b + "mlp."
        x = x + lin(silu(lin(h, W[m + "gate_proj.weight"])) * lin(h, W[m + "up_proj.weight"]), W[m + "down_proj.weight"])
    x = rms_norm(x, W["model.norm.weight"], eps)
    head = W.get("lm_head.weight", W["model.embed_tokens.weight"])
    return lin(x, head)


def moe_ffn(h, router, expert, k, renormalise):
    """h: [seq, H]; router: [E, H]; expert(e) -> (gate, up, down) matrices of expert e."""
    probs = softmax(lin(h, router))  # [seq, E]
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        top = np.argsort(-probs[t], kind="stable")[:k]
        wts = probs[t, top] / (probs[t, top].sum() if renormalise else 1.0)
        for e, wt in zip(top, wts):
            g, u, d = expert(e)
            out[t] += wt * lin(silu(lin(h[t], g)) * lin(h[t], u), d)
    return out


def _forward_moe(cfg, W, ids, causal):
    """LLaDA-MoE (bidirectional, no renormalisation) and Qwen3-MoE (causal, `norm_topk_prob`)."""
    eps = cfg["rms_norm_eps"]
    E, K = cfg.get("num_experts") or cfg["num_local_experts"], cfg["num_experts_per_tok"]
    assert cfg.get("decoder_sparse_step", 1) == 1 and not cfg.get("mlp_only_layers")
    x = W["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        b = f"model.layers.{i}."
        h = rms_norm(x, W[b + "input_layernorm.weight"], eps)
        x = x + _attn_hf(cfg, W, b, h, causal=causal, qk_norm=True)
        h = rms_norm(x, W[b + "post_attention_layernorm.weight"], eps)
        m = b + "mlp."
        assert W[m + "gate.weight"].shape[0] == E

        def expert(e):
            ex = f"{m}experts.{e}."
            return W[ex + "gate_proj.weight"], W[ex + "up_proj.weight"], W[ex + "down_proj.weight"]

        x = x + moe_ffn(h, W[m + "gate.weight"], expert, K, renormalise=bool(cfg["norm_topk_prob"]))
    x = rms_norm(x, W["model.norm.weight"], eps)
    return lin(x, W["lm_head.weight"])


def forward_gguf_llama(path, ids):
    """Causal llama forward straight from a llama.cpp-style GGUF (any type gguf-py can
    dequantise). Q/K rows are stored permuted by the converter, so RoPE here is the
    interleaved (NORM) variant; no un-permutation is done."""
    import gguf
    from gguf.quants import dequantize

    r = gguf.GGUFReader(path)
    kv = {f.name: f.contents() for f in r.fields.values()}
    arch = kv["general.architecture"]
    n_h, n_kv = kv[f"{arch}.attention.head_count"], kv[f"{arch}.attention.head_count_kv"]
    eps, theta = kv[f"{arch}.attention.layer_norm_rms_epsilon"], kv[f"{arch}.rope.freq_base"]
    W = {}
    for t in r.tensors:
        shape = [int(v) for v in t.shape][::-1]  # GGUF ne is innermost-first
        W[t.name] = dequantize(np.asarray(t.data), t.tensor_type).reshape(shape).astype(np.float64)
    seq = len(ids)
    x = W["token_embd.weight"][ids]
    for i in range(kv[f"{arch}.block_count"]):
        b = f"blk.{i}."
        h = rms_norm(x, W[b + "attn_norm.weight"], eps)
        hd = W[b + "attn_q.weight"].shape[0] // n_h
        q = lin(h, W[b + "attn_q.weight"]).reshape(seq, n_h, hd)
        k = lin(h, W[b + "attn_k.weight"]).reshape(seq, n_kv, hd)
        v = lin(h, W[b + "attn_v.weight"]).reshape(seq, n_kv, hd)
        q, k = rope_interleaved(q, theta), rope_interleaved(k, theta)
        x = x + lin(attention(q, k, v, causal=True), W[b + "attn_output.weight"])
        h = rms_norm(x, W[b + "ffn_norm.weight"], eps)
        x = x + lin(silu(lin(h, W[b + "ffn_gate.weight"])) * lin(h, W[b + "ffn_up.weight"]), W[b + "ffn_down.weight"])
    x = rms_norm(x, W["output_norm.weight"], eps)
    return lin(x, W.get("output.weight", W["token_embd.weight"]))


def _gguf_weights(path):
    import gguf
    from gguf.quants import dequantize

    r = gguf.GGUFReader(path)
    kv = {f.name: f.contents() for f in r.fields.values()}
    W = {}
    for t in r.tensors:
        shape = [int(v) for v in t.shape][::-1]  # GGUF ne is innermost-first
        W[t.name] = dequantize(np.asarray(t.data), t.tensor_type).reshape(shape).astype(np.float64)
    return kv, W


def forward_gguf_qwen3moe(path, ids):
    """Causal Qwen3-MoE forward straight from a llama.cpp `qwen3moe` GGUF: rotate-half (NEOX)
    RoPE, per-head q/k RMSNorm before it, merged expert tensors `ffn_{gate,up,down}_exps`
    ([E, out, in] here), top-k softmax weights always renormalised (llama.cpp's graph)."""
    kv, W = _gguf_weights(path)
    a = kv["general.architecture"]
    assert a == "qwen3moe", a
    n_h, n_kv = kv[f"{a}.attention.head_count"], kv[f"{a}.attention.head_count_kv"]
    hd = kv[f"{a}.attention.key_length"]
    eps, theta = kv[f"{a}.attention.layer_norm_rms_epsilon"], kv[f"{a}.rope.freq_base"]
    K = kv[f"{a}.expert_used_count"]
    seq = len(ids)
    x = W["token_embd.weight"][ids]
    for i in range(kv[f"{a}.block_count"]):
        b = f"blk.{i}."
        h = rms_norm(x, W[b + "attn_norm.weight"], eps)
        q = rms_norm(lin(h, W[b + "attn_q.weight"]).reshape(seq, n_h, hd), W[b + "attn_q_norm.weight"], eps)
        k = rms_norm(lin(h, W[b + "attn_k.weight"]).reshape(seq, n_kv, hd), W[b + "attn_k_norm.weight"], eps)
        v = lin(h, W[b + "attn_v.weight"]).reshape(seq, n_kv, hd)
        q, k = rope_rotate_half(q, theta), rope_rotate_half(k, theta)
        x = x + lin(attention(q, k, v, causal=True), W[b + "attn_output.weight"])
        h = rms_norm(x, W[b + "ffn_norm.weight"], eps)
        g, u, d = (W[b + f"ffn_{p}_exps.weight"] for p in ("gate", "up", "down"))
        x = x + moe_ffn(h, W[b + "ffn_gate_inp.weight"], lambda e: (g[e], u[e], d[e]), K, renormalise=True)
    x = rms_norm(x, W["output_norm.weight"], eps)
    return lin(x, W.get("output.weight", W["token_embd.weight"]))


if __name__ == "__main__":
    d = sys.argv[1]
    g = load_file(os.path.join(d, "golden.safetensors"))
    worst = 0.0
    for p, ids in enumerate(g["input_ids"]):
        ref = forward(d, ids)
        got = g["logits"][p].astype(np.float64)
        worst = max(worst, np.abs(ref - got).max() / np.abs(ref).max())
    print(f"{d}: max |np - golden| / max|np| = {worst:.3e}")
