//! The forward pass of the generic decoder-only transformer (all supported families).
//!
//! One data flow, buffers named after the math: `x` (residual stream), `xn` (normed), `q`/`k`/`v`,
//! `att` (attention output), `gate`/`up` (FFN), `logits`.

use std::collections::HashSet;

use rayon::prelude::*;

use crate::error::{EngineError, Result};
use crate::kernels::activation::{softmax_inplace, swiglu_inplace};
use crate::kernels::attention::{attention, HeadShape};
use crate::kernels::linear::Linear;
use crate::kernels::norm::rmsnorm_rows_inplace;
use crate::kernels::rope::RopeTable;

use super::config::ModelConfig;
use super::kv_cache::KvCache;
use super::weights::{FeedForward, LayerWeights, ModelWeights};

/// How a forward uses the KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvMode {
    /// Attend only within the block; leave the cache untouched.
    Ignore,
    /// Attend to the cache's valid positions (block positions overridden by fresh K/V).
    Read,
    /// As `Read`, then store the block's K/V at its positions and mark them valid.
    ReadWrite,
}

/// One forward call: a block of tokens at absolute positions.
#[derive(Debug, Clone)]
pub struct ForwardRequest<'a> {
    pub tokens: &'a [u32],
    pub positions: &'a [usize],
    /// Rows of the block (indices into `tokens`) whose logits are wanted.
    pub logits_rows: &'a [usize],
    pub kv: KvMode,
}

/// Logits for the requested rows, `rows.len() × vocab`, plus work counters.
#[derive(Debug, Clone, Default)]
pub struct ForwardOutput {
    pub rows: Vec<usize>,
    pub logits: Vec<f32>,
    pub vocab: usize,
    /// Attention context length (cached positions + block).
    pub context_len: usize,
    /// Floating-point operations performed (linear + attention), for throughput reports.
    pub flops: f64,
}

impl ForwardOutput {

    /// Logits of the i-th requested row.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.logits[i * self.vocab..(i + 1) * self.vocab]
    }
}

/// Where a forward takes each layer's (and the LM head's) weights from: the resident weights, or
/// copies a staging thread prepared (the virtual NPU's swap-optimized memory runtime).
pub trait LayerSource {
    /// Runs `f` on the weights of layer `li`.
    fn with_layer(&mut self, li: usize, f: &mut dyn FnMut(&LayerWeights) -> Result<f64>) -> Result<f64>;
    /// Runs `f` on the LM head.
    fn with_head(&mut self, f: &mut dyn FnMut(&Linear) -> Result<f64>) -> Result<f64>;
}

/// The weights as loaded: every layer read in place.
pub struct ResidentLayers<'a>(pub &'a ModelWeights);

impl LayerSource for ResidentLayers<'_> {
    fn with_layer(&mut self, li: usize, f: &mut dyn FnMut(&LayerWeights) -> Result<f64>) -> Result<f64> {
        let layer = self.0.layers.get(li).ok_or_else(|| EngineError::InvalidRequest(format!("no layer {li}")))?;
        f(layer)
    }
    fn with_head(&mut self, f: &mut dyn FnMut(&Linear) -> Result<f64>) -> Result<f64> {
        f(&self.0.lm_head)
    }
}

/// A loaded model ready to run.
#[derive(Debug)]
pub struct Transformer {
    pub config: ModelConfig,
    pub weights: ModelWeights,
    rope: RopeTable,
}

impl Transformer {
    /// Builds the runtime tables for `weights`.
    pub fn new(config: ModelConfig, weights: ModelWeights) -> Self {
        let rope = RopeTable::new(config.rope_style, config.rotary_dim, config.rope_theta, config.max_seq);
        Transformer { config, weights, rope }
    }

    /// A KV cache sized for `capacity` positions.
    pub fn new_cache(&self, capacity: usize) -> KvCache {
        KvCache::new(&self.config, capacity)
    }

    fn check(&self, req: &ForwardRequest, cache: Option<&KvCache>) -> Result<()> {
        let c = &self.config;
        if req.tokens.len() != req.positions.len() {
            return Err(EngineError::InvalidRequest(format!(
                "{} tokens but {} positions",
                req.tokens.len(),
                req.positions.len()
            )));
        }
        if let Some(&t) = req.tokens.iter().find(|&&t| t as usize >= c.vocab) {
            return Err(EngineError::InvalidRequest(format!("token id {t} outside vocab of {}", c.vocab)));
        }
        let limit = cache.map_or(c.max_seq, |k| k.capacity().min(c.max_seq));
        if let Some(&p) = req.positions.iter().max() {
            if p >= limit || p >= self.rope.max_pos() {
                return Err(EngineError::ContextOverflow { len: p + 1, max: limit });
            }
        }
        if let Some(&r) = req.logits_rows.iter().find(|&&r| r >= req.tokens.len()) {
            return Err(EngineError::InvalidRequest(format!("logits row {r} outside block of {}", req.tokens.len())));
        }
        if req.kv != KvMode::Ignore && cache.is_none() {
            return Err(EngineError::InvalidRequest("KV mode needs a cache".into()));
        }
        Ok(())
    }

    /// Runs the layer stack on a block and returns logits for the requested rows.
    pub fn forward(&self, req: &ForwardRequest, cache: Option<&mut KvCache>) -> Result<ForwardOutput> {
        self.forward_with(req, cache, &mut ResidentLayers(&self.weights))
    }

    /// [`Transformer::forward`] with each layer's weights taken from `layers` (same math; a
    /// source must hand out weights equal to this model's for the result to be the same).
    pub fn forward_with(
        &self,
        req: &ForwardRequest,
        mut cache: Option<&mut KvCache>,
        layers: &mut dyn LayerSource,
    ) -> Result<ForwardOutput> {
        self.check(req, cache.as_deref())?;
        let c = &self.config;
        let n = req.tokens.len();
        let h = c.hidden;
        if n == 0 {
            return Ok(ForwardOutput { vocab: c.vocab, ..Default::default() });
        }
        // Cached positions the block attends to: valid slots not overridden by the block itself.
        let block_pos: HashSet<usize> = req.positions.iter().copied().collect();
        let cached: Vec<usize> = match (&cache, req.kv) {
            (Some(kc), KvMode::Read | KvMode::ReadWrite) => {
                kc.valid_positions().into_iter().filter(|p| !block_pos.contains(p)).collect()
            }
            _ => Vec::new(),
        };
        let ctx_len = cached.len() + n;
        let mut k_pos = cached.clone();
        k_pos.extend_from_slice(req.positions);

        let mut x = vec![0.0f32; n * h];
        for (row, &t) in x.chunks_exact_mut(h).zip(req.tokens) {
            self.weights.embedding.row_into(t as usize, row);
        }
        let mut flops = 0.0f64;
        for li in 0..self.weights.layers.len() {
            flops += layers.with_layer(li, &mut |layer: &LayerWeights| {
                self.layer_forward(li, layer, &mut x, req, &cached, &k_pos, cache.as_deref_mut())
            })?;
        }
        if req.kv == KvMode::ReadWrite {
            if let Some(kc) = cache.as_deref_mut() {
                kc.mark_valid(req.positions.iter().copied());
            }
        }
        // LM head only for the requested rows (logit skipping).
        let m = req.logits_rows.len();
        let mut xn = vec![0.0f32; m * h];
        for (dst, &r) in xn.chunks_exact_mut(h).zip(req.logits_rows) {
            dst.copy_from_slice(&x[r * h..(r + 1) * h]);
        }
        rmsnorm_rows_inplace(&mut xn, &self.weights.final_norm, c.rms_eps);
        let mut logits = vec![0.0f32; m * c.vocab];
        if m > 0 {
            layers.with_head(&mut |head: &Linear| {
                head.forward(&xn, m, &mut logits);
                Ok(0.0)
            })?;
        }
        flops += 2.0 * (m * h * c.vocab) as f64;
        Ok(ForwardOutput { rows: req.logits_rows.to_vec(), logits, vocab: c.vocab, context_len: ctx_len, flops })
    }

    fn layer_forward(
        &self,
        li: usize,
        w: &LayerWeights,
        x: &mut [f32],
        req: &ForwardRequest,
        cached: &[usize],
        k_pos: &[usize],
        cache: Option<&mut KvCache>,
    ) -> Result<f64> {
        let c = &self.config;
        let (n, h, hd) = (req.tokens.len(), c.hidden, c.head_dim);
        let (qd, kvd) = (c.q_dim(), c.kv_dim());
        let mut flops = 0.0f64;

        // --- attention ---
        let mut xn = x.to_vec();
        rmsnorm_rows_inplace(&mut xn, &w.attn_norm, c.rms_eps);
        let mut q = vec![0.0f32; n * qd];
        let mut k = vec![0.0f32; n * kvd];
        let mut v = vec![0.0f32; n * kvd];
        w.wq.forward(&xn, n, &mut q);
        w.wk.forward(&xn, n, &mut k);
        w.wv.forward(&xn, n, &mut v);
        flops += 2.0 * (n * h * (qd + 2 * kvd)) as f64;
        add_bias(&mut q, w.bq.as_deref());
        add_bias(&mut k, w.bk.as_deref());
        add_bias(&mut v, w.bv.as_deref());
        if let Some(qn) = &w.q_norm {
            rmsnorm_rows_inplace(&mut q, qn, c.rms_eps);
        }
        if let Some(kn) = &w.k_norm {
            rmsnorm_rows_inplace(&mut k, kn, c.rms_eps);
        }
        self.rope.apply_rows(&mut q, req.positions, c.n_heads, hd);
        self.rope.apply_rows(&mut k, req.positions, c.n_kv_heads, hd);

        // Context = cached rows, then the block's fresh rows.
        let ctx = cached.len() + n;
        let mut kctx = Vec::with_capacity(ctx * kvd);
        let mut vctx = Vec::with_capacity(ctx * kvd);
        if let Some(kc) = cache.as_deref() {
            for &p in cached {
                kc.append_rows(li, p, &mut kctx, &mut vctx);
            }
        }
        kctx.extend_from_slice(&k);
        vctx.extend_from_slice(&v);
        let mut att = vec![0.0f32; n * qd];
        let shape = HeadShape { n_heads: c.n_heads, n_kv_heads: c.n_kv_heads, head_dim: hd };
        attention(&mut att, &q, req.positions, &kctx, &vctx, k_pos, shape, c.causal);
        flops += 4.0 * (n * ctx * qd) as f64;
        if req.kv == KvMode::ReadWrite {
            if let Some(kc) = cache {
                for (i, &p) in req.positions.iter().enumerate() {
                    kc.write(li, p, &k[i * kvd..(i + 1) * kvd], &v[i * kvd..(i + 1) * kvd]);
                }
            }
        }
        let mut o = vec![0.0f32; n * h];
        w.wo.forward(&att, n, &mut o);
        flops += 2.0 * (n * qd * h) as f64;
        for (xi, oi) in x.iter_mut().zip(&o) {
            *xi += oi;
        }

        // --- feed-forward ---
        let mut xn = x.to_vec();
        rmsnorm_rows_inplace(&mut xn, &w.ffn_norm, c.rms_eps);
        match &w.ffn {
            FeedForward::Dense { gate, up, down } => {
                flops += swiglu_mlp(gate, up, down, &xn, n, x);
            }
            FeedForward::Moe { router, experts } => {
                let Some(moe) = &c.moe else {
                    return Err(EngineError::InvalidRequest("MoE weights without MoE config".into()));
                };
                let e = experts.len();
                let mut scores = vec![0.0f32; n * e];
                router.forward(&xn, n, &mut scores);
                flops += 2.0 * (n * h * e) as f64;
                // Token rows routed to each expert, with their mixing weights.
                let mut routed: Vec<Vec<(usize, f32)>> = vec![Vec::new(); e];
                for (t, s) in scores.chunks_exact_mut(e).enumerate() {
                    softmax_inplace(s);
                    let mut idx: Vec<usize> = (0..e).collect();
                    idx.sort_by(|&a, &b| s[b].total_cmp(&s[a]).then(a.cmp(&b)));
                    let top = &idx[..moe.top_k];
                    let norm: f32 = if moe.norm_topk_prob { top.iter().map(|&i| s[i]).sum() } else { 1.0 };
                    for &i in top {
                        routed[i].push((t, s[i] / norm));
                    }
                }
                let outs: Vec<(usize, Vec<f32>, f64)> = routed
                    .par_iter()
                    .enumerate()
                    .filter(|(_, r)| !r.is_empty())
                    .map(|(ei, r)| {
                        let m = r.len();
                        let mut xin = vec![0.0f32; m * h];
                        for (dst, &(t, _)) in xin.chunks_exact_mut(h).zip(r) {
                            dst.copy_from_slice(&xn[t * h..(t + 1) * h]);
                        }
                        let mut y = vec![0.0f32; m * h];
                        let ex = &experts[ei];
                        let f = swiglu_mlp(&ex.gate, &ex.up, &ex.down, &xin, m, &mut y);
                        (ei, y, f)
                    })
                    .collect();
                for (ei, y, f) in outs {
                    flops += f;
                    for (row, &(t, wgt)) in y.chunks_exact(h).zip(&routed[ei]) {
                        for (xi, yi) in x[t * h..(t + 1) * h].iter_mut().zip(row) {
                            *xi += wgt * yi;
                        }
                    }
                }
            }
        }
        Ok(flops)
    }
}

/// `acc += down(silu(gate(x)) * up(x))` over `m` rows; returns FLOPs.
fn swiglu_mlp(gate: &Linear, up: &Linear, down: &Linear, x: &[f32], m: usize, acc: &mut [f32]) -> f64 {
    let (f, h) = (gate.n_out, gate.k_in);
    let mut g = vec![0.0f32; m * f];
    let mut u = vec![0.0f32; m * f];
    gate.forward(x, m, &mut g);
    up.forward(x, m, &mut u);
    swiglu_inplace(&mut g, &u);
    let mut y = vec![0.0f32; m * h];
    down.forward(&g, m, &mut y);
    for (a, b) in acc.iter_mut().zip(&y) {
        *a += b;
    }
    2.0 * (3 * m * h * f) as f64
}

fn add_bias(x: &mut [f32], b: Option<&[f32]>) {
    if let Some(b) = b {
        for row in x.chunks_exact_mut(b.len()) {
            for (v, bb) in row.iter_mut().zip(b) {
                *v += bb;
            }
        }
    }
}
