//! The GEMM seam: a weight matrix in any storage format, multiplied by a block of activations.
//! Model code calls [`Linear::forward`] and never branches on formats.

use std::sync::Arc;

use rayon::prelude::*;

use crate::error::{EngineError, Result};
use crate::tensor::{DType, RawTensor, TensorBytes};

use super::f32gemm::PackedF32;
use super::int8::{Int8Weights, ScaleGroup};
use super::quant::dequantize_into;

/// How a weight matrix is held in memory.
#[derive(Clone, Debug)]
pub enum WeightStorage {
    /// f32 values viewed in place in the checkpoint map (zero-copy).
    F32Mapped(TensorBytes),
    /// f32 values owned by the process.
    F32Owned(Vec<f32>),
    /// Any other storage (f16, bf16, GGUF blocks): rows are dequantised in panels at use.
    Packed { dtype: DType, bytes: TensorBytes },
    /// Int8 codes repacked at load into the integer kernels' 16-row panels (replaces the loaded
    /// bytes; shared so tied embeddings/heads are not duplicated).
    Int8Packed(Arc<Int8Weights>),
    /// f32 values repacked at load into 16-column panels for our AVX-512 microkernel
    /// ([`super::f32gemm`]; measured faster than the `gemm` crate on this machine).
    F32Packed(Arc<PackedF32>),
}

/// Which kernel family a weight matrix is prepared for at load ([`Linear::repack`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KernelChoice {
    /// Block-quantised GGUF types → int8 kernel (Q8_0/Q4_0 exactly, K-quants requantised per 32);
    /// f32 → f32 panels for our microkernel; f16/bf16 stay as loaded.
    #[default]
    Auto,
    /// Keep the loaded storage (f32 via the `gemm` crate; other types dequantised per panel at use).
    Float,
    /// Everything → int8 with one scale per output row (f32 requantised; fastest kernel).
    Int8PerRow,
    /// Everything → int8 with one scale per 32 k (Q8_0/Q4_0 exact).
    Int8Block32,
}

/// A `[n_out, k_in]` weight matrix (HF `[out, in]` layout): `y = x · Wᵀ`.
#[derive(Clone, Debug)]
pub struct Linear {
    pub name: String,
    pub n_out: usize,
    pub k_in: usize,
    pub storage: WeightStorage,
}

/// Output rows dequantised together for packed formats (fits L2 comfortably at k = 4096).
const PANEL: usize = 32;

impl Linear {
    /// Wraps a 2-D checkpoint tensor, checking its shape.
    pub fn from_raw(t: RawTensor, n_out: usize, k_in: usize) -> Result<Self> {
        t.expect_shape(&[n_out, k_in])?;
        Self::from_raw_unchecked(t.name, t.dtype, t.data, n_out, k_in)
    }

    /// Wraps raw bytes already known to hold `[n_out, k_in]` values of `dtype`.
    pub fn from_raw_unchecked(
        name: String,
        dtype: DType,
        data: TensorBytes,
        n_out: usize,
        k_in: usize,
    ) -> Result<Self> {
        if dtype.bytes_for(k_in).is_none() || dtype.bytes_for(n_out * k_in) != Some(data.len()) {
            return Err(EngineError::UnsupportedDType {
                name,
                dtype: format!("{dtype} with row length {k_in} ({} bytes)", data.len()),
            });
        }
        let storage = match dtype {
            DType::F32 => {
                if bytemuck::try_cast_slice::<u8, f32>(data.as_slice()).is_ok() {
                    WeightStorage::F32Mapped(data)
                } else {
                    let v: Vec<f32> =
                        data.as_slice().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
                    WeightStorage::F32Owned(v)
                }
            }
            DType::F16 | DType::BF16 | DType::Q8_0 | DType::Q4_0 | DType::Q4_1 | DType::Q4_K | DType::Q6_K => {
                WeightStorage::Packed { dtype, bytes: data }
            }
            _ => return Err(EngineError::UnsupportedDType { name, dtype: dtype.to_string() }),
        };
        Ok(Linear { name, n_out, k_in, storage })
    }

    /// An owned f32 matrix.
    pub fn from_f32(name: impl Into<String>, n_out: usize, k_in: usize, w: Vec<f32>) -> Self {
        assert_eq!(w.len(), n_out * k_in);
        Linear { name: name.into(), n_out, k_in, storage: WeightStorage::F32Owned(w) }
    }

    /// Storage dtype.
    pub fn dtype(&self) -> DType {
        match &self.storage {
            WeightStorage::F32Mapped(_) | WeightStorage::F32Owned(_) => DType::F32,
            WeightStorage::Packed { dtype, .. } => *dtype,
            WeightStorage::Int8Packed(w) => w.source,
            WeightStorage::F32Packed(_) => DType::F32,
        }
    }

    /// Short name of the in-memory format (reports).
    pub fn storage_name(&self) -> String {
        match &self.storage {
            WeightStorage::Int8Packed(w) if w.nibbles => format!("int4/32 (from {})", w.source),
            WeightStorage::Int8Packed(w) if w.group == w.kp => format!("int8/row (from {})", w.source),
            WeightStorage::Int8Packed(w) => format!("int8/32 (from {})", w.source),
            _ => self.dtype().to_string(),
        }
    }

    /// Converts the storage for `choice`, consuming `self` so the loaded bytes are dropped.
    pub fn repack(self, choice: KernelChoice) -> Result<Linear> {
        self.repack_widening(choice, false)
    }

    /// As [`Linear::repack`]; with `widen_half` and [`KernelChoice::Auto`], f16/bf16 weights are
    /// widened to f32 panels too (exact; twice the memory) instead of being converted at every
    /// use, which dominates small models' decoding.
    pub fn repack_widening(self, choice: KernelChoice, widen_half: bool) -> Result<Linear> {
        let (n, k) = (self.n_out, self.k_in);
        let half = matches!(&self.storage, WeightStorage::Packed { dtype: DType::F16 | DType::BF16, .. });
        if choice == KernelChoice::Auto && widen_half && half && super::f32gemm::available() {
            let packed = PackedF32::pack(n, k, |j, out| self.row_into(j, out));
            return Ok(Linear { name: self.name, n_out: n, k_in: k, storage: WeightStorage::F32Packed(Arc::new(packed)) });
        }
        let group = match (choice, &self.storage) {
            (KernelChoice::Float, _) => return Ok(self),
            (KernelChoice::Auto, WeightStorage::Packed { dtype, .. }) if dtype.block_elems() > 1 => ScaleGroup::Block32,
            (KernelChoice::Auto, WeightStorage::F32Mapped(_) | WeightStorage::F32Owned(_))
                if super::f32gemm::available() =>
            {
                let packed = PackedF32::pack(n, k, |j, out| self.row_into(j, out));
                self.release_mapped();
                return Ok(Linear {
                    name: self.name,
                    n_out: n,
                    k_in: k,
                    storage: WeightStorage::F32Packed(Arc::new(packed)),
                });
            }
            (KernelChoice::Auto, _) => return Ok(self),
            (KernelChoice::Int8PerRow, _) => ScaleGroup::PerRow,
            (KernelChoice::Int8Block32, _) => ScaleGroup::Block32,
        };
        let packed = match &self.storage {
            WeightStorage::Int8Packed(w) if (group == ScaleGroup::PerRow) == (w.group == w.kp) => return Ok(self),
            WeightStorage::Packed { dtype, bytes } if group == ScaleGroup::Block32 => {
                Int8Weights::from_blocks(*dtype, bytes.as_slice(), n, k).ok_or_else(|| {
                    EngineError::UnsupportedDType {
                        name: self.name.clone(),
                        dtype: format!("{dtype} cannot be repacked to int8"),
                    }
                })?
            }
            _ => Int8Weights::from_f32_rows(n, k, group, self.dtype(), |j, out| self.row_into(j, out)),
        };
        // Q4_0 under Auto keeps 4-bit codes where this CPU has a kernel reading them directly
        // (0.5625 instead of 1.0625 bytes per weight); elsewhere it stays int8.
        let simd4 = matches!(super::int8::Isa::detect(), super::int8::Isa::Avx2 | super::int8::Isa::Avx512Vnni);
        let packed = if choice == KernelChoice::Auto && packed.source == DType::Q4_0 && simd4 {
            packed.into_nibbles().unwrap_or_else(|int8| int8)
        } else {
            packed
        };
        self.release_mapped();
        Ok(Linear { name: self.name, n_out: n, k_in: k, storage: WeightStorage::Int8Packed(Arc::new(packed)) })
    }

    /// A copy that owns fresh storage holding the same bytes (what a DMA transfer into a staging
    /// slot produces): computing with it gives bit-identical results to computing with `self`.
    pub fn staged_copy(&self) -> Linear {
        let storage = match &self.storage {
            WeightStorage::F32Mapped(b) => WeightStorage::F32Owned(
                b.as_slice().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            ),
            WeightStorage::F32Owned(v) => WeightStorage::F32Owned(v.clone()),
            WeightStorage::Packed { dtype, bytes } => {
                WeightStorage::Packed { dtype: *dtype, bytes: TensorBytes::owned(bytes.as_slice().to_vec()) }
            }
            WeightStorage::Int8Packed(w) => WeightStorage::Int8Packed(Arc::new(Int8Weights::clone(w))),
            WeightStorage::F32Packed(w) => WeightStorage::F32Packed(Arc::new(PackedF32::clone(w))),
        };
        Linear { name: self.name.clone(), n_out: self.n_out, k_in: self.k_in, storage }
    }

    /// Overwrites this matrix's storage with `src`'s bytes in place, without allocating (the fill
    /// of a staging slot made once by [`Linear::staged_copy`]): same shape and same storage format
    /// required (a mapped f32 source fills an owned f32 slot). Returns the bytes copied, `None`
    /// when the slot cannot hold `src`.
    pub fn copy_storage_from(&mut self, src: &Linear) -> Option<usize> {
        if (self.n_out, self.k_in) != (src.n_out, src.k_in) {
            return None;
        }
        let ok = match (&mut self.storage, &src.storage) {
            (WeightStorage::F32Owned(d), WeightStorage::F32Owned(s)) if d.len() == s.len() => {
                d.copy_from_slice(s);
                true
            }
            (WeightStorage::F32Owned(d), WeightStorage::F32Mapped(b)) if d.len() * 4 == b.len() => {
                for (x, c) in d.iter_mut().zip(b.as_slice().chunks_exact(4)) {
                    *x = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
                true
            }
            (WeightStorage::Packed { dtype: dd, bytes: db }, WeightStorage::Packed { dtype: sd, bytes: sb }) => {
                *dd == *sd && db.copy_in_place(sb.as_slice())
            }
            (WeightStorage::Int8Packed(d), WeightStorage::Int8Packed(s)) => {
                Arc::get_mut(d).is_some_and(|d| d.copy_from(s))
            }
            (WeightStorage::F32Packed(d), WeightStorage::F32Packed(s)) => {
                Arc::get_mut(d).is_some_and(|d| d.copy_from(s))
            }
            _ => false,
        };
        ok.then(|| src.bytes())
    }

    /// The loaded bytes were copied into a repacked form: drop their mapped pages from RSS.
    fn release_mapped(&self) {
        if let WeightStorage::F32Mapped(b) | WeightStorage::Packed { bytes: b, .. } = &self.storage {
            b.release_pages();
        }
    }

    /// Bytes the weights occupy.
    pub fn bytes(&self) -> usize {
        match &self.storage {
            WeightStorage::F32Mapped(b) => b.len(),
            WeightStorage::F32Owned(v) => v.len() * 4,
            WeightStorage::Packed { bytes, .. } => bytes.len(),
            WeightStorage::Int8Packed(w) => w.bytes(),
            WeightStorage::F32Packed(w) => w.bytes(),
        }
    }

    fn f32_slice(&self) -> Option<&[f32]> {
        match &self.storage {
            WeightStorage::F32Mapped(b) => bytemuck::try_cast_slice(b.as_slice()).ok(),
            WeightStorage::F32Owned(v) => Some(v),
            WeightStorage::Packed { .. } | WeightStorage::Int8Packed(_) | WeightStorage::F32Packed(_) => None,
        }
    }

    /// Writes row `r` (one output unit, `k_in` values) as f32 into `out` (embedding lookups).
    pub fn row_into(&self, r: usize, out: &mut [f32]) {
        let k = self.k_in;
        match &self.storage {
            WeightStorage::Packed { dtype, bytes } => {
                let rb = dtype.bytes_for(k).unwrap_or(0);
                let b = &bytes.as_slice()[r * rb..(r + 1) * rb];
                let _ = dequantize_into(*dtype, b, out);
            }
            WeightStorage::Int8Packed(w) => w.row_into(r, out),
            WeightStorage::F32Packed(w) => w.row_into(r, out),
            _ => {
                if let Some(w) = self.f32_slice() {
                    out.copy_from_slice(&w[r * k..(r + 1) * k]);
                }
            }
        }
    }

    /// `y[m, n_out] = x[m, k_in] · Wᵀ` (overwrites `y`).
    /// [`Linear::forward`] without splitting the product across workers where the storage allows
    /// it (packed f32 and plain f32); other storages run their usual kernel.
    pub fn forward_serial(&self, x: &[f32], m: usize, y: &mut [f32]) {
        let (n, k) = (self.n_out, self.k_in);
        if m == 0 || n == 0 {
            return;
        }
        if let Some(w) = self.f32_slice() {
            gemm_x_wt(m, n, k, x, w, y, gemm::Parallelism::None);
            return;
        }
        match &self.storage {
            WeightStorage::F32Packed(w) => super::f32gemm::gemm_serial(w, x, m, y),
            _ => self.forward(x, m, y),
        }
    }

    pub fn forward(&self, x: &[f32], m: usize, y: &mut [f32]) {
        let (n, k) = (self.n_out, self.k_in);
        debug_assert!(x.len() >= m * k && y.len() >= m * n);
        if m == 0 || n == 0 {
            return;
        }
        if let Some(w) = self.f32_slice() {
            gemm_x_wt(m, n, k, x, w, y, gemm::Parallelism::Rayon(rayon::current_num_threads()));
            return;
        }
        match &self.storage {
            WeightStorage::Int8Packed(w) => return super::int8::gemm(w, x, m, y),
            WeightStorage::F32Packed(w) => return super::f32gemm::gemm(w, x, m, y),
            _ => {}
        }
        let WeightStorage::Packed { dtype, bytes } = &self.storage else { return };
        let rb = dtype.bytes_for(k).unwrap_or(0);
        let bytes = bytes.as_slice();
        // Each panel of output columns is independent: dequantise it, then one small GEMM.
        let panels: Vec<(usize, Vec<f32>)> = (0..n.div_ceil(PANEL))
            .into_par_iter()
            .map(|p| {
                let j0 = p * PANEL;
                let j1 = (j0 + PANEL).min(n);
                let mut w = vec![0.0f32; (j1 - j0) * k];
                for (j, wr) in (j0..j1).zip(w.chunks_exact_mut(k)) {
                    let _ = dequantize_into(*dtype, &bytes[j * rb..(j + 1) * rb], wr);
                }
                let mut yp = vec![0.0f32; m * (j1 - j0)];
                gemm_x_wt(m, j1 - j0, k, x, &w, &mut yp, gemm::Parallelism::None);
                (j0, yp)
            })
            .collect();
        for (j0, yp) in panels {
            let w = yp.len() / m;
            for i in 0..m {
                y[i * n + j0..i * n + j0 + w].copy_from_slice(&yp[i * w..(i + 1) * w]);
            }
        }
    }

    /// A copy stored as Q8_0 blocks (requantised row by row); `k_in` must be a multiple of 32.
    pub fn to_q8_0(&self) -> Result<Linear> {
        let k = self.k_in;
        let mut row = vec![0.0f32; k];
        let mut bytes = Vec::with_capacity(self.n_out * (k / 32) * 34);
        for r in 0..self.n_out {
            self.row_into(r, &mut row);
            let q = super::quant::quantize_q8_0(&row).ok_or_else(|| EngineError::UnsupportedDType {
                name: self.name.clone(),
                dtype: format!("Q8_0 needs rows of a multiple of 32 values, got {k}"),
            })?;
            bytes.extend_from_slice(&q);
        }
        Linear::from_raw_unchecked(self.name.clone(), DType::Q8_0, TensorBytes::owned(bytes), self.n_out, k)
    }

    /// Plain triple-loop reference of [`Linear::forward`] (tests only).
    pub fn forward_reference(&self, x: &[f32], m: usize, y: &mut [f32]) {
        let (n, k) = (self.n_out, self.k_in);
        let mut row = vec![0.0f32; k];
        for j in 0..n {
            self.row_into(j, &mut row);
            for i in 0..m {
                let mut acc = 0.0f64;
                for t in 0..k {
                    acc += x[i * k + t] as f64 * row[t] as f64;
                }
                y[i * n + j] = acc as f32;
            }
        }
    }
}

/// `y[m, n] = x[m, k] · wᵀ` with `w` an `[n, k]` row-major matrix, through the `gemm` crate.
fn gemm_x_wt(m: usize, n: usize, k: usize, x: &[f32], w: &[f32], y: &mut [f32], par: gemm::Parallelism) {
    assert!(x.len() >= m * k && w.len() >= n * k && y.len() >= m * n, "gemm operands too short");
    // SAFETY: x is m×k row-major, w is n×k row-major read as the k×n matrix wᵀ (row stride 1,
    // column stride k), y is m×n row-major; the lengths were checked above.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            y.as_mut_ptr(),
            1,
            n as isize,
            false,
            x.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            k as isize,
            1,
            0.0f32,
            1.0f32,
            false,
            false,
            false,
            par,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::quant::quantize_q8_0;
    use proptest::prelude::*;

    fn check(lin: &Linear, m: usize, seed: u64) {
        let k = lin.k_in;
        let x: Vec<f32> = (0..m * k).map(|i| (((i as u64 * 2654435761 + seed) % 1000) as f32 / 500.0) - 1.0).collect();
        let mut y = vec![0.0; m * lin.n_out];
        let mut r = vec![0.0; m * lin.n_out];
        lin.forward(&x, m, &mut y);
        lin.forward_reference(&x, m, &mut r);
        for (a, b) in y.iter().zip(&r) {
            assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "{a} vs {b}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn f32_matches_reference(m in 1usize..40, n in 1usize..70, k in 1usize..90, seed in 0u64..1000) {
            let w: Vec<f32> = (0..n * k).map(|i| ((i as u64 * 40503 + seed) % 997) as f32 / 498.0 - 1.0).collect();
            check(&Linear::from_f32("w", n, k, w.clone()), m, seed);
            let packed = Linear::from_f32("w", n, k, w).repack(KernelChoice::Auto).unwrap();
            check(&packed, m, seed);
        }

        #[test]
        fn q8_0_matches_reference(m in 1usize..20, n in 1usize..70, kb in 1usize..4, seed in 0u64..1000) {
            let k = kb * 32;
            let w: Vec<f32> = (0..n * k).map(|i| ((i as u64 * 40503 + seed) % 997) as f32 / 498.0 - 1.0).collect();
            let q = quantize_q8_0(&w).unwrap();
            let lin = Linear::from_raw_unchecked("w".into(), DType::Q8_0, TensorBytes::owned(q), n, k).unwrap();
            check(&lin, m, seed);
        }

        /// Repacked Q8_0 runs the int8 kernel: close to the f32 reference of the same Q8_0 weights
        /// (only the activations are rounded to int8, ≤ |x|max/254 per element).
        #[test]
        fn q8_0_repacked_is_close(m in 1usize..20, n in 1usize..70, kb in 1usize..4, seed in 0u64..1000) {
            let k = kb * 32;
            let w: Vec<f32> = (0..n * k).map(|i| ((i as u64 * 40503 + seed) % 997) as f32 / 498.0 - 1.0).collect();
            let q = quantize_q8_0(&w).unwrap();
            let lin = Linear::from_raw_unchecked("w".into(), DType::Q8_0, TensorBytes::owned(q), n, k).unwrap();
            let x: Vec<f32> = (0..m * k).map(|i| (((i as u64 * 2654435761 + seed) % 1000) as f32 / 500.0) - 1.0).collect();
            let mut r = vec![0.0; m * n];
            lin.forward_reference(&x, m, &mut r);
            let lin = lin.repack(KernelChoice::Auto).unwrap();
            prop_assert!(matches!(lin.storage, WeightStorage::Int8Packed(_)));
            let mut y = vec![0.0; m * n];
            lin.forward(&x, m, &mut y);
            for (a, b) in y.iter().zip(&r) {
                prop_assert!((a - b).abs() <= k as f32 / 254.0 + 1e-4, "{} vs {}", a, b);
            }
        }

        /// Q4_0 (exact codes) and Q4_K (requantised per 32) repacked to int8, and f32 requantised
        /// per row: close to the f32 reference of the loaded weights (int8 rounding of x and, for
        /// Q4_K / f32, of w: each ≤ half a step of |max|/127 per element).
        #[test]
        fn repacked_formats_are_close(m in 1usize..12, n in 1usize..40, kb in 1usize..3, seed in 0u64..1000) {
            use crate::kernels::quant::{quantize_q4_0, quantize_q4_k};
            let k = kb * 256;
            let w: Vec<f32> = (0..n * k).map(|i| ((i as u64 * 40503 + seed) % 997) as f32 / 498.0 - 1.0).collect();
            let x: Vec<f32> = (0..m * k).map(|i| (((i as u64 * 2654435761 + seed) % 1000) as f32 / 500.0) - 1.0).collect();
            let cases = [
                (Linear::from_raw_unchecked("w".into(), DType::Q4_0, TensorBytes::owned(quantize_q4_0(&w).unwrap()), n, k).unwrap(), KernelChoice::Auto),
                (Linear::from_raw_unchecked("w".into(), DType::Q4_K, TensorBytes::owned(quantize_q4_k(&w).unwrap()), n, k).unwrap(), KernelChoice::Auto),
                (Linear::from_f32("w", n, k, w.clone()), KernelChoice::Int8PerRow),
            ];
            for (lin, choice) in cases {
                let mut r = vec![0.0; m * n];
                lin.forward_reference(&x, m, &mut r);
                let lin = lin.repack(choice).unwrap();
                prop_assert!(matches!(lin.storage, WeightStorage::Int8Packed(_)));
                let mut y = vec![0.0; m * n];
                lin.forward(&x, m, &mut y);
                for (a, b) in y.iter().zip(&r) {
                    // |x| ≤ 1 and |w| ≤ 1.1: two half-steps of 1/127 per term, summed over k.
                    prop_assert!((a - b).abs() <= 2.2 * k as f32 / 254.0 + 1e-3, "{} vs {}", a, b);
                }
            }
        }
    }
}
