//! CPU reference execution of the ops the mock supports. Every tensor is decoded
//! to f32, computed in f32, and re-encoded to the output dtype, so quantized and
//! fp16 outputs carry the same rounding a real backend would introduce.

use crate::ffi::*;
use crate::model::{is_fixed_point, MNode, MTensor};

pub const SUPPORTED_OPS: &[&str] = &[
    "FullyConnected",
    "MatMul",
    "ElementWiseAdd",
    "ElementWiseMultiply",
    "ElementWiseSubtract",
    "ElementWiseDivide",
    "ElementWiseSin",
    "ElementWiseCos",
    "ElementWiseExp",
    "ElementWiseNeg",
    "ElementWiseRsqrt",
    "RmsNorm",
    "Softmax",
    "Reshape",
    "Transpose",
    "Concat",
];

// ------------------------------------------------------------------ dtype codec

pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) as u32) << 31;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    let bits = if exp == 0 {
        if man == 0 {
            sign
        } else {
            // Subnormal: value = man * 2^-24.
            let v = man as f32 * (1.0 / 16_777_216.0);
            return if sign != 0 { -v } else { v };
        }
    } else if exp == 31 {
        sign | 0x7f80_0000 | (man << 13)
    } else {
        sign | ((exp + 112) << 23) | (man << 13)
    };
    f32::from_bits(bits)
}

pub fn f32_to_f16(v: f32) -> u16 {
    let bits = v.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let man = bits & 0x7f_ffff;
    if exp == 255 {
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 31 {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let mut r = m >> shift;
        let rem = m & ((1 << shift) - 1);
        if rem > half || (rem == half && (r & 1) == 1) {
            r += 1;
        }
        return sign | r as u16;
    }
    let mut r = ((e as u32) << 10) | (man >> 13);
    let rem = man & 0x1fff;
    if rem > 0x1000 || (rem == 0x1000 && (r & 1) == 1) {
        r += 1; // may carry into the exponent, which is the correct rounding
    }
    sign | r as u16
}

/// Integer range of a fixed-point/int dtype.
fn int_range(dtype: u32) -> Option<(f32, f32)> {
    Some(match dtype {
        QNN_DATATYPE_SFIXED_POINT_8 | QNN_DATATYPE_INT_8 => (-128.0, 127.0),
        QNN_DATATYPE_UFIXED_POINT_8 | QNN_DATATYPE_UINT_8 | QNN_DATATYPE_BOOL_8 => (0.0, 255.0),
        QNN_DATATYPE_SFIXED_POINT_16 | QNN_DATATYPE_INT_16 => (-32768.0, 32767.0),
        QNN_DATATYPE_UFIXED_POINT_16 | QNN_DATATYPE_UINT_16 => (0.0, 65535.0),
        QNN_DATATYPE_INT_32 | QNN_DATATYPE_SFIXED_POINT_32 => (i32::MIN as f32, i32::MAX as f32),
        QNN_DATATYPE_UINT_32 | QNN_DATATYPE_UFIXED_POINT_32 => (0.0, u32::MAX as f32),
        _ => return None,
    })
}

/// Decodes raw little-endian bytes of `t`'s dtype into f32 (dequantizing fixed point).
pub fn decode(t: &MTensor, bytes: &[u8]) -> Result<Vec<f32>, String> {
    let n = t.numel();
    let fixed = is_fixed_point(t.dtype);
    let raw: Vec<f32> = match t.dtype {
        QNN_DATATYPE_FLOAT_32 => bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
        QNN_DATATYPE_FLOAT_16 => bytes.chunks_exact(2).map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]]))).collect(),
        QNN_DATATYPE_SFIXED_POINT_8 | QNN_DATATYPE_INT_8 => bytes.iter().map(|&b| b as i8 as f32).collect(),
        QNN_DATATYPE_UFIXED_POINT_8 | QNN_DATATYPE_UINT_8 | QNN_DATATYPE_BOOL_8 => bytes.iter().map(|&b| b as f32).collect(),
        QNN_DATATYPE_SFIXED_POINT_16 | QNN_DATATYPE_INT_16 => {
            bytes.chunks_exact(2).map(|c| i16::from_le_bytes([c[0], c[1]]) as f32).collect()
        }
        QNN_DATATYPE_UFIXED_POINT_16 | QNN_DATATYPE_UINT_16 => {
            bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]) as f32).collect()
        }
        QNN_DATATYPE_INT_32 => bytes.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32).collect(),
        QNN_DATATYPE_UINT_32 => bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32).collect(),
        other => return Err(format!("tensor {:?}: dtype 0x{other:04x} not supported by the mock", t.name)),
    };
    if raw.len() != n {
        return Err(format!("tensor {:?}: {} bytes do not hold {n} elements", t.name, bytes.len()));
    }
    if !fixed {
        return Ok(raw);
    }
    // Dequantize: float = (q + offset) * scale, per tensor or per channel.
    Ok(raw
        .iter()
        .enumerate()
        .map(|(i, &q)| {
            let (scale, offset) = t.quant_for(i);
            (q + offset as f32) * scale
        })
        .collect())
}

/// Encodes f32 values into `t`'s dtype (quantizing: `q = round(v / scale) - offset`, clamped).
pub fn encode(t: &MTensor, vals: &[f32]) -> Result<Vec<u8>, String> {
    let fixed = is_fixed_point(t.dtype);
    let (lo, hi) = int_range(t.dtype).unwrap_or((f32::MIN, f32::MAX));
    let quant = |i: usize, v: f32| -> f32 {
        let q = if fixed {
            let (scale, offset) = t.quant_for(i);
            (v / scale).round() - offset as f32
        } else {
            v.round()
        };
        q.clamp(lo, hi)
    };
    let q = || vals.iter().enumerate().map(|(i, &v)| quant(i, v));
    Ok(match t.dtype {
        QNN_DATATYPE_FLOAT_32 => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
        QNN_DATATYPE_FLOAT_16 => vals.iter().flat_map(|&v| f32_to_f16(v).to_le_bytes()).collect(),
        QNN_DATATYPE_SFIXED_POINT_8 | QNN_DATATYPE_INT_8 => q().map(|v| v as i8 as u8).collect(),
        QNN_DATATYPE_UFIXED_POINT_8 | QNN_DATATYPE_UINT_8 | QNN_DATATYPE_BOOL_8 => q().map(|v| v as u8).collect(),
        QNN_DATATYPE_SFIXED_POINT_16 | QNN_DATATYPE_INT_16 => q().flat_map(|v| (v as i16).to_le_bytes()).collect(),
        QNN_DATATYPE_UFIXED_POINT_16 | QNN_DATATYPE_UINT_16 => q().flat_map(|v| (v as u16).to_le_bytes()).collect(),
        QNN_DATATYPE_INT_32 => q().flat_map(|v| (v as i32).to_le_bytes()).collect(),
        QNN_DATATYPE_UINT_32 => q().flat_map(|v| (v as u32).to_le_bytes()).collect(),
        other => return Err(format!("tensor {:?}: dtype 0x{other:04x} not supported by the mock", t.name)),
    })
}

// ------------------------------------------------------------------ shapes

fn numel(d: &[u32]) -> usize {
    d.iter().map(|&x| x as usize).product()
}

fn broadcast(a: &[u32], b: &[u32]) -> Result<Vec<u32>, String> {
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

/// Float vs fixed-point family: ops may mix dtypes within a family, never across.
fn family(dtype: u32) -> u8 {
    if dtype == QNN_DATATYPE_FLOAT_32 || dtype == QNN_DATATYPE_FLOAT_16 {
        if dtype == QNN_DATATYPE_FLOAT_32 {
            0
        } else {
            1
        }
    } else if is_fixed_point(dtype) {
        2
    } else {
        3
    }
}

/// Checks input/output counts, dtypes and computes expected output dims.
/// Returns a message for GRAPH_ERROR_INVALID_OP_CONFIG on mismatch.
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
    if !arity_ok || outs.len() != 1 {
        return Err(format!("{op} {:?}: wrong number of inputs/outputs ({n_in}/{})", node.name, outs.len()));
    }
    let out = outs[0];
    let x = ins[0];
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
            let k = *x.dims.last().unwrap_or(&0);
            if w.dims.len() != 2 || w.dims[1] != k {
                return Err(format!("FullyConnected {:?}: weight {:?} is not [N, {k}]", node.name, w.dims));
            }
            let n = w.dims[0];
            if let Some(b) = ins.get(2) {
                if numel(&b.dims) != n as usize {
                    return Err(format!("FullyConnected {:?}: bias {:?} is not [{n}]", node.name, b.dims));
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
            let ta = node.param("transpose_in0").and_then(|p| p.as_bool()).unwrap_or(false);
            let tb = node.param("transpose_in1").and_then(|p| p.as_bool()).unwrap_or(false);
            let (m, ka) = if ta { (a[a.len() - 1], a[a.len() - 2]) } else { (a[a.len() - 2], a[a.len() - 1]) };
            let (kb, n) = if tb { (b[b.len() - 1], b[b.len() - 2]) } else { (b[b.len() - 2], b[b.len() - 1]) };
            if ka != kb {
                return Err(format!("MatMul {:?}: inner dims {ka} != {kb}", node.name));
            }
            let mut d = broadcast(&a[..a.len() - 2], &b[..b.len() - 2])?;
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
            }
            if let Some(axes) = node.param("axes").and_then(|p| p.as_u32_vec()) {
                if axes != [x.dims.len() as u32 - 1] {
                    return Err(format!("RmsNorm {:?}: mock supports only the last axis, got {axes:?}", node.name));
                }
            }
            x.dims.clone()
        }
        "Softmax" => {
            let axis = node.param("axis").and_then(|p| p.as_u32()).unwrap_or(x.dims.len() as u32 - 1);
            if axis as usize >= x.dims.len() {
                return Err(format!("Softmax {:?}: axis {axis} out of range", node.name));
            }
            x.dims.clone()
        }
        "Reshape" => {
            if numel(&x.dims) != numel(&out.dims) {
                return Err(format!("Reshape {:?}: {:?} -> {:?} changes the element count", node.name, x.dims, out.dims));
            }
            out.dims.clone()
        }
        "Transpose" => {
            let perm = node
                .param("perm")
                .and_then(|p| p.as_u32_vec())
                .ok_or_else(|| format!("Transpose {:?}: missing tensor param `perm`", node.name))?;
            let mut seen = vec![false; x.dims.len()];
            if perm.len() != x.dims.len() || perm.iter().any(|&p| (p as usize) >= seen.len() || std::mem::replace(&mut seen[p as usize], true)) {
                return Err(format!("Transpose {:?}: perm {perm:?} is not a permutation of rank {}", node.name, x.dims.len()));
            }
            perm.iter().map(|&p| x.dims[p as usize]).collect()
        }
        "Concat" => {
            let axis = node.param("axis").and_then(|p| p.as_u32()).unwrap_or(x.dims.len() as u32 - 1) as usize;
            if axis >= x.dims.len() {
                return Err(format!("Concat {:?}: axis {axis} out of range", node.name));
            }
            let mut d = x.dims.clone();
            d[axis] = 0;
            for t in ins {
                if t.dims.len() != x.dims.len() || t.dims.iter().enumerate().any(|(i, &v)| i != axis && v != x.dims[i]) {
                    return Err(format!("Concat {:?}: input {:?} {:?} incompatible with {:?}", node.name, t.name, t.dims, x.dims));
                }
                d[axis] += t.dims[axis];
            }
            d
        }
        _ => x.dims.clone(), // unary element-wise
    };
    if expected != out.dims {
        return Err(format!("{op} {:?}: output {:?} has dims {:?}, expected {:?}", node.name, out.name, out.dims, expected));
    }
    Ok(())
}

// ------------------------------------------------------------------ execution

fn strides(d: &[u32]) -> Vec<usize> {
    let mut s = vec![1usize; d.len()];
    for i in (0..d.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * d[i + 1] as usize;
    }
    s
}

/// Index into a tensor of dims `src` for an output multi-index under numpy broadcasting.
fn broadcast_index(out_idx: &[usize], src: &[u32]) -> usize {
    let off = out_idx.len() - src.len();
    let st = strides(src);
    src.iter().enumerate().map(|(i, &d)| if d == 1 { 0 } else { out_idx[i + off] * st[i] }).sum()
}

fn unravel(mut flat: usize, dims: &[u32]) -> Vec<usize> {
    let mut idx = vec![0; dims.len()];
    for i in (0..dims.len()).rev() {
        idx[i] = flat % dims[i] as usize;
        flat /= dims[i] as usize;
    }
    idx
}

/// Runs one validated node on f32 inputs, returning the f32 output.
pub fn run(node: &MNode, ins: &[(&MTensor, &[f32])], out: &MTensor) -> Vec<f32> {
    let (x, xv) = ins[0];
    match node.op.as_str() {
        "FullyConnected" => {
            let (w, wv) = ins[1];
            let (n, k) = (w.dims[0] as usize, w.dims[1] as usize);
            let m = xv.len() / k;
            let mut y = vec![0f32; m * n];
            for i in 0..m {
                for j in 0..n {
                    let mut acc = ins.get(2).map_or(0.0, |(_, b)| b[j]);
                    for p in 0..k {
                        acc += xv[i * k + p] * wv[j * k + p];
                    }
                    y[i * n + j] = acc;
                }
            }
            y
        }
        "MatMul" => {
            let (b, bv) = ins[1];
            let ta = node.param("transpose_in0").and_then(|p| p.as_bool()).unwrap_or(false);
            let tb = node.param("transpose_in1").and_then(|p| p.as_bool()).unwrap_or(false);
            let r = out.dims.len();
            let (m, n) = (out.dims[r - 2] as usize, out.dims[r - 1] as usize);
            let ad = &x.dims;
            let k = if ta { ad[ad.len() - 2] } else { ad[ad.len() - 1] } as usize;
            let batch: Vec<u32> = out.dims[..r - 2].to_vec();
            let nb = numel(&batch);
            let (a_mat, b_mat) = (numel(&ad[ad.len() - 2..]), numel(&b.dims[b.dims.len() - 2..]));
            let mut y = vec![0f32; nb * m * n];
            for bi in 0..nb {
                let bidx = unravel(bi, &batch);
                let ao = broadcast_index(&bidx, &ad[..ad.len() - 2]) * a_mat;
                let bo = broadcast_index(&bidx, &b.dims[..b.dims.len() - 2]) * b_mat;
                for i in 0..m {
                    for j in 0..n {
                        let mut acc = 0f32;
                        for p in 0..k {
                            let av = if ta { xv[ao + p * m + i] } else { xv[ao + i * k + p] };
                            let bvv = if tb { bv[bo + j * k + p] } else { bv[bo + p * n + j] };
                            acc += av * bvv;
                        }
                        y[bi * m * n + i * n + j] = acc;
                    }
                }
            }
            y
        }
        "ElementWiseAdd" | "ElementWiseMultiply" | "ElementWiseSubtract" | "ElementWiseDivide" => {
            let (b, bv) = ins[1];
            let f: fn(f32, f32) -> f32 = match node.op.as_str() {
                "ElementWiseAdd" => |a, b| a + b,
                "ElementWiseMultiply" => |a, b| a * b,
                "ElementWiseSubtract" => |a, b| a - b,
                _ => |a, b| a / b,
            };
            (0..numel(&out.dims))
                .map(|i| {
                    let idx = unravel(i, &out.dims);
                    f(xv[broadcast_index(&idx, &x.dims)], bv[broadcast_index(&idx, &b.dims)])
                })
                .collect()
        }
        "ElementWiseSin" => xv.iter().map(|v| v.sin()).collect(),
        "ElementWiseCos" => xv.iter().map(|v| v.cos()).collect(),
        "ElementWiseExp" => xv.iter().map(|v| v.exp()).collect(),
        "ElementWiseNeg" => xv.iter().map(|v| -v).collect(),
        "ElementWiseRsqrt" => xv.iter().map(|v| 1.0 / v.sqrt()).collect(),
        "RmsNorm" => {
            let eps = node.param("epsilon").and_then(|p| p.as_f32()).unwrap_or(1e-6);
            let d = *x.dims.last().unwrap_or(&1) as usize;
            let gamma = ins[1].1;
            let beta = ins.get(2).map(|(_, b)| *b);
            let mut y = vec![0f32; xv.len()];
            for (row, yr) in xv.chunks(d).zip(y.chunks_mut(d)) {
                let ms = row.iter().map(|v| v * v).sum::<f32>() / d as f32;
                let inv = 1.0 / (ms + eps).sqrt();
                for i in 0..d {
                    yr[i] = row[i] * inv * gamma[i] + beta.map_or(0.0, |b| b[i]);
                }
            }
            y
        }
        "Softmax" => {
            let axis = node.param("axis").and_then(|p| p.as_u32()).unwrap_or(x.dims.len() as u32 - 1) as usize;
            let beta = node.param("beta").and_then(|p| p.as_f32()).unwrap_or(1.0);
            let len = x.dims[axis] as usize;
            let inner: usize = numel(&x.dims[axis + 1..]);
            let outer: usize = numel(&x.dims[..axis]);
            let mut y = vec![0f32; xv.len()];
            for o in 0..outer {
                for i in 0..inner {
                    let at = |j: usize| o * len * inner + j * inner + i;
                    let mx = (0..len).map(|j| xv[at(j)] * beta).fold(f32::NEG_INFINITY, f32::max);
                    let sum: f32 = (0..len).map(|j| (xv[at(j)] * beta - mx).exp()).sum();
                    for j in 0..len {
                        y[at(j)] = (xv[at(j)] * beta - mx).exp() / sum;
                    }
                }
            }
            y
        }
        "Reshape" => xv.to_vec(),
        "Transpose" => {
            let perm = node.param("perm").and_then(|p| p.as_u32_vec()).unwrap_or_default();
            let st = strides(&x.dims);
            (0..xv.len())
                .map(|i| {
                    let oi = unravel(i, &out.dims);
                    xv[oi.iter().enumerate().map(|(k, &v)| v * st[perm[k] as usize]).sum::<usize>()]
                })
                .collect()
        }
        "Concat" => {
            let axis = node.param("axis").and_then(|p| p.as_u32()).unwrap_or(x.dims.len() as u32 - 1) as usize;
            let outer = numel(&out.dims[..axis]);
            let mut y = Vec::with_capacity(numel(&out.dims));
            for o in 0..outer {
                for (t, v) in ins {
                    let chunk = numel(&t.dims[axis..]);
                    y.extend_from_slice(&v[o * chunk..(o + 1) * chunk]);
                }
            }
            y
        }
        _ => Vec::new(), // unreachable: validated op list
    }
}
