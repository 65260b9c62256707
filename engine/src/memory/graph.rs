//! The operator graph of one forward, derived from a [`ModelConfig`]: which operators run in which order
//! and which buffers (weights, KV cache, activations) each one reads and writes, with byte sizes.
//! The memory planner and the virtual NPU's cost model both walk this one graph.

use crate::model::ModelConfig;

/// Index of a buffer in [`LayerGraph::buffers`].
pub type BufferId = usize;

/// What a buffer holds, which decides how long it lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum BufferClass {
    /// Model weights: read every step, never written (long-lived).
    Weight,
    /// Per-layer K/V cache: persists across steps (long-lived).
    KvCache,
    /// Intermediate tensors of one forward (short-lived).
    Activation,
}

impl BufferClass {
    /// Whether the buffer outlives a single forward.
    pub fn is_long_lived(self) -> bool {
        !matches!(self, BufferClass::Activation)
    }
}

/// One buffer of the graph.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BufferSpec {
    /// Name for traces ("l3.wq", "l3.q").
    pub name: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Weight, KV cache or activation.
    pub class: BufferClass,
}

/// Numeric type the matrix unit computes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MatrixDType {
    /// 8-bit integer MACs.
    Int8,
    /// 4-bit weights on the integer path.
    Int4,
    /// Half-precision floating point.
    Fp16,
    /// Single precision (CPU; NPUs run fp32 graphs in fp16).
    Fp32,
}

/// Storage and compute formats of a deployment.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Precision {
    /// Matrix-unit arithmetic.
    pub matrix: MatrixDType,
    /// Bits per weight including block scales.
    pub weight_bits: f64,
    /// Bytes per activation element.
    pub activation_bytes: f64,
    /// Bytes per K or V element in the cache.
    pub kv_bytes: f64,
}

impl Precision {
    /// W4A16 with 8-bit block scales per 16 weights and an 8-bit KV cache: what mllm deploys on the
    /// HTP (npu-qnn.md §8: LPBQ block 16, KV 8-bit, FP16).
    pub fn npu_w4a16() -> Self {
        Precision { matrix: MatrixDType::Fp16, weight_bits: 4.5, activation_bytes: 2.0, kv_bytes: 1.0 }
    }
    /// Q4_0 weights (18 bytes per 32) with int8 dot products and an f16 KV cache: llama.cpp's usual
    /// phone CPU setup.
    pub fn cpu_q4_0() -> Self {
        Precision { matrix: MatrixDType::Int8, weight_bits: 4.5, activation_bytes: 4.0, kv_bytes: 2.0 }
    }
    /// Everything f32: this engine's CPU path on f32 checkpoints.
    pub fn f32() -> Self {
        Precision { matrix: MatrixDType::Fp32, weight_bits: 32.0, activation_bytes: 4.0, kv_bytes: 4.0 }
    }
    /// Bytes of a `rows × cols` weight matrix.
    pub fn weight_bytes(&self, rows: usize, cols: usize) -> u64 {
        ((rows as f64) * (cols as f64) * self.weight_bits / 8.0).ceil() as u64
    }
}

/// What an operator computes (enough to cost it).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum OpKind {
    /// `[m, k] · [k, n]` on the matrix unit; the weight is the operator's weight input.
    Matmul { m: usize, n: usize, k: usize },
    /// Multi-head attention of `q_rows` queries over `ctx` keys (QKᵀ and PV on the matrix unit,
    /// softmax on the vector unit).
    Attention { q_rows: usize, ctx: usize, n_heads: usize, n_kv_heads: usize, head_dim: usize },
    /// Elementwise / reduction work on the vector unit.
    Vector { elems: u64, flops_per_elem: f64 },
}

/// One operator with its buffers.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Operator {
    /// Name for traces ("l3.wq").
    pub name: String,
    /// Layer index (`None` for the head).
    pub layer: Option<usize>,
    /// What it computes.
    pub kind: OpKind,
    /// Buffers read.
    pub inputs: Vec<BufferId>,
    /// Buffers written.
    pub outputs: Vec<BufferId>,
}

/// Shape of one forward as the device runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct StepShape {
    /// Tokens in the block (after any bucket padding).
    pub tokens: usize,
    /// Attention context: cached positions plus the block (after any padding).
    pub context: usize,
    /// Rows that go through the LM head.
    pub logit_rows: usize,
}

/// The operator list of one forward and every buffer it touches.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LayerGraph {
    /// All buffers.
    pub buffers: Vec<BufferSpec>,
    /// Operators in execution order.
    pub ops: Vec<Operator>,
}

impl LayerGraph {
    /// Builds the graph of one forward of `cfg` at `shape` (embedding lookup stays on the CPU and is
    /// not part of the device graph). MoE layers are modelled as dense matmuls over the `top_k`
    /// active experts while every expert's weights count as resident bytes.
    pub fn build(cfg: &ModelConfig, shape: StepShape, p: &Precision) -> Self {
        let mut g = GraphBuilder { graph: LayerGraph { buffers: Vec::new(), ops: Vec::new() }, p: *p };
        let (t, h, qd, kvd) = (shape.tokens, cfg.hidden, cfg.q_dim(), cfg.kv_dim());
        let (ffn_compute, ffn_weight_rows) = match &cfg.moe {
            Some(m) => (m.top_k * m.expert_ffn, m.n_experts * m.expert_ffn),
            None => (cfg.ffn, cfg.ffn),
        };
        let mut x = g.act("x0", t * h);
        for l in 0..cfg.n_layers {
            let n = |s: &str| format!("l{l}.{s}");
            let kv = g.buffer(
                &n("kv"),
                (2.0 * shape.context as f64 * kvd as f64 * p.kv_bytes).ceil() as u64,
                BufferClass::KvCache,
            );
            let attn_norm = g.weight_vec(&n("attn_norm"), h);
            let xn = g.act(&n("xn_attn"), t * h);
            g.vector(&n("attn_norm"), l, (t * h) as u64, 4.0, vec![x, attn_norm], vec![xn]);
            let q = g.matmul(&n("wq"), l, xn, t, qd, h);
            let k = g.matmul(&n("wk"), l, xn, t, kvd, h);
            let v = g.matmul(&n("wv"), l, xn, t, kvd, h);
            g.vector(&n("rope"), l, (t * (qd + kvd)) as u64, 3.0, vec![q, k], vec![q, k]);
            let att = g.act(&n("att"), t * qd);
            g.graph.ops.push(Operator {
                name: n("attention"),
                layer: Some(l),
                kind: OpKind::Attention {
                    q_rows: t,
                    ctx: shape.context,
                    n_heads: cfg.n_heads,
                    n_kv_heads: cfg.n_kv_heads,
                    head_dim: cfg.head_dim,
                },
                inputs: vec![q, k, v, kv],
                outputs: vec![att, kv],
            });
            let o = g.matmul(&n("wo"), l, att, t, h, qd);
            let x_mid = g.act(&n("x_mid"), t * h);
            g.vector(&n("residual_attn"), l, (t * h) as u64, 1.0, vec![x, o], vec![x_mid]);
            let ffn_norm = g.weight_vec(&n("ffn_norm"), h);
            let xn2 = g.act(&n("xn_ffn"), t * h);
            g.vector(&n("ffn_norm"), l, (t * h) as u64, 4.0, vec![x_mid, ffn_norm], vec![xn2]);
            let gate = g.matmul_w(&n("w_gate"), l, xn2, t, ffn_compute, h, ffn_weight_rows * h);
            let up = g.matmul_w(&n("w_up"), l, xn2, t, ffn_compute, h, ffn_weight_rows * h);
            let a = g.act(&n("swiglu"), t * ffn_compute);
            g.vector(&n("swiglu"), l, (t * ffn_compute) as u64, 6.0, vec![gate, up], vec![a]);
            let d = g.matmul_w(&n("w_down"), l, a, t, h, ffn_compute, h * ffn_weight_rows);
            let x_next = g.act(&format!("x{}", l + 1), t * h);
            g.vector(&n("residual_ffn"), l, (t * h) as u64, 1.0, vec![x_mid, d], vec![x_next]);
            x = x_next;
        }
        let r = shape.logit_rows;
        if r == 0 {
            // No row needs logits: the head is skipped entirely.
            return g.graph;
        }
        let final_norm = g.weight_vec("final_norm", h);
        let xf = g.act("xn_final", r * h);
        g.vector_head("final_norm", (r * h) as u64, 4.0, vec![x, final_norm], vec![xf]);
        let w = g.buffer("lm_head", p.weight_bytes(cfg.vocab, h), BufferClass::Weight);
        let logits = g.act("logits", r * cfg.vocab);
        g.graph.ops.push(Operator {
            name: "lm_head".into(),
            layer: None,
            kind: OpKind::Matmul { m: r, n: cfg.vocab, k: h },
            inputs: vec![xf, w],
            outputs: vec![logits],
        });
        g.graph
    }

    /// Total bytes of buffers of one class.
    pub fn bytes_of(&self, class: BufferClass) -> u64 {
        self.buffers.iter().filter(|b| b.class == class).map(|b| b.bytes).sum()
    }

    /// The weight buffers an operator reads.
    pub fn weights_of<'a>(&'a self, op: &'a Operator) -> impl Iterator<Item = BufferId> + 'a {
        op.inputs.iter().copied().filter(move |&b| self.buffers[b].class == BufferClass::Weight)
    }

    /// Inclusive `(first, last)` operator index touching each buffer; `None` if unused.
    pub fn lifetimes(&self) -> Vec<Option<(usize, usize)>> {
        let mut life: Vec<Option<(usize, usize)>> = vec![None; self.buffers.len()];
        for (i, op) in self.ops.iter().enumerate() {
            for &b in op.inputs.iter().chain(&op.outputs) {
                life[b] = Some(match life[b] {
                    None => (i, i),
                    Some((s, _)) => (s, i),
                });
            }
        }
        life
    }
}

struct GraphBuilder {
    graph: LayerGraph,
    p: Precision,
}

impl GraphBuilder {
    fn buffer(&mut self, name: &str, bytes: u64, class: BufferClass) -> BufferId {
        self.graph.buffers.push(BufferSpec { name: name.to_owned(), bytes, class });
        self.graph.buffers.len() - 1
    }
    fn act(&mut self, name: &str, elems: usize) -> BufferId {
        let bytes = (elems as f64 * self.p.activation_bytes).ceil() as u64;
        self.buffer(name, bytes, BufferClass::Activation)
    }
    /// Norm gains and similar vectors, kept in 16-bit on the device.
    fn weight_vec(&mut self, name: &str, n: usize) -> BufferId {
        self.buffer(name, 2 * n as u64, BufferClass::Weight)
    }
    fn vector(
        &mut self,
        name: &str,
        layer: usize,
        elems: u64,
        fpe: f64,
        inputs: Vec<BufferId>,
        outputs: Vec<BufferId>,
    ) {
        let kind = OpKind::Vector { elems, flops_per_elem: fpe };
        self.graph.ops.push(Operator { name: name.to_owned(), layer: Some(layer), kind, inputs, outputs });
    }
    fn vector_head(&mut self, name: &str, elems: u64, fpe: f64, inputs: Vec<BufferId>, outputs: Vec<BufferId>) {
        let kind = OpKind::Vector { elems, flops_per_elem: fpe };
        self.graph.ops.push(Operator { name: name.to_owned(), layer: None, kind, inputs, outputs });
    }
    /// `[m, k] · W[n, k]ᵀ` with a weight of exactly the computed shape.
    fn matmul(&mut self, name: &str, layer: usize, x: BufferId, m: usize, n: usize, k: usize) -> BufferId {
        self.matmul_w(name, layer, x, m, n, k, n * k)
    }
    /// As [`GraphBuilder::matmul`] but the stored weight may hold more elements than are computed (MoE).
    #[allow(clippy::too_many_arguments)]
    fn matmul_w(
        &mut self,
        name: &str,
        layer: usize,
        x: BufferId,
        m: usize,
        n: usize,
        k: usize,
        w_elems: usize,
    ) -> BufferId {
        let w = self.buffer(name, self.p.weight_bytes(w_elems, 1), BufferClass::Weight);
        let short = name.rsplit('.').next().unwrap_or(name).trim_start_matches("w_").trim_start_matches('w');
        let y = self.act(&format!("l{layer}.{short}"), m * n);
        self.graph.ops.push(Operator {
            name: name.to_owned(),
            layer: Some(layer),
            kind: OpKind::Matmul { m, n, k },
            inputs: vec![x, w],
            outputs: vec![y],
        });
        y
    }
}
