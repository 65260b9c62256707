//! Op validation at `graphAddNode`: input/output counts, dtypes, params (names, kinds,
//! values) and the exact output shape each op implies. A failure is a message for
//! GRAPH_ERROR_INVALID_OP_CONFIG, as a real backend's op validation would report.

use crate::ffi::*;
use crate::model::{is_fixed_point, MNode, MParam, MTensor};

/// Highest tensor rank HTP ops accept (documented for MatMul; the mock applies it to every op).
pub const MAX_RANK: usize = 4;

pub fn numel(d: &[u32]) -> usize {
    d.iter().map(|&x| x as usize).product()
}

pub fn broadcast(a: &[u32], b: &[u32]) -> Result<Vec<u32>, String> {
    let r = a.len().max(b.len());
    let mut out = vec![0; r];
    for i in 0..r {
        let da = if i + a.len() >= r { a[i + a.len() - r] } else { 1 };
        let db = if i + b.len() >= r { b[i + b.len() - r] } else { 1 };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(format!("shapes {a:?} and {b:?} do not broadcast"));
        };
    }
    Ok(out)
}

/// Dtype family: FLOAT_32, FLOAT_16, fixed point, plain integers. Activations of one op share a
/// family (no implicit casts), as on HTP.
fn family(dtype: u32) -> u8 {
    match dtype {
        QNN_DATATYPE_FLOAT_32 => 0,
        QNN_DATATYPE_FLOAT_16 => 1,
        d if is_fixed_point(d) => 2,
        _ => 3,
    }
}

fn is_float(dtype: u32) -> bool {
    family(dtype) < 2
}

/// The kind of value a named param must carry.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Bool,
    U32,
    F32,
    U32Tensor,
}

/// (name, kind, required) per op; any other param name is rejected.
fn param_table(op: &str) -> &'static [(&'static str, Kind, bool)] {
    match op {
        "FullyConnected" => &[("keep_dims", Kind::Bool, false)],
        "MatMul" => &[("transpose_in0", Kind::Bool, false), ("transpose_in1", Kind::Bool, false)],
        "RmsNorm" => &[("epsilon", Kind::F32, true), ("axes", Kind::U32Tensor, true)],
        "Softmax" => &[("axis", Kind::U32, false), ("beta", Kind::F32, false)],
        "Transpose" => &[("perm", Kind::U32Tensor, true)],
        "Concat" => &[("axis", Kind::U32, true)],
        "Split" => &[("axis", Kind::U32, true), ("split_index", Kind::U32Tensor, true)],
        _ => &[],
    }
}

fn check_params(node: &MNode) -> Result<(), String> {
    let table = param_table(&node.op);
    for (name, p) in &node.params {
        let Some(&(_, kind, _)) = table.iter().find(|(n, _, _)| n == name) else {
            return Err(format!("{} {:?}: unknown param {name:?}", node.op, node.name));
        };
        let ok = match (kind, p) {
            (Kind::Bool, MParam::Scalar { dtype, .. }) => *dtype == QNN_DATATYPE_BOOL_8,
            (Kind::U32, MParam::Scalar { dtype, .. }) => *dtype == QNN_DATATYPE_UINT_32,
            (Kind::F32, MParam::Scalar { dtype, bits }) => {
                *dtype == QNN_DATATYPE_FLOAT_32 && f32::from_bits(*bits as u32).is_finite()
            }
            (Kind::U32Tensor, MParam::Tensor { dtype, dims, .. }) => *dtype == QNN_DATATYPE_UINT_32 && dims.len() == 1,
            _ => false,
        };
        if !ok {
            return Err(format!("{} {:?}: param {name:?} has the wrong kind or dtype: {p:?}", node.op, node.name));
        }
        if node.params.iter().filter(|(n, _)| n == name).count() > 1 {
            return Err(format!("{} {:?}: param {name:?} given twice", node.op, node.name));
        }
    }
    if let Some((name, _, _)) = table.iter().find(|(n, _, req)| *req && node.param(n).is_none()) {
        return Err(format!("{} {:?}: missing required param {name:?}", node.op, node.name));
    }
    Ok(())
}

/// FC/MatMul weights: float of the activation's family, or SFIXED_POINT_8 (per tensor, or per
/// output channel on axis 0, optionally with a 4-bit width) under float activations.
fn check_weight(node: &MNode, w: &MTensor, act: &MTensor, channel_axis: usize) -> Result<(), String> {
    if family(w.dtype) == family(act.dtype) && (w.channels.is_empty() || is_fixed_point(w.dtype)) {
        return Ok(());
    }
    let quantized_ok = w.dtype == QNN_DATATYPE_SFIXED_POINT_8
        && is_float(act.dtype)
        && (w.channels.is_empty() || w.axis as usize == channel_axis)
        && matches!(w.bitwidth, 0 | 4 | 8);
    if quantized_ok {
        return Ok(());
    }
    Err(format!(
        "{} {:?}: weight {:?} (dtype 0x{:04x}, axis {}, {} bits) is not usable with activations 0x{:04x}",
        node.op, node.name, w.name, w.dtype, w.axis, w.bitwidth, act.dtype
    ))
}

fn u32_param(node: &MNode, name: &str) -> Option<u32> {
    node.param(name).and_then(MParam::as_u32)
}

/// `Split`: `split_index` strictly ascending inside the axis (0 excluded), one output per piece,
/// each the input's shape with the piece's length on `axis`, all in the input's dtype family.
fn validate_split(node: &MNode, x: &MTensor, outs: &[&MTensor]) -> Result<(), String> {
    let axis = u32_param(node, "axis").unwrap_or(u32::MAX) as usize;
    if axis >= x.dims.len() {
        return Err(format!("Split {:?}: axis {axis} out of range", node.name));
    }
    let idx = node.param("split_index").and_then(MParam::as_u32_vec).unwrap_or_default();
    let len = x.dims[axis];
    let mut bounds = vec![0u32];
    for &i in &idx {
        if i <= *bounds.last().unwrap_or(&0) || i >= len {
            return Err(format!("Split {:?}: split_index {idx:?} is not ascending inside (0, {len})", node.name));
        }
        bounds.push(i);
    }
    bounds.push(len);
    if outs.len() != bounds.len() - 1 {
        return Err(format!("Split {:?}: {} outputs for {} pieces", node.name, outs.len(), bounds.len() - 1));
    }
    for (t, w) in outs.iter().zip(bounds.windows(2)) {
        let mut want = x.dims.clone();
        want[axis] = w[1] - w[0];
        if t.dims != want {
            return Err(format!("Split {:?}: output {:?} has dims {:?}, expected {want:?}", node.name, t.name, t.dims));
        }
        if family(t.dtype) != family(x.dtype) {
            return Err(format!("Split {:?}: output {:?} dtype differs from the input's", node.name, t.name));
        }
    }
    Ok(())
}

/// Checks input/output counts, dtypes, params and the output shape.
pub fn validate(node: &MNode, ins: &[&MTensor], outs: &[&MTensor]) -> Result<(), String> {
    let op = node.op.as_str();
    let n_in = ins.len();
    let arity_ok = match op {
        "FullyConnected" => n_in == 2 || n_in == 3,
        "MatMul" | "ElementWiseAdd" | "ElementWiseMultiply" | "ElementWiseSubtract" | "ElementWiseDivide" => n_in == 2,
        "RmsNorm" => n_in == 2 || n_in == 3,
        "Concat" => n_in >= 1,
        _ => n_in == 1,
    };
    // Split is the only op with several outputs (one per piece).
    let outs_ok = if op == "Split" { !outs.is_empty() } else { outs.len() == 1 };
    if !arity_ok || !outs_ok {
        return Err(format!("{op} {:?}: wrong number of inputs/outputs ({n_in}/{})", node.name, outs.len()));
    }
    check_params(node)?;
    if let Some(t) = ins.iter().chain(outs).find(|t| t.dims.len() > MAX_RANK) {
        return Err(format!("{op} {:?}: tensor {:?} has rank {} > {MAX_RANK}", node.name, t.name, t.dims.len()));
    }
    let out = outs[0];
    let x = ins[0];
    if op == "Split" {
        return validate_split(node, x, outs);
    }
    // Activations (input 0 and every input of element-wise/concat) share the output's family;
    // weights (FC/MatMul input 1) may be fixed-point under float activations, as on HTP.
    let activation_inputs: &[&MTensor] = match op {
        "FullyConnected" | "MatMul" | "RmsNorm" => &ins[..1],
        _ => ins,
    };
    for t in activation_inputs {
        if family(t.dtype) != family(out.dtype) {
            return Err(format!(
                "{op} {:?}: input {:?} dtype 0x{:04x} does not match output {:?} dtype 0x{:04x}",
                node.name, t.name, t.dtype, out.name, out.dtype
            ));
        }
    }
    let expected: Vec<u32> = match op {
        "FullyConnected" => {
            let w = ins[1];
            check_weight(node, w, x, 0)?;
            let k = *x.dims.last().unwrap_or(&0);
            if w.dims.len() != 2 || w.dims[1] != k {
                return Err(format!("FullyConnected {:?}: weight {:?} is not [N, {k}]", node.name, w.dims));
            }
            let n = w.dims[0];
            if let Some(b) = ins.get(2) {
                if numel(&b.dims) != n as usize || b.dims.len() != 1 {
                    return Err(format!("FullyConnected {:?}: bias {:?} is not [{n}]", node.name, b.dims));
                }
                if family(b.dtype) != family(out.dtype) {
                    return Err(format!(
                        "FullyConnected {:?}: bias dtype 0x{:04x} differs from the output's",
                        node.name, b.dtype
                    ));
                }
            }
            if node.param("keep_dims").and_then(|p| p.as_bool()).unwrap_or(false) {
                let mut d = x.dims.clone();
                if let Some(l) = d.last_mut() {
                    *l = n;
                }
                d
            } else {
                vec![(numel(&x.dims) / k.max(1) as usize) as u32, n]
            }
        }
        "MatMul" => {
            let (a, b) = (&ins[0].dims, &ins[1].dims);
            if a.len() < 2 || b.len() < 2 {
                return Err(format!("MatMul {:?}: inputs must have rank >= 2", node.name));
            }
            let tb = node.param("transpose_in1").and_then(|p| p.as_bool()).unwrap_or(false);
            // Per-channel weights quantize the output (N) axis.
            check_weight(node, ins[1], x, if tb { b.len() - 2 } else { b.len() - 1 })?;
            let ta = node.param("transpose_in0").and_then(|p| p.as_bool()).unwrap_or(false);
            let (m, ka) = if ta { (a[a.len() - 1], a[a.len() - 2]) } else { (a[a.len() - 2], a[a.len() - 1]) };
            let (kb, n) = if tb { (b[b.len() - 1], b[b.len() - 2]) } else { (b[b.len() - 2], b[b.len() - 1]) };
            if ka != kb {
                return Err(format!("MatMul {:?}: inner dims {ka} != {kb}", node.name));
            }
            let mut d =
                broadcast(&a[..a.len() - 2], &b[..b.len() - 2]).map_err(|e| format!("MatMul {:?}: {e}", node.name))?;
            d.extend([m, n]);
            d
        }
        "ElementWiseAdd" | "ElementWiseMultiply" | "ElementWiseSubtract" | "ElementWiseDivide" => {
            broadcast(&ins[0].dims, &ins[1].dims).map_err(|e| format!("{op} {:?}: {e}", node.name))?
        }
        "RmsNorm" => {
            let d = *x.dims.last().unwrap_or(&0);
            for t in &ins[1..] {
                if numel(&t.dims) != d as usize {
                    return Err(format!("RmsNorm {:?}: gamma/beta {:?} is not [{d}]", node.name, t.dims));
                }
                if !is_float(t.dtype) && !is_fixed_point(t.dtype) {
                    return Err(format!("RmsNorm {:?}: gamma/beta dtype 0x{:04x}", node.name, t.dtype));
                }
            }
            let eps = node.param("epsilon").and_then(|p| p.as_f32()).unwrap_or(-1.0);
            if eps <= 0.0 {
                return Err(format!("RmsNorm {:?}: epsilon must be positive, got {eps}", node.name));
            }
            let axes = node.param("axes").and_then(|p| p.as_u32_vec()).unwrap_or_default();
            if axes != [x.dims.len() as u32 - 1] {
                return Err(format!("RmsNorm {:?}: mock supports only the last axis, got {axes:?}", node.name));
            }
            x.dims.clone()
        }
        "Softmax" => {
            let axis = u32_param(node, "axis").unwrap_or(x.dims.len() as u32 - 1);
            if axis as usize >= x.dims.len() {
                return Err(format!("Softmax {:?}: axis {axis} out of range", node.name));
            }
            let beta = node.param("beta").and_then(|p| p.as_f32()).unwrap_or(1.0);
            if beta <= 0.0 {
                return Err(format!("Softmax {:?}: beta must be positive, got {beta}", node.name));
            }
            x.dims.clone()
        }
        "Reshape" => {
            if numel(&x.dims) != numel(&out.dims) {
                return Err(format!(
                    "Reshape {:?}: {:?} -> {:?} changes the element count",
                    node.name, x.dims, out.dims
                ));
            }
            out.dims.clone()
        }
        "Transpose" => {
            let perm = node.param("perm").and_then(|p| p.as_u32_vec()).unwrap_or_default();
            let mut seen = vec![false; x.dims.len()];
            if perm.len() != x.dims.len()
                || perm.iter().any(|&p| (p as usize) >= seen.len() || std::mem::replace(&mut seen[p as usize], true))
            {
                return Err(format!(
                    "Transpose {:?}: perm {perm:?} is not a permutation of rank {}",
                    node.name,
                    x.dims.len()
                ));
            }
            perm.iter().map(|&p| x.dims[p as usize]).collect()
        }
        "Concat" => {
            let axis = u32_param(node, "axis").unwrap_or(u32::MAX) as usize;
            if axis >= x.dims.len() {
                return Err(format!("Concat {:?}: axis {axis} out of range", node.name));
            }
            let mut d = x.dims.clone();
            d[axis] = 0;
            for t in ins {
                if t.dims.len() != x.dims.len() || t.dims.iter().enumerate().any(|(i, &v)| i != axis && v != x.dims[i])
                {
                    return Err(format!(
                        "Concat {:?}: input {:?} {:?} incompatible with {:?}",
                        node.name, t.name, t.dims, x.dims
                    ));
                }
                d[axis] += t.dims[axis];
            }
            d
        }
        _ => x.dims.clone(), // unary element-wise
    };
    if expected != out.dims {
        return Err(format!(
            "{op} {:?}: output {:?} has dims {:?}, expected {:?}",
            node.name, out.name, out.dims, expected
        ));
    }
    Ok(())
}
