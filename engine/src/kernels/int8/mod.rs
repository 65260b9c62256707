//! Integer GEMM `y[m, n] = x[m, k] · Wᵀ` with int8 weights repacked at load and int8 activations
//! quantised per token row at call time; i32 accumulation, f32 out.
//!
//! Math (the reference, [`reference_gemm`]): activations `x[i, k] ≈ sx[i]·qx[i, k]`, weights
//! `W[j, k] ≈ sw[j, g]·qw[j, k]` for scale group `g ∋ k` (32 values, or the whole row), both codes
//! in [-127, 127]; `y[i, j] = sx[i] · Σ_g sw[j, g] · Σ_{k∈g} qx·qw` with the inner sums in i32.
//!
//! Packed layout (one *panel* = 16 output rows, zero-padded in n and in k up to `kp`):
//! - `data`   `[panel][kp/4][row 0..16][4]` i8: each k-quad of a panel is 64 bytes, exactly the i8
//!   operand of one `vpdpbusd` zmm (16 lanes = 16 output rows, 4 k each) or two AVX2 ymm halves.
//! - `scales` `[panel][group][row 0..16]` f32: one zmm of weight scales per group.
//! - `comp`   `[panel·16 + row]` f32 = 128·Σ_g sw·Σ_{k∈g} qw: VNNI multiplies *unsigned* by signed
//!   bytes, so that kernel feeds `qx + 128` and subtracts this term once per output instead of per
//!   block (the offset's contribution is linear in the weights).
//!
//! Kernels: AVX-512 VNNI (`vpdpbusd`), AVX2 (`vpsignb` sign trick + `vpmaddubsw` + `vpmaddwd`, codes
//! kept in ±127 so the i16 pair sums cannot saturate), aarch64 NEON `sdot` and i8mm `smmla`
//! ([`super::int8_aarch64`], over an aarch64 *oct* layout `[panel][kp/8][row 0..16][8]`, see
//! [`Layout`]), scalar. Chosen at run time ([`Isa::detect`]); each target compiles only its own
//! SIMD code (`cfg(target_arch)`).
//!
//! 4-bit weights ([`Int8Weights::into_nibbles`], Q4_0 under `KernelChoice::Auto` on AVX2/VNNI):
//! the 64-byte block of k-oct `o` holds quad `2o` in the low and quad `2o+1` in the high nibbles
//! (codes +8), so the x86 kernels unpack two `Quad4` operands per load and run unchanged after.
//!
//! Rates per shape and kernel, as fractions of a `vpdpbusd` peak measured in the same run, are in
//! `bench/results/kernels.json` (`bench/run kernels`). Int8 logits on the golden tiny models stay
//! within 2.8% of the largest |logit| (`tests/kernels_int8_accuracy.rs`).

//!
//! Files: `format.rs` (the packed weights), `reference.rs` (plain references and the portable
//! kernel), `activations.rs` (per-row activation quantisation, vectorised), `x86.rs` (VNNI and
//! AVX2 kernels), `../int8_aarch64.rs` (NEON kernels; kept there because the qemu cross test
//! includes that exact file).

use rayon::prelude::*;

use super::int8_aarch64 as a64;

mod activations;
mod format;
mod reference;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use activations::{quantize_row_reference, quantize_row_with, vnni_offset, QuantizedRows, VNNI_TILE_ROWS};
pub use format::{Int8Weights, Layout, ScaleGroup, WeightScales, PANEL};
use reference::scalar_panels;
pub use reference::{quantize_into, reference_gemm};

/// Instruction set of an int8 kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Isa {
    /// Plain Rust loops (any target).
    Scalar,
    /// AVX2 `vpmaddubsw` + `vpmaddwd`.
    Avx2,
    /// AVX-512 VNNI `vpdpbusd`.
    Avx512Vnni,
    /// aarch64 NEON dot product `sdot` (FEAT_DotProd).
    NeonDot,
    /// aarch64 int8 matrix multiply `smmla` (FEAT_I8MM).
    NeonI8mm,
}

impl Isa {
    /// Whether this CPU can run kernels of this ISA.
    pub fn available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            // Every AVX2 CPU also has FMA and F16C (the kernel uses both); checked all the same.
            Isa::Avx2 => {
                is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => {
                is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vnni")
            }
            Isa::NeonDot => a64::dot_available(),
            Isa::NeonI8mm => a64::i8mm_available(),
            #[cfg(not(target_arch = "x86_64"))]
            Isa::Avx2 | Isa::Avx512Vnni => false,
        }
    }

    /// The panel layout this ISA's kernel reads (`None`: any).
    pub fn layout(self) -> Option<Layout> {
        match self {
            Isa::Scalar => None,
            Isa::Avx2 | Isa::Avx512Vnni => Some(Layout::Quad4),
            Isa::NeonDot | Isa::NeonI8mm => Some(Layout::Oct8),
        }
    }

    /// Whether this ISA's kernel can run here on `w` (its layout; 4-bit codes: x86 kernels and
    /// scalar only; f16 scales: scalar, AVX2, VNNI with scale groups).
    pub fn runs(self, w: &Int8Weights) -> bool {
        self.available()
            && self.layout().is_none_or(|l| l == w.layout)
            && (!w.nibbles || matches!(self, Isa::Scalar | Isa::Avx2 | Isa::Avx512Vnni))
            && (!w.scales.is_f16() || self.widens_f16(w))
    }

    /// Whether this ISA's kernel reads `w`'s f16 scales.
    fn widens_f16(self, w: &Int8Weights) -> bool {
        match self {
            Isa::Scalar | Isa::Avx2 => true,
            Isa::Avx512Vnni => w.n_groups() > 1,
            Isa::NeonDot | Isa::NeonI8mm => false,
        }
    }

    /// The fastest ISA this CPU supports (`UNMASK_INT8_ISA=scalar|avx2|vnni|dotprod|i8mm` narrows it).
    pub fn detect() -> Isa {
        static BEST: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| {
            let want = std::env::var("UNMASK_INT8_ISA").ok();
            let forced = match want.as_deref() {
                Some("scalar") => Some(Isa::Scalar),
                Some("avx2") => Some(Isa::Avx2),
                Some("vnni") => Some(Isa::Avx512Vnni),
                Some("dotprod") => Some(Isa::NeonDot),
                Some("i8mm") => Some(Isa::NeonI8mm),
                _ => None,
            };
            if let Some(i) = forced.filter(|i| i.available()) {
                return i;
            }
            [Isa::Avx512Vnni, Isa::Avx2, Isa::NeonI8mm, Isa::NeonDot]
                .into_iter()
                .find(|i| i.available())
                .unwrap_or(Isa::Scalar)
        })
    }
}

/// `y[m, n] = x[m, k] · Wᵀ` with the fastest kernel for this CPU (overwrites `y`).
pub fn gemm(w: &Int8Weights, x: &[f32], m: usize, y: &mut [f32]) {
    gemm_with(Isa::detect(), w, x, m, y)
}

/// As [`gemm`] with a given ISA (falls back to scalar when unavailable or when the weights are in
/// another layout than the ISA's kernel reads).
pub fn gemm_with(isa: Isa, w: &Int8Weights, x: &[f32], m: usize, y: &mut [f32]) {
    let isa = if isa.runs(w) { isa } else { Isa::Scalar };
    // The quantised activations live in a per-thread buffer sized by the largest call so far, so
    // steady-state decoding allocates nothing here. A nested call on the same thread (rayon runs
    // other tasks while this one waits) finds it busy and uses a fresh buffer instead.
    thread_local! {
        static XQ: std::cell::RefCell<QuantizedRows> = std::cell::RefCell::new(QuantizedRows::empty());
    }
    XQ.with(|cell| match cell.try_borrow_mut() {
        Ok(mut xq) => {
            xq.fill(x, m, w.k, w.kp, isa);
            gemm_quantized(w, &xq, m, y);
        }
        Err(_) => gemm_quantized(w, &QuantizedRows::from_f32(x, m, w.k, w.kp, isa), m, y),
    });
}

/// Raw output pointer shared by the column tasks.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: tasks write disjoint column ranges of `y`, so sharing the pointer across threads is sound.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

/// Panels per column task (the VNNI tile is 2 panels = 32 columns wide).
const TASK_PANELS: usize = 2;

/// GEMM on already quantised activations (encoding must match `xq.isa`).
pub fn gemm_quantized(w: &Int8Weights, xq: &QuantizedRows, m: usize, y: &mut [f32]) {
    assert_eq!(xq.kp, w.kp, "activation padding must match the weights");
    assert!(xq.data.len() >= m * w.kp && xq.scales.len() >= m && y.len() >= m * w.n);
    let np = w.n_panels();
    let isa = if xq.isa.runs(w) { xq.isa } else { Isa::Scalar };
    assert!(isa == xq.isa || xq.isa != Isa::Avx512Vnni, "VNNI-encoded activations need the VNNI kernel");
    // The aarch64 kernels run only on f32 scales (`Isa::runs`).
    let panels = a64::Panels { data: &w.data, scales: w.scales.f32s().unwrap_or(&[]), n: w.n, kp: w.kp, group: w.group };
    let rows = a64::Rows { data: &xq.data, scales: &xq.scales, kp: xq.kp };
    if matches!(isa, Isa::NeonDot | Isa::NeonI8mm) {
        assert!(a64::shapes_ok(&panels, &rows, m, 0, np, y.len()), "aarch64 kernel operands do not fit");
    }
    let out = OutPtr(y.as_mut_ptr());
    // Columns are split across threads: each task owns a 32-column strip of y and streams only its
    // weight panels, which stay in L2 while every row tile of x passes over them.
    (0..np.div_ceil(TASK_PANELS)).into_par_iter().for_each(|t| {
        let out = out;
        let p0 = t * TASK_PANELS;
        let p1 = (p0 + TASK_PANELS).min(np);
        match isa {
            Isa::Scalar => scalar_panels(w, xq, m, p0, p1, out.0),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `isa.available()` confirmed AVX-512 F/BW/VNNI; buffers were size-checked above.
            Isa::Avx512Vnni => unsafe { x86::vnni_panels(w, xq, m, p0, p1, out.0) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `isa.available()` confirmed AVX2, FMA and F16C; buffers were size-checked above.
            Isa::Avx2 => unsafe { x86::avx2_panels(w, xq, m, p0, p1, out.0) },
            #[cfg(target_arch = "aarch64")]
            // SAFETY: `isa.runs` confirmed NEON + dotprod and the oct layout; `shapes_ok` held.
            Isa::NeonDot => unsafe { a64::dot_panels(&panels, &rows, m, p0, p1, out.0) },
            #[cfg(target_arch = "aarch64")]
            // SAFETY: `isa.runs` confirmed NEON + i8mm and the oct layout; `shapes_ok` held.
            Isa::NeonI8mm => unsafe { a64::i8mm_panels(&panels, &rows, m, p0, p1, out.0) },
            // Unreachable: `runs` is false for another target's ISA.
            #[allow(unreachable_patterns)]
            _ => scalar_panels(w, xq, m, p0, p1, out.0),
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::DType;
    use proptest::prelude::*;

    const LAYOUTS: [Layout; 2] = [Layout::Quad4, Layout::Oct8];

    /// Every ISA that can run here on `w` (always includes scalar).
    fn isas(w: &Int8Weights) -> Vec<Isa> {
        [Isa::Scalar, Isa::Avx2, Isa::Avx512Vnni, Isa::NeonDot, Isa::NeonI8mm]
            .into_iter()
            .filter(|i| i.runs(w))
            .collect()
    }

    /// Deterministic codes in ±127 from a seed.
    fn codes(len: usize, seed: u64) -> Vec<i8> {
        (0..len)
            .map(|i| ((i as u64).wrapping_mul(2654435761).wrapping_add(seed * 97) % 255) as i32 - 127)
            .map(|v| v as i8)
            .collect()
    }

    fn packed(layout: Layout, n: usize, k: usize, group: ScaleGroup, qw: &[i8], sw: &[f32]) -> Int8Weights {
        let kp = k.div_ceil(32) * 32;
        let ng = if group == ScaleGroup::PerRow { 1 } else { kp / 32 };
        Int8Weights::pack_with_layout(layout, n, k, group, DType::F32, |j, q, s| {
            q[..k].copy_from_slice(&qw[j * k..(j + 1) * k]);
            s.copy_from_slice(&sw[j * ng..(j + 1) * ng]);
        })
    }

    fn run(isa: Isa, w: &Int8Weights, qx: &[i8], sx: &[f32], m: usize) -> Vec<f32> {
        let xq = QuantizedRows::from_codes(qx, sx, w.kp, isa);
        let mut y = vec![f32::NAN; m * w.n];
        gemm_quantized(w, &xq, m, &mut y);
        y
    }

    /// Deterministic weight scales (`n_w`) and activation scales (`m`) from a seed.
    fn random_scales(n_w: usize, m: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
        let sw = (0..n_w).map(|i| 0.001 + ((i as u64 * 31 + seed) % 17) as f32 * 0.003).collect();
        let sx = (0..m).map(|i| 0.01 + ((i as u64 * 7 + seed) % 13) as f32 * 0.01).collect();
        (sw, sx)
    }

    /// Every ISA that runs `w` against the reference on the padded codes `qx` (`m` rows) and
    /// `qw`: exact when `exact`, else within 1e-5 of the largest output.
    #[allow(clippy::too_many_arguments)]
    fn check_against_reference(
        w: &Int8Weights,
        qx: &[i8],
        sx: &[f32],
        m: usize,
        qw: &[i8],
        sw: &[f32],
        exact: bool,
        label: &str,
    ) -> Result<(), TestCaseError> {
        let mut want = vec![0.0f32; m * w.n];
        reference_gemm(qx, sx, m, qw, sw, w.n, w.kp, w.group, &mut want);
        let tol = if exact { 0.0 } else { 1e-5 * want.iter().fold(1e-6f32, |a, v| a.max(v.abs())) };
        for isa in isas(w) {
            let got = run(isa, w, qx, sx, m);
            for (a, b) in got.iter().zip(&want) {
                prop_assert!((a - b).abs() <= tol, "{:?} {}: {} vs {}", isa, label, a, b);
            }
        }
        Ok(())
    }

    fn pad(q: &[i8], rows: usize, k: usize, kp: usize) -> Vec<i8> {
        let mut out = vec![0i8; rows * kp];
        for r in 0..rows {
            out[r * kp..r * kp + k].copy_from_slice(&q[r * k..(r + 1) * k]);
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// Unit scales: every kernel's output is the exact integer dot product.
        #[test]
        fn int_accumulation_is_exact(m in 1usize..20, n in 1usize..70, k in 1usize..200, per_row in any::<bool>(), seed in 0u64..1000) {
            let group = if per_row { ScaleGroup::PerRow } else { ScaleGroup::Block32 };
            let kp = k.div_ceil(32) * 32;
            let ng = if per_row { 1 } else { kp / 32 };
            let qw = codes(n * k, seed);
            let qx = codes(m * k, seed + 1);
            let qxp = pad(&qx, m, k, kp);
            for layout in LAYOUTS {
                let w = packed(layout, n, k, group, &qw, &vec![1.0; n * ng]);
                let mut want = vec![0.0f32; m * n];
                reference_gemm(&qxp, &vec![1.0; m], m, &pad(&qw, n, k, kp), &vec![1.0; n * ng], n, kp, w.group, &mut want);
                for isa in isas(&w) {
                    let got = run(isa, &w, &qxp, &vec![1.0; m], m);
                    prop_assert_eq!(&got, &want, "{:?} {:?}", isa, layout);
                }
            }
        }

        /// Random scales: f32 outputs agree with the reference to rounding.
        #[test]
        fn scaled_matches_reference(m in 1usize..20, n in 1usize..70, k in 1usize..300, per_row in any::<bool>(), seed in 0u64..1000) {
            let group = if per_row { ScaleGroup::PerRow } else { ScaleGroup::Block32 };
            let kp = k.div_ceil(32) * 32;
            let ng = if per_row { 1 } else { kp / 32 };
            let qw = codes(n * k, seed);
            let qx = codes(m * k, seed + 5);
            let (sw, sx) = random_scales(n * ng, m, seed);
            let qxp = pad(&qx, m, k, kp);
            for layout in LAYOUTS {
                let w = packed(layout, n, k, group, &qw, &sw);
                check_against_reference(&w, &qxp, &sx, m, &pad(&qw, n, k, kp), &sw, false, &format!("{layout:?}"))?;
            }
        }

        /// Panels of 16 KiB and more (k >= 1024), where the VNNI kernel prefetches ahead and the
        /// next panel pair into L2: exact with unit scales, to rounding with random scales.
        #[test]
        fn big_panels_match_reference(m in 1usize..40, n in 1usize..70, extra in 0usize..600, per_row in any::<bool>(), nib in any::<bool>(), seed in 0u64..1000) {
            let k = 1024 + extra;
            let group = if per_row { ScaleGroup::PerRow } else { ScaleGroup::Block32 };
            let kp = k.div_ceil(32) * 32;
            let ng = if per_row { 1 } else { kp / 32 };
            let qw: Vec<i8> = codes(n * k, seed).iter().map(|&v| if nib { (v as i32).rem_euclid(16) as i8 - 8 } else { v }).collect();
            let qx = pad(&codes(m * k, seed + 3), m, k, kp);
            let (sw, sx) = random_scales(n * ng, m, seed);
            for unit in [true, false] {
                let (sw, sx) = if unit { (vec![1.0; n * ng], vec![1.0; m]) } else { (sw.clone(), sx.clone()) };
                let w8 = packed(Layout::Quad4, n, k, group, &qw, &sw);
                let w = if nib { w8.into_nibbles().ok().expect("codes are in [-8, 7]") } else { w8 };
                check_against_reference(&w, &qx, &sx, m, &pad(&qw, n, k, kp), &sw, unit, &format!("unit={unit}"))?;
            }
        }

        /// 4-bit codes read directly (VNNI, AVX2, scalar): exact integer sums with unit scales, and
        /// the same outputs as the int8 form of the same weights with random scales.
        #[test]
        fn nibble_weights_match_reference(m in 1usize..20, n in 1usize..70, k in 1usize..300, per_row in any::<bool>(), seed in 0u64..1000) {
            let group = if per_row { ScaleGroup::PerRow } else { ScaleGroup::Block32 };
            let kp = k.div_ceil(32) * 32;
            let ng = if per_row { 1 } else { kp / 32 };
            let qw: Vec<i8> = codes(n * k, seed).iter().map(|&v| (v as i32).rem_euclid(16) as i8 - 8).collect();
            let qx = pad(&codes(m * k, seed + 2), m, k, kp);
            let (sw, sx) = random_scales(n * ng, m, seed);
            for unit in [true, false] {
                let (sw, sx) = if unit { (vec![1.0; n * ng], vec![1.0; m]) } else { (sw.clone(), sx.clone()) };
                let w8 = packed(Layout::Quad4, n, k, group, &qw, &sw);
                let w4 = w8.clone().into_nibbles().ok().expect("codes are in [-8, 7]");
                prop_assert!(w4.nibbles && w4.bytes() < w8.bytes());
                prop_assert_eq!(w4.unpack(), w8.unpack());
                check_against_reference(&w4, &qx, &sx, m, &pad(&qw, n, k, kp), &sw, unit, &format!("unit={unit}"))?;
            }
        }

        /// f16 scales (what Q8_0 / Q4_0 repack to) give every kernel bit for bit the outputs of
        /// the f32 form of the same scales, short panels and long (prefetching) ones, int8 and
        /// 4-bit codes.
        #[test]
        fn f16_scales_change_no_output(m in 1usize..40, n in 1usize..70, k in 33usize..1400, nib in any::<bool>(), seed in 0u64..1000) {
            let kp = k.div_ceil(32) * 32;
            let qw: Vec<i8> = codes(n * k, seed).iter().map(|&v| if nib { (v as i32).rem_euclid(16) as i8 - 8 } else { v }).collect();
            let qx = pad(&codes(m * k, seed + 4), m, k, kp);
            let (sw, sx) = random_scales(n * (kp / 32), m, seed);
            let sw: Vec<f32> = sw.iter().map(|&s| half::f16::from_f32(s).to_f32()).collect();
            let w8 = packed(Layout::Quad4, n, k, ScaleGroup::Block32, &qw, &sw);
            let w16 = w8.clone().with_f16_scales();
            prop_assert!(w16.scales.is_f16() && w16.bytes() < w8.bytes());
            let (w32, w16) = if nib {
                (w8.into_nibbles().ok().expect("4-bit codes"), w16.into_nibbles().ok().expect("4-bit codes"))
            } else {
                (w8, w16)
            };
            prop_assert_eq!(w16.unpack(), w32.unpack());
            prop_assert_eq!(isas(&w16), isas(&w32));
            for isa in isas(&w16) {
                let (a, b) = (run(isa, &w32, &qx, &sx, m), run(isa, &w16, &qx, &sx, m));
                prop_assert!(a == b, "{:?}", isa);
            }
        }

        /// End to end from f32: the int8 GEMM is close to the f32 product.
        #[test]
        fn f32_in_is_close(m in 1usize..10, n in 1usize..40, k in 1usize..200, seed in 0u64..1000) {
            let f = |i: usize, s: u64| (((i as u64).wrapping_mul(40503).wrapping_add(s) % 997) as f32 / 498.0) - 1.0;
            let wf: Vec<f32> = (0..n * k).map(|i| f(i, seed)).collect();
            let x: Vec<f32> = (0..m * k).map(|i| f(i, seed + 3)).collect();
            let w = Int8Weights::from_f32_rows(n, k, ScaleGroup::Block32, DType::F32, |j, o| o.copy_from_slice(&wf[j * k..(j + 1) * k]));
            for isa in isas(&w) {
                let mut y = vec![0.0f32; m * n];
                gemm_with(isa, &w, &x, m, &mut y);
                for i in 0..m {
                    for j in 0..n {
                        let exact: f32 = (0..k).map(|t| x[i * k + t] * wf[j * k + t]).sum();
                        // Two int8 roundings: each term errs by ≤ |x||w|/127; bound the sum loosely.
                        let bound = 2.0 * (k as f32) / 127.0 + 1e-3;
                        prop_assert!((y[i * n + j] - exact).abs() <= bound, "{:?}", isa);
                    }
                }
            }
        }
    }

    /// Asking for any ISA on weights of any layout gives the exact result: a kernel never reads
    /// weights packed for another one (it falls back to scalar), and on its own layout it is exact.
    #[test]
    fn any_isa_on_any_layout_is_exact() {
        let (m, n, k) = (3, 20, 64);
        let qw = codes(n * k, 7);
        let mut qx = codes(m * k, 8);
        // A ±127 in every row makes the per-row requantisation of `x` below the identity.
        for i in 0..m {
            qx[i * k] = 127;
        }
        let want = {
            let mut y = vec![0.0f32; m * n];
            reference_gemm(&qx, &[1.0; 3], m, &qw, &vec![1.0; n], n, k, k, &mut y);
            y
        };
        for layout in LAYOUTS {
            let w = packed(layout, n, k, ScaleGroup::PerRow, &qw, &vec![1.0; n]);
            for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512Vnni, Isa::NeonDot, Isa::NeonI8mm] {
                let mut y = vec![f32::NAN; m * n];
                let x: Vec<f32> = qx.iter().map(|&v| v as f32).collect();
                gemm_with(isa, &w, &x, m, &mut y);
                assert_eq!(y, want, "{isa:?} on {layout:?}");
            }
        }
    }

    #[test]
    fn nibbles_need_4_bit_codes_and_quad_layout() {
        let qw = vec![8i8; 4 * 32];
        assert!(packed(Layout::Quad4, 4, 32, ScaleGroup::Block32, &qw, &[1.0; 4]).into_nibbles().is_err());
        let qw = vec![-8i8; 4 * 32];
        assert!(packed(Layout::Oct8, 4, 32, ScaleGroup::Block32, &qw, &[1.0; 4]).into_nibbles().is_err());
        assert!(packed(Layout::Quad4, 4, 32, ScaleGroup::Block32, &qw, &[1.0; 4]).into_nibbles().is_ok());
    }

    /// Scales stay f32 where f16 would change an output or a kernel could not read them.
    #[test]
    fn f16_scales_only_where_exact_and_readable() {
        let qw = codes(4 * 64, 3);
        let f16 = |layout, k, s: f32| packed(layout, 4, k, ScaleGroup::Block32, &qw[..4 * k], &vec![s; 4 * k.div_ceil(32)]).with_f16_scales().scales.is_f16();
        assert!(f16(Layout::Quad4, 64, 0.5));
        assert!(!f16(Layout::Quad4, 64, 0.1), "0.1 is not an f16");
        assert!(!f16(Layout::Quad4, 32, 0.5), "one group per row: the per-row kernel path reads f32");
        assert!(!f16(Layout::Oct8, 64, 0.5), "the aarch64 kernels read f32");
    }

    #[test]
    fn q8_0_and_q4_0_repack_exactly() {
        let (n, k) = (37, 96);
        let wf: Vec<f32> = (0..n * k).map(|i| ((i * 7919 % 211) as f32 - 105.0) / 50.0).collect();
        let q8 = crate::kernels::quant::quantize_q8_0(&wf).unwrap();
        let w = Int8Weights::from_blocks(DType::Q8_0, &q8, n, k).unwrap();
        // The file's f16 block scales are kept as they are where the layout allows.
        assert_eq!(w.scales.is_f16(), Layout::native() == Layout::Quad4);
        let want = crate::kernels::quant::dequantize(DType::Q8_0, &q8, n * k).unwrap();
        let mut row = vec![0.0f32; k];
        for j in 0..n {
            w.row_into(j, &mut row);
            assert_eq!(&row[..], &want[j * k..(j + 1) * k]);
        }
        let q4 = crate::kernels::quant::quantize_q4_0(&wf).unwrap();
        let w = Int8Weights::from_blocks(DType::Q4_0, &q4, n, k).unwrap();
        let want = crate::kernels::quant::dequantize(DType::Q4_0, &q4, n * k).unwrap();
        for j in 0..n {
            w.row_into(j, &mut row);
            assert_eq!(&row[..], &want[j * k..(j + 1) * k]);
        }
    }
}
