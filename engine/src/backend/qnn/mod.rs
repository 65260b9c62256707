//! The QNN backend: runs the dense path on a Qualcomm Hexagon NPU through `qnn-sys`.
//!
//! Each forward runs static-shape graphs for its (tokens × cached) [`Bucket`]: the layer stack
//! (one graph per group of `layers_per_graph` layers, see [`stack`] and [`lower_layer`]) and the
//! LM head on the requested rows only ([`lower_head`]). Embedding lookup, RoPE tables, the mask
//! and the KV cache stay on our side ([`inputs`]); cached K/V rows are graph inputs and each graph
//! returns the block's fresh K/V rows, which we store. Weights are STATIC tensors quantised per
//! output channel ([`quantize`]). Built contexts are cached as context binaries ([`graph_cache`]).
//!
//! MoE models (LLaDA-MoE, Qwen3-MoE) run with one graph per layer, ending at the normed FFN input;
//! the host routes the tokens ([`moe_host`]: router, top-k, static capacities, saliency dropping)
//! and runs each expert group that received tokens as one static grouped graph
//! ([`lower_moe`]), one launch per group, then scatters the outputs back with the gate weights.

pub(crate) mod buckets;
pub(crate) mod emit;
pub(crate) mod graph_cache;
pub(crate) mod inputs;
pub(crate) mod lower_head;
pub(crate) mod lower_layer;
pub(crate) mod lower_moe;
pub(crate) mod moe_host;
pub(crate) mod options;
pub(crate) mod quantize;
pub(crate) mod rope;
pub(crate) mod stack;

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use qnn_sys::{Context, Device, PowerVote, QnnLibrary};

pub use buckets::{Bucket, BucketPlan};
pub use graph_cache::Outcome;
pub use options::{QnnOptions, QnnStats};
pub use quantize::QnnPrecision;

use super::{Backend, CostProfile, CpuPathExecutor, CpuPathHost, ForwardStats};
use crate::error::{EngineError, Result};
use crate::kernels::rope::RopeTable;
use crate::model::weights::FeedForward;
use crate::model::{ForwardOutput, ForwardRequest, KvCache, KvMode, ModelConfig, Transformer};
use crate::moe::MoeStats;
use graph_cache::{Entry, GraphCache};
use lower_head::{build_head, HeadGraph};
use lower_moe::{build_experts, ExpertsGraph, Segment};
use quantize::{decode, encode};
use stack::{build_group, cut_after, layer_groups, SharedInputs, StackGraph};

/// Per-execute overhead of an HTP graph (~160 µs RPC vs accelerator time on SM8550; reference
/// `npu-qnn.md` §0), used for the cost profile decoding plans windows with.
pub const EXECUTE_OVERHEAD_S: f64 = 160e-6;

/// Runs the dense transformer on a QNN backend.
pub struct QnnBackend {
    // Graphs first: fields drop in order, and graphs belong to contexts, contexts to the device.
    stacks: HashMap<Bucket, Vec<StackGraph>>,
    heads: HashMap<usize, HeadGraph>,
    /// Grouped expert graphs by (layer, segments).
    experts: HashMap<(usize, Vec<Segment>), ExpertsGraph>,
    contexts: Vec<Context>,
    _vote: Option<PowerVote>,
    device: Device,
    api: qnn_sys::Backend,
    lib: QnnLibrary,
    model: Arc<Transformer>,
    opts: QnnOptions,
    plan: BucketPlan,
    groups: Vec<Range<usize>>,
    rope: RopeTable,
    cache: GraphCache,
    outcomes: Vec<(String, Outcome)>,
    stats: QnnStats,
    moe_stats: MoeStats,
}

impl QnnBackend {
    /// Loads the QNN library and brings up backend → device (no graph is built until a bucket
    /// is first used or [`QnnBackend::prepare`]d). An MoE model must be MoE in every layer.
    pub fn new(model: Arc<Transformer>, opts: QnnOptions) -> Result<Self> {
        check_lowerable(&model.config, &model)?;
        let moe_layers: Vec<bool> =
            model.weights.layers.iter().map(|l| matches!(l.ffn, FeedForward::Moe { .. })).collect();
        let plan = match &opts.buckets {
            Some(p) => p.clone(),
            None => BucketPlan::for_config(&model.config),
        };
        let lib = QnnLibrary::load(&opts.library)?;
        let api = qnn_sys::Backend::new(&lib, opts.log_level)?;
        let device = api.create_device(&opts.device)?;
        let vote = opts.power.map(|p| device.set_power_profile(p)).transpose()?;
        let c = &model.config;
        let rope = RopeTable::new(c.rope_style, c.rotary_dim, c.rope_theta, c.max_seq);
        let cache = GraphCache::new(opts.cache_dir.clone(), &model, opts.precision);
        tracing::info!(
            provider = lib.provider_name(),
            precision = opts.precision.name(),
            fingerprint = cache.model_fingerprint(),
            "QNN backend ready"
        );
        Ok(QnnBackend {
            stacks: HashMap::new(),
            heads: HashMap::new(),
            experts: HashMap::new(),
            contexts: Vec::new(),
            _vote: vote,
            device,
            api,
            lib,
            // The host routes between an MoE layer's graph and the next layer's.
            groups: cut_after(layer_groups(c.n_layers, opts.layers_per_graph), |l| {
                moe_layers.get(l).copied().unwrap_or(false)
            }),
            model,
            opts,
            plan,
            rope,
            cache,
            outcomes: Vec::new(),
            stats: QnnStats::default(),
            moe_stats: MoeStats::default(),
        })
    }

    /// Builds (or reloads) the graphs of `bucket` now rather than at first use.
    pub fn prepare(&mut self, bucket: Bucket) -> Result<()> {
        self.ensure_stack(bucket)
    }

    /// Builds (or reloads) the LM head for `rows` (rounded up to a row bucket).
    pub fn prepare_head(&mut self, rows: usize) -> Result<()> {
        let rows = self.plan.rows(rows)?;
        self.ensure_head(rows)
    }

    /// The shape buckets in force.
    pub fn buckets(&self) -> &BucketPlan {
        &self.plan
    }

    /// How each context was obtained, by cache key, in load order.
    pub fn outcomes(&self) -> &[(String, Outcome)] {
        &self.outcomes
    }

    /// Counters.
    pub fn stats(&self) -> &QnnStats {
        &self.stats
    }

    /// The MoE counters since the last call (reset to zero), in the terms of
    /// [`Transformer::take_moe_stats`]: `launches` counts grouped expert graphs run.
    pub fn take_moe_stats(&mut self) -> MoeStats {
        std::mem::take(&mut self.moe_stats)
    }

    /// The model.
    pub fn model(&self) -> &Arc<Transformer> {
        &self.model
    }

    /// The options.
    pub fn options(&self) -> &QnnOptions {
        &self.opts
    }

    fn record(&mut self, entry: &Entry, outcome: Outcome) {
        match outcome {
            Outcome::Loaded => self.stats.contexts_loaded += 1,
            _ => self.stats.contexts_built += 1,
        }
        self.outcomes.push((self.cache.file_key(entry), outcome));
    }

    fn ensure_stack(&mut self, bucket: Bucket) -> Result<()> {
        if self.stacks.contains_key(&bucket) {
            return Ok(());
        }
        let act = self.opts.precision.activation();
        // Committed only when every group is ready, so a failure leaves no half-loaded bucket.
        let mut graphs = Vec::with_capacity(self.groups.len());
        let mut contexts = Vec::with_capacity(self.groups.len());
        for layers in self.groups.clone() {
            let entry = Entry::Stack { bucket, layers: layers.clone() };
            let (model, precision) = (&self.model, self.opts.precision);
            let built = self.cache.load_or_build(&self.api, Some(&self.device), &entry, |ctx| {
                Ok(vec![build_group(ctx, model, layers.clone(), bucket, precision)?])
            })?;
            let graph = single(built.graphs, &entry)?;
            let x_dims = [bucket.tokens as u32, self.model.config.hidden as u32];
            let stack = StackGraph::bind(graph, layers.clone(), act, x_dims)?;
            let last_is_moe = layers
                .end
                .checked_sub(1)
                .and_then(|l| self.model.weights.layers.get(l))
                .is_some_and(|w| matches!(w.ffn, FeedForward::Moe { .. }));
            if stack.ends_in_moe() != last_is_moe {
                return Err(bad_cache(&entry, format!("MoE FFN input output present: {}", stack.ends_in_moe())));
            }
            graphs.push(stack);
            contexts.push(built.context);
            self.record(&entry, built.outcome);
        }
        self.contexts.extend(contexts);
        self.stacks.insert(bucket, graphs);
        Ok(())
    }

    fn ensure_head(&mut self, rows: usize) -> Result<()> {
        if self.heads.contains_key(&rows) {
            return Ok(());
        }
        let entry = Entry::Head { rows };
        let (model, precision) = (&self.model, self.opts.precision);
        let built = self.cache.load_or_build(&self.api, Some(&self.device), &entry, |ctx| {
            Ok(vec![build_head(ctx, model, rows, precision)?])
        })?;
        let head = HeadGraph::bind(single(built.graphs, &entry)?, self.opts.precision.activation())?;
        if head.rows() != rows {
            return Err(bad_cache(&entry, format!("head graph has {} rows", head.rows())));
        }
        self.heads.insert(rows, head);
        self.contexts.push(built.context);
        self.record(&entry, built.outcome);
        Ok(())
    }

    /// The same request checks as the CPU forward, plus the cache's layout.
    fn check(&self, req: &ForwardRequest, cache: Option<&KvCache>) -> Result<()> {
        let c = &self.model.config;
        let bad = |m: String| Err(EngineError::InvalidRequest(m));
        if req.tokens.len() != req.positions.len() {
            return bad(format!("{} tokens but {} positions", req.tokens.len(), req.positions.len()));
        }
        if let Some(&t) = req.tokens.iter().find(|&&t| t as usize >= c.vocab) {
            return bad(format!("token id {t} outside vocab of {}", c.vocab));
        }
        let limit = cache.map_or(c.max_seq, |k| k.capacity().min(c.max_seq)).min(self.rope.max_pos());
        if let Some(&p) = req.positions.iter().max() {
            if p >= limit {
                return Err(EngineError::ContextOverflow { len: p + 1, max: limit });
            }
        }
        if let Some(&r) = req.logits_rows.iter().find(|&&r| r >= req.tokens.len()) {
            return bad(format!("logits row {r} outside block of {}", req.tokens.len()));
        }
        if req.kv != KvMode::Ignore && cache.is_none() {
            return bad("KV mode needs a cache".into());
        }
        if let Some(k) = cache {
            if k.n_layers() != c.n_layers || k.kv_dim() != c.kv_dim() {
                return bad(format!("KV cache of {} layers × {} does not fit the model", k.n_layers(), k.kv_dim()));
            }
        }
        Ok(())
    }
}

/// Refuses models the lowering does not cover: MoE weights without an MoE config, or a mix of
/// dense and MoE layers (the static expert plans are per layer of an all-MoE stack).
fn check_lowerable(cfg: &ModelConfig, model: &Transformer) -> Result<()> {
    let moe_layer = model.weights.layers.iter().any(|l| matches!(l.ffn, FeedForward::Moe { .. }));
    if moe_layer || cfg.moe.is_some() {
        if cfg.moe.is_none() {
            return Err(EngineError::InvalidRequest("MoE weights without an MoE config".into()));
        }
        moe_host::moe_shape(model, cfg)?;
    }
    Ok(())
}

fn experts_entry((layer, segs): &(usize, Vec<Segment>)) -> Entry {
    Entry::Experts {
        layer: *layer,
        experts: segs.iter().map(|s| s.expert).collect(),
        capacities: segs.iter().map(|s| s.rows).collect(),
    }
}

fn bad_cache(entry: &Entry, why: String) -> EngineError {
    EngineError::Backend { backend: "qnn".into(), reason: format!("context {entry:?}: {why}") }
}

fn single(graphs: Vec<qnn_sys::Graph>, entry: &Entry) -> Result<qnn_sys::Graph> {
    let n = graphs.len();
    let mut it = graphs.into_iter();
    match (it.next(), n) {
        (Some(g), 1) => Ok(g),
        _ => Err(bad_cache(entry, format!("expected one graph, found {n}"))),
    }
}

impl Backend for QnnBackend {
    fn name(&self) -> String {
        format!("qnn:{}:{}", self.lib.provider_name(), self.opts.precision.name())
    }

    fn config(&self) -> &ModelConfig {
        &self.model.config
    }

    fn new_cache(&self, capacity: usize) -> KvCache {
        self.model.new_cache(capacity)
    }

    fn forward(&mut self, req: &ForwardRequest, cache: Option<&mut KvCache>) -> Result<(ForwardOutput, ForwardStats)> {
        let t0 = Instant::now();
        self.check(req, cache.as_deref())?;
        let model = Arc::clone(&self.model);
        let c = &model.config;
        let n = req.tokens.len();
        if n == 0 {
            return Ok((ForwardOutput { vocab: c.vocab, ..Default::default() }, ForwardStats::default()));
        }
        let block: HashSet<usize> = req.positions.iter().copied().collect();
        let cached: Vec<usize> = match (&cache, req.kv) {
            (Some(kc), KvMode::Read | KvMode::ReadWrite) => {
                kc.valid_positions().into_iter().filter(|p| !block.contains(p)).collect()
            }
            _ => Vec::new(),
        };
        let bucket = self.plan.select(n, cached.len())?;
        self.ensure_stack(bucket)?;
        let act = self.opts.precision.activation();
        let shape = inputs::ForwardShape { positions: req.positions, cached: &cached, bucket };
        let (cos, sin) = inputs::rope_inputs(&self.rope, &shape, c.head_dim, act);
        let mask = encode(&inputs::mask(&shape, c.causal), act);
        let x = inputs::embeddings(&model, req.tokens, bucket.tokens, act);
        // Read per forward: the MoE policy and plan may change between forwards.
        let moe = match model.moe_shape() {
            Some((layers, experts)) => Some(moe_host::MoeShapes::new(&model.moe_execution(), layers, experts)?),
            None => None,
        };
        // Taken out of the map while running so MoE layers can build expert graphs (`&mut self`)
        // between stack graphs; put back whatever happens.
        let mut graphs = self.stacks.remove(&bucket).ok_or_else(|| EngineError::Backend {
            backend: "qnn".into(),
            reason: format!("graphs of {bucket:?} not loaded"),
        })?;
        let shared = StackRun { x, cos: &cos, sin: &sin, mask: &mask, cached: &cached, bucket, n, moe: moe.as_ref() };
        // MoE counters count only forwards that complete, as on the CPU.
        let mut moe_stats = MoeStats::default();
        let ran = self.run_stack(&mut graphs, shared, cache.as_deref(), &mut moe_stats);
        self.stacks.insert(bucket, graphs);
        let (x, fresh) = ran?;
        if req.kv == KvMode::ReadWrite {
            if let Some(kc) = cache {
                let d = c.kv_dim();
                for (l, k, v) in &fresh {
                    let (k, v) = (decode(k, act), decode(v, act));
                    for (i, &p) in req.positions.iter().enumerate() {
                        kc.write(*l, p, &k[i * d..(i + 1) * d], &v[i * d..(i + 1) * d]);
                    }
                }
                kc.mark_valid(req.positions.iter().copied());
            }
        }
        let logits = self.head(&x, req.logits_rows)?;
        self.stats.forwards += 1;
        self.moe_stats.merge(&moe_stats);
        let ctx_len = cached.len() + n;
        let out = ForwardOutput {
            rows: req.logits_rows.to_vec(),
            logits,
            vocab: c.vocab,
            context_len: ctx_len,
            flops: flops(c, n, ctx_len, req.logits_rows.len()),
            moe: None,
        };
        let stats = ForwardStats {
            wall_s: t0.elapsed().as_secs_f64(),
            simulated_s: None,
            energy_j: None,
            tokens: n,
            padded_tokens: bucket.tokens,
            flops: out.flops,
        };
        Ok((out, stats))
    }

    fn cost_profile(&self) -> Option<CostProfile> {
        Some(CostProfile {
            token_buckets: self.plan.token_buckets().to_vec(),
            launch_overhead_s: EXECUTE_OVERHEAD_S * (self.groups.len() + 1 + self.expert_launches_bound()) as f64,
        })
    }

    fn cpu_path_host(&self) -> Option<&dyn CpuPathHost> {
        Some(self)
    }

    fn take_moe_stats(&mut self) -> Option<MoeStats> {
        Some(QnnBackend::take_moe_stats(self))
    }
}

impl CpuPathHost for QnnBackend {
    fn cpu_path_executor(&self) -> Option<Box<dyn CpuPathExecutor>> {
        // Revision runs on the phone's CPU cores next to the NPU, on the same weights.
        Some(Box::new(crate::backend::cpu::CpuBackend::new(Arc::clone(&self.model))))
    }
}

/// What running a bucket's stack graphs needs besides the graphs.
struct StackRun<'a> {
    /// Embeddings of the block (activation dtype, bucket-padded).
    x: Vec<u8>,
    cos: &'a [u8],
    sin: &'a [u8],
    mask: &'a [u8],
    cached: &'a [usize],
    bucket: Bucket,
    /// Real block rows.
    n: usize,
    /// Set for MoE models.
    moe: Option<&'a moe_host::MoeShapes>,
}

/// A layer's fresh K and V rows (activation dtype).
type FreshKv = Vec<(usize, Vec<u8>, Vec<u8>)>;

impl QnnBackend {
    /// Runs the stack graphs in order (and the experts after each MoE layer's graph); returns the
    /// final residual stream and every layer's fresh K/V rows.
    fn run_stack(
        &mut self,
        graphs: &mut [StackGraph],
        r: StackRun<'_>,
        kc: Option<&KvCache>,
        moe_stats: &mut MoeStats,
    ) -> Result<(Vec<u8>, FreshKv)> {
        let act = self.opts.precision.activation();
        let mut x = r.x;
        let mut fresh = Vec::new();
        for g in graphs.iter_mut() {
            let kv_in = |l: usize| -> (Vec<u8>, Vec<u8>) {
                match kc {
                    Some(kc) => inputs::cached_kv(kc, l, r.cached, r.bucket.cached, act),
                    None => (Vec::new(), Vec::new()),
                }
            };
            let out = g.run(&SharedInputs { x: &x, cos: r.cos, sin: r.sin, mask: r.mask }, &kv_in)?;
            self.stats.executes += 1;
            fresh.extend(out.kv);
            x = match (out.ffn_in, r.moe) {
                (Some(xn), Some(moe)) => {
                    let layer = g.layers().end - 1;
                    let (x, stats) = self.moe_layer(moe, layer, r.n, r.bucket.tokens, &out.x, &xn)?;
                    moe_stats.merge(&stats);
                    x
                }
                (None, _) => out.x,
                (Some(_), None) => {
                    return Err(EngineError::Backend {
                        backend: "qnn".into(),
                        reason: format!("graph of layers {:?} ends in an MoE layer of a dense model", g.layers()),
                    })
                }
            };
        }
        Ok((x, fresh))
    }

    /// MoE layer `layer` on the host and the grouped expert graphs: `x` is the residual stream
    /// after attention, `xn` the normed FFN input (both `[T, hidden]`, activation dtype); returns
    /// the residual stream after the experts and the layer's counters.
    fn moe_layer(
        &mut self,
        moe: &moe_host::MoeShapes,
        layer: usize,
        n: usize,
        bucket_tokens: usize,
        x: &[u8],
        xn: &[u8],
    ) -> Result<(Vec<u8>, MoeStats)> {
        let act = self.opts.precision.activation();
        let h = self.model.config.hidden;
        let (mut xs, xns) = (decode(x, act), decode(xn, act));
        let caps = moe.capacities(n, layer, bucket_tokens)?;
        let routed = moe_host::route(&self.model, layer, &xns, &xs, n, &caps, moe.renormalise)?;
        let mut launches = 0;
        for group in &moe.groups(layer)?.groups {
            if !moe_host::has_tokens(group, &routed.routing) {
                continue;
            }
            let segs = moe_host::segments(group, &caps);
            let key = (layer, segs);
            self.ensure_experts(&key)?;
            let buf = encode(&moe_host::gather(&key.1, &routed.routing, &xns, h), act);
            let graph =
                self.experts.get_mut(&key).ok_or_else(|| bad_cache(&experts_entry(&key), "not loaded".into()))?;
            let y = decode(&graph.run(&buf)?, act);
            moe_host::scatter_add(&key.1, &routed.routing, &y, &mut xs, h);
            launches += 1;
            self.stats.executes += 1;
            self.stats.moe_launches += 1;
        }
        Ok((encode(&xs, act), moe_host::layer_stats(layer, &routed, launches)))
    }

    fn ensure_experts(&mut self, key: &(usize, Vec<Segment>)) -> Result<()> {
        if self.experts.contains_key(key) {
            return Ok(());
        }
        let entry = experts_entry(key);
        let (model, precision) = (&self.model, self.opts.precision);
        let built = self.cache.load_or_build(&self.api, Some(&self.device), &entry, |ctx| {
            Ok(vec![build_experts(ctx, model, key.0, &key.1, precision)?])
        })?;
        let rows = key.1.iter().map(|s| s.rows).sum();
        let graph =
            ExpertsGraph::bind(single(built.graphs, &entry)?, precision.activation(), rows, model.config.hidden)?;
        self.experts.insert(key.clone(), graph);
        self.contexts.push(built.context);
        self.record(&entry, built.outcome);
        Ok(())
    }

    /// Grouped expert launches of one forward when every group receives tokens (0 for dense).
    fn expert_launches_bound(&self) -> usize {
        let Some((layers, experts)) = self.model.moe_shape() else {
            return 0;
        };
        match moe_host::MoeShapes::new(&self.model.moe_execution(), layers, experts) {
            Ok(m) => (0..layers).filter_map(|l| m.groups(l).ok()).map(|g| g.groups.len()).sum(),
            Err(_) => 0,
        }
    }

    /// Runs the LM head on the requested rows of the final residual stream `x` (act bytes).
    fn head(&mut self, x: &[u8], rows: &[usize]) -> Result<Vec<f32>> {
        let (h, vocab) = (self.model.config.hidden, self.model.config.vocab);
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let bucket = self.plan.rows(rows.len())?;
        self.ensure_head(bucket)?;
        let act = self.opts.precision.activation();
        let xs = decode(x, act);
        let mut sel = vec![0.0f32; bucket * h];
        for (dst, &r) in sel.chunks_exact_mut(h).zip(rows) {
            dst.copy_from_slice(&xs[r * h..(r + 1) * h]);
        }
        let head =
            self.heads.get_mut(&bucket).ok_or_else(|| bad_cache(&Entry::Head { rows: bucket }, "not loaded".into()))?;
        let mut logits = decode(&head.run(&encode(&sel, act))?, act);
        self.stats.executes += 1;
        logits.truncate(rows.len() * vocab);
        Ok(logits)
    }
}

/// FLOPs of the real (unpadded) work, counted like the CPU backend.
fn flops(c: &ModelConfig, n: usize, ctx: usize, rows: usize) -> f64 {
    let (h, qd, kvd) = (c.hidden, c.q_dim(), c.kv_dim());
    let ffn = match &c.moe {
        // Routed experts per token plus the router.
        Some(m) => 6 * n * h * m.expert_ffn * m.top_k + 2 * n * h * m.n_experts,
        None => 6 * n * h * c.ffn,
    };
    let per_layer = 2 * n * h * (qd + 2 * kvd) + 4 * n * ctx * qd + 2 * n * qd * h + ffn;
    (c.n_layers * per_layer + 2 * rows * h * c.vocab) as f64
}
