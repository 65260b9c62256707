//! The pieces of an MoE prefill, each costed by the virtual NPU's operator cost model
//! ([`op_cost`]): the dense block of a layer (norms, QKV, attention, output projection, router),
//! one expert at a row count, the CPU's top-k, gather and scatter, and the LM head.
//!
//! Nothing here has a formula of its own: every piece is an operator (or a few) of the engine's
//! graph vocabulary, timed as `max(compute, memory) + per-op overhead` on a [`ComputeTarget`].

use std::collections::HashMap;

use crate::memory::graph::{BufferClass, BufferSpec, LayerGraph, OpKind, Operator, Precision, StepShape};
use crate::model::config::{Architecture, ModelConfig, RopeStyle};
use crate::moe::MoeShape;

use super::super::cost::{op_cost, ComputeTarget, OpCost};

/// Time and DRAM traffic of a piece of simulated work.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Work {
    /// Simulated seconds on the unit that runs it.
    pub time_s: f64,
    /// DRAM bytes read and written.
    pub dram_bytes: f64,
}

impl Work {
    fn add_op(&mut self, c: &OpCost) {
        self.time_s += c.time_s;
        self.dram_bytes += c.dram_bytes;
    }
    /// Both pieces, one after the other.
    pub fn plus(self, o: Work) -> Work {
        Work { time_s: self.time_s + o.time_s, dram_bytes: self.dram_bytes + o.dram_bytes }
    }
    /// `n` repetitions.
    pub fn times(self, n: f64) -> Work {
        Work { time_s: self.time_s * n, dram_bytes: self.dram_bytes * n }
    }
}

/// The layer graph vocabulary needs a `ModelConfig`; this one has the shape's attention and no
/// dense FFN (the MoE FFN is costed expert by expert).
fn dense_config(shape: &MoeShape) -> ModelConfig {
    ModelConfig {
        arch: Architecture::Qwen3,
        hidden: shape.hidden,
        n_layers: 1,
        n_heads: shape.n_heads,
        n_kv_heads: shape.n_kv_heads,
        head_dim: shape.head_dim,
        ffn: 0,
        vocab: shape.vocab,
        max_seq: usize::MAX,
        rope_theta: 1e6,
        rope_style: RopeStyle::RotateHalf,
        rotary_dim: shape.head_dim,
        rms_eps: 1e-6,
        qkv_bias: false,
        qk_norm: true,
        moe: None,
        causal: true,
        shift_logits: false,
        tie_embeddings: false,
        mask_token_id: None,
        bos_token_id: None,
        eos_token_id: None,
        eot_token_id: None,
        pad_token_id: None,
    }
}

/// Operators of the dense FFN, which an MoE layer replaces with its experts.
fn is_dense_ffn(op: &Operator) -> bool {
    [".w_gate", ".w_up", ".swiglu", ".w_down"].iter().any(|s| op.name.ends_with(s))
}

/// A graph of one operator over buffers of the given sizes (inputs, then one output), so
/// [`op_cost`] can cost it.
fn single_op(kind: OpKind, inputs: &[(u64, BufferClass)], output_bytes: u64) -> LayerGraph {
    let mut buffers: Vec<BufferSpec> = inputs
        .iter()
        .enumerate()
        .map(|(i, &(bytes, class))| BufferSpec { name: format!("in{i}"), bytes, class })
        .collect();
    buffers.push(BufferSpec { name: "out".into(), bytes: output_bytes, class: BufferClass::Activation });
    let op = Operator {
        name: "op".into(),
        layer: Some(0),
        kind,
        inputs: (0..inputs.len()).collect(),
        outputs: vec![inputs.len()],
    };
    LayerGraph { buffers, ops: vec![op] }
}

fn cost_single(target: &ComputeTarget, g: &LayerGraph) -> Work {
    let mut w = Work::default();
    w.add_op(&op_cost(target, g, &g.ops[0]));
    w
}

/// `[m, k] · W[n, k]ᵀ` with its weight read from DRAM.
fn matmul(target: &ComputeTarget, p: &Precision, m: usize, n: usize, k: usize) -> Work {
    let act = |elems: usize| (elems as f64 * p.activation_bytes).ceil() as u64;
    let g = single_op(
        OpKind::Matmul { m, n, k },
        &[(act(m * k), BufferClass::Activation), (p.weight_bytes(n, k), BufferClass::Weight)],
        act(m * n),
    );
    cost_single(target, &g)
}

/// Elementwise or reduction work with explicit byte counts.
fn vector(target: &ComputeTarget, elems: u64, flops_per_elem: f64, in_bytes: u64, out_bytes: u64) -> Work {
    let g = single_op(OpKind::Vector { elems, flops_per_elem }, &[(in_bytes, BufferClass::Activation)], out_bytes);
    cost_single(target, &g)
}

/// One layer's dense block for a launch of `tokens` rows over `context` positions: the layer
/// graph's operators up to the FFN (norms, QKV, RoPE, attention, output projection, residuals)
/// plus the router matmul (`tokens × hidden → experts`).
pub fn dense_block(target: &ComputeTarget, shape: &MoeShape, p: &Precision, tokens: usize, context: usize) -> Work {
    let g = LayerGraph::build(&dense_config(shape), StepShape { tokens, context, logit_rows: 0 }, p);
    let mut w = Work::default();
    for op in g.ops.iter().filter(|o| !is_dense_ffn(o)) {
        w.add_op(&op_cost(target, &g, op));
    }
    w.plus(matmul(target, p, tokens, shape.n_experts, shape.hidden))
}

/// Final norm and LM head for the one row whose logits give the first token.
pub fn head(target: &ComputeTarget, shape: &MoeShape, p: &Precision) -> Work {
    let g = LayerGraph::build(&dense_config(shape), StepShape { tokens: 1, context: 1, logit_rows: 1 }, p);
    let mut w = Work::default();
    for op in g.ops.iter().filter(|o| o.layer.is_none()) {
        w.add_op(&op_cost(target, &g, op));
    }
    w
}

/// Router softmax and top-k selection over `tokens × experts` scores (the ANE cannot run `topk`,
/// docs/sources.md §A1): ~5 FLOP per score for the softmax plus `log2(k)` comparisons.
pub fn top_k(target: &ComputeTarget, shape: &MoeShape, tokens: usize) -> Work {
    let scores = (tokens * shape.n_experts) as u64;
    let fpe = 5.0 + (shape.top_k as f64).log2().max(1.0);
    // fp16 scores in; an index (4 bytes) and a weight (2 bytes) per chosen pair out.
    vector(target, scores, fpe, 2 * scores, (tokens * shape.top_k * 6) as u64)
}

/// Copying `pairs` routed rows of the normed activations into the experts' input buffers.
pub fn gather(target: &ComputeTarget, shape: &MoeShape, tokens: usize, pairs: usize) -> Work {
    let (h, b) = (shape.hidden as u64, 2u64);
    vector(target, pairs as u64 * h, 0.0, tokens as u64 * h * b, pairs as u64 * h * b)
}

/// Adding `pairs` expert output rows, weighted, back into the residual rows.
pub fn scatter(target: &ComputeTarget, shape: &MoeShape, tokens: usize, pairs: usize) -> Work {
    let (h, b) = (shape.hidden as u64, 2u64);
    vector(target, pairs as u64 * h, 2.0, pairs as u64 * h * b, tokens as u64 * h * b)
}

/// One expert's SwiGLU FFN over `rows` rows: gate and up projections, the SwiGLU, the down
/// projection; its weights are read from DRAM once per call.
pub fn expert(target: &ComputeTarget, shape: &MoeShape, p: &Precision, rows: usize) -> Work {
    swiglu_expert(target, p, rows, shape.hidden, shape.expert_ffn)
}

/// One `h -> f -> h` SwiGLU expert over `rows` rows.
pub fn swiglu_expert(target: &ComputeTarget, p: &Precision, rows: usize, h: usize, f: usize) -> Work {
    if rows == 0 {
        return Work::default();
    }
    let act = |elems: usize| (elems as f64 * p.activation_bytes).ceil() as u64;
    let gate_up = matmul(target, p, rows, f, h).times(2.0);
    let swiglu = vector(target, (rows * f) as u64, 6.0, 2 * act(rows * f), act(rows * f));
    gate_up.plus(swiglu).plus(matmul(target, p, rows, h, f))
}

/// Weight bytes of one expert at precision `p`.
pub fn expert_weight_bytes(shape: &MoeShape, p: &Precision) -> u64 {
    3 * p.weight_bytes(shape.hidden, shape.expert_ffn)
}

/// Weight bytes of one layer's dense block (attention and router) at precision `p`.
pub fn dense_weight_bytes(shape: &MoeShape, p: &Precision) -> u64 {
    let h = shape.hidden;
    p.weight_bytes(shape.q_dim() + 2 * shape.kv_dim(), h)
        + p.weight_bytes(h, shape.q_dim())
        + p.weight_bytes(shape.n_experts, h)
}

/// Expert costs by row count on one target (every expert of a shape costs the same at equal rows).
#[derive(Debug)]
pub struct ExpertCosts<'a> {
    target: &'a ComputeTarget,
    shape: &'a MoeShape,
    precision: &'a Precision,
    by_rows: HashMap<usize, Work>,
}

impl<'a> ExpertCosts<'a> {
    pub fn new(target: &'a ComputeTarget, shape: &'a MoeShape, precision: &'a Precision) -> Self {
        ExpertCosts { target, shape, precision, by_rows: HashMap::new() }
    }
    /// One expert over `rows` rows.
    pub fn at(&mut self, rows: usize) -> Work {
        let (t, s, p) = (self.target, self.shape, self.precision);
        *self.by_rows.entry(rows).or_insert_with(|| expert(t, s, p, rows))
    }
}
