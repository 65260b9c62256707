//! The LM head graph: final RmsNorm + FullyConnected to the vocabulary, run only on the rows
//! whose logits decoding asked for (gathered on our side and padded to a row bucket).

use qnn_sys::{Context, DType, Graph};

use super::emit::{Dest, Emitter};
use super::quantize::{constant, weight, QnnPrecision};
use super::stack::graph_options;
use crate::error::{EngineError, Result};
use crate::model::Transformer;

/// Graph name of the head for `rows` rows.
pub fn head_name(rows: usize) -> String {
    format!("lm_head_r{rows}")
}

/// Builds and finalizes the LM head graph for `rows` rows in `ctx`.
pub fn build_head(ctx: &Context, model: &Transformer, rows: usize, precision: QnnPrecision) -> Result<Graph> {
    let cfg = &model.config;
    let norm = constant("final_norm", &model.weights.final_norm, &[cfg.hidden as u32], precision);
    let lm = weight("lm_head", &model.weights.lm_head, precision);
    let mut e = Emitter::new(ctx.graph_builder(&head_name(rows), &graph_options(precision))?, precision.activation());
    let x = e.input("x", &[rows as u32, cfg.hidden as u32])?;
    let gamma = e.constant(&norm)?;
    let w = e.constant(&lm)?;
    let xn = e.rms_norm("xn", x, gamma, cfg.rms_eps)?;
    e.fully_connected("logits", xn, w, None, Dest::Output)?;
    e.finalize()
}

/// A runnable head graph.
pub struct HeadGraph {
    graph: Graph,
    rows: usize,
}

impl HeadGraph {
    /// Checks the graph has the head's I/O (`x` in, `logits` out, activation dtype).
    pub fn bind(graph: Graph, act: DType) -> Result<Self> {
        let ins = graph.input_specs();
        let outs = graph.output_specs();
        let ok = ins.len() == 1
            && outs.len() == 1
            && ins[0].name == "x"
            && outs[0].name == "logits"
            && ins[0].dtype == act
            && outs[0].dtype == act;
        if !ok {
            return Err(EngineError::Backend {
                backend: "qnn".into(),
                reason: format!("graph {:?} is not an LM head graph", graph.name()),
            });
        }
        let rows = ins[0].dims[0] as usize;
        Ok(HeadGraph { graph, rows })
    }

    /// Row bucket.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Logits (activation dtype bytes, `rows × vocab`) of `x` (`rows × hidden`).
    pub fn run(&mut self, x: &[u8]) -> Result<Vec<u8>> {
        let mut out = vec![0u8; self.graph.output_specs()[0].num_bytes()];
        self.graph.execute(&[x], &mut [&mut out])?;
        Ok(out)
    }
}
