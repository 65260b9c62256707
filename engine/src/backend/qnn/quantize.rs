//! Weights as the NPU wants them: per-output-channel symmetric int8 (W8A16) or 4-bit values in an
//! int8 container (W4A16, BW_AXIS_SCALE_OFFSET) under fp16 activations, or plain f32 (the
//! dequantised reference lowering). Also the f32 ↔ activation-dtype codec for graph I/O.

use half::f16;
use qnn_sys::{DType, Quant, TensorSpec};

use crate::kernels::linear::Linear;

/// Storage of weights and activations in the QNN graphs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
pub enum QnnPrecision {
    /// f32 weights and activations: the dequantised reference (matches the CPU backend).
    F32,
    /// int8 weights per output channel, fp16 activations.
    #[default]
    W8A16,
    /// 4-bit weights per output channel (int8 container), fp16 activations.
    W4A16,
}

impl QnnPrecision {
    /// Activation (and float constant) dtype.
    pub fn activation(self) -> DType {
        match self {
            QnnPrecision::F32 => DType::F32,
            QnnPrecision::W8A16 | QnnPrecision::W4A16 => DType::F16,
        }
    }

    /// Short name (logs, cache keys, CLI).
    pub fn name(self) -> &'static str {
        match self {
            QnnPrecision::F32 => "f32",
            QnnPrecision::W8A16 => "w8a16",
            QnnPrecision::W4A16 => "w4a16",
        }
    }

    /// Parses [`QnnPrecision::name`].
    pub fn parse(s: &str) -> Option<Self> {
        [QnnPrecision::F32, QnnPrecision::W8A16, QnnPrecision::W4A16].into_iter().find(|p| p.name() == s)
    }

    /// Largest quantised magnitude, or `None` for float weights.
    fn qmax(self) -> Option<f32> {
        match self {
            QnnPrecision::F32 => None,
            QnnPrecision::W8A16 => Some(127.0),
            QnnPrecision::W4A16 => Some(7.0),
        }
    }
}

/// A STATIC graph tensor: spec plus little-endian dense bytes.
#[derive(Debug, Clone)]
pub struct StaticTensor {
    /// Name, dtype, dims, quantization.
    pub spec: TensorSpec,
    /// Data, `spec.num_bytes()` long.
    pub bytes: Vec<u8>,
}

/// A `[n_out, k_in]` weight matrix for FullyConnected, quantised per output row for `precision`.
pub fn weight(name: &str, lin: &Linear, precision: QnnPrecision) -> StaticTensor {
    let (n, k) = (lin.n_out, lin.k_in);
    let dims = [n as u32, k as u32];
    let mut row = vec![0.0f32; k];
    let Some(qmax) = precision.qmax() else {
        let mut bytes = Vec::with_capacity(n * k * 4);
        for j in 0..n {
            lin.row_into(j, &mut row);
            bytes.extend(row.iter().flat_map(|v| v.to_le_bytes()));
        }
        return StaticTensor { spec: TensorSpec::new(name, DType::F32, &dims), bytes };
    };
    let mut bytes = Vec::with_capacity(n * k);
    let mut scales = Vec::with_capacity(n);
    for j in 0..n {
        lin.row_into(j, &mut row);
        let (scale, codes) = quantize_row(&row, qmax);
        scales.push(scale);
        bytes.extend(codes.iter().map(|&q| q as u8));
    }
    let quant = if precision == QnnPrecision::W4A16 {
        Quant::PerAxisBitwidth { bitwidth: 4, axis: 0, offsets: vec![0; n], scales }
    } else {
        Quant::PerAxis { axis: 0, scale_offsets: scales.into_iter().map(|s| (s, 0)).collect() }
    };
    StaticTensor { spec: TensorSpec::new(name, DType::QI8, &dims).with_quant(quant), bytes }
}

/// Symmetric quantisation of one row, codes in `[-qmax, qmax]`. 8-bit uses `scale = max|w| /
/// qmax`; 4-bit also tries clipping the range (ratios 1.0 down to 0.5) and keeps the scale with
/// the least squared error, since with 15 levels one outlier otherwise wastes most of them.
/// An all-zero row gets scale 1 (QNN requires a positive scale).
pub fn quantize_row(row: &[f32], qmax: f32) -> (f32, Vec<i8>) {
    let amax = row.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    if !(amax > 0.0 && amax.is_finite()) {
        return (1.0, vec![0; row.len()]);
    }
    let code = |v: f32, scale: f32| (v / scale).round().clamp(-qmax, qmax);
    let sq_err = |scale: f32| row.iter().map(|&v| (v - code(v, scale) * scale).powi(2)).sum::<f32>();
    let mut scale = amax / qmax;
    if qmax < 127.0 {
        let mut best = sq_err(scale);
        for step in 1..=20 {
            let candidate = amax * (1.0 - step as f32 * 0.025) / qmax;
            let e = sq_err(candidate);
            if e < best {
                (best, scale) = (e, candidate);
            }
        }
    }
    (scale, row.iter().map(|&v| code(v, scale) as i8).collect())
}

/// A float constant (norm weights, biases, rotation matrix, scale) in the activation dtype.
pub fn constant(name: &str, values: &[f32], dims: &[u32], precision: QnnPrecision) -> StaticTensor {
    let dtype = precision.activation();
    StaticTensor { spec: TensorSpec::new(name, dtype, dims), bytes: encode(values, dtype) }
}

/// f32 values as dense bytes of an activation dtype (F32 or F16).
pub fn encode(values: &[f32], dtype: DType) -> Vec<u8> {
    match dtype {
        DType::F16 => values.iter().flat_map(|&v| f16::from_f32(v).to_le_bytes()).collect(),
        _ => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

/// Dense bytes of an activation dtype (F32 or F16) back to f32.
pub fn decode(bytes: &[u8], dtype: DType) -> Vec<f32> {
    match dtype {
        DType::F16 => bytes.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        _ => bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_channel_codes_reconstruct_within_half_a_step() {
        let w: Vec<f32> =
            (0..6 * 10).map(|i| ((i * 37 % 23) as f32 - 11.0) * if i < 10 { 0.001 } else { 0.3 }).collect();
        let lin = Linear::from_f32("w", 6, 10, w.clone());
        for (p, qmax) in [(QnnPrecision::W8A16, 127.0f32), (QnnPrecision::W4A16, 7.0)] {
            let t = weight("w", &lin, p);
            assert_eq!(t.spec.dtype, DType::QI8);
            assert_eq!(t.bytes.len(), 60);
            let scales: Vec<f32> = match &t.spec.quant {
                Quant::PerAxis { axis: 0, scale_offsets } => scale_offsets.iter().map(|s| s.0).collect(),
                Quant::PerAxisBitwidth { bitwidth: 4, axis: 0, scales, .. } => scales.clone(),
                other => panic!("unexpected quant {other:?}"),
            };
            for j in 0..6 {
                let amax = w[j * 10..(j + 1) * 10].iter().fold(0.0f32, |m, v| m.max(v.abs()));
                assert!(scales[j] <= amax / qmax * (1.0 + 1e-6) && scales[j] >= 0.5 * amax / qmax * (1.0 - 1e-6));
                let mut sq = 0.0f32;
                for i in 0..10 {
                    let q = t.bytes[j * 10 + i] as i8 as f32;
                    assert!(q.abs() <= qmax);
                    sq += (q * scales[j] - w[j * 10 + i]).powi(2);
                }
                // Never worse than plain max-abs scaling (whose error is ≤ half a step per value).
                let plain = amax / qmax;
                assert!(sq <= 10.0 * (plain / 2.0).powi(2) + 1e-9, "row {j}: {sq}");
            }
        }
        let f = weight("w", &lin, QnnPrecision::F32);
        assert_eq!(decode(&f.bytes, DType::F32), w);
        assert_eq!(quantize_row(&[0.0, 0.0], 127.0).0, 1.0);
    }

    #[test]
    fn activation_codec_roundtrips() {
        let v = [1.5f32, -0.25, 65504.0, 3.0e-5];
        assert_eq!(decode(&encode(&v, DType::F32), DType::F32), v);
        let h = decode(&encode(&v, DType::F16), DType::F16);
        assert_eq!(&h[..3], &v[..3]);
        assert!((h[3] - v[3]).abs() < 1e-7);
        assert_eq!(QnnPrecision::parse("w4a16"), Some(QnnPrecision::W4A16));
        assert_eq!(QnnPrecision::parse("int3"), None);
    }
}
