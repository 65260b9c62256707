//! The QNN backend: runs the dense path on a Qualcomm Hexagon NPU through `qnn-sys`.
//!
//! Each forward runs static-shape graphs for its (tokens × cached) [`Bucket`]: the layer stack
//! (one graph per group of `layers_per_graph` layers, see [`stack`] and [`lower_layer`]) and the
//! LM head on the requested rows only ([`lower_head`]). Embedding lookup, RoPE tables, the mask
//! and the KV cache stay on our side ([`inputs`]); cached K/V rows are graph inputs and each graph
//! returns the block's fresh K/V rows, which we store. Weights are STATIC tensors quantised per
//! output channel ([`quantize`]). Built contexts are cached as context binaries ([`graph_cache`]).
//!
//! Not lowered: MoE feed-forwards (LLaDA-MoE) — [`QnnBackend::new`] returns
//! [`EngineError::Unsupported`] for them.

pub mod buckets;
pub mod emit;
pub mod graph_cache;
pub mod inputs;
pub mod lower_head;
pub mod lower_layer;
pub mod options;
pub mod quantize;
pub mod rope;
pub mod stack;

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use qnn_sys::{Context, Device, PowerVote, QnnLibrary};

pub use buckets::{Bucket, BucketPlan};
pub use graph_cache::Outcome;
pub use options::{QnnOptions, QnnStats};
pub use quantize::QnnPrecision;

use super::{Backend, CostProfile, ForwardStats};
use crate::error::{EngineError, Result};
use crate::kernels::rope::RopeTable;
use crate::model::{ForwardOutput, ForwardRequest, KvCache, KvMode, ModelConfig, Transformer};
use graph_cache::{Entry, GraphCache};
use lower_head::{build_head, HeadGraph};
use quantize::{decode, encode};
use stack::{build_group, layer_groups, SharedInputs, StackGraph};

/// Per-execute overhead of an HTP graph (~160 µs RPC vs accelerator time on SM8550; reference
/// `npu-qnn.md` §0), used for the cost profile decoding plans windows with.
pub const EXECUTE_OVERHEAD_S: f64 = 160e-6;

/// Runs the dense transformer on a QNN backend.
pub struct QnnBackend {
    // Graphs first: fields drop in order, and graphs belong to contexts, contexts to the device.
    stacks: HashMap<Bucket, Vec<StackGraph>>,
    heads: HashMap<usize, HeadGraph>,
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
}

impl QnnBackend {
    /// Loads the QNN library and brings up backend → device (no graph is built until a bucket
    /// is first used or [`QnnBackend::prepare`]d). MoE models are refused.
    pub fn new(model: Arc<Transformer>, opts: QnnOptions) -> Result<Self> {
        check_lowerable(&model.config, &model)?;
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
            contexts: Vec::new(),
            _vote: vote,
            device,
            api,
            lib,
            groups: layer_groups(c.n_layers, opts.layers_per_graph),
            model,
            opts,
            plan,
            rope,
            cache,
            outcomes: Vec::new(),
            stats: QnnStats::default(),
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
            graphs.push(StackGraph::bind(graph, layers, act, x_dims)?);
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

/// Refuses models the lowering does not cover (MoE feed-forwards).
fn check_lowerable(cfg: &ModelConfig, model: &Transformer) -> Result<()> {
    let moe_layer =
        model.weights.layers.iter().any(|l| matches!(l.ffn, crate::model::weights::FeedForward::Moe { .. }));
    if cfg.moe.is_some() || moe_layer {
        return Err(EngineError::Unsupported {
            backend: "qnn".into(),
            what: format!(
                "{:?} (MoE feed-forward layers are not lowered to QNN; use the cpu or vnpu backend)",
                cfg.arch
            ),
        });
    }
    Ok(())
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
        let mut x = inputs::embeddings(&model, req.tokens, bucket.tokens, act);
        let mut fresh = Vec::new();
        let graphs = self.stacks.get_mut(&bucket).ok_or_else(|| EngineError::Backend {
            backend: "qnn".into(),
            reason: format!("graphs of {bucket:?} not loaded"),
        })?;
        for g in graphs.iter_mut() {
            let kc = cache.as_deref();
            let kv_in = |l: usize| -> (Vec<u8>, Vec<u8>) {
                match kc {
                    Some(kc) => inputs::cached_kv(kc, l, &cached, bucket.cached, act),
                    None => (Vec::new(), Vec::new()),
                }
            };
            let out = g.run(&SharedInputs { x: &x, cos: &cos, sin: &sin, mask: &mask }, &kv_in)?;
            x = out.x;
            fresh.extend(out.kv);
            self.stats.executes += 1;
        }
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
            launch_overhead_s: EXECUTE_OVERHEAD_S * (self.groups.len() + 1) as f64,
        })
    }

    fn revision_backend(&self) -> Option<Box<dyn Backend>> {
        // Revision runs on the phone's CPU cores next to the NPU, on the same weights.
        Some(Box::new(crate::backend::cpu::CpuBackend::new(Arc::clone(&self.model))))
    }
}

impl QnnBackend {
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
    let per_layer = 2 * n * h * (qd + 2 * kvd) + 4 * n * ctx * qd + 2 * n * qd * h + 6 * n * h * c.ffn;
    (c.n_layers * per_layer + 2 * rows * h * c.vocab) as f64
}
