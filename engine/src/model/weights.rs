//! The generic transformer's weights, loaded from any [`TensorSource`] through a [`NameScheme`].

use crate::kernels::quant::TensorToF32;
use crate::error::{EngineError, Result};
use crate::kernels::linear::{KernelChoice, Linear};

use super::arch::{ExpertLayout, Global, NameScheme, Part};
use super::config::ModelConfig;
use crate::tensor::{DType, TensorBytes, TensorSource};

/// Feed-forward block of one layer.
#[derive(Debug, Clone)]
pub enum FeedForward {
    /// SwiGLU MLP: `down(silu(gate(x)) * up(x))`.
    Dense { gate: Linear, up: Linear, down: Linear },
    /// Routed experts, each a SwiGLU MLP.
    Moe { router: Linear, experts: Vec<Expert> },
}

pub use crate::moe::Expert;

/// Weights of one transformer layer.
#[derive(Debug, Clone)]
pub struct LayerWeights {
    pub attn_norm: Vec<f32>,
    pub wq: Linear,
    pub wk: Linear,
    pub wv: Linear,
    pub wo: Linear,
    pub bq: Option<Vec<f32>>,
    pub bk: Option<Vec<f32>>,
    pub bv: Option<Vec<f32>>,
    /// Per-head RMSNorm weights (head_dim) for q and k.
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub ffn_norm: Vec<f32>,
    pub ffn: FeedForward,
}

/// The matrices of one layer, named as the memory runtime's layer graph names its weight buffers
/// (`l{i}.wq` … `l{i}.w_down`); an MoE layer's gate/up/down stand for all its experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LayerMatrix {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
}

impl LayerMatrix {
    /// The matrix a layer-graph weight buffer name (`l3.wq`, `l3.w_gate`) refers to.
    pub fn from_buffer_name(name: &str) -> Option<(usize, LayerMatrix)> {
        let (layer, part) = name.strip_prefix('l')?.split_once('.')?;
        let m = match part {
            "wq" => LayerMatrix::Q,
            "wk" => LayerMatrix::K,
            "wv" => LayerMatrix::V,
            "wo" => LayerMatrix::O,
            "w_gate" => LayerMatrix::Gate,
            "w_up" => LayerMatrix::Up,
            "w_down" => LayerMatrix::Down,
            _ => return None,
        };
        Some((layer.parse().ok()?, m))
    }
}

impl LayerWeights {
    /// A copy whose matrices in `which` own fresh storage with the same bytes (a staging-slot
    /// fill); the others share the resident storage. Returns the copy and the bytes copied.
    pub fn staged_copy(&self, which: &[LayerMatrix]) -> (LayerWeights, u64) {
        let mut out = self.clone();
        let mut bytes = 0u64;
        let mut stage = |l: &mut Linear| {
            *l = l.staged_copy();
            bytes += l.bytes() as u64;
        };
        for m in which {
            match (m, &mut out.ffn) {
                (LayerMatrix::Q, _) => stage(&mut out.wq),
                (LayerMatrix::K, _) => stage(&mut out.wk),
                (LayerMatrix::V, _) => stage(&mut out.wv),
                (LayerMatrix::O, _) => stage(&mut out.wo),
                (LayerMatrix::Gate, FeedForward::Dense { gate, .. }) => stage(gate),
                (LayerMatrix::Up, FeedForward::Dense { up, .. }) => stage(up),
                (LayerMatrix::Down, FeedForward::Dense { down, .. }) => stage(down),
                (LayerMatrix::Gate, FeedForward::Moe { experts, .. }) => {
                    experts.iter_mut().for_each(|e| stage(&mut e.gate))
                }
                (LayerMatrix::Up, FeedForward::Moe { experts, .. }) => {
                    experts.iter_mut().for_each(|e| stage(&mut e.up))
                }
                (LayerMatrix::Down, FeedForward::Moe { experts, .. }) => {
                    experts.iter_mut().for_each(|e| stage(&mut e.down))
                }
            }
        }
        (out, bytes)
    }
}

/// All weights of a model.
#[derive(Debug, Clone)]
pub struct ModelWeights {
    /// `[vocab, hidden]` embedding table (rows looked up, never multiplied).
    pub embedding: Linear,
    pub layers: Vec<LayerWeights>,
    pub final_norm: Vec<f32>,
    /// `[vocab, hidden]` LM head (the embedding table when tied).
    pub lm_head: Linear,
    /// Whether `lm_head` shares the embedding's storage.
    pub tied_head: bool,
}

impl ModelWeights {
    /// Loads every weight named by `names`, checking shapes against `cfg`.
    pub fn load(src: &dyn TensorSource, names: &dyn NameScheme, cfg: &ModelConfig) -> Result<Self> {
        let (h, v) = (cfg.hidden, cfg.vocab);
        let file = src.path();
        let lin = |name: String, n: usize, k: usize| -> Result<Linear> {
            Linear::from_raw(src.require_finite(&name)?, n, k).map_err(|e| e.in_file(file))
        };
        let vec = |name: String, n: usize| -> Result<Vec<f32>> {
            let t = src.require_finite(&name)?;
            t.expect_shape(&[n]).map_err(|e| e.in_file(file))?;
            t.to_f32_vec().map_err(|e| e.in_file(file))
        };
        let opt_vec = |name: String, n: usize| -> Result<Option<Vec<f32>>> {
            if src.contains(&name) {
                vec(name, n).map(Some)
            } else {
                Ok(None)
            }
        };
        let embedding = lin(names.global(Global::Embedding), v, h)?;
        let lm_name = names.global(Global::LmHead);
        let tied_head = !src.contains(&lm_name);
        let lm_head = if !tied_head {
            lin(lm_name, v, h)?
        } else if cfg.tie_embeddings || names.global(Global::Embedding).starts_with("token_embd") {
            // Tied head, or a GGUF without `output` (llama.cpp falls back to token_embd).
            embedding.clone()
        } else {
            return Err(EngineError::MissingTensor { path: src.path().to_owned(), name: lm_name });
        };
        // The config's layer count must match the checkpoint before anything is sized by it.
        let last = names.layer(cfg.n_layers.saturating_sub(1), Part::Q);
        if !src.contains(&last) {
            return Err(EngineError::Config {
                path: src.path().to_owned(),
                reason: format!(
                    "the config gives {} layers but the checkpoint has no tensor `{last}` (it holds {} tensors)",
                    cfg.n_layers,
                    src.names().len()
                ),
            });
        }
        let extra = names.layer(cfg.n_layers, Part::Q);
        if src.contains(&extra) {
            return Err(EngineError::Config {
                path: src.path().to_owned(),
                reason: format!(
                    "the config gives {} layers but the checkpoint holds more (it has `{extra}`)",
                    cfg.n_layers
                ),
            });
        }
        let (q, kv) = (cfg.q_dim(), cfg.kv_dim());
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for l in 0..cfg.n_layers {
            let ffn = match &cfg.moe {
                None => FeedForward::Dense {
                    gate: lin(names.layer(l, Part::Gate), cfg.ffn, h)?,
                    up: lin(names.layer(l, Part::Up), cfg.ffn, h)?,
                    down: lin(names.layer(l, Part::Down), h, cfg.ffn)?,
                },
                Some(m) => {
                    let router = lin(names.layer(l, Part::Router), m.n_experts, h)?;
                    let experts = load_experts(src, names, l, m.n_experts, m.expert_ffn, h)?;
                    FeedForward::Moe { router, experts }
                }
            };
            let (bq, bk, bv) = if cfg.qkv_bias {
                (
                    Some(vec(names.layer(l, Part::QBias), q)?),
                    Some(vec(names.layer(l, Part::KBias), kv)?),
                    Some(vec(names.layer(l, Part::VBias), kv)?),
                )
            } else {
                (None, None, None)
            };
            let (q_norm, k_norm) = if cfg.qk_norm {
                (
                    Some(vec(names.layer(l, Part::QNorm), cfg.head_dim)?),
                    Some(vec(names.layer(l, Part::KNorm), cfg.head_dim)?),
                )
            } else {
                (
                    opt_vec(names.layer(l, Part::QNorm), cfg.head_dim)?,
                    opt_vec(names.layer(l, Part::KNorm), cfg.head_dim)?,
                )
            };
            layers.push(LayerWeights {
                attn_norm: vec(names.layer(l, Part::AttnNorm), h)?,
                wq: lin(names.layer(l, Part::Q), q, h)?,
                wk: lin(names.layer(l, Part::K), kv, h)?,
                wv: lin(names.layer(l, Part::V), kv, h)?,
                wo: lin(names.layer(l, Part::O), h, q)?,
                bq,
                bk,
                bv,
                q_norm,
                k_norm,
                ffn_norm: vec(names.layer(l, Part::FfnNorm), h)?,
                ffn,
            });
        }
        Ok(ModelWeights { embedding, layers, final_norm: vec(names.global(Global::FinalNorm), h)?, lm_head, tied_head })
    }

    /// A copy with every matrix passed through `f` (format conversion at load time).
    pub fn map_matrices(&self, f: &dyn Fn(&Linear) -> Result<Linear>) -> Result<Self> {
        let mut out = self.clone();
        out.embedding = f(&self.embedding)?;
        out.lm_head = if self.tied_head { out.embedding.clone() } else { f(&self.lm_head)? };
        for l in out.layers.iter_mut() {
            l.wq = f(&l.wq)?;
            l.wk = f(&l.wk)?;
            l.wv = f(&l.wv)?;
            l.wo = f(&l.wo)?;
            match &mut l.ffn {
                FeedForward::Dense { gate, up, down } => {
                    *gate = f(gate)?;
                    *up = f(up)?;
                    *down = f(down)?;
                }
                FeedForward::Moe { router, experts } => {
                    *router = f(router)?;
                    for e in experts.iter_mut() {
                        e.gate = f(&e.gate)?;
                        e.up = f(&e.up)?;
                        e.down = f(&e.down)?;
                    }
                }
            }
        }
        Ok(out)
    }

    /// Every multiplied matrix converted for `choice`, consuming `self` so loaded bytes are
    /// released as each is repacked (a tied head shares the repacked embedding).
    pub fn repack(self, choice: KernelChoice) -> Result<Self> {
        // Half-precision weights of a small model are widened to f32 once: converting them at
        // every forward costs more than the math at decoding shapes; large models keep their
        // memory footprint.
        let widen = self.half_matrix_elems() * 4 <= WIDEN_HALF_UP_TO_BYTES;
        let rp = |l: Linear| l.repack_widening(choice, widen);
        let ModelWeights { embedding, layers, final_norm, lm_head, tied_head } = self;
        // An untied embedding is only row-gathered: keep its loaded (smallest, possibly mapped) form.
        let (embedding, lm_head) = if tied_head {
            let e = rp(embedding)?;
            (e.clone(), e)
        } else {
            (embedding, rp(lm_head)?)
        };
        let layers = layers
            .into_iter()
            .map(|l| {
                let ffn = match l.ffn {
                    FeedForward::Dense { gate, up, down } => FeedForward::Dense {
                        gate: rp(gate)?,
                        up: rp(up)?,
                        down: rp(down)?,
                    },
                    FeedForward::Moe { router, experts } => FeedForward::Moe {
                        router: rp(router)?,
                        experts: experts
                            .into_iter()
                            .map(|e| {
                                Ok(Expert {
                                    gate: rp(e.gate)?,
                                    up: rp(e.up)?,
                                    down: rp(e.down)?,
                                })
                            })
                            .collect::<Result<_>>()?,
                    },
                };
                Ok(LayerWeights {
                    wq: rp(l.wq)?,
                    wk: rp(l.wk)?,
                    wv: rp(l.wv)?,
                    wo: rp(l.wo)?,
                    ffn,
                    ..l
                })
            })
            .collect::<Result<_>>()?;
        Ok(ModelWeights { embedding, layers, final_norm, lm_head, tied_head })
    }

    /// Elements of all f16/bf16 weight matrices.
    fn half_matrix_elems(&self) -> usize {
        let mut all: Vec<&Linear> = vec![&self.embedding, &self.lm_head];
        for l in &self.layers {
            all.extend([&l.wq, &l.wk, &l.wv, &l.wo]);
            match &l.ffn {
                FeedForward::Dense { gate, up, down } => all.extend([gate, up, down]),
                FeedForward::Moe { router, experts } => {
                    all.push(router);
                    for e in experts {
                        all.extend([&e.gate, &e.up, &e.down]);
                    }
                }
            }
        }
        all.iter().filter(|l| matches!(l.dtype(), DType::F16 | DType::BF16)).map(|l| l.n_out * l.k_in).sum()
    }

    /// Bytes of all weight matrices (norms and biases excluded).
    pub fn matrix_bytes(&self) -> usize {
        let mut b = self.embedding.bytes();
        if !self.tied_head {
            b += self.lm_head.bytes();
        }
        for l in &self.layers {
            b += l.wq.bytes() + l.wk.bytes() + l.wv.bytes() + l.wo.bytes();
            match &l.ffn {
                FeedForward::Dense { gate, up, down } => b += gate.bytes() + up.bytes() + down.bytes(),
                FeedForward::Moe { router, experts } => {
                    b += router.bytes();
                    for e in experts {
                        b += e.gate.bytes() + e.up.bytes() + e.down.bytes();
                    }
                }
            }
        }
        b
    }
}

/// Models whose half-precision matrices widen to at most this many f32 bytes are widened at load.
const WIDEN_HALF_UP_TO_BYTES: usize = 1 << 30;

fn load_experts(
    src: &dyn TensorSource,
    names: &dyn NameScheme,
    l: usize,
    n_experts: usize,
    ffn: usize,
    h: usize,
) -> Result<Vec<Expert>> {
    let file = src.path();
    match names.expert_layout() {
        ExpertLayout::PerExpert => (0..n_experts)
            .map(|e| {
                Ok(Expert {
                    gate: Linear::from_raw(src.require_finite(&names.expert(l, e, Part::Gate))?, ffn, h).map_err(|e| e.in_file(file))?,
                    up: Linear::from_raw(src.require_finite(&names.expert(l, e, Part::Up))?, ffn, h).map_err(|e| e.in_file(file))?,
                    down: Linear::from_raw(src.require_finite(&names.expert(l, e, Part::Down))?, h, ffn).map_err(|e| e.in_file(file))?,
                })
            })
            .collect(),
        ExpertLayout::Stacked => {
            // One [n_experts, rows, cols] tensor per projection; slice expert e's bytes out of it.
            let split = |p: Part, rows: usize, cols: usize| -> Result<Vec<Linear>> {
                let t = src.require_finite(&names.expert(l, 0, p))?;
                t.expect_shape(&[n_experts, rows, cols]).map_err(|e| e.in_file(file))?;
                let per = bytes_for(t.dtype, rows * cols, &t.name)?;
                (0..n_experts)
                    .map(|e| {
                        let bytes = sub_bytes(&t.data, e * per, per);
                        Linear::from_raw_unchecked(format!("{}[{e}]", t.name), t.dtype, bytes, rows, cols)
                    })
                    .collect()
            };
            let gates = split(Part::Gate, ffn, h)?;
            let ups = split(Part::Up, ffn, h)?;
            let downs = split(Part::Down, h, ffn)?;
            Ok(gates.into_iter().zip(ups).zip(downs).map(|((gate, up), down)| Expert { gate, up, down }).collect())
        }
    }
}

fn bytes_for(dtype: DType, n: usize, name: &str) -> Result<usize> {
    dtype.bytes_for(n).ok_or_else(|| EngineError::UnsupportedDType { name: name.to_owned(), dtype: dtype.to_string() })
}

fn sub_bytes(b: &TensorBytes, start: usize, len: usize) -> TensorBytes {
    b.slice(start, len)
}
