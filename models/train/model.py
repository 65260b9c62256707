"""Tiny transformers in the three layouts Unmask's Rust engine loads (PyTorch).

* `LLaDATiny` (arch "llada"): LLaDA-8B's layout scaled down. Pre-norm blocks, bidirectional
  attention, RMSNorm with weight, RoPE rotate-half (HF/NeoX), q/k/v/o without bias, MHA,
  SwiGLU `ff_out(silu(ff_proj(x)) * up_proj(x))`, untied `wte` / `ff_out`, no logit scaling.
  Parameter names follow LLaDA/OLMo (`model.transformer.*`).
* `HFDecoderTiny` with arch "llama": HF `LlamaForCausalLM` (causal attention, same math otherwise),
  names `model.embed_tokens`, `model.layers.N.{self_attn,mlp}.*`, `model.norm`, `lm_head`.
* `HFDecoderTiny` with arch "llada_moe": LLaDA-MoE (`LLaDAMoEModelLM`): bidirectional, per-head
  RMSNorm on q and k before RoPE (`q_norm`/`k_norm`, [head_dim]), every layer a routed MoE:
  router `mlp.gate` -> softmax over all experts -> top-k, weights not renormalised
  (`norm_topk_prob` false), experts `mlp.experts.E.{gate,up,down}_proj` (SwiGLU).

`state_dict()` names are the checkpoint names, so export is a plain safetensors write.
`forward(ids, rows=None)` returns logits; with `rows` (a bool mask [B, T]) only those positions
go through the LM head (training computes the loss at masked / target positions only).
"""
import json
import math
import os
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F

ARCHS = ("llada", "llama", "llada_moe")


@dataclass
class TinyConfig:
    d_model: int = 256
    n_heads: int = 4
    n_kv_heads: int = 4
    n_layers: int = 6
    mlp_hidden_size: int = 768
    vocab_size: int = 4096
    max_sequence_length: int = 256
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    mask_token_id: int = 2
    eos_token_id: int = 1
    pad_token_id: int = 1
    bos_token_id: int = 0
    eot_token_id: int = 5
    arch: str = "llada"
    # MoE (llada_moe only)
    n_experts: int = 0
    top_k: int = 0
    expert_hidden: int = 0
    # llama only: LM head = input embedding (the SmolLM2 draft; the tiny models are untied)
    tie_embeddings: bool = False
    # llada only: row p-1 predicts token p (Dream's shift), so an AR model's next-token head keeps
    # its meaning after conversion. Written to config.json only when set.
    shift_logits: bool = False

    @property
    def head_dim(self):
        return self.d_model // self.n_heads

    @property
    def causal(self):
        return self.arch == "llama"

    def to_hf(self):
        """config.json in the family's own format."""
        if self.arch == "llada":
            return {
                "architectures": ["LLaDAModelLM"],
                "model_type": "llada",
                "d_model": self.d_model,
                "n_heads": self.n_heads,
                "n_kv_heads": self.n_kv_heads,
                "n_layers": self.n_layers,
                "mlp_hidden_size": self.mlp_hidden_size,
                "mlp_ratio": self.mlp_hidden_size // self.d_model,
                "vocab_size": self.vocab_size,
                "embedding_size": self.vocab_size,
                "max_sequence_length": self.max_sequence_length,
                "rope_theta": float(self.rope_theta),
                "rms_norm_eps": self.rms_norm_eps,
                "mask_token_id": self.mask_token_id,
                "eos_token_id": self.eos_token_id,
                "pad_token_id": self.pad_token_id,
                "bos_token_id": self.bos_token_id,
                "eot_token_id": self.eot_token_id,
                "block_type": "llama",
                "activation_type": "silu",
                "layer_norm_type": "rms",
                "include_bias": False,
                "include_qkv_bias": False,
                "weight_tying": False,
                "scale_logits": False,
                "rope": True,
                "alibi": False,
                "attention_layer_norm": False,
                **({"shift_logits": True} if self.shift_logits else {}),
            }
        d = {
            "hidden_size": self.d_model,
            "num_attention_heads": self.n_heads,
            "num_key_value_heads": self.n_kv_heads,
            "head_dim": self.head_dim,
            "num_hidden_layers": self.n_layers,
            "intermediate_size": self.mlp_hidden_size,
            "vocab_size": self.vocab_size,
            "max_position_embeddings": self.max_sequence_length,
            "rope_theta": float(self.rope_theta),
            "rms_norm_eps": self.rms_norm_eps,
            "hidden_act": "silu",
            "attention_bias": False,
            "tie_word_embeddings": self.tie_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "pad_token_id": self.pad_token_id,
            "eot_token_id": self.eot_token_id,
            "torch_dtype": "bfloat16",
        }
        if self.arch == "llama":
            d.update({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "mlp_bias": False,
                      "rope_scaling": None})
        else:
            d.update({"architectures": ["LLaDAMoEModelLM"], "model_type": "llada_moe",
                      "mask_token_id": self.mask_token_id, "num_experts": self.n_experts,
                      "num_experts_per_tok": self.top_k, "moe_intermediate_size": self.expert_hidden,
                      "moe_layer_freq": 1, "norm_topk_prob": False, "qk_layernorm": True,
                      "rope_scaling": None})
        return {k: d[k] for k in sorted(d)}

    @classmethod
    def from_hf(cls, d):
        archs = d.get("architectures", [])
        if "LLaDAModelLM" in archs or d.get("model_type") == "llada":
            keys = set(cls.__dataclass_fields__) - {"arch"}
            return cls(arch="llada", **{k: d[k] for k in keys if k in d})
        arch = "llama" if d.get("model_type") == "llama" else "llada_moe"
        return cls(arch=arch, d_model=d["hidden_size"], n_heads=d["num_attention_heads"],
                   n_kv_heads=d["num_key_value_heads"], n_layers=d["num_hidden_layers"],
                   mlp_hidden_size=d["intermediate_size"], vocab_size=d["vocab_size"],
                   max_sequence_length=d["max_position_embeddings"], rope_theta=d["rope_theta"],
                   rms_norm_eps=d["rms_norm_eps"], mask_token_id=d.get("mask_token_id", 2),
                   eos_token_id=d["eos_token_id"], pad_token_id=d["pad_token_id"],
                   bos_token_id=d["bos_token_id"], eot_token_id=d["eot_token_id"],
                   n_experts=d.get("num_experts", 0), top_k=d.get("num_experts_per_tok", 0),
                   expert_hidden=d.get("moe_intermediate_size", 0),
                   tie_embeddings=bool(d.get("tie_word_embeddings", False)))


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + self.eps) * self.weight


def rope_cos_sin(seq_len, head_dim, theta, device, dtype=torch.float32):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    pos = torch.arange(seq_len, device=device, dtype=torch.float32)
    freqs = torch.outer(pos, inv_freq)            # [T, hd/2]
    emb = torch.cat([freqs, freqs], dim=-1)      # [T, hd]  (rotate-half layout)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x, cos, sin):
    # x: [B, H, T, hd]; cos/sin: [T, hd]
    return x * cos + rotate_half(x) * sin


def attention(q, k, v, n_heads, n_kv_heads, causal, attn_mask=None):
    if n_kv_heads != n_heads:
        rep = n_heads // n_kv_heads
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    if q.device.type == "cpu" and (q.dtype == torch.bfloat16 or torch.is_autocast_enabled("cpu")):
        # under autocast q/k/v arrive in f32 (RoPE's f32 tables promote them)
        q, k, v = (t.to(torch.bfloat16) for t in (q, k, v))
        return attention_bf16_cpu(q, k, v, causal, attn_mask)
    # default scale = 1/sqrt(head_dim)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=causal and attn_mask is None)


def attention_bf16_cpu(q, k, v, causal, attn_mask):
    """Same math as scaled_dot_product_attention, softmax in f32. PyTorch's fused CPU kernel is
    about 4x slower in bf16 than these two bf16 matmuls (which run on AMX where the CPU has it)."""
    s = (q @ k.transpose(-1, -2)).float() * q.shape[-1] ** -0.5
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else s + attn_mask
    elif causal:
        t = s.shape[-1]
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return s.softmax(-1).to(v.dtype) @ v


# ------------------------------------------------------------------ LLaDA (dense, OLMo names)
class Block(nn.Module):
    def __init__(self, cfg: TinyConfig):
        super().__init__()
        d, f = cfg.d_model, cfg.mlp_hidden_size
        kv = cfg.n_kv_heads * cfg.head_dim
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.attn_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, kv, bias=False)
        self.v_proj = nn.Linear(d, kv, bias=False)
        self.attn_out = nn.Linear(d, d, bias=False)
        self.ff_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.ff_proj = nn.Linear(d, f, bias=False)   # gate
        self.up_proj = nn.Linear(d, f, bias=False)
        self.ff_out = nn.Linear(f, d, bias=False)

    def forward(self, x, cos, sin, attn_mask=None):
        B, T, D = x.shape
        h = self.attn_norm(x)
        q = self.q_proj(h).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        a = attention(q, k, v, self.n_heads, self.n_kv_heads, False, attn_mask)  # bidirectional
        a = a.transpose(1, 2).reshape(B, T, D)
        x = x + self.attn_out(a)
        h = self.ff_norm(x)
        return x + self.ff_out(F.silu(self.ff_proj(h)) * self.up_proj(h))


class Transformer(nn.Module):
    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layers)])
        self.ln_f = RMSNorm(cfg.d_model, cfg.rms_norm_eps)
        self.ff_out = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)  # LM head (untied)


class Inner(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.transformer = Transformer(cfg)


def init_weights(model, n_layers, out_suffixes):
    std = 0.02
    out_std = 0.02 / math.sqrt(2 * n_layers)
    for name, p in model.named_parameters():
        if "norm" in name.rsplit(".", 2)[-2] or name.endswith("ln_f.weight"):
            nn.init.ones_(p)
        elif any(name.endswith(s) for s in out_suffixes):
            nn.init.normal_(p, 0.0, out_std)
        else:
            nn.init.normal_(p, 0.0, std)


class LLaDATiny(nn.Module):
    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.cfg = cfg
        self.model = Inner(cfg)   # -> parameter names model.transformer.*
        self._rope_cache = {}
        self.aux_loss = None
        init_weights(self, cfg.n_layers, ("attn_out.weight",))
        for blk in self.model.transformer.blocks:   # block ff_out = down projection
            nn.init.normal_(blk.ff_out.weight, 0.0, 0.02 / math.sqrt(2 * cfg.n_layers))

    def _rope(self, T, device):
        key = (T, str(device))
        if key not in self._rope_cache:
            self._rope_cache[key] = rope_cos_sin(T, self.cfg.head_dim, self.cfg.rope_theta, device)
        return self._rope_cache[key]

    def forward(self, ids, rows=None, attn_mask=None):
        t = self.model.transformer
        x = t.wte(ids)
        cos, sin = self._rope(ids.shape[1], ids.device)
        for blk in t.blocks:
            x = blk(x, cos, sin, attn_mask)
        if rows is not None:
            x = x[rows]
        return t.ff_out(t.ln_f(x))

    def num_params(self):
        return sum(p.numel() for p in self.parameters())


# ------------------------------------------------------------------ HF decoder (Llama, LLaDA-MoE)
class HFAttention(nn.Module):
    def __init__(self, cfg: TinyConfig, qk_norm):
        super().__init__()
        d, hd = cfg.d_model, cfg.head_dim
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, hd
        self.q_proj = nn.Linear(d, cfg.n_heads * hd, bias=False)
        self.k_proj = nn.Linear(d, cfg.n_kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(d, cfg.n_kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(cfg.n_heads * hd, d, bias=False)
        if qk_norm:   # per-head RMSNorm, weight [head_dim], before RoPE
            self.q_norm = RMSNorm(hd, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(hd, cfg.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = None

    def forward(self, h, cos, sin, causal, attn_mask=None):
        B, T, _ = h.shape
        q = self.q_proj(h).view(B, T, self.n_heads, self.head_dim)
        k = self.k_proj(h).view(B, T, self.n_kv_heads, self.head_dim)
        v = self.v_proj(h).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q.transpose(1, 2), cos, sin), apply_rope(k.transpose(1, 2), cos, sin)
        a = attention(q, k, v, self.n_heads, self.n_kv_heads, causal, attn_mask)
        return self.o_proj(a.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, d, f):
        super().__init__()
        self.gate_proj = nn.Linear(d, f, bias=False)
        self.up_proj = nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MoE(nn.Module):
    """Softmax router over all experts, top-k, weights = the raw top-k probabilities."""

    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.n_experts, self.top_k = cfg.n_experts, cfg.top_k
        self.gate = nn.Linear(cfg.d_model, cfg.n_experts, bias=False)
        self.experts = nn.ModuleList([MLP(cfg.d_model, cfg.expert_hidden) for _ in range(cfg.n_experts)])

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        probs = F.softmax(self.gate(x).float(), dim=-1)            # [N, E]
        w, idx = torch.topk(probs, self.top_k, dim=-1)             # [N, k]
        y = torch.zeros_like(x)
        for e in range(self.n_experts):
            tok, slot = torch.nonzero(idx == e, as_tuple=True)
            if tok.numel() == 0:
                continue
            y.index_add_(0, tok, self.experts[e](x[tok]) * w[tok, slot, None].to(x.dtype))
        # Switch-style load-balancing loss: E * sum_e (fraction of routed slots) * (mean prob).
        frac = torch.bincount(idx.reshape(-1), minlength=self.n_experts).float() / idx.numel()
        self.aux = self.n_experts * (frac * probs.mean(0)).sum()
        self.load = frac.detach()
        return y.reshape(shape)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TinyConfig):
        super().__init__()
        moe = cfg.arch == "llada_moe"
        self.input_layernorm = RMSNorm(cfg.d_model, cfg.rms_norm_eps)
        self.self_attn = HFAttention(cfg, qk_norm=moe)
        self.post_attention_layernorm = RMSNorm(cfg.d_model, cfg.rms_norm_eps)
        self.mlp = MoE(cfg) if moe else MLP(cfg.d_model, cfg.mlp_hidden_size)

    def forward(self, x, cos, sin, causal, attn_mask=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, causal, attn_mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class HFModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList([DecoderLayer(cfg) for _ in range(cfg.n_layers)])
        self.norm = RMSNorm(cfg.d_model, cfg.rms_norm_eps)


class HFDecoderTiny(nn.Module):
    def __init__(self, cfg: TinyConfig):
        super().__init__()
        assert cfg.arch in ("llama", "llada_moe"), cfg.arch
        self.cfg = cfg
        self.model = HFModel(cfg)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self._rope_cache = {}
        init_weights(self, cfg.n_layers, ("o_proj.weight", "down_proj.weight"))
        if cfg.tie_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def _rope(self, T, device):
        key = (T, str(device))
        if key not in self._rope_cache:
            self._rope_cache[key] = rope_cos_sin(T, self.cfg.head_dim, self.cfg.rope_theta, device)
        return self._rope_cache[key]

    def forward(self, ids, rows=None, attn_mask=None):
        m = self.model
        x = m.embed_tokens(ids)
        cos, sin = self._rope(ids.shape[1], ids.device)
        for layer in m.layers:
            x = layer(x, cos, sin, self.cfg.causal, attn_mask)
        if rows is not None:
            x = x[rows]
        return self.lm_head(m.norm(x))

    @property
    def aux_loss(self):
        if self.cfg.arch != "llada_moe":
            return None
        return sum(l.mlp.aux for l in self.model.layers) / len(self.model.layers)

    def expert_load(self):
        return torch.stack([l.mlp.load for l in self.model.layers])

    def num_params(self):
        return sum(p.numel() for p in self.parameters())


def build(cfg: TinyConfig):
    return LLaDATiny(cfg) if cfg.arch == "llada" else HFDecoderTiny(cfg)


def save_hf(model, out_dir, dtype=torch.bfloat16):
    """Writes model.safetensors (bf16 by default: the shipped format) and config.json."""
    from safetensors.torch import save_file
    os.makedirs(out_dir, exist_ok=True)
    sd = {k: v.detach().to(dtype).contiguous().clone() for k, v in model.state_dict().items()}
    if model.cfg.tie_embeddings:   # HF convention: a tied head is not stored
        sd.pop("lm_head.weight", None)
    save_file(sd, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(model.cfg.to_hf(), f, indent=2)
        f.write("\n")


def load_hf(model_dir, device="cpu"):
    """Loads an exported directory; weights are upcast to f32 (what the Rust Float path computes)."""
    from safetensors.torch import load_file
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = TinyConfig.from_hf(json.load(f))
    model = build(cfg)
    sd = {k: v.float() for k, v in load_file(os.path.join(model_dir, "model.safetensors"), device=str(device)).items()}
    if cfg.tie_embeddings and "lm_head.weight" not in sd:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    model.load_state_dict(sd, strict=True)
    return model.to(device)
