//! Graphs of consecutive layers ("groups") for one bucket: building them (inputs, constants, one
//! [`lower_layer`] per layer) and running them (binding our buffers to the graph's I/O by name,
//! so a graph retrieved from a cached context binds exactly like a freshly built one).

use std::collections::BTreeMap;
use std::ops::Range;

use qnn_sys::{Context, DType, Graph, GraphOptions};

use super::buckets::Bucket;
use super::emit::Emitter;
use super::lower_layer::{k_cache_name, lower_layer, v_cache_name, LayerInputs, LayerStatics, FFN_IN_NAME};
use super::quantize::{constant, QnnPrecision, StaticTensor};
use super::rope::rotation_matrix;
use crate::error::{EngineError, Result};
use crate::model::Transformer;

/// Splits `n_layers` into graphs of `per_graph` layers (0 = the whole stack in one graph).
pub fn layer_groups(n_layers: usize, per_graph: usize) -> Vec<Range<usize>> {
    let per = if per_graph == 0 { n_layers.max(1) } else { per_graph };
    (0..n_layers).step_by(per).map(|s| s..(s + per).min(n_layers)).collect()
}

/// Cuts `groups` after every layer for which `ends_graph` holds (MoE layers: the host routes
/// their tokens between the layer's graph and the next one).
pub fn cut_after(groups: Vec<Range<usize>>, ends_graph: impl Fn(usize) -> bool) -> Vec<Range<usize>> {
    let mut out = Vec::with_capacity(groups.len());
    for g in groups {
        let mut start = g.start;
        for l in g.clone() {
            if ends_graph(l) || l + 1 == g.end {
                out.push(start..l + 1);
                start = l + 1;
            }
        }
    }
    out
}

/// Graph name of a layer group (unique within its context).
pub fn group_name(layers: &Range<usize>) -> String {
    format!("stack_l{}_{}", layers.start, layers.end)
}

/// HTP graph options for `precision` (fp16 math for A16; all VTCM; the slow-but-best finalize).
pub fn graph_options(precision: QnnPrecision) -> GraphOptions {
    GraphOptions { fp16_precision: precision != QnnPrecision::F32, vtcm_mb: Some(0), finalize_optimization: Some(3.0) }
}

/// Builds and finalizes the graph of `layers` for `bucket` in `ctx`.
pub fn build_group(
    ctx: &Context,
    model: &Transformer,
    layers: Range<usize>,
    bucket: Bucket,
    precision: QnnPrecision,
) -> Result<Graph> {
    let cfg = &model.config;
    // Prepared before the builder: STATIC data must outlive it (QNN reads it until finalize).
    let statics: Vec<LayerStatics> =
        layers.clone().map(|l| LayerStatics::prepare(l, &model.weights.layers[l], precision)).collect::<Result<_>>()?;
    let hd = cfg.head_dim as u32;
    let rot =
        constant("rope_rotation", &rotation_matrix(cfg.rope_style, cfg.rotary_dim, cfg.head_dim), &[hd, hd], precision);
    let scale: StaticTensor = constant("score_scale", &[1.0 / (cfg.head_dim as f32).sqrt()], &[1], precision);

    let mut e =
        Emitter::new(ctx.graph_builder(&group_name(&layers), &graph_options(precision))?, precision.activation());
    let (t, cc) = (bucket.tokens as u32, bucket.cached as u32);
    let mut x = e.input("x", &[t, cfg.hidden as u32])?;
    let cos = e.input("cos", &[t, 1, hd])?;
    let sin = e.input("sin", &[t, 1, hd])?;
    let mask = e.input("mask", &[t, bucket.context() as u32])?;
    let rot = e.constant(&rot)?;
    let scale = e.constant(&scale)?;
    for (w, l) in statics.iter().zip(layers.clone()) {
        let cache = if cc > 0 {
            let kvd = cfg.kv_dim() as u32;
            Some((e.input(&k_cache_name(l), &[cc, kvd])?, e.input(&v_cache_name(l), &[cc, kvd])?))
        } else {
            None
        };
        let io = LayerInputs { x, cos, sin, mask, rot, scale, cache };
        x = lower_layer(&mut e, cfg, l, w, &io, bucket, l + 1 == layers.end)?;
    }
    e.finalize()
}

/// What a graph input carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum In {
    X,
    Cos,
    Sin,
    Mask,
    KCache(usize),
    VCache(usize),
}

/// What a graph output carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Out {
    X,
    /// The normed FFN input of the group's last layer, an MoE layer.
    FfnIn,
    KNew(usize),
    VNew(usize),
}

fn layer_of(name: &str, prefix: &str) -> Option<usize> {
    name.strip_prefix(prefix)?.strip_prefix('.')?.parse().ok()
}

fn bad_graph(graph: &str, why: String) -> EngineError {
    EngineError::Backend { backend: "qnn".into(), reason: format!("graph {graph:?}: {why}") }
}

/// Per-forward inputs shared by every group: encoded in the activation dtype.
pub struct SharedInputs<'a> {
    /// `[T, hidden]` residual stream entering the group.
    pub x: &'a [u8],
    /// `[T, 1, head_dim]`.
    pub cos: &'a [u8],
    /// `[T, 1, head_dim]`.
    pub sin: &'a [u8],
    /// `[T, C]`.
    pub mask: &'a [u8],
}

/// A group's outputs: the residual stream and each layer's fresh K/V rows (activation dtype).
pub struct GroupOutputs {
    /// `[T, hidden]`.
    pub x: Vec<u8>,
    /// `(layer, k [T, kv_dim], v [T, kv_dim])`.
    pub kv: Vec<(usize, Vec<u8>, Vec<u8>)>,
    /// When the group ends in an MoE layer: its normed FFN input `[T, hidden]` (`x` is then the
    /// residual stream after that layer's attention, before its experts).
    pub ffn_in: Option<Vec<u8>>,
}

/// A runnable layer-group graph with its I/O roles.
pub struct StackGraph {
    graph: Graph,
    layers: Range<usize>,
    inputs: Vec<In>,
    outputs: Vec<Out>,
}

impl StackGraph {
    /// Resolves the graph's I/O by name; fails on any tensor the lowering would not produce.
    pub fn bind(graph: Graph, layers: Range<usize>, act: DType, x_dims: [u32; 2]) -> Result<Self> {
        let gname = graph.name().to_string();
        if gname != group_name(&layers) {
            return Err(bad_graph(&gname, format!("expected the graph of layers {layers:?}")));
        }
        let mut inputs = Vec::new();
        for s in graph.input_specs() {
            if s.dtype != act {
                return Err(bad_graph(&gname, format!("input {:?} is {:?}, expected {act:?}", s.name, s.dtype)));
            }
            if s.name == "x" && s.dims != x_dims {
                return Err(bad_graph(&gname, format!("input x has dims {:?}, expected {x_dims:?}", s.dims)));
            }
            inputs.push(match s.name.as_str() {
                "x" => In::X,
                "cos" => In::Cos,
                "sin" => In::Sin,
                "mask" => In::Mask,
                n => match (layer_of(n, "k_cache"), layer_of(n, "v_cache")) {
                    (Some(l), _) if layers.contains(&l) => In::KCache(l),
                    (_, Some(l)) if layers.contains(&l) => In::VCache(l),
                    _ => return Err(bad_graph(&gname, format!("unexpected input {n:?}"))),
                },
            });
        }
        let mut outputs = Vec::new();
        for s in graph.output_specs() {
            outputs.push(match s.name.as_str() {
                "x_out" => Out::X,
                FFN_IN_NAME if s.dims == x_dims => Out::FfnIn,
                n => match (layer_of(n, "k_new"), layer_of(n, "v_new")) {
                    (Some(l), _) if layers.contains(&l) => Out::KNew(l),
                    (_, Some(l)) if layers.contains(&l) => Out::VNew(l),
                    _ => return Err(bad_graph(&gname, format!("unexpected output {n:?}"))),
                },
            });
        }
        if !outputs.contains(&Out::X) || !inputs.contains(&In::X) {
            return Err(bad_graph(&gname, "no residual-stream input/output".into()));
        }
        Ok(StackGraph { graph, layers, inputs, outputs })
    }

    /// Whether the graph ends in an MoE layer (outputs its normed FFN input for the experts).
    pub fn ends_in_moe(&self) -> bool {
        self.outputs.contains(&Out::FfnIn)
    }

    /// Layers this graph runs.
    pub fn layers(&self) -> &Range<usize> {
        &self.layers
    }

    /// Executes once; `kv_in(layer)` gives that layer's cached K and V bytes (bucket-padded).
    pub fn run(
        &mut self,
        shared: &SharedInputs<'_>,
        kv_in: &dyn Fn(usize) -> (Vec<u8>, Vec<u8>),
    ) -> Result<GroupOutputs> {
        let kv: Vec<(usize, Vec<u8>, Vec<u8>)> = self
            .layers
            .clone()
            .filter(|l| self.inputs.contains(&In::KCache(*l)))
            .map(|l| {
                let (k, v) = kv_in(l);
                (l, k, v)
            })
            .collect();
        let cached = |l: usize, want_k: bool| -> &[u8] {
            kv.iter().find(|(x, _, _)| *x == l).map_or(&[][..], |(_, k, v)| if want_k { k } else { v })
        };
        let ins: Vec<&[u8]> = self
            .inputs
            .iter()
            .map(|r| match *r {
                In::X => shared.x,
                In::Cos => shared.cos,
                In::Sin => shared.sin,
                In::Mask => shared.mask,
                In::KCache(l) => cached(l, true),
                In::VCache(l) => cached(l, false),
            })
            .collect();
        let mut outs: Vec<Vec<u8>> = self.graph.output_specs().iter().map(|s| vec![0u8; s.num_bytes()]).collect();
        {
            let mut refs: Vec<&mut [u8]> = outs.iter_mut().map(|b| b.as_mut_slice()).collect();
            self.graph.execute(&ins, &mut refs)?;
        }
        let mut x = Vec::new();
        let mut ffn_in = None;
        let mut fresh: BTreeMap<usize, (Vec<u8>, Vec<u8>)> = BTreeMap::new();
        for (role, bytes) in self.outputs.iter().zip(outs) {
            match *role {
                Out::X => x = bytes,
                Out::FfnIn => ffn_in = Some(bytes),
                Out::KNew(l) => fresh.entry(l).or_default().0 = bytes,
                Out::VNew(l) => fresh.entry(l).or_default().1 = bytes,
            }
        }
        let kv = fresh.into_iter().map(|(l, (k, v))| (l, k, v)).collect();
        Ok(GroupOutputs { x, kv, ffn_in })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_cover_every_layer_once() {
        assert_eq!(layer_groups(6, 0), vec![0..6]);
        assert_eq!(layer_groups(6, 4), vec![0..4, 4..6]);
        assert_eq!(layer_groups(2, 1), vec![0..1, 1..2]);
        assert_eq!(group_name(&(4..6)), "stack_l4_6");
        assert_eq!(cut_after(vec![0..4, 4..6], |l| l == 1 || l == 4), vec![0..2, 2..4, 4..5, 5..6]);
        let whole = || vec![Range { start: 0, end: 3 }];
        assert_eq!(cut_after(whole(), |_| true), vec![0..1, 1..2, 2..3]);
        assert_eq!(cut_after(whole(), |_| false), whole());
        assert_eq!(layer_of("k_cache.12", "k_cache"), Some(12));
        assert_eq!(layer_of("k_cache12", "k_cache"), None);
    }
}
