"""Tiny LLaDA-architecture masked-diffusion transformer (PyTorch).

Matches the LLaDA-8B layout so that one loader serves both:
  * pre-norm decoder blocks, bidirectional attention (no causal mask)
  * RMSNorm with weight, eps from config
  * RoPE rotate-half (HF / NeoX style, non-interleaved), theta from config
  * q/k/v/o projections without bias, MHA (n_kv_heads == n_heads)
  * SwiGLU MLP: ff_out(silu(ff_proj(x)) * up_proj(x))
  * untied embedding (wte) and output head (ff_out), no logit scaling

Parameter names follow LLaDA/OLMo naming (`model.transformer.*`) so that
`state_dict()` can be written to safetensors unchanged.
"""
import json
import math
import os
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


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

    @property
    def head_dim(self):
        return self.d_model // self.n_heads

    def to_hf(self):
        """config.json in LLaDA's format."""
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
        }

    @classmethod
    def from_hf(cls, d):
        keys = set(cls.__dataclass_fields__)
        return cls(**{k: d[k] for k in keys if k in d})


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

    def forward(self, x, cos, sin):
        B, T, D = x.shape
        h = self.attn_norm(x)
        q = self.q_proj(h).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.n_kv_heads != self.n_heads:
            rep = self.n_heads // self.n_kv_heads
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        # bidirectional: no mask, not causal; default scale = 1/sqrt(head_dim)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=None, is_causal=False)
        a = a.transpose(1, 2).reshape(B, T, D)
        x = x + self.attn_out(a)
        h = self.ff_norm(x)
        x = x + self.ff_out(F.silu(self.ff_proj(h)) * self.up_proj(h))
        return x


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


class LLaDATiny(nn.Module):
    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.cfg = cfg
        self.model = Inner(cfg)   # -> parameter names model.transformer.*
        self._rope_cache = {}
        self.reset_parameters()

    def reset_parameters(self):
        std = 0.02
        out_std = 0.02 / math.sqrt(2 * self.cfg.n_layers)
        for name, p in self.named_parameters():
            if name.endswith("norm.weight") or name.endswith("ln_f.weight"):
                nn.init.ones_(p)
            elif name.endswith("attn_out.weight") or (".blocks." in name and name.endswith("ff_out.weight")):
                nn.init.normal_(p, 0.0, out_std)
            else:
                nn.init.normal_(p, 0.0, std)

    def _rope(self, T, device):
        key = (T, str(device))
        if key not in self._rope_cache:
            self._rope_cache[key] = rope_cos_sin(T, self.cfg.head_dim, self.cfg.rope_theta, device)
        return self._rope_cache[key]

    def forward(self, ids):
        t = self.model.transformer
        x = t.wte(ids)
        cos, sin = self._rope(ids.shape[1], ids.device)
        for blk in t.blocks:
            x = blk(x, cos, sin)
        return t.ff_out(t.ln_f(x))

    def num_params(self):
        return sum(p.numel() for p in self.parameters())


def save_hf(model: LLaDATiny, out_dir, extra_gen_cfg=None):
    from safetensors.torch import save_file
    os.makedirs(out_dir, exist_ok=True)
    sd = {k: v.detach().to(torch.float32).contiguous().clone() for k, v in model.state_dict().items()}
    save_file(sd, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(model.cfg.to_hf(), f, indent=2)
        f.write("\n")


def load_hf(model_dir, device="cpu"):
    from safetensors.torch import load_file
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = TinyConfig.from_hf(json.load(f))
    model = LLaDATiny(cfg)
    sd = load_file(os.path.join(model_dir, "model.safetensors"), device=str(device))
    missing, unexpected = model.load_state_dict(sd, strict=True)
    return model.to(device)
