//! Grouped expert graphs of an MoE layer: one static graph per (layer, expert group, capacity
//! shape), run as one launch per group.
//!
//! Input `x` is the group's unified buffer `[Σ capacities, hidden]`: each member expert's segment
//! holds the (already RmsNorm-ed, by the layer's graph) rows routed to it, zero-padded to its static
//! capacity. The graph splits the buffer into segments (Split on axis 0), runs each expert's
//! SwiGLU (FullyConnected gate/up, Sigmoid, Multiply, FullyConnected down) and concatenates the
//! results into output `y` `[Σ capacities, hidden]`, unweighted: the host scatters each row back
//! to its token with the gate weight. Under-full segments are padding, never a recompile.

use qnn_sys::{ops, Context, DType, Graph, TensorId};

use super::emit::{Dest, Emitter};
use super::quantize::{weight, QnnPrecision, StaticTensor};
use super::stack::graph_options;
use crate::error::{EngineError, Result};
use crate::model::weights::FeedForward;
use crate::model::Transformer;

/// One member of a grouped graph: an expert and its segment capacity (rows, ≥ 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Segment {
    /// Expert index within the layer.
    pub expert: usize,
    /// Rows reserved for it in the unified buffer.
    pub rows: usize,
}

/// Graph name of a group shape (unique within its context).
pub fn experts_name(layer: usize, segments: &[Segment]) -> String {
    let parts: Vec<String> = segments.iter().map(|s| format!("e{}x{}", s.expert, s.rows)).collect();
    format!("moe_l{layer}_{}", parts.join("_"))
}

/// One expert's weights as STATIC tensors.
struct ExpertStatics {
    gate: StaticTensor,
    up: StaticTensor,
    down: StaticTensor,
}

fn backend_err(reason: String) -> EngineError {
    EngineError::Backend { backend: "qnn".into(), reason }
}

/// Builds and finalizes the grouped graph of `segments` (in buffer order) of MoE layer `layer`.
pub fn build_experts(
    ctx: &Context,
    model: &Transformer,
    layer: usize,
    segments: &[Segment],
    precision: QnnPrecision,
) -> Result<Graph> {
    let FeedForward::Moe { experts, .. } =
        &model.weights.layers.get(layer).ok_or_else(|| backend_err(format!("no layer {layer}")))?.ffn
    else {
        return Err(backend_err(format!("layer {layer} has no experts")));
    };
    if segments.is_empty() || segments.iter().any(|s| s.rows == 0) {
        return Err(backend_err(format!("expert group of layer {layer} has an empty segment: {segments:?}")));
    }
    // Prepared before the builder: STATIC data must outlive it (QNN reads it until finalize).
    let statics: Vec<ExpertStatics> = segments
        .iter()
        .map(|s| {
            let ex = experts
                .get(s.expert)
                .ok_or_else(|| backend_err(format!("layer {layer} has no expert {}", s.expert)))?;
            let name = |m: &str| format!("l{layer}.e{}.{m}.weight", s.expert);
            Ok(ExpertStatics {
                gate: weight(&name("gate"), &ex.gate, precision),
                up: weight(&name("up"), &ex.up, precision),
                down: weight(&name("down"), &ex.down, precision),
            })
        })
        .collect::<Result<_>>()?;
    let h = model.config.hidden as u32;
    let rows: Vec<u32> = segments.iter().map(|s| s.rows as u32).collect();
    let total: u32 = rows.iter().sum();
    let mut e = Emitter::new(
        ctx.graph_builder(&experts_name(layer, segments), &graph_options(precision))?,
        precision.activation(),
    );
    let x = e.input("x", &[total, h])?;
    // One segment needs no Split (and no Concat): the buffer is the segment.
    let parts = e.split("seg", x, &rows, 0)?;
    let single = parts.len() == 1;
    let mut ys: Vec<TensorId> = Vec::with_capacity(parts.len());
    for ((seg, w), s) in parts.into_iter().zip(&statics).zip(segments) {
        let n = |m: &str| format!("e{}.{m}", s.expert);
        let wg = e.constant(&w.gate)?;
        let wu = e.constant(&w.up)?;
        let wd = e.constant(&w.down)?;
        let gt = e.fully_connected(&n("gate"), seg, wg, None, Dest::Native)?;
        let up = e.fully_connected(&n("up"), seg, wu, None, Dest::Native)?;
        let sg = e.unary(&n("gate_sig"), ops::SIGMOID, gt)?;
        let silu = e.binary(&n("gate_silu"), ops::ELEMENT_WISE_MULTIPLY, gt, sg, Dest::Native)?;
        let hid = e.binary(&n("ffn_h"), ops::ELEMENT_WISE_MULTIPLY, silu, up, Dest::Native)?;
        let (name, dest) = if single { ("y".to_string(), Dest::Output) } else { (n("down"), Dest::Native) };
        ys.push(e.fully_connected(&name, hid, wd, None, dest)?);
    }
    if !single {
        e.concat_to("y", &ys, 0, Dest::Output)?;
    }
    e.finalize()
}

/// A runnable grouped expert graph.
pub struct ExpertsGraph {
    graph: Graph,
}

impl ExpertsGraph {
    /// Checks the graph has a grouped graph's I/O: `x` in and `y` out, both `[rows, hidden]` in
    /// the activation dtype.
    pub fn bind(graph: Graph, act: DType, rows: usize, hidden: usize) -> Result<Self> {
        let dims = [rows as u32, hidden as u32];
        let (ins, outs) = (graph.input_specs(), graph.output_specs());
        let ok = ins.len() == 1
            && outs.len() == 1
            && ins[0].name == "x"
            && outs[0].name == "y"
            && ins[0].dims == dims
            && outs[0].dims == dims
            && ins[0].dtype == act
            && outs[0].dtype == act;
        if !ok {
            return Err(backend_err(format!("graph {:?} is not a grouped expert graph of {dims:?}", graph.name())));
        }
        Ok(ExpertsGraph { graph })
    }

    /// Expert outputs (activation dtype bytes, `[rows, hidden]`) of the unified buffer `x`.
    pub fn run(&mut self, x: &[u8]) -> Result<Vec<u8>> {
        let mut out = vec![0u8; self.graph.output_specs()[0].num_bytes()];
        self.graph.execute(&[x], &mut [&mut out])?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_spell_the_shape() {
        let s = [Segment { expert: 3, rows: 8 }, Segment { expert: 0, rows: 2 }];
        assert_eq!(experts_name(5, &s), "moe_l5_e3x8_e0x2");
    }
}
