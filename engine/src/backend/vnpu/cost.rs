//! Per-operator cost model (simulated time): `time = max(compute / (peak · efficiency), bytes /
//! bandwidth) + per-op overhead`, with matmuls padded to the matrix tile, and static shape buckets
//! that pad a call's tokens and context up to the shapes graphs were compiled for.

use crate::error::{EngineError, Result};
use crate::memory::graph::{LayerGraph, MatrixDType, OpKind, Operator, Precision};

use crate::trace::Lane;

use super::profile::DeviceProfile;

/// The rates of whatever unit executes a graph (the NPU or a set of CPU cores).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ComputeTarget {
    /// "sm8750 NPU", "sm8750 CPU x8", ...
    pub name: String,
    /// Lane the work appears on.
    pub lane: Lane,
    /// Matrix peak for the chosen precision, ops per second.
    pub matrix_ops_per_s: f64,
    /// Fraction of the matrix peak reached at large row counts.
    pub matrix_efficiency: f64,
    /// Rows at which efficiency reaches half its maximum (0 = no row dependence).
    pub half_efficiency_rows: f64,
    /// Tile (rows, cols, depth) matmul dimensions are padded to.
    pub tile: (usize, usize, usize),
    /// Vector peak, FLOP per second.
    pub vector_flops_per_s: f64,
    /// Fraction of the vector peak reached.
    pub vector_efficiency: f64,
    /// Bytes per second the unit streams from DRAM while computing.
    pub mem_bytes_per_s: f64,
    /// Copy rate into NPU-visible memory (swap-ins), bytes per second.
    pub dma_bytes_per_s: f64,
    /// Cost of mapping one buffer into the device address space, seconds.
    pub map_cost_s: f64,
    /// Cost of unmapping one buffer, seconds.
    pub unmap_cost_s: f64,
    /// Fixed cost per graph launch, seconds.
    pub launch_overhead_s: f64,
    /// Fixed cost per operator, seconds.
    pub per_op_overhead_s: f64,
    /// Whether attention's QKᵀ/PV run on the matrix unit (NPU) or as vector dot loops (this engine's
    /// CPU attention kernel is an online-softmax dot-product loop, not a GEMM).
    pub attention_on_matrix_unit: bool,
    /// Power while busy, watts.
    pub active_w: f64,
    /// Power while idle, watts.
    pub idle_w: f64,
}

impl ComputeTarget {
    /// The profile's NPU at `precision`.
    pub fn npu(profile: &DeviceProfile, precision: &Precision) -> Result<Self> {
        let Some(n) = &profile.npu else {
            return Err(EngineError::Backend {
                backend: "vnpu".into(),
                reason: format!("profile `{}` has no NPU", profile.name),
            });
        };
        let tops = match precision.matrix {
            MatrixDType::Int8 => n.int8_tops.value,
            MatrixDType::Int4 => n.int4_tops.value,
            // The HTP runs fp32 graphs in fp16 (npu-qnn.md §6, PRECISION FLOAT16).
            MatrixDType::Fp16 | MatrixDType::Fp32 => n.fp16_tops.value,
        };
        Ok(ComputeTarget {
            name: format!("{} NPU", profile.name),
            lane: Lane::Npu,
            matrix_ops_per_s: tops * 1e12,
            matrix_efficiency: n.matrix_efficiency.value,
            half_efficiency_rows: n.half_efficiency_rows.value,
            tile: (n.tile_m.value, n.tile_n.value, n.tile_k.value),
            vector_flops_per_s: n.vector_gflops.value * 1e9,
            vector_efficiency: n.vector_efficiency.value,
            mem_bytes_per_s: n.dram_read_gbps.value.min(profile.memory.dram_gbps.value) * 1e9,
            dma_bytes_per_s: n.dma_gbps.value.min(profile.memory.dram_gbps.value) * 1e9,
            map_cost_s: n.map_cost_s.value,
            unmap_cost_s: n.unmap_cost_s.value,
            launch_overhead_s: n.launch_overhead_s.value,
            per_op_overhead_s: n.per_op_overhead_s.value,
            attention_on_matrix_unit: true,
            active_w: n.active_w.value,
            idle_w: n.idle_w.value,
        })
    }

    /// The profile's fastest `cores` CPU cores working together at `precision`.
    pub fn cpu(profile: &DeviceProfile, cores: usize, precision: &Precision) -> Self {
        let c = &profile.cpu;
        let used = c.fastest_cores(cores.max(1));
        let per_core = |k: &&super::profile::CoreCluster| match precision.matrix {
            MatrixDType::Int8 | MatrixDType::Int4 => k.int8_gops_per_core.value,
            MatrixDType::Fp16 => k.fp16_gflops_per_core.value,
            MatrixDType::Fp32 => k.fp32_gflops_per_core.value,
        };
        ComputeTarget {
            name: format!("{} CPU x{}", profile.name, used.len()),
            lane: Lane::Cpu(0),
            matrix_ops_per_s: used.iter().map(per_core).sum::<f64>() * 1e9,
            matrix_efficiency: c.matrix_efficiency.value,
            half_efficiency_rows: c.half_efficiency_rows.value,
            tile: (1, 1, 1),
            vector_flops_per_s: used.iter().map(|k| k.fp32_gflops_per_core.value).sum::<f64>() * 1e9,
            vector_efficiency: c.vector_efficiency.value,
            mem_bytes_per_s: profile.memory.dram_gbps.value * c.dram_efficiency.value * 1e9,
            // The CPU reads weights where they are: nothing is swapped in, nothing is mapped.
            dma_bytes_per_s: profile.memory.dram_gbps.value * c.dram_efficiency.value * 1e9,
            map_cost_s: 0.0,
            unmap_cost_s: 0.0,
            launch_overhead_s: 0.0,
            per_op_overhead_s: c.per_op_overhead_s.value,
            attention_on_matrix_unit: false,
            active_w: used.iter().map(|k| k.active_w_per_core.value).sum(),
            idle_w: c.idle_w.value,
        }
    }

    /// Matrix efficiency at `rows` (after padding).
    pub fn matrix_efficiency_at(&self, rows: usize) -> f64 {
        if self.half_efficiency_rows > 0.0 {
            let r = rows as f64;
            self.matrix_efficiency * r / (r + self.half_efficiency_rows)
        } else {
            self.matrix_efficiency
        }
    }
}

/// Simulated cost of one operator.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct OpCost {
    /// Arithmetic time at the sustained rate (padded work), seconds.
    pub compute_s: f64,
    /// DRAM streaming time, seconds.
    pub memory_s: f64,
    /// Fixed per-op cost, seconds.
    pub overhead_s: f64,
    /// `max(compute, memory) + overhead`, seconds.
    pub time_s: f64,
    /// Useful FLOPs (unpadded).
    pub flops: f64,
    /// FLOPs executed including tile padding.
    pub padded_flops: f64,
    /// DRAM bytes read and written.
    pub dram_bytes: f64,
}

fn pad(x: usize, t: usize) -> usize {
    x.div_ceil(t.max(1)) * t.max(1)
}

/// Costs `op` of `graph` on `target`; buffer sizes come from the graph (so they follow its precision).
pub fn op_cost(target: &ComputeTarget, graph: &LayerGraph, op: &Operator) -> OpCost {
    let bytes: f64 = op.inputs.iter().chain(&op.outputs).map(|&b| graph.buffers[b].bytes as f64).sum();
    let (tm, tn, tk) = target.tile;
    let (compute_s, flops, padded) = match op.kind {
        OpKind::Matmul { m, n, k } => {
            let (pm, pn, pk) = (pad(m, tm), pad(n, tn), pad(k, tk));
            let padded = 2.0 * (pm * pn) as f64 * pk as f64;
            let rate = target.matrix_ops_per_s * target.matrix_efficiency_at(pm);
            (padded / rate, 2.0 * (m * n) as f64 * k as f64, padded)
        }
        OpKind::Attention { q_rows, ctx, n_heads, head_dim, .. } => {
            // QKᵀ and PV per head on the matrix unit (queries, keys and head dim padded to the tile),
            // softmax (~5 FLOP per score: max, sub, exp, sum, scale) on the vector unit.
            let (pq, pc, pd) = (pad(q_rows, tm), pad(ctx, tn), pad(head_dim, tk));
            let padded = 4.0 * n_heads as f64 * (pq * pc) as f64 * pd as f64;
            let useful = 4.0 * n_heads as f64 * (q_rows * ctx) as f64 * head_dim as f64;
            let scores = (n_heads * pq * pc) as f64;
            let vector_rate = target.vector_flops_per_s * target.vector_efficiency;
            let rate = if target.attention_on_matrix_unit {
                target.matrix_ops_per_s * target.matrix_efficiency_at(pq)
            } else {
                vector_rate
            };
            let t = padded / rate + 5.0 * scores / vector_rate;
            (t, useful + 5.0 * (n_heads * q_rows * ctx) as f64, padded + 5.0 * scores)
        }
        OpKind::Vector { elems, flops_per_elem } => {
            let f = elems as f64 * flops_per_elem;
            (f / (target.vector_flops_per_s * target.vector_efficiency), f, f)
        }
    };
    let memory_s = bytes / target.mem_bytes_per_s;
    let overhead_s = target.per_op_overhead_s;
    OpCost {
        compute_s,
        memory_s,
        overhead_s,
        time_s: compute_s.max(memory_s) + overhead_s,
        flops,
        padded_flops: padded,
        dram_bytes: bytes,
    }
}

/// One static shape a graph was compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct ShapeBucket {
    /// Tokens per launch.
    pub tokens: usize,
    /// Context (KV positions incl. the block) per launch.
    pub context: usize,
}

/// The token and context lengths graphs exist for; empty lists mean dynamic shapes (no padding).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ShapeBuckets {
    /// Token buckets, ascending.
    pub tokens: Vec<usize>,
    /// Context buckets, ascending.
    pub context: Vec<usize>,
}

impl ShapeBuckets {
    /// No padding at all (CPU).
    pub fn dynamic() -> Self {
        ShapeBuckets { tokens: Vec::new(), context: Vec::new() }
    }

    /// The profile NPU's buckets (dynamic for CPU-only profiles).
    pub fn from_profile(p: &DeviceProfile) -> Self {
        match &p.npu {
            Some(n) => Self::new(n.token_buckets.value.clone(), n.context_buckets.value.clone()),
            None => Self::dynamic(),
        }
    }

    /// Sorted, deduplicated buckets (zeros dropped).
    pub fn new(mut tokens: Vec<usize>, mut context: Vec<usize>) -> Self {
        for v in [&mut tokens, &mut context] {
            v.retain(|&x| x > 0);
            v.sort_unstable();
            v.dedup();
        }
        ShapeBuckets { tokens, context }
    }

    /// Launches for a call of `tokens` tokens over `context` positions: tokens are padded up to the
    /// next bucket, or split into launches of the largest bucket; context is padded up to its bucket.
    /// A context longer than the largest bucket has no graph and is an error.
    pub fn fit(&self, tokens: usize, context: usize) -> Result<Vec<ShapeBucket>> {
        let ctx = if self.context.is_empty() {
            context
        } else {
            *self.context.iter().find(|&&c| c >= context).ok_or_else(|| EngineError::ContextOverflow {
                len: context,
                max: self.context.last().copied().unwrap_or(0),
            })?
        };
        if self.tokens.is_empty() || tokens == 0 {
            return Ok(vec![ShapeBucket { tokens, context: ctx }]);
        }
        let max = *self.tokens.last().unwrap_or(&tokens);
        let mut out = Vec::new();
        let mut left = tokens;
        while left > max {
            out.push(ShapeBucket { tokens: max, context: ctx });
            left -= max;
        }
        let t = self.tokens.iter().copied().find(|&b| b >= left).unwrap_or(max);
        out.push(ShapeBucket { tokens: t, context: ctx });
        Ok(out)
    }

    /// The smallest token bucket holding `rows` (rows themselves when dynamic).
    pub fn pad_tokens(&self, rows: usize) -> usize {
        self.tokens.iter().copied().find(|&b| b >= rows).unwrap_or(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_pad_and_split() {
        let b = ShapeBuckets::new(vec![1, 32, 64, 128], vec![512, 1024]);
        assert_eq!(b.fit(20, 300).unwrap(), vec![ShapeBucket { tokens: 32, context: 512 }]);
        assert_eq!(b.fit(1, 600).unwrap(), vec![ShapeBucket { tokens: 1, context: 1024 }]);
        let split = b.fit(200, 900).unwrap();
        assert_eq!(split.iter().map(|s| s.tokens).collect::<Vec<_>>(), vec![128, 128]);
        assert!(b.fit(8, 2000).is_err());
        assert_eq!(ShapeBuckets::dynamic().fit(7, 33).unwrap(), vec![ShapeBucket { tokens: 7, context: 33 }]);
    }

    #[test]
    fn matmul_pays_for_tile_padding() {
        let p = DeviceProfile::builtin("sm8750").unwrap();
        let prec = Precision::npu_w4a16();
        let t = ComputeTarget::npu(&p, &prec).unwrap();
        let cfg = crate::memory::plan_test_config();
        let g = LayerGraph::build(&cfg, crate::memory::StepShape { tokens: 33, context: 64, logit_rows: 1 }, &prec);
        let op = g.ops.iter().find(|o| o.name == "l0.wq").unwrap();
        let c = op_cost(&t, &g, op);
        assert!(c.padded_flops > c.flops * 1.8, "33 rows pad to 64: {} vs {}", c.padded_flops, c.flops);
    }
}
