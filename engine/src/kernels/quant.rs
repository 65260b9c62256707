//! Dequantisation of checkpoint storage types (dense 16-bit and GGUF block formats) to f32.
//! These are the reference implementations; fast GEMM paths are checked against them.

use half::{bf16, f16};

use crate::error::{EngineError, Result};
use crate::tensor::{DType, RawTensor};

#[inline]
fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// A checkpoint tensor's values as f32 (the tensor types sit below the kernels, so the
/// conversion is a kernel-side extension).
pub trait TensorToF32 {
    /// Converts a dense or block-quantised tensor to f32 values (copies).
    fn to_f32_vec(&self) -> Result<Vec<f32>>;
}

impl TensorToF32 for RawTensor {
    fn to_f32_vec(&self) -> Result<Vec<f32>> {
        dequantize(self.dtype, self.data.as_slice(), self.numel())
            .ok_or_else(|| EngineError::UnsupportedDType { name: self.name.clone(), dtype: self.dtype.to_string() })
    }
}

/// Dequantises `n` elements of `dtype` from `bytes`; `None` for non-float types or a size mismatch.
pub fn dequantize(dtype: DType, bytes: &[u8], n: usize) -> Option<Vec<f32>> {
    if dtype.bytes_for(n)? != bytes.len() {
        return None;
    }
    let mut out = vec![0.0f32; n];
    dequantize_into(dtype, bytes, &mut out)?;
    Some(out)
}

/// Dequantises into `out` (`out.len()` elements); `None` for unsupported types or sizes.
pub fn dequantize_into(dtype: DType, bytes: &[u8], out: &mut [f32]) -> Option<()> {
    if dtype.bytes_for(out.len())? != bytes.len() {
        return None;
    }
    match dtype {
        DType::F32 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        DType::F16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        DType::BF16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = bf16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        DType::Q8_0 => {
            for (o, b) in out.chunks_exact_mut(32).zip(bytes.chunks_exact(34)) {
                let d = f16_at(b, 0);
                for j in 0..32 {
                    o[j] = d * (b[2 + j] as i8) as f32;
                }
            }
        }
        DType::Q4_0 => {
            for (o, b) in out.chunks_exact_mut(32).zip(bytes.chunks_exact(18)) {
                let d = f16_at(b, 0);
                for j in 0..16 {
                    let q = b[2 + j];
                    o[j] = d * ((q & 0x0F) as i32 - 8) as f32;
                    o[j + 16] = d * ((q >> 4) as i32 - 8) as f32;
                }
            }
        }
        DType::Q4_1 => {
            for (o, b) in out.chunks_exact_mut(32).zip(bytes.chunks_exact(20)) {
                let d = f16_at(b, 0);
                let m = f16_at(b, 2);
                for j in 0..16 {
                    let q = b[4 + j];
                    o[j] = d * (q & 0x0F) as f32 + m;
                    o[j + 16] = d * (q >> 4) as f32 + m;
                }
            }
        }
        DType::Q4_K => {
            for (o, b) in out.chunks_exact_mut(256).zip(bytes.chunks_exact(144)) {
                let d = f16_at(b, 0);
                let dmin = f16_at(b, 2);
                let s = &b[4..16];
                let qs = &b[16..144];
                for c in 0..4 {
                    let (sc0, m0) = q4k_scale_min(2 * c, s);
                    let (sc1, m1) = q4k_scale_min(2 * c + 1, s);
                    let (d0, mm0) = (d * sc0 as f32, dmin * m0 as f32);
                    let (d1, mm1) = (d * sc1 as f32, dmin * m1 as f32);
                    for l in 0..32 {
                        let q = qs[32 * c + l];
                        o[64 * c + l] = d0 * (q & 0x0F) as f32 - mm0;
                        o[64 * c + 32 + l] = d1 * (q >> 4) as f32 - mm1;
                    }
                }
            }
        }
        DType::Q6_K => {
            for (o, b) in out.chunks_exact_mut(256).zip(bytes.chunks_exact(210)) {
                let d = f16_at(b, 208);
                for h in 0..2 {
                    let ql = &b[64 * h..64 * h + 64];
                    let qh = &b[128 + 32 * h..128 + 32 * h + 32];
                    let sc = &b[192 + 8 * h..192 + 8 * h + 8];
                    let y = &mut o[128 * h..128 * h + 128];
                    for l in 0..32 {
                        let is = l / 16;
                        let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                        let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                        let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                        let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                        y[l] = d * (sc[is] as i8) as f32 * q1 as f32;
                        y[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
                        y[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
                        y[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
                    }
                }
            }
        }
        DType::I64 | DType::I32 | DType::U8 => return None,
    }
    Some(())
}

/// 6-bit scale and min of Q4_K sub-block `j` (llama.cpp `get_scale_min_k4`).
#[inline]
fn q4k_scale_min(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        ((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4))
    }
}

/// Quantises f32 values to Q8_0 blocks (round-to-nearest, as llama.cpp's reference quantiser).
pub fn quantize_q8_0(x: &[f32]) -> Option<Vec<u8>> {
    if x.len() % 32 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(x.len() / 32 * 34);
    for blk in x.chunks_exact(32) {
        let amax = blk.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
        for v in blk {
            out.push(((v * id).round() as i32).clamp(-128, 127) as i8 as u8);
        }
    }
    Some(out)
}

/// Quantises f32 values to Q4_0 blocks (llama.cpp's reference rule: the signed absmax maps to -8).
pub fn quantize_q4_0(x: &[f32]) -> Option<Vec<u8>> {
    if x.len() % 32 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(x.len() / 32 * 18);
    for blk in x.chunks_exact(32) {
        let max = blk.iter().fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
        for j in 0..16 {
            let q0 = ((blk[j] * id + 8.5) as i32).clamp(0, 15) as u8;
            let q1 = ((blk[j + 16] * id + 8.5) as i32).clamp(0, 15) as u8;
            out.push(q0 | (q1 << 4));
        }
    }
    Some(out)
}

/// Quantises f32 values to Q4_K super-blocks with a simple min/max rule per 32-value sub-block
/// (not llama.cpp's iterative search: good enough for benchmarks and tests of the layout).
pub fn quantize_q4_k(x: &[f32]) -> Option<Vec<u8>> {
    if x.len() % 256 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(x.len() / 256 * 144);
    for sb in x.chunks_exact(256) {
        let mut scale = [0.0f32; 8];
        let mut min = [0.0f32; 8];
        for (b, sub) in sb.chunks_exact(32).enumerate() {
            let lo = sub.iter().fold(0.0f32, |a, &v| a.min(v));
            let hi = sub.iter().fold(f32::MIN, |a, &v| a.max(v));
            scale[b] = (hi - lo) / 15.0;
            min[b] = -lo;
        }
        let d = f16::from_f32(scale.iter().fold(0.0f32, |a, &v| a.max(v)) / 63.0);
        let dmin = f16::from_f32(min.iter().fold(0.0f32, |a, &v| a.max(v)) / 63.0);
        let (df, dminf) = (d.to_f32(), dmin.to_f32());
        let q6 = |v: f32, unit: f32| if unit > 0.0 { (v / unit).round().clamp(0.0, 63.0) as u8 } else { 0 };
        let sc: Vec<u8> = scale.iter().map(|&v| q6(v, df)).collect();
        let mn: Vec<u8> = min.iter().map(|&v| q6(v, dminf)).collect();
        let mut s = [0u8; 12];
        for j in 0..4 {
            s[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
            s[j + 4] = mn[j] | ((mn[j + 4] >> 4) << 6);
            s[j + 8] = (sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4);
        }
        out.extend_from_slice(&d.to_le_bytes());
        out.extend_from_slice(&dmin.to_le_bytes());
        out.extend_from_slice(&s);
        let code = |v: f32, b: usize| -> u8 {
            let unit = df * sc[b] as f32;
            if unit == 0.0 {
                return 0;
            }
            ((v + dminf * mn[b] as f32) / unit).round().clamp(0.0, 15.0) as u8
        };
        for c in 0..4 {
            for l in 0..32 {
                let lo = code(sb[64 * c + l], 2 * c);
                let hi = code(sb[64 * c + 32 + l], 2 * c + 1);
                out.push(lo | (hi << 4));
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q8_0_roundtrip_is_close() {
        let x: Vec<f32> = (0..64).map(|i| ((i * 37 % 64) as f32 - 32.0) / 7.0).collect();
        let q = quantize_q8_0(&x).unwrap();
        let y = dequantize(DType::Q8_0, &q, 64).unwrap();
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() < 0.05, "{a} {b}");
        }
    }

    #[test]
    fn q4_roundtrips_are_close() {
        let x: Vec<f32> = (0..512).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
        for (dt, q) in [(DType::Q4_0, quantize_q4_0(&x).unwrap()), (DType::Q4_K, quantize_q4_k(&x).unwrap())] {
            let y = dequantize(dt, &q, 512).unwrap();
            for (a, b) in x.iter().zip(&y) {
                // 4-bit codes over a range of 4: half a step is 4/15/2 ≈ 0.14, plus 6-bit scale rounding.
                assert!((a - b).abs() < 0.3, "{dt}: {a} {b}");
            }
        }
    }

    #[test]
    fn size_mismatch_is_none() {
        assert!(dequantize(DType::Q4_0, &[0u8; 17], 32).is_none());
        assert!(dequantize(DType::Q4_0, &[0u8; 18], 31).is_none());
    }
}
