//! CPU reference execution of the ops the mock supports. Every tensor is decoded
//! to f32, computed in f32, and re-encoded to the output dtype, so quantized and
//! fp16 outputs carry the same rounding a real backend would introduce.

use crate::ffi::*;
use crate::model::{is_fixed_point, MNode, MTensor};
use crate::validate::numel;

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
    "Sigmoid",
    "RmsNorm",
    "Softmax",
    "Reshape",
    "Transpose",
    "Concat",
    "Split",
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

/// Integer range of `t`'s stored values: the dtype's, narrowed by a BW_* bit width.
pub fn value_range(t: &MTensor) -> Option<(f32, f32)> {
    let (lo, hi) = int_range(t.dtype)?;
    if t.bitwidth == 0 || t.bitwidth >= 32 {
        return Some((lo, hi));
    }
    let span = (1u64 << t.bitwidth) as f32;
    Some(if lo < 0.0 { (-span / 2.0, span / 2.0 - 1.0) } else { (0.0, span - 1.0) })
}

/// Decodes raw little-endian bytes of `t`'s dtype into f32 (dequantizing fixed point).
pub fn decode(t: &MTensor, bytes: &[u8]) -> Result<Vec<f32>, String> {
    let n = t.numel();
    let fixed = is_fixed_point(t.dtype);
    let raw: Vec<f32> = match t.dtype {
        QNN_DATATYPE_FLOAT_32 => bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
        QNN_DATATYPE_FLOAT_16 => bytes.chunks_exact(2).map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]]))).collect(),
        QNN_DATATYPE_SFIXED_POINT_8 | QNN_DATATYPE_INT_8 => bytes.iter().map(|&b| b as i8 as f32).collect(),
        QNN_DATATYPE_UFIXED_POINT_8 | QNN_DATATYPE_UINT_8 | QNN_DATATYPE_BOOL_8 => {
            bytes.iter().map(|&b| b as f32).collect()
        }
        QNN_DATATYPE_SFIXED_POINT_16 | QNN_DATATYPE_INT_16 => {
            bytes.chunks_exact(2).map(|c| i16::from_le_bytes([c[0], c[1]]) as f32).collect()
        }
        QNN_DATATYPE_UFIXED_POINT_16 | QNN_DATATYPE_UINT_16 => {
            bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]) as f32).collect()
        }
        QNN_DATATYPE_INT_32 => {
            bytes.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32).collect()
        }
        QNN_DATATYPE_UINT_32 => {
            bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32).collect()
        }
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
    let (lo, hi) = value_range(t).unwrap_or((f32::MIN, f32::MAX));
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

// ------------------------------------------------------------------ execution

fn strides(d: &[u32]) -> Vec<usize> {
    let mut s = vec![1usize; d.len()];
    for i in (0..d.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * d[i + 1] as usize;
    }
    s
}

/// Strides of `src` read through numpy broadcasting into an output of dims `out` (0 on broadcast axes).
fn broadcast_strides(src: &[u32], out: &[u32]) -> Vec<usize> {
    let off = out.len() - src.len();
    let st = strides(src);
    (0..out.len()).map(|i| if i < off || src[i - off] == 1 { 0 } else { st[i - off] }).collect()
}

/// Visits every multi-index of `dims` in row-major order, passing the offset into each of the
/// strided sources (no allocation per element).
fn for_each_offset<const N: usize>(dims: &[u32], src_strides: [&[usize]; N], mut f: impl FnMut([usize; N])) {
    let total = numel(dims);
    let mut idx = vec![0usize; dims.len()];
    let mut off = [0usize; N];
    for _ in 0..total {
        f(off);
        // Odometer increment, updating each source offset incrementally.
        for ax in (0..dims.len()).rev() {
            idx[ax] += 1;
            for (o, st) in off.iter_mut().zip(&src_strides) {
                *o += st[ax];
            }
            if idx[ax] < dims[ax] as usize {
                break;
            }
            for (o, st) in off.iter_mut().zip(&src_strides) {
                *o -= st[ax] * idx[ax];
            }
            idx[ax] = 0;
        }
    }
}

fn unravel(mut flat: usize, dims: &[u32]) -> Vec<usize> {
    let mut idx = vec![0; dims.len()];
    for i in (0..dims.len()).rev() {
        idx[i] = flat % dims[i] as usize;
        flat /= dims[i] as usize;
    }
    idx
}

/// Index into a tensor of dims `src` for an output multi-index under numpy broadcasting.
fn broadcast_index(out_idx: &[usize], src: &[u32]) -> usize {
    let off = out_idx.len() - src.len();
    let st = strides(src);
    src.iter().enumerate().map(|(i, &d)| if d == 1 { 0 } else { out_idx[i + off] * st[i] }).sum()
}

/// Runs a validated `Split` node: one f32 vector per output, in output order.
pub fn run_split(node: &MNode, x: &MTensor, xv: &[f32], outs: &[&MTensor]) -> Vec<Vec<f32>> {
    let axis = node.param("axis").and_then(|p| p.as_u32()).unwrap_or(0) as usize;
    let outer = numel(&x.dims[..axis]);
    let in_chunk = numel(&x.dims[axis..]);
    let mut ys: Vec<Vec<f32>> = outs.iter().map(|t| Vec::with_capacity(t.numel())).collect();
    for o in 0..outer {
        let mut at = o * in_chunk;
        for (t, y) in outs.iter().zip(ys.iter_mut()) {
            let chunk = numel(&t.dims[axis..]);
            y.extend_from_slice(&xv[at..at + chunk]);
            at += chunk;
        }
    }
    ys
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
            let (sa, sb) = (broadcast_strides(&x.dims, &out.dims), broadcast_strides(&b.dims, &out.dims));
            let mut y = Vec::with_capacity(numel(&out.dims));
            for_each_offset(&out.dims, [&sa, &sb], |[ia, ib]| y.push(f(xv[ia], bv[ib])));
            y
        }
        "ElementWiseSin" => xv.iter().map(|v| v.sin()).collect(),
        "ElementWiseCos" => xv.iter().map(|v| v.cos()).collect(),
        "ElementWiseExp" => xv.iter().map(|v| v.exp()).collect(),
        "ElementWiseNeg" => xv.iter().map(|v| -v).collect(),
        "ElementWiseRsqrt" => xv.iter().map(|v| 1.0 / v.sqrt()).collect(),
        "Sigmoid" => xv.iter().map(|v| 1.0 / (1.0 + (-v).exp())).collect(),
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
            // Output axis k walks input axis perm[k].
            let src: Vec<usize> = perm.iter().map(|&p| st[p as usize]).collect();
            let mut y = Vec::with_capacity(xv.len());
            for_each_offset(&out.dims, [&src], |[i]| y.push(xv[i]));
            y
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
