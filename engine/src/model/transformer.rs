//! The forward pass of the generic decoder-only transformer (all supported families).
//!
//! One data flow, buffers named after the math: `x` (residual stream), `xn` (normed), `q`/`k`/`v`,
//! `att` (attention output), `gate`/`up` (FFN), `logits`.
//!
//! No allocation on the hot path (llama2.c style): every intermediate lives in a [`Scratch`] the
//! model keeps, grown to the largest window seen (or reserved up front by
//! [`Transformer::new_cache`] for the cache's capacity) and written through once when it grows,
//! so its pages are faulted in before decoding starts. Only the returned logits are fresh.
//! A forward that finds the scratch busy (the same model running on another thread) uses a
//! private one.

use std::sync::Mutex;

use crate::error::{EngineError, Result};
use crate::kernels::activation::swiglu_inplace;
use crate::kernels::attention::{attention_with, AttnArgs, HeadShape};
use crate::kernels::linear::Linear;
use crate::kernels::norm::{add_inplace, rmsnorm_rows_inplace};
use crate::kernels::rope::RopeTable;
use crate::kernels::simd::Simd;
use crate::moe::ffn::{moe_ffn, MoeExecution, MoeLayer, MoeStats, StaticPlan};

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
    /// What this forward's MoE layers did (MoE models only): backends that time MoE launches read it.
    pub moe: Option<MoeStats>,
}

impl ForwardOutput {

    /// Logits of the i-th requested row.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.logits[i * self.vocab..(i + 1) * self.vocab]
    }
}

/// Where a forward takes each layer's (and the LM head's) weights from: the resident weights, or
/// copies a staging thread prepared (the virtual NPU's swap-optimized memory runtime).
pub trait LayerSource: Send {
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

/// Every intermediate buffer of a forward, reused across forwards (grown, never shrunk).
#[derive(Default)]
pub struct Scratch {
    x: Vec<f32>,
    xn: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    kctx: Vec<f32>,
    vctx: Vec<f32>,
    kt: Vec<f32>,
    att: Vec<f32>,
    o: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    head_in: Vec<f32>,
    cached: Vec<usize>,
    k_pos: Vec<usize>,
    in_block: Vec<bool>,
    /// Tokens and context the buffers are sized for.
    rows: usize,
    ctx: usize,
}

impl std::fmt::Debug for Scratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Scratch {{ rows: {}, ctx: {} }}", self.rows, self.ctx)
    }
}

/// Grows `v` to `n` elements, writing every new one (so its pages are faulted in now).
fn grow<T: Copy + Default>(v: &mut Vec<T>, n: usize) {
    if v.len() < n {
        v.reserve_exact(n - v.len());
        // black_box keeps the fill from being folded into a lazily zeroed allocation.
        v.resize(n, std::hint::black_box(T::default()));
    }
}

impl Scratch {
    /// Sizes every buffer for forwards of up to `rows` tokens over up to `ctx` positions.
    pub fn reserve(&mut self, c: &ModelConfig, rows: usize, ctx: usize) {
        if rows <= self.rows && ctx <= self.ctx {
            return;
        }
        let rows = rows.max(self.rows);
        let ctx = ctx.max(self.ctx).max(rows);
        let (h, qd, kvd) = (c.hidden, c.q_dim(), c.kv_dim());
        let ffn = c.ffn.max(c.moe.as_ref().map_or(0, |m| m.expert_ffn));
        grow(&mut self.x, rows * h);
        grow(&mut self.xn, rows * h);
        grow(&mut self.q, rows * qd);
        grow(&mut self.k, rows * kvd);
        grow(&mut self.v, rows * kvd);
        grow(&mut self.kctx, ctx * kvd);
        grow(&mut self.vctx, ctx * kvd);
        // Transposed K, padded to whole key tiles (64 keys at most).
        grow(&mut self.kt, (ctx + 64) * kvd);
        grow(&mut self.att, rows * qd);
        grow(&mut self.o, rows * h);
        grow(&mut self.gate, rows * ffn);
        grow(&mut self.up, rows * ffn);
        grow(&mut self.head_in, rows * h);
        self.cached.reserve(ctx);
        self.k_pos.reserve(ctx);
        self.rows = rows;
        self.ctx = ctx;
    }
}

/// A loaded model ready to run.
#[derive(Debug)]
pub struct Transformer {
    pub config: ModelConfig,
    pub weights: ModelWeights,
    rope: RopeTable,
    scratch: Mutex<Scratch>,
    /// How MoE layers run, and their counters since the last [`Transformer::take_moe_stats`].
    moe: Mutex<(MoeExecution, MoeStats)>,
}

impl Transformer {
    /// Builds the runtime tables for `weights`.
    pub fn new(config: ModelConfig, weights: ModelWeights) -> Self {
        let rope = RopeTable::new(config.rope_style, config.rotary_dim, config.rope_theta, config.max_seq);
        Transformer { config, weights, rope, scratch: Mutex::new(Scratch::default()), moe: Mutex::default() }
    }

    /// Sets how MoE layers run; a static plan is checked against the model's shape first.
    pub fn set_moe_execution(&self, exec: MoeExecution) -> Result<()> {
        if exec.policy == crate::moe::MoePolicy::StaticTiers {
            let plan: &StaticPlan = exec.plan.as_deref().ok_or_else(|| {
                EngineError::InvalidRequest("the static-tiers MoE policy needs a plan (calibration or uniform)".into())
            })?;
            let (layers, experts) = self.moe_shape().ok_or_else(|| {
                EngineError::InvalidRequest("static MoE tiers asked for a model without MoE layers".into())
            })?;
            plan.check(layers, experts)?;
        }
        self.moe.lock().unwrap_or_else(|p| p.into_inner()).0 = exec;
        Ok(())
    }

    /// The MoE execution in use.
    pub fn moe_execution(&self) -> MoeExecution {
        self.moe.lock().unwrap_or_else(|p| p.into_inner()).0.clone()
    }

    /// The MoE counters since the last call (reset to zero).
    pub fn take_moe_stats(&self) -> MoeStats {
        std::mem::take(&mut self.moe.lock().unwrap_or_else(|p| p.into_inner()).1)
    }

    /// `(layers, experts per layer)` when every layer is MoE with the same expert count.
    pub fn moe_shape(&self) -> Option<(usize, usize)> {
        let mut experts = None;
        for l in &self.weights.layers {
            match &l.ffn {
                FeedForward::Moe { experts: ex, .. } if experts.is_none_or(|e| e == ex.len()) => experts = Some(ex.len()),
                _ => return None,
            }
        }
        experts.map(|e| (self.weights.layers.len(), e))
    }

    /// A KV cache sized for `capacity` positions; also sizes the forward's scratch for windows
    /// of up to `capacity` tokens, so decoding with this cache allocates nothing more.
    pub fn new_cache(&self, capacity: usize) -> KvCache {
        self.reserve_scratch(capacity, capacity);
        KvCache::new(&self.config, capacity)
    }

    /// Sizes the reused scratch for forwards of up to `rows` tokens over `ctx` positions.
    pub fn reserve_scratch(&self, rows: usize, ctx: usize) {
        if let Ok(mut s) = self.scratch.try_lock() {
            s.reserve(&self.config, rows, ctx);
        }
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
        if rayon::current_thread_index().is_none() {
            // Called from outside the worker pool: hand the whole forward to it once, instead of
            // once per kernel call (each hand-off is two context switches, which dominated small
            // models' decoding).
            return rayon::scope(|_| self.forward_with(req, cache, layers));
        }
        self.check(req, cache.as_deref())?;
        let c = &self.config;
        let n = req.tokens.len();
        let h = c.hidden;
        if n == 0 {
            return Ok(ForwardOutput { vocab: c.vocab, ..Default::default() });
        }
        let mut private = None;
        let mut guard = self.scratch.try_lock().ok();
        let sc: &mut Scratch = match guard.as_deref_mut() {
            Some(s) => s,
            None => private.insert(Scratch::default()),
        };
        // Cached positions the block attends to: valid slots not overridden by the block itself.
        sc.cached.clear();
        if let (Some(kc), KvMode::Read | KvMode::ReadWrite) = (&cache, req.kv) {
            sc.in_block.clear();
            sc.in_block.resize(kc.capacity(), false);
            for &p in req.positions {
                if p < sc.in_block.len() {
                    sc.in_block[p] = true;
                }
            }
            sc.cached.extend((0..kc.capacity()).filter(|&p| kc.is_valid(p) && !sc.in_block[p]));
        }
        let ctx_len = sc.cached.len() + n;
        sc.reserve(c, n, ctx_len);
        sc.k_pos.clear();
        sc.k_pos.extend_from_slice(&sc.cached);
        sc.k_pos.extend_from_slice(req.positions);

        for (row, &t) in sc.x[..n * h].chunks_exact_mut(h).zip(req.tokens) {
            self.weights.embedding.row_into(t as usize, row);
        }
        let mut flops = 0.0f64;
        let moe_exec = self.moe_execution();
        let mut moe_stats = MoeStats::default();
        for li in 0..self.weights.layers.len() {
            flops += layers.with_layer(li, &mut |layer: &LayerWeights| {
                let moe = (&moe_exec, &mut moe_stats);
                self.layer_forward(li, layer, sc, req, cache.as_deref_mut(), moe)
            })?;
        }
        let moe = (moe_stats.layer_runs > 0).then(|| {
            self.moe.lock().unwrap_or_else(|p| p.into_inner()).1.merge(&moe_stats);
            moe_stats
        });
        if req.kv == KvMode::ReadWrite {
            if let Some(kc) = cache.as_deref_mut() {
                kc.mark_valid(req.positions.iter().copied());
            }
        }
        // LM head only for the requested rows (logit skipping).
        let m = req.logits_rows.len();
        let xn = &mut sc.head_in[..m * h];
        for (dst, &r) in xn.chunks_exact_mut(h).zip(req.logits_rows) {
            dst.copy_from_slice(&sc.x[r * h..(r + 1) * h]);
        }
        rmsnorm_rows_inplace(xn, &self.weights.final_norm, c.rms_eps);
        let mut logits = vec![0.0f32; m * c.vocab];
        if m > 0 {
            layers.with_head(&mut |head: &Linear| {
                head.forward(xn, m, &mut logits);
                Ok(0.0)
            })?;
        }
        flops += 2.0 * (m * h * c.vocab) as f64;
        Ok(ForwardOutput { rows: req.logits_rows.to_vec(), logits, vocab: c.vocab, context_len: ctx_len, flops, moe })
    }

    fn layer_forward(
        &self,
        li: usize,
        w: &LayerWeights,
        sc: &mut Scratch,
        req: &ForwardRequest,
        cache: Option<&mut KvCache>,
        (moe_exec, moe_stats): (&MoeExecution, &mut MoeStats),
    ) -> Result<f64> {
        let c = &self.config;
        let (n, h, hd) = (req.tokens.len(), c.hidden, c.head_dim);
        let (qd, kvd) = (c.q_dim(), c.kv_dim());
        let mut flops = 0.0f64;
        let ctx = sc.cached.len() + n;
        let x = &mut sc.x[..n * h];

        // --- attention ---
        let xn = &mut sc.xn[..n * h];
        xn.copy_from_slice(x);
        rmsnorm_rows_inplace(xn, &w.attn_norm, c.rms_eps);
        let (q, k, v) = (&mut sc.q[..n * qd], &mut sc.k[..n * kvd], &mut sc.v[..n * kvd]);
        w.wq.forward(xn, n, q);
        w.wk.forward(xn, n, k);
        w.wv.forward(xn, n, v);
        flops += 2.0 * (n * h * (qd + 2 * kvd)) as f64;
        add_bias(q, w.bq.as_deref());
        add_bias(k, w.bk.as_deref());
        add_bias(v, w.bv.as_deref());
        if let Some(qn) = &w.q_norm {
            rmsnorm_rows_inplace(q, qn, c.rms_eps);
        }
        if let Some(kn) = &w.k_norm {
            rmsnorm_rows_inplace(k, kn, c.rms_eps);
        }
        self.rope.apply_rows(q, req.positions, c.n_heads, hd);
        self.rope.apply_rows(k, req.positions, c.n_kv_heads, hd);

        // Context = cached rows, then the block's fresh rows (gathered into reused buffers).
        let (kctx, vctx) = (&mut sc.kctx[..ctx * kvd], &mut sc.vctx[..ctx * kvd]);
        if let Some(kc) = cache.as_deref() {
            for (i, &p) in sc.cached.iter().enumerate() {
                kc.copy_rows(li, p, &mut kctx[i * kvd..(i + 1) * kvd], &mut vctx[i * kvd..(i + 1) * kvd]);
            }
        }
        let nc = sc.cached.len();
        kctx[nc * kvd..].copy_from_slice(k);
        vctx[nc * kvd..].copy_from_slice(v);
        let att = &mut sc.att[..n * qd];
        let shape = HeadShape { n_heads: c.n_heads, n_kv_heads: c.n_kv_heads, head_dim: hd };
        let args = AttnArgs { q, q_pos: req.positions, k: kctx, v: vctx, k_pos: &sc.k_pos, shape, causal: c.causal };
        attention_with(Simd::detect(), att, args, &mut sc.kt);
        flops += 4.0 * (n * ctx * qd) as f64;
        if req.kv == KvMode::ReadWrite {
            if let Some(kc) = cache {
                for (i, &p) in req.positions.iter().enumerate() {
                    kc.write(li, p, &k[i * kvd..(i + 1) * kvd], &v[i * kvd..(i + 1) * kvd]);
                }
            }
        }
        let o = &mut sc.o[..n * h];
        w.wo.forward(att, n, o);
        flops += 2.0 * (n * qd * h) as f64;
        add_inplace(x, o);

        // --- feed-forward ---
        let xn = &mut sc.xn[..n * h];
        xn.copy_from_slice(x);
        rmsnorm_rows_inplace(xn, &w.ffn_norm, c.rms_eps);
        let xn = &sc.xn[..n * h];
        match &w.ffn {
            FeedForward::Dense { gate, up, down } => {
                let f = gate.n_out;
                let (g, u, y) = (&mut sc.gate[..n * f], &mut sc.up[..n * f], &mut sc.o[..n * h]);
                flops += swiglu_mlp(gate, up, down, xn, n, g, u, y);
                add_inplace(x, y);
            }
            FeedForward::Moe { router, experts } => {
                let Some(moe) = &c.moe else {
                    return Err(EngineError::InvalidRequest("MoE weights without MoE config".into()));
                };
                let layer = MoeLayer { router, experts, top_k: moe.top_k, norm_topk_prob: moe.norm_topk_prob };
                flops += moe_ffn(&layer, moe_exec, li, x, xn, n, h, moe_stats)?;
            }
        }
        Ok(flops)
    }
}

/// `y = down(silu(gate(x)) * up(x))` over `m` rows into the given buffers; returns FLOPs.
#[allow(clippy::too_many_arguments)]
fn swiglu_mlp(
    gate: &Linear,
    up: &Linear,
    down: &Linear,
    x: &[f32],
    m: usize,
    g: &mut [f32],
    u: &mut [f32],
    y: &mut [f32],
) -> f64 {
    let (f, h) = (gate.n_out, gate.k_in);
    gate.forward(x, m, g);
    up.forward(x, m, u);
    swiglu_inplace(g, u);
    down.forward(g, m, y);
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
