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
//!
//! Every row gives every layer its K/V, but only the rows whose logits are asked for go through
//! the last layer's queries, attention output and FFN (their hidden states are all the LM head
//! reads; [`Transformer::forward_every_row`] runs them all).
//!
//! [`Transformer::forward_batch`] packs the blocks of several independent decodes into one
//! forward (cross-request batching): every linear layer runs once over all their rows, only
//! attention and the K/V caches stay per sequence. A single forward is a batch of one.

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

/// One sequence of a packed forward: its block and the cache it attends to.
#[derive(Debug)]
pub struct BatchItem<'a> {
    pub req: ForwardRequest<'a>,
    pub cache: Option<&'a mut KvCache>,
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

/// Which rows the last layer runs past their K/V projections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RowsPastKv {
    /// Only those whose logits are asked for (the others' outputs are never read).
    HeadRows,
    /// Every row.
    All,
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
    /// Positions of all rows of the packed block, sequence after sequence.
    positions: Vec<usize>,
    /// Packed rows whose final hidden state the LM head reads (ascending, unique), and their
    /// positions: the last layer computes queries, attention output and FFN for these only.
    head_rows: Vec<usize>,
    head_pos: Vec<usize>,
    /// Per sequence: the cached positions it attends to, and its key positions (cached, then
    /// its block).
    cached: Vec<Vec<usize>>,
    k_pos: Vec<Vec<usize>>,
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
        self.positions.reserve(rows);
        self.head_rows.reserve(rows);
        self.head_pos.reserve(rows);
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
                FeedForward::Moe { experts: ex, .. } if experts.is_none_or(|e| e == ex.len()) => {
                    experts = Some(ex.len())
                }
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
        cache: Option<&mut KvCache>,
        layers: &mut dyn LayerSource,
    ) -> Result<ForwardOutput> {
        let mut one = [BatchItem { req: req.clone(), cache }];
        let mut out = self.forward_packed(&mut one, layers, RowsPastKv::HeadRows)?;
        Ok(out.pop().unwrap_or_default())
    }

    /// [`Transformer::forward`] with every row run through every layer, the last included: what
    /// observes every token's MoE routing (calibration) without asking for every row's logits.
    pub fn forward_every_row(&self, req: &ForwardRequest, cache: Option<&mut KvCache>) -> Result<ForwardOutput> {
        let mut one = [BatchItem { req: req.clone(), cache }];
        let mut out = self.forward_packed(&mut one, &mut ResidentLayers(&self.weights), RowsPastKv::All)?;
        Ok(out.pop().unwrap_or_default())
    }

    /// Runs the blocks of several independent sequences as one packed forward: the result of
    /// each is the result [`Transformer::forward`] gives it alone (same rows, same math; only
    /// the order of rows inside a GEMM differs). A sequence whose request is invalid gets its
    /// error and is left out; the others still run.
    pub fn forward_batch(&self, items: &mut [BatchItem<'_>]) -> Vec<Result<ForwardOutput>> {
        let checks: Vec<Result<()>> = items.iter().map(|it| self.check(&it.req, it.cache.as_deref())).collect();
        let mut valid: Vec<BatchItem<'_>> = items
            .iter_mut()
            .zip(&checks)
            .filter(|(_, ok)| ok.is_ok())
            .map(|(it, _)| BatchItem { req: it.req.clone(), cache: it.cache.as_deref_mut() })
            .collect();
        let packed = self.forward_packed(&mut valid, &mut ResidentLayers(&self.weights), RowsPastKv::HeadRows);
        drop(valid);
        let mut packed = match packed {
            Ok(outs) => outs.into_iter().map(Ok).collect::<Vec<_>>().into_iter(),
            Err(e) => {
                // Every sequence of the pack failed with it: the first gets the error itself.
                let n = checks.iter().filter(|c| c.is_ok()).count();
                let said = e.to_string();
                let mut errs = vec![Err(e)];
                errs.extend(
                    (1..n).map(|_| Err(EngineError::InvalidRequest(format!("the packed forward failed: {said}")))),
                );
                errs.into_iter()
            }
        };
        checks
            .into_iter()
            .map(|c| match c {
                Ok(()) => {
                    packed.next().unwrap_or_else(|| Err(EngineError::InvalidRequest("batch result missing".into())))
                }
                Err(e) => Err(e),
            })
            .collect()
    }

    /// The forward of one or more sequences packed row after row.
    fn forward_packed(
        &self,
        items: &mut [BatchItem<'_>],
        layers: &mut dyn LayerSource,
        last_layer: RowsPastKv,
    ) -> Result<Vec<ForwardOutput>> {
        if rayon::current_thread_index().is_none() {
            // Called from outside the worker pool: hand the whole forward to it once, instead of
            // once per kernel call (each hand-off is two context switches, which dominated small
            // models' decoding).
            return rayon::scope(|_| self.forward_packed(items, layers, last_layer));
        }
        for it in items.iter() {
            self.check(&it.req, it.cache.as_deref())?;
        }
        let c = &self.config;
        let h = c.hidden;
        let total: usize = items.iter().map(|it| it.req.tokens.len()).sum();
        if total == 0 {
            return Ok(items.iter().map(|_| ForwardOutput { vocab: c.vocab, ..Default::default() }).collect());
        }
        let mut private = None;
        let mut guard = self.scratch.try_lock().ok();
        let sc: &mut Scratch = match guard.as_deref_mut() {
            Some(s) => s,
            None => private.insert(Scratch::default()),
        };
        if sc.cached.len() < items.len() {
            sc.cached.resize_with(items.len(), Vec::new);
            sc.k_pos.resize_with(items.len(), Vec::new);
        }
        let mut max_ctx = 0;
        sc.positions.clear();
        for (s, it) in items.iter().enumerate() {
            // Cached positions the block attends to: valid slots not overridden by the block itself.
            let cached = &mut sc.cached[s];
            cached.clear();
            if let (Some(kc), KvMode::Read | KvMode::ReadWrite) = (&it.cache, it.req.kv) {
                sc.in_block.clear();
                sc.in_block.resize(kc.capacity(), false);
                for &p in it.req.positions {
                    if p < sc.in_block.len() {
                        sc.in_block[p] = true;
                    }
                }
                cached.extend((0..kc.capacity()).filter(|&p| kc.is_valid(p) && !sc.in_block[p]));
            }
            let k_pos = &mut sc.k_pos[s];
            k_pos.clear();
            k_pos.extend_from_slice(cached);
            k_pos.extend_from_slice(it.req.positions);
            max_ctx = max_ctx.max(k_pos.len());
            sc.positions.extend_from_slice(it.req.positions);
        }
        sc.reserve(c, total, max_ctx);

        let tokens = items.iter().flat_map(|it| it.req.tokens.iter());
        for (row, &t) in sc.x[..total * h].chunks_exact_mut(h).zip(tokens) {
            self.weights.embedding.row_into(t as usize, row);
        }
        // Linear layers cost the same per row whichever sequence it belongs to; attention is
        // counted per sequence. `row_flops` ran on every row, `head_row_flops` (the last layer
        // past its K/V) on the LM head's rows only.
        let (mut row_flops, mut head_row_flops) = (0.0f64, 0.0f64);
        let mut attn_flops = vec![0.0f64; items.len()];
        let moe_exec = self.moe_execution();
        let mut moe_stats = MoeStats::default();
        // Only the LM head's rows leave the last layer: the other rows still feed it their K/V
        // (and write them to the cache), but their queries, attention output and FFN would be
        // computed for nothing. Saves (n - m)/n of one layer's work besides K/V: a large share
        // of a shallow model's block-start refresh, a small one of a deep model's.
        let mut head_rows = std::mem::take(&mut sc.head_rows);
        head_rows.clear();
        let mut start = 0;
        for it in items.iter() {
            head_rows.extend(it.req.logits_rows.iter().map(|&r| start + r));
            start += it.req.tokens.len();
        }
        head_rows.sort_unstable();
        head_rows.dedup();
        let n_layers = self.weights.layers.len();
        let skips = n_layers > 0 && last_layer == RowsPastKv::HeadRows;
        for li in 0..n_layers {
            let last = skips && li + 1 == n_layers;
            let out_rows = last.then_some(&head_rows[..]);
            let mut split = (0.0, 0.0);
            layers.with_layer(li, &mut |layer: &LayerWeights| {
                let moe = (&moe_exec, &mut moe_stats);
                split = self.layer_forward(li, layer, sc, items, out_rows, &mut attn_flops, moe)?;
                Ok(split.0 + split.1)
            })?;
            row_flops += split.0;
            if last {
                head_row_flops += split.1;
            } else {
                row_flops += split.1;
            }
        }
        let mut moe = (moe_stats.layer_runs > 0).then(|| {
            self.moe.lock().unwrap_or_else(|p| p.into_inner()).1.merge(&moe_stats);
            moe_stats
        });
        for it in items.iter_mut() {
            if it.req.kv == KvMode::ReadWrite {
                if let Some(kc) = it.cache.as_deref_mut() {
                    kc.mark_valid(it.req.positions.iter().copied());
                }
            }
        }
        // LM head only for the requested rows (logit skipping), of every sequence at once. The
        // last layer left them packed in `head_rows` order.
        let m: usize = items.iter().map(|it| it.req.logits_rows.len()).sum();
        let xn = &mut sc.head_in[..m * h];
        let mut dst_rows = xn.chunks_exact_mut(h);
        let mut start = 0;
        for it in items.iter() {
            for &r in it.req.logits_rows {
                let src = if skips { head_rows.partition_point(|&p| p < start + r) } else { start + r };
                if let Some(dst) = dst_rows.next() {
                    dst.copy_from_slice(&sc.x[src * h..(src + 1) * h]);
                }
            }
            start += it.req.tokens.len();
        }
        sc.head_rows = head_rows;
        rmsnorm_rows_inplace(xn, &self.weights.final_norm, c.rms_eps);
        let mut logits = vec![0.0f32; m * c.vocab];
        if m > 0 {
            layers.with_head(&mut |head: &Linear| {
                head.forward(xn, m, &mut logits);
                Ok(0.0)
            })?;
        }
        if items.len() == 1 {
            let it = &items[0];
            let flops = row_flops + head_row_flops + attn_flops[0] + 2.0 * (m * h * c.vocab) as f64;
            let (rows, context_len) = (it.req.logits_rows.to_vec(), sc.k_pos[0].len());
            return Ok(vec![ForwardOutput { rows, logits, vocab: c.vocab, context_len, flops, moe }]);
        }
        let mut outs = Vec::with_capacity(items.len());
        let mut head_row = 0;
        let mut r0 = 0;
        let head_rows = &sc.head_rows;
        for (s, it) in items.iter().enumerate() {
            let (n, ms) = (it.req.tokens.len(), it.req.logits_rows.len());
            let own_head_rows = head_rows.partition_point(|&p| p < r0 + n) - head_rows.partition_point(|&p| p < r0);
            r0 += n;
            let head_share = if head_rows.is_empty() { 0.0 } else { own_head_rows as f64 / head_rows.len() as f64 };
            let flops = row_flops * n as f64 / total as f64
                + head_row_flops * head_share
                + attn_flops[s]
                + 2.0 * (ms * h * c.vocab) as f64;
            outs.push(ForwardOutput {
                rows: it.req.logits_rows.to_vec(),
                logits: logits[head_row * c.vocab..(head_row + ms) * c.vocab].to_vec(),
                vocab: c.vocab,
                context_len: sc.k_pos[s].len(),
                flops,
                // The packed forward's MoE counters go with its first sequence (the model's own
                // counters hold them too).
                moe: moe.take(),
            });
            head_row += ms;
        }
        Ok(outs)
    }

    /// One layer over the packed rows of `items`; returns the linear layers' FLOPs (those of the
    /// K/V projections, then the rest) and adds each sequence's attention FLOPs to `attn_flops`.
    ///
    /// With `out_rows` (ascending packed row indices), every row still produces its K/V, but
    /// only those rows go on through attention and the FFN: their outputs are left in the first
    /// `out_rows.len()` rows of the residual stream, in that order.
    #[allow(clippy::too_many_arguments)]
    fn layer_forward(
        &self,
        li: usize,
        w: &LayerWeights,
        sc: &mut Scratch,
        items: &mut [BatchItem<'_>],
        out_rows: Option<&[usize]>,
        attn_flops: &mut [f64],
        (moe_exec, moe_stats): (&MoeExecution, &mut MoeStats),
    ) -> Result<(f64, f64)> {
        let c = &self.config;
        let n: usize = items.iter().map(|it| it.req.tokens.len()).sum();
        let (h, hd) = (c.hidden, c.head_dim);
        let (qd, kvd) = (c.q_dim(), c.kv_dim());
        let mut flops = 0.0f64;
        let x = &mut sc.x[..n * h];
        // Rows that go on past the K/V projections.
        let nq = out_rows.map_or(n, <[usize]>::len);

        // --- attention ---
        let xn = &mut sc.xn[..n * h];
        xn.copy_from_slice(x);
        rmsnorm_rows_inplace(xn, &w.attn_norm, c.rms_eps);
        let (k, v) = (&mut sc.k[..n * kvd], &mut sc.v[..n * kvd]);
        w.wk.forward(xn, n, k);
        w.wv.forward(xn, n, v);
        let kv_flops = 2.0 * (n * h * 2 * kvd) as f64;
        add_bias(k, w.bk.as_deref());
        add_bias(v, w.bv.as_deref());
        if let Some(kn) = &w.k_norm {
            rmsnorm_rows_inplace(k, kn, c.rms_eps);
        }
        self.rope.apply_rows(k, &sc.positions, c.n_kv_heads, hd);
        let q_pos: &[usize] = match out_rows {
            None => &sc.positions,
            Some(rows) => {
                // Ascending, so each row moves down onto a row already used.
                for (i, &p) in rows.iter().enumerate() {
                    if p != i {
                        xn.copy_within(p * h..(p + 1) * h, i * h);
                        x.copy_within(p * h..(p + 1) * h, i * h);
                    }
                }
                sc.head_pos.clear();
                sc.head_pos.extend(rows.iter().map(|&p| sc.positions[p]));
                &sc.head_pos
            }
        };
        let q = &mut sc.q[..nq * qd];
        w.wq.forward(&xn[..nq * h], nq, q);
        flops += 2.0 * (nq * h * qd) as f64;
        add_bias(q, w.bq.as_deref());
        if let Some(qn) = &w.q_norm {
            rmsnorm_rows_inplace(q, qn, c.rms_eps);
        }
        self.rope.apply_rows(q, q_pos, c.n_heads, hd);

        let shape = HeadShape { n_heads: c.n_heads, n_kv_heads: c.n_kv_heads, head_dim: hd };
        let mut r0 = 0;
        for (s, it) in items.iter_mut().enumerate() {
            let ns = it.req.tokens.len();
            // This sequence's query rows.
            let (qa, qb) = match out_rows {
                None => (r0, r0 + ns),
                Some(rows) => (rows.partition_point(|&p| p < r0), rows.partition_point(|&p| p < r0 + ns)),
            };
            let (ks, vs) = (&k[r0 * kvd..(r0 + ns) * kvd], &v[r0 * kvd..(r0 + ns) * kvd]);
            if qb > qa {
                let (cached, k_pos) = (&sc.cached[s], &sc.k_pos[s]);
                let (nc, ctx) = (cached.len(), k_pos.len());
                // Context = cached rows, then the block's fresh rows (gathered into reused buffers).
                let (kctx, vctx) = (&mut sc.kctx[..ctx * kvd], &mut sc.vctx[..ctx * kvd]);
                if let Some(kc) = it.cache.as_deref() {
                    for (i, &p) in cached.iter().enumerate() {
                        kc.copy_rows(li, p, &mut kctx[i * kvd..(i + 1) * kvd], &mut vctx[i * kvd..(i + 1) * kvd]);
                    }
                }
                kctx[nc * kvd..].copy_from_slice(ks);
                vctx[nc * kvd..].copy_from_slice(vs);
                let att = &mut sc.att[qa * qd..qb * qd];
                let qs = &q[qa * qd..qb * qd];
                let args = AttnArgs { q: qs, q_pos: &q_pos[qa..qb], k: kctx, v: vctx, k_pos, shape, causal: c.causal };
                attention_with(Simd::detect(), att, args, &mut sc.kt);
                attn_flops[s] += 4.0 * ((qb - qa) * ctx * qd) as f64;
            }
            if it.req.kv == KvMode::ReadWrite {
                if let Some(kc) = it.cache.as_deref_mut() {
                    for (i, &p) in it.req.positions.iter().enumerate() {
                        kc.write(li, p, &ks[i * kvd..(i + 1) * kvd], &vs[i * kvd..(i + 1) * kvd]);
                    }
                }
            }
            r0 += ns;
        }
        let x = &mut x[..nq * h];
        let att = &sc.att[..nq * qd];
        let o = &mut sc.o[..nq * h];
        w.wo.forward(att, nq, o);
        flops += 2.0 * (nq * qd * h) as f64;
        add_inplace(x, o);

        // --- feed-forward ---
        let xn = &mut sc.xn[..nq * h];
        xn.copy_from_slice(x);
        rmsnorm_rows_inplace(xn, &w.ffn_norm, c.rms_eps);
        let xn = &sc.xn[..nq * h];
        match &w.ffn {
            FeedForward::Dense { gate, up, down } => {
                let f = gate.n_out;
                let (g, u, y) = (&mut sc.gate[..nq * f], &mut sc.up[..nq * f], &mut sc.o[..nq * h]);
                flops += swiglu_mlp(gate, up, down, xn, nq, g, u, y);
                add_inplace(x, y);
            }
            FeedForward::Moe { router, experts } => {
                let Some(moe) = &c.moe else {
                    return Err(EngineError::InvalidRequest("MoE weights without MoE config".into()));
                };
                let layer = MoeLayer { router, experts, top_k: moe.top_k, norm_topk_prob: moe.norm_topk_prob };
                flops += moe_ffn(&layer, moe_exec, li, x, xn, nq, h, moe_stats)?;
            }
        }
        Ok((kv_flops, flops))
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
