//! Context-binary cache of the lowered graphs: one context per (bucket, layer group), per LM
//! head row bucket and per (MoE layer, expert group, capacity shape), keyed by lowering version + model config + weight fingerprint + precision +
//! shape, so a second process start reloads the binaries (`contextCreateFromBinary` +
//! `graphRetrieve`) instead of building and finalizing graphs again.

use std::ops::Range;
use std::path::PathBuf;

use qnn_sys::{Backend as QnnApi, CacheOutcome, Context, ContextCache, Device, Graph};

use super::buckets::Bucket;
use super::quantize::QnnPrecision;
use crate::error::Result;
use crate::model::weights::FeedForward;
use crate::model::Transformer;

/// Bump whenever the lowering emits different graphs for the same inputs.
pub const LOWERING_VERSION: u32 = 1;

/// What a cached context holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// The graph of `layers` for `bucket`.
    Stack {
        /// Shape.
        bucket: Bucket,
        /// Layers in the graph.
        layers: Range<usize>,
    },
    /// The LM head for `rows` rows.
    Head {
        /// Row bucket.
        rows: usize,
    },
    /// One expert group of an MoE layer, for one capacity shape.
    Experts {
        /// Layer.
        layer: usize,
        /// Experts with a segment in the unified buffer, in segment order.
        experts: Vec<usize>,
        /// Their segment capacities (rows), same order.
        capacities: Vec<usize>,
    },
}

impl Entry {
    fn describe(&self) -> String {
        match self {
            Entry::Stack { bucket, layers } => {
                format!("t{}-c{}-l{}_{}", bucket.tokens, bucket.cached, layers.start, layers.end)
            }
            Entry::Head { rows } => format!("head-r{rows}"),
            Entry::Experts { layer, experts, capacities } => {
                let join = |v: &[usize]| v.iter().map(usize::to_string).collect::<Vec<_>>().join("_");
                format!("moe-l{layer}-e{}-c{}", join(experts), join(capacities))
            }
        }
    }
}

/// How a context was obtained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Reloaded from a cached binary (no graph was built).
    Loaded,
    /// Built and saved; `reason` says why the cache was not used.
    Built {
        /// Why no cached binary was used.
        reason: String,
    },
    /// Built without a cache directory.
    Uncached,
}

/// A context with its graphs in build order.
pub struct CachedGraphs {
    /// Owns the graphs' device memory.
    pub context: Context,
    /// Graphs, in the order the build step returned them.
    pub graphs: Vec<Graph>,
    /// Loaded or built.
    pub outcome: Outcome,
}

/// Cache keys for one model, precision and lowering configuration.
pub struct GraphCache {
    dir: Option<PathBuf>,
    /// Hash of the model config and every weight value.
    model_fp: String,
    precision: QnnPrecision,
    config_json: String,
}

impl GraphCache {
    /// Fingerprints `model` (one pass over its weights) for caching under `dir` (`None` = no cache).
    pub fn new(dir: Option<PathBuf>, model: &Transformer, precision: QnnPrecision) -> Self {
        let config_json = serde_json::to_string(&model.config).unwrap_or_default();
        GraphCache { dir, model_fp: model_fingerprint(model, &config_json), precision, config_json }
    }

    /// The model fingerprint (part of every key).
    pub fn model_fingerprint(&self) -> &str {
        &self.model_fp
    }

    /// File stem of an entry under the cache directory.
    pub fn file_key(&self, entry: &Entry) -> String {
        format!("unmask-{}-{}-{}", &self.model_fp, self.precision.name(), entry.describe())
    }

    /// Everything the graphs depend on, hashed (stored in the sidecar and compared on load).
    pub fn source_hash(&self, entry: &Entry) -> String {
        let version = LOWERING_VERSION.to_le_bytes();
        qnn_sys::fingerprint(&[
            &version,
            self.config_json.as_bytes(),
            self.model_fp.as_bytes(),
            self.precision.name().as_bytes(),
            entry.describe().as_bytes(),
        ])
    }

    /// Reloads `entry` from the cache, or builds it with `build` (and saves it when caching).
    pub fn load_or_build(
        &self,
        api: &QnnApi,
        device: Option<&Device>,
        entry: &Entry,
        build: impl FnOnce(&Context) -> Result<Vec<Graph>>,
    ) -> Result<CachedGraphs> {
        let Some(dir) = &self.dir else {
            let context = Context::new(api, device)?;
            let graphs = build(&context)?;
            return Ok(CachedGraphs { context, graphs, outcome: Outcome::Uncached });
        };
        let cache = ContextCache::new(dir, &self.file_key(entry));
        let c = cache.load_or_build_with(api, device, &self.source_hash(entry), build)?;
        let outcome = match c.outcome {
            CacheOutcome::Loaded => Outcome::Loaded,
            CacheOutcome::Built { reason } => Outcome::Built { reason },
        };
        Ok(CachedGraphs { context: c.context, graphs: c.graphs, outcome })
    }
}

/// FNV-1a over 32-bit words (4× fewer steps than bytewise; detects changes, not tampering).
struct WordHash(u64);

impl WordHash {
    fn word(&mut self, w: u32) {
        self.0 = (self.0 ^ u64::from(w)).wrapping_mul(0x0100_0000_01b3);
    }
    fn floats(&mut self, v: &[f32]) {
        self.word(v.len() as u32);
        v.iter().for_each(|x| self.word(x.to_bits()));
    }
    fn bytes(&mut self, b: &[u8]) {
        self.word(b.len() as u32);
        b.chunks(4).for_each(|c| self.word(c.iter().fold(0u32, |a, &x| (a << 8) | u32::from(x))));
    }
}

/// Hash of the config and of every weight value as the lowering reads it (f32 rows).
pub fn model_fingerprint(model: &Transformer, config_json: &str) -> String {
    let mut h = WordHash(0xcbf2_9ce4_8422_2325);
    h.bytes(config_json.as_bytes());
    let mut row = Vec::new();
    let mut matrix = |h: &mut WordHash, m: &crate::kernels::linear::Linear| {
        row.resize(m.k_in, 0.0);
        h.bytes(m.name.as_bytes());
        for r in 0..m.n_out {
            m.row_into(r, &mut row);
            h.floats(&row);
        }
    };
    let w = &model.weights;
    matrix(&mut h, &w.embedding);
    matrix(&mut h, &w.lm_head);
    h.floats(&w.final_norm);
    for l in &w.layers {
        for m in [&l.wq, &l.wk, &l.wv, &l.wo] {
            matrix(&mut h, m);
        }
        for v in [
            Some(&l.attn_norm),
            Some(&l.ffn_norm),
            l.bq.as_ref(),
            l.bk.as_ref(),
            l.bv.as_ref(),
            l.q_norm.as_ref(),
            l.k_norm.as_ref(),
        ] {
            match v {
                Some(v) => h.floats(v),
                None => h.word(u32::MAX),
            }
        }
        match &l.ffn {
            FeedForward::Dense { gate, up, down } => {
                for m in [gate, up, down] {
                    matrix(&mut h, m);
                }
            }
            FeedForward::Moe { router, experts } => {
                matrix(&mut h, router);
                for ex in experts {
                    for m in [&ex.gate, &ex.up, &ex.down] {
                        matrix(&mut h, m);
                    }
                }
            }
        }
    }
    format!("{:016x}", h.0)
}
