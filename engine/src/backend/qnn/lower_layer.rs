//! Lowering of one dense transformer layer into QNN ops, for every dense architecture the engine
//! runs: RmsNorm → q/k/v FullyConnected (+ Qwen2/Dream biases) → per-head q/k RmsNorm (Qwen3) →
//! RoPE (constant rotation MatMul + element-wise) → Concat with the cached K/V inputs →
//! GQA attention (Transpose/Reshape, MatMul, scale, additive mask, Softmax, MatMul) → output
//! projection + residual → RmsNorm → SwiGLU (Sigmoid, Multiply) → down projection + residual.
//! An MoE layer stops after the FFN RmsNorm: its experts are grouped graphs of their own
//! (`lower_moe`), routed on the host.
//!
//! Shapes for a bucket of `T` block rows and `Cc` cached rows (`C = Cc + T`), `g = n_heads /
//! n_kv_heads`: scores are `[n_kv, g, T, C]` (rank 4, the HTP limit), so one MatMul per kv head
//! group serves all its query heads without repeating K/V.

use qnn_sys::{ops, TensorId};

use super::buckets::Bucket;
use super::emit::{Dest, Emitter};
use super::quantize::{constant, weight, QnnPrecision, StaticTensor};
use crate::error::{EngineError, Result};
use crate::model::weights::{FeedForward, LayerWeights};
use crate::model::ModelConfig;

/// A layer's weights as STATIC tensors.
pub struct LayerStatics {
    attn_norm: StaticTensor,
    wq: StaticTensor,
    wk: StaticTensor,
    wv: StaticTensor,
    wo: StaticTensor,
    bq: Option<StaticTensor>,
    bk: Option<StaticTensor>,
    bv: Option<StaticTensor>,
    q_norm: Option<StaticTensor>,
    k_norm: Option<StaticTensor>,
    ffn_norm: StaticTensor,
    ffn: FfnStatics,
}

/// The feed-forward part of a layer's statics.
enum FfnStatics {
    /// A dense SwiGLU, lowered into the layer's graph.
    Dense(Box<DenseStatics>),
    /// Routed experts: the layer's graph ends at the normed FFN input; the experts run as
    /// grouped graphs of their own (`lower_moe`), routed on the host.
    Moe,
}

/// A dense SwiGLU's matrices.
struct DenseStatics {
    gate: StaticTensor,
    up: StaticTensor,
    down: StaticTensor,
}

impl LayerStatics {
    /// Quantises layer `l` for `precision` (for an MoE layer, everything up to the experts).
    pub fn prepare(l: usize, w: &LayerWeights, precision: QnnPrecision) -> Result<Self> {
        let vec = |name: &str, v: &[f32]| constant(&format!("l{l}.{name}.weight"), v, &[v.len() as u32], precision);
        let opt = |name: &str, v: &Option<Vec<f32>>| v.as_deref().map(|v| vec(name, v));
        let mat = |name: &str, lin| weight(&format!("l{l}.{name}.weight"), lin, precision);
        let ffn = match &w.ffn {
            FeedForward::Dense { gate, up, down } => FfnStatics::Dense(Box::new(DenseStatics {
                gate: mat("gate", gate),
                up: mat("up", up),
                down: mat("down", down),
            })),
            FeedForward::Moe { .. } => FfnStatics::Moe,
        };
        Ok(LayerStatics {
            attn_norm: vec("attn_norm", &w.attn_norm),
            wq: mat("wq", &w.wq),
            wk: mat("wk", &w.wk),
            wv: mat("wv", &w.wv),
            wo: mat("wo", &w.wo),
            bq: opt("bq", &w.bq),
            bk: opt("bk", &w.bk),
            bv: opt("bv", &w.bv),
            q_norm: opt("q_norm", &w.q_norm),
            k_norm: opt("k_norm", &w.k_norm),
            ffn_norm: vec("ffn_norm", &w.ffn_norm),
            ffn,
        })
    }
}

/// Graph tensors a layer reads besides its weights.
#[derive(Debug, Clone, Copy)]
pub struct LayerInputs {
    /// Residual stream `[T, hidden]`.
    pub x: TensorId,
    /// `[T, 1, head_dim]` RoPE tables of the block rows.
    pub cos: TensorId,
    /// See `cos`.
    pub sin: TensorId,
    /// Additive `[T, C]` mask (0 visible, a large negative value hidden).
    pub mask: TensorId,
    /// Constant `[head_dim, head_dim]` rotation (see `rope.rs`).
    pub rot: TensorId,
    /// Constant `[1]` score scale `1/√head_dim`.
    pub scale: TensorId,
    /// This layer's cached `[Cc, kv_dim]` K and V inputs (none when the bucket has no cache).
    pub cache: Option<(TensorId, TensorId)>,
}

/// Names of a layer's graph I/O, shared by the lowering and the runtime binding.
pub fn k_cache_name(l: usize) -> String {
    format!("k_cache.{l}")
}
/// See [`k_cache_name`].
pub fn v_cache_name(l: usize) -> String {
    format!("v_cache.{l}")
}
/// Fresh (normed, rotated) K rows of the block, `[T, kv_dim]`.
pub fn k_new_name(l: usize) -> String {
    format!("k_new.{l}")
}
/// Fresh V rows of the block, `[T, kv_dim]`.
pub fn v_new_name(l: usize) -> String {
    format!("v_new.{l}")
}

/// Graph output of an MoE layer's graph: the RmsNorm-ed FFN input `[T, hidden]` the experts read
/// (the graph's `x_out` is then the residual stream after attention).
pub const FFN_IN_NAME: &str = "xn_ffn";

/// Emits layer `l`; returns the new residual stream (a graph output named `x_out` when `last`).
///
/// An MoE layer must be `last`: its graph stops after the FFN RmsNorm and outputs the residual
/// stream after attention as `x_out` and the normed FFN input as [`FFN_IN_NAME`]; routing and the
/// experts run outside the graph.
pub fn lower_layer<'w>(
    e: &mut Emitter<'w>,
    cfg: &ModelConfig,
    l: usize,
    w: &'w LayerStatics,
    io: &LayerInputs,
    bucket: Bucket,
    last: bool,
) -> Result<TensorId> {
    let n = |s: &str| format!("l{l}.{s}");
    let t = bucket.tokens as u32;
    let (nh, nkv, hd) = (cfg.n_heads as u32, cfg.n_kv_heads as u32, cfg.head_dim as u32);
    let group = nh / nkv;
    let ctx = bucket.context() as u32;

    // --- attention ---
    let gamma = e.constant(&w.attn_norm)?;
    let xn = e.rms_norm(&n("xn"), io.x, gamma, cfg.rms_eps)?;
    let project =
        |e: &mut Emitter<'w>, name: &str, m: &'w StaticTensor, b: &'w Option<StaticTensor>| -> Result<TensorId> {
            let wt = e.constant(m)?;
            let bt = b.as_ref().map(|b| e.constant(b)).transpose()?;
            e.fully_connected(&n(name), xn, wt, bt, Dest::Native)
        };
    let q = project(e, "q", &w.wq, &w.bq)?;
    let k = project(e, "k", &w.wk, &w.bk)?;
    let v = project(e, "v", &w.wv, &w.bv)?;
    let mut q3 = e.reshape(&n("q3"), q, &[t, nh, hd], Dest::Native)?;
    let mut k3 = e.reshape(&n("k3"), k, &[t, nkv, hd], Dest::Native)?;
    let v3 = e.reshape(&n("v3"), v, &[t, nkv, hd], Dest::Native)?;
    if let Some(g) = &w.q_norm {
        let g = e.constant(g)?;
        q3 = e.rms_norm(&n("q3n"), q3, g, cfg.rms_eps)?;
    }
    if let Some(g) = &w.k_norm {
        let g = e.constant(g)?;
        k3 = e.rms_norm(&n("k3n"), k3, g, cfg.rms_eps)?;
    }
    let q_rot = rope(e, &n("q"), q3, io)?;
    let k_rot = rope(e, &n("k"), k3, io)?;
    let kvd = nkv * hd;
    e.reshape(&k_new_name(l), k_rot, &[t, kvd], Dest::Output)?;
    e.reshape(&v_new_name(l), v3, &[t, kvd], Dest::Output)?;
    let (k_all, v_all) = match io.cache {
        Some((kc, vc)) => {
            let cc = bucket.cached as u32;
            let kc3 = e.reshape(&n("kc3"), kc, &[cc, nkv, hd], Dest::Native)?;
            let vc3 = e.reshape(&n("vc3"), vc, &[cc, nkv, hd], Dest::Native)?;
            (e.concat(&n("k_all"), &[kc3, k_rot], 0)?, e.concat(&n("v_all"), &[vc3, v3], 0)?)
        }
        None => (k_rot, v3),
    };
    let kt = e.transpose(&n("kt"), k_all, &[1, 0, 2])?; // [nkv, C, hd]
    let vt = e.transpose(&n("vt"), v_all, &[1, 0, 2])?;
    let qh = e.transpose(&n("qh"), q_rot, &[1, 0, 2])?; // [nh, T, hd]
    let qg = e.reshape(&n("qg"), qh, &[nkv, group * t, hd], Dest::Native)?;
    let s = e.mat_mul(&n("scores"), qg, kt, true)?; // [nkv, g·T, C]
    let s4 = e.reshape(&n("scores4"), s, &[nkv, group, t, ctx], Dest::Native)?;
    let scaled = e.binary(&n("scaled"), ops::ELEMENT_WISE_MULTIPLY, s4, io.scale, Dest::Native)?;
    let masked = e.binary(&n("masked"), ops::ELEMENT_WISE_ADD, scaled, io.mask, Dest::Native)?;
    let p = e.softmax(&n("probs"), masked)?;
    let p3 = e.reshape(&n("probs3"), p, &[nkv, group * t, ctx], Dest::Native)?;
    let o = e.mat_mul(&n("att"), p3, vt, false)?; // [nkv, g·T, hd]
    let oh = e.reshape(&n("att_h"), o, &[nh, t, hd], Dest::Native)?;
    let ot = e.transpose(&n("att_t"), oh, &[1, 0, 2])?; // [T, nh, hd]
    let of = e.reshape(&n("att_flat"), ot, &[t, nh * hd], Dest::Native)?;
    let wo = e.constant(&w.wo)?;
    let attn = e.fully_connected(&n("attn_out"), of, wo, None, Dest::Native)?;
    let x1 = e.binary(&n("x_attn"), ops::ELEMENT_WISE_ADD, io.x, attn, Dest::Native)?;

    // --- SwiGLU feed-forward ---
    let gamma = e.constant(&w.ffn_norm)?;
    let xn2 = e.rms_norm(&n("xn2"), x1, gamma, cfg.rms_eps)?;
    let (gate, up, down) = match &w.ffn {
        FfnStatics::Dense(d) => (&d.gate, &d.up, &d.down),
        FfnStatics::Moe if last => {
            // Copies (Reshape to the same shape) so the outputs are not also op inputs.
            let dims = e.dims(x1)?;
            e.reshape(FFN_IN_NAME, xn2, &dims, Dest::Output)?;
            return e.reshape("x_out", x1, &dims, Dest::Output);
        }
        FfnStatics::Moe => {
            return Err(EngineError::Backend {
                backend: "qnn".into(),
                reason: format!("MoE layer {l} must be the last layer of its graph"),
            })
        }
    };
    let wg = e.constant(gate)?;
    let wu = e.constant(up)?;
    let wd = e.constant(down)?;
    let gt = e.fully_connected(&n("gate"), xn2, wg, None, Dest::Native)?;
    let up = e.fully_connected(&n("up"), xn2, wu, None, Dest::Native)?;
    let sg = e.unary(&n("gate_sig"), ops::SIGMOID, gt)?;
    let silu = e.binary(&n("gate_silu"), ops::ELEMENT_WISE_MULTIPLY, gt, sg, Dest::Native)?;
    let h = e.binary(&n("ffn_h"), ops::ELEMENT_WISE_MULTIPLY, silu, up, Dest::Native)?;
    let down = e.fully_connected(&n("down"), h, wd, None, Dest::Native)?;
    let (name, dest) = if last { ("x_out".to_string(), Dest::Output) } else { (n("x_out"), Dest::Native) };
    e.binary(&name, ops::ELEMENT_WISE_ADD, x1, down, dest)
}

/// `x ⊙ cos + (x · R) ⊙ sin` on `[T, heads, head_dim]`.
fn rope(e: &mut Emitter<'_>, name: &str, x: TensorId, io: &LayerInputs) -> Result<TensorId> {
    let xr = e.mat_mul(&format!("{name}_rot"), x, io.rot, false)?;
    let a = e.binary(&format!("{name}_cos"), ops::ELEMENT_WISE_MULTIPLY, x, io.cos, Dest::Native)?;
    let b = e.binary(&format!("{name}_sin"), ops::ELEMENT_WISE_MULTIPLY, xr, io.sin, Dest::Native)?;
    e.binary(&format!("{name}_rope"), ops::ELEMENT_WISE_ADD, a, b, Dest::Native)
}
