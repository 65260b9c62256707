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
//! Measured (AMD EPYC Zen 4 KVM guest, 1 thread, load avg ~3.8 on 2 cores, dev profile, 4096×4096,
//! `bench/run kernels --quick`): VNNI per-row 376 GOP/s at m = 64 (0.82 of the 461 GOP/s `vpdpbusd`
//! peak of the same run), block-32 (Q8_0/Q4_0/Q4_K) 285–300 GOP/s (0.62–0.65: a `vcvtdq2ps` + `vfmadd`
//! per accumulator per 8 `vpdpbusd`), AVX2 ~80, scalar ~1. Int8 logits on the golden tiny models stay
//! within 2.8% of the largest |logit| (`tests/kernels_int8_accuracy.rs`).

use rayon::prelude::*;

use crate::model::tensor::DType;

use super::int8_aarch64 as a64;
use super::quant::dequantize_into;

/// Output rows per packed panel (one zmm of i32 lanes).
pub const PANEL: usize = 16;

/// How finely weight scales vary along k.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaleGroup {
    /// One scale per output row (cheapest kernel: a single i32 accumulation over all of k).
    PerRow,
    /// One scale per 32 consecutive k (GGUF block structure; Q8_0 and Q4_0 map onto it exactly).
    Block32,
}

/// Byte order of codes inside a 16-row panel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Layout {
    /// `[kp/4][row 0..16][4]`: the `vpdpbusd` operand (x86 kernels).
    Quad4,
    /// `[kp/8][row 0..16][8]`: the `smmla` operand, also read by the `sdot` kernel (aarch64).
    Oct8,
}

impl Layout {
    /// The layout this target's SIMD kernels read (the scalar kernel reads both).
    pub fn native() -> Layout {
        if cfg!(target_arch = "aarch64") {
            Layout::Oct8
        } else {
            Layout::Quad4
        }
    }

    /// Offset of (panel row `r`, k index `t`) inside one panel.
    #[inline]
    pub fn offset(self, r: usize, t: usize) -> usize {
        match self {
            Layout::Quad4 => (t / 4) * PANEL * 4 + r * 4 + t % 4,
            Layout::Oct8 => a64::oct_offset(r, t),
        }
    }
}

/// Int8 weights in the kernels' panel layout (see the module docs).
#[derive(Debug, Clone)]
pub struct Int8Weights {
    /// Output rows.
    pub n: usize,
    /// Input columns.
    pub k: usize,
    /// `k` padded to a multiple of 32 (and of the group).
    pub kp: usize,
    /// k values per scale group (32, or `kp` for per-row scales).
    pub group: usize,
    /// Storage type the weights came from (reporting only).
    pub source: DType,
    /// Code order inside a panel.
    pub layout: Layout,
    /// 4-bit form ([`Int8Weights::into_nibbles`]): two codes per byte, read directly by the VNNI,
    /// AVX2 and scalar kernels without repacking to int8.
    pub nibbles: bool,
    data: Vec<i8>,
    scales: Vec<f32>,
    comp: Vec<f32>,
}

impl Int8Weights {
    /// Number of 16-row panels.
    pub fn n_panels(&self) -> usize {
        self.n.div_ceil(PANEL)
    }

    /// Number of scale groups along k.
    pub fn n_groups(&self) -> usize {
        self.kp / self.group
    }

    /// Bytes held in memory (codes, scales, compensation).
    pub fn bytes(&self) -> usize {
        self.data.len() + 4 * (self.scales.len() + self.comp.len())
    }

    /// Packs rows given as codes and scales: `row(j, codes[kp], scales[n_groups])` fills row `j`
    /// (codes beyond `k` must stay 0; codes are clamped to ±127), in this target's native layout.
    pub fn pack(
        n: usize,
        k: usize,
        group: ScaleGroup,
        source: DType,
        row: impl Fn(usize, &mut [i8], &mut [f32]) + Sync,
    ) -> Self {
        Self::pack_with_layout(Layout::native(), n, k, group, source, row)
    }

    /// As [`Int8Weights::pack`] in a given layout (tests run both layouts on every target).
    pub fn pack_with_layout(
        layout: Layout,
        n: usize,
        k: usize,
        group: ScaleGroup,
        source: DType,
        row: impl Fn(usize, &mut [i8], &mut [f32]) + Sync,
    ) -> Self {
        let kp = k.div_ceil(32).max(1) * 32;
        let group = match group {
            ScaleGroup::PerRow => kp,
            ScaleGroup::Block32 => 32,
        };
        let ng = kp / group;
        let np = n.div_ceil(PANEL);
        let mut data = vec![0i8; np * kp * PANEL];
        let mut scales = vec![0.0f32; np * ng * PANEL];
        let mut comp = vec![0.0f32; np * PANEL];
        data.par_chunks_mut(kp * PANEL)
            .zip(scales.par_chunks_mut(ng * PANEL))
            .zip(comp.par_chunks_mut(PANEL))
            .enumerate()
            .for_each(|(p, ((d, s), c))| {
                let mut q = vec![0i8; kp];
                let mut sc = vec![0.0f32; ng];
                for r in 0..PANEL.min(n - p * PANEL) {
                    q.iter_mut().for_each(|v| *v = 0);
                    sc.iter_mut().for_each(|v| *v = 0.0);
                    row(p * PANEL + r, &mut q, &mut sc);
                    let mut cr = 0.0f64;
                    for (g, &sg) in sc.iter().enumerate() {
                        let mut sum = 0i32;
                        for t in g * group..(g + 1) * group {
                            // -128 would overflow the AVX2 sign trick; all our quantisers stay in ±127.
                            let v = q[t].max(-127);
                            d[layout.offset(r, t)] = v;
                            sum += v as i32;
                        }
                        s[g * PANEL + r] = sg;
                        cr += 128.0 * sg as f64 * sum as f64;
                    }
                    c[r] = cr as f32;
                }
            });
        Int8Weights { n, k, kp, group, source, layout, nibbles: false, data, scales, comp }
    }

    /// Quantises f32 rows (`row(j, out[k])`) to int8 codes with absmax scales per group.
    pub fn from_f32_rows(
        n: usize,
        k: usize,
        group: ScaleGroup,
        source: DType,
        row: impl Fn(usize, &mut [f32]) + Sync,
    ) -> Self {
        Self::pack(n, k, group, source, |j, q, s| {
            let mut f = vec![0.0f32; k];
            row(j, &mut f);
            let g = q.len() / s.len();
            for (gi, sg) in s.iter_mut().enumerate() {
                let lo = gi * g;
                let hi = ((gi + 1) * g).min(k);
                if lo >= hi {
                    continue;
                }
                *sg = quantize_into(&f[lo..hi], &mut q[lo..hi]);
            }
        })
    }

    /// Repacks GGUF-style blocks: Q8_0 and Q4_0 exactly (their codes and block scales are int8
    /// and block-32 already); other types are dequantised per row and requantised per 32.
    pub fn from_blocks(dtype: DType, bytes: &[u8], n: usize, k: usize) -> Option<Self> {
        let rb = dtype.bytes_for(k)?;
        if bytes.len() != rb * n {
            return None;
        }
        let f16 = |b: &[u8]| half::f16::from_le_bytes([b[0], b[1]]).to_f32();
        Some(match dtype {
            DType::Q8_0 => Self::pack(n, k, ScaleGroup::Block32, dtype, |j, q, s| {
                for (b, blk) in bytes[j * rb..(j + 1) * rb].chunks_exact(34).enumerate() {
                    s[b] = f16(blk);
                    for t in 0..32 {
                        q[b * 32 + t] = blk[2 + t] as i8;
                    }
                }
            }),
            DType::Q4_0 => Self::pack(n, k, ScaleGroup::Block32, dtype, |j, q, s| {
                for (b, blk) in bytes[j * rb..(j + 1) * rb].chunks_exact(18).enumerate() {
                    s[b] = f16(blk);
                    for t in 0..16 {
                        let v = blk[2 + t];
                        q[b * 32 + t] = (v & 0x0F) as i8 - 8;
                        q[b * 32 + t + 16] = (v >> 4) as i8 - 8;
                    }
                }
            }),
            _ => Self::from_f32_rows(n, k, ScaleGroup::Block32, dtype, |j, out| {
                let _ = dequantize_into(dtype, &bytes[j * rb..(j + 1) * rb], out);
            }),
        })
    }

    /// Code bytes per panel.
    fn panel_bytes(&self) -> usize {
        if self.nibbles {
            self.kp * PANEL / 2
        } else {
            self.kp * PANEL
        }
    }

    /// Code of (panel `p`, panel row `r`, k index `t`).
    #[inline]
    fn code_in_panel(&self, p: usize, r: usize, t: usize) -> i8 {
        let base = p * self.panel_bytes();
        if self.nibbles {
            // Oct o of k holds quad 2o in the low and quad 2o+1 in the high nibbles, +8 biased.
            let b = self.data[base + (t / 8) * PANEL * 4 + r * 4 + t % 4] as u8;
            let v = if (t / 4) % 2 == 0 { b & 0x0F } else { b >> 4 };
            v as i8 - 8
        } else {
            self.data[base + self.layout.offset(r, t)]
        }
    }

    /// Code and scale of element (j, t) (gathers across the panel layout).
    fn code(&self, j: usize, t: usize) -> (i8, f32) {
        let (p, r) = (j / PANEL, j % PANEL);
        let q = self.code_in_panel(p, r, t);
        let s = self.scales[p * self.n_groups() * PANEL + (t / self.group) * PANEL + r];
        (q, s)
    }

    /// The 4-bit form of these weights; `Err(self)` unchanged unless they are `Quad4` with every
    /// code in [-8, 7] (Q4_0 repacks exactly so). Halves the code bytes (0.625 bytes per weight with the
    /// block-32 f32 scales, against 1.125 as int8); scales and compensation are unchanged.
    pub fn into_nibbles(self) -> Result<Self, Self> {
        if self.nibbles || self.layout != Layout::Quad4 || self.data.iter().any(|&q| !(-8..=7).contains(&q)) {
            return Err(self);
        }
        let quad = PANEL * 4;
        let mut data = vec![0i8; self.data.len() / 2];
        data.par_chunks_mut(quad).zip(self.data.par_chunks(2 * quad)).for_each(|(out, pair)| {
            for (i, o) in out.iter_mut().enumerate() {
                let lo = (pair[i] + 8) as u8;
                let hi = (pair[quad + i] + 8) as u8;
                *o = (lo | (hi << 4)) as i8;
            }
        });
        Ok(Int8Weights { nibbles: true, data, ..self })
    }

    /// Dequantised row `j` into `out[k]` (embedding lookups, references).
    pub fn row_into(&self, j: usize, out: &mut [f32]) {
        for (t, o) in out.iter_mut().enumerate().take(self.k) {
            let (q, s) = self.code(j, t);
            *o = q as f32 * s;
        }
    }

    /// Unpacked codes `[n][kp]` and scales `[n][n_groups]` (for the reference and tests).
    pub fn unpack(&self) -> (Vec<i8>, Vec<f32>) {
        let ng = self.n_groups();
        let mut q = vec![0i8; self.n * self.kp];
        let mut s = vec![0.0f32; self.n * ng];
        for j in 0..self.n {
            for t in 0..self.kp {
                let (c, sc) = self.code(j, t);
                q[j * self.kp + t] = c;
                s[j * ng + t / self.group] = sc;
            }
        }
        (q, s)
    }
}

/// Absmax quantisation of `x` into `q` (codes in ±127); returns the scale (0 for an all-zero `x`).
pub fn quantize_into(x: &[f32], q: &mut [i8]) -> f32 {
    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    if amax == 0.0 || !amax.is_finite() {
        q.iter_mut().for_each(|v| *v = 0);
        return 0.0;
    }
    let inv = 127.0 / amax;
    for (o, v) in q.iter_mut().zip(x) {
        *o = (v * inv).round().clamp(-127.0, 127.0) as i8;
    }
    amax / 127.0
}

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
            Isa::Avx2 => is_x86_feature_detected!("avx2"),
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

    /// Whether this ISA's kernel can run here on `w` (its layout, and 4-bit codes: x86 kernels
    /// and scalar only).
    pub fn runs(self, w: &Int8Weights) -> bool {
        self.available()
            && self.layout().is_none_or(|l| l == w.layout)
            && (!w.nibbles || matches!(self, Isa::Scalar | Isa::Avx2 | Isa::Avx512Vnni))
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

/// Quantised activations in the encoding a kernel wants: `[m][kp]` bytes plus one scale per row.
pub struct QuantizedRows {
    /// VNNI: `qx + 128` as u8; other kernels: `qx` as i8 bits.
    pub data: Vec<u8>,
    pub scales: Vec<f32>,
    pub kp: usize,
    pub isa: Isa,
}

impl QuantizedRows {
    /// Quantises `m` rows of `x[m][k]` per row for kernel `isa`, zero-padding to `kp`.
    pub fn from_f32(x: &[f32], m: usize, k: usize, kp: usize, isa: Isa) -> Self {
        let mut data = vec![0u8; m * kp];
        let mut scales = vec![0.0f32; m];
        let offset = if isa == Isa::Avx512Vnni { 128u8 } else { 0 };
        data.par_chunks_mut(kp).zip(scales.par_iter_mut()).enumerate().for_each(|(i, (d, s))| {
            let mut q = vec![0i8; k];
            *s = quantize_into(&x[i * k..(i + 1) * k], &mut q);
            for (o, &v) in d.iter_mut().zip(&q) {
                *o = (v as u8).wrapping_add(offset);
            }
            for o in d[k..].iter_mut() {
                *o = offset;
            }
        });
        QuantizedRows { data, scales, kp, isa }
    }

    /// Wraps codes `qx[m][kp]` (±127) and scales as given (tests).
    pub fn from_codes(qx: &[i8], scales: &[f32], kp: usize, isa: Isa) -> Self {
        let offset = if isa == Isa::Avx512Vnni { 128u8 } else { 0 };
        let data = qx.iter().map(|&v| (v.max(-127) as u8).wrapping_add(offset)).collect();
        QuantizedRows { data, scales: scales.to_vec(), kp, isa }
    }
}

/// Plain reference: `y[i, j] = sx[i] · Σ_g sw[j, g] · Σ_{k∈g} qx·qw` from unpacked codes, with
/// i32 inner sums and f64 outer sums.
pub fn reference_gemm(
    qx: &[i8],
    sx: &[f32],
    m: usize,
    qw: &[i8],
    sw: &[f32],
    n: usize,
    kp: usize,
    group: usize,
    y: &mut [f32],
) {
    let ng = kp / group;
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0.0f64;
            for g in 0..ng {
                let mut s = 0i32;
                for t in g * group..(g + 1) * group {
                    s += qx[i * kp + t] as i32 * qw[j * kp + t] as i32;
                }
                acc += sw[j * ng + g] as f64 * s as f64;
            }
            y[i * n + j] = (sx[i] as f64 * acc) as f32;
        }
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
    let xq = QuantizedRows::from_f32(x, m, w.k, w.kp, isa);
    gemm_quantized(w, &xq, m, y);
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
    let panels = a64::Panels { data: &w.data, scales: &w.scales, n: w.n, kp: w.kp, group: w.group };
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
            // SAFETY: `isa.available()` confirmed AVX2; buffers were size-checked above.
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

/// Scalar kernel over the packed layout (what the SIMD kernels compute, lane by lane).
fn scalar_panels(w: &Int8Weights, xq: &QuantizedRows, m: usize, p0: usize, p1: usize, y: *mut f32) {
    let (kp, ng, g) = (w.kp, w.n_groups(), w.group);
    for p in p0..p1 {
        let s = &w.scales[p * ng * PANEL..(p + 1) * ng * PANEL];
        for r in 0..PANEL.min(w.n - p * PANEL) {
            let j = p * PANEL + r;
            for i in 0..m {
                let x = &xq.data[i * kp..(i + 1) * kp];
                let mut acc = 0.0f32;
                for gi in 0..ng {
                    let mut sum = 0i32;
                    for t in gi * g..(gi + 1) * g {
                        sum += (x[t] as i8) as i32 * w.code_in_panel(p, r, t) as i32;
                    }
                    acc += sum as f32 * s[gi * PANEL + r];
                }
                // SAFETY: i < m and j < n, and this task alone writes column j.
                unsafe { *y.add(i * w.n + j) = acc * xq.scales[i] };
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{Int8Weights, QuantizedRows, PANEL};

    /// Activation rows per VNNI tile: 6 rows × 2 panels = 12 i32 + 12 f32 accumulators in zmm.
    const MR_VNNI: usize = 6;
    /// Activation rows per AVX2 tile (16 ymm registers: 2·MR i32 + 2·MR f32 + operands).
    const MR_AVX2: usize = 3;

    /// Runs VNNI tiles over panels `p0..p1` (at most 2) for all `m` rows.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn vnni_panels(w: &Int8Weights, xq: &QuantizedRows, m: usize, p0: usize, p1: usize, y: *mut f32) {
        let np = p1 - p0;
        let mut i = 0;
        while i < m {
            let mr = (m - i).min(MR_VNNI);
            macro_rules! go {
                ($($a:literal, $b:literal);*) => {
                    match (mr, np) {
                        $(($a, $b) if w.nibbles => vnni_tile::<$a, $b, true>(w, xq, i, p0, y),
                          ($a, $b) => vnni_tile::<$a, $b, false>(w, xq, i, p0, y),)*
                        _ => unreachable!(),
                    }
                };
            }
            go!(1,1; 2,1; 3,1; 4,1; 5,1; 6,1; 1,2; 2,2; 3,2; 4,2; 5,2; 6,2);
            i += mr;
        }
    }

    /// One MR×(NP·16) tile: rows `i0..i0+MR` of x against panels `p0..p0+NP`, all of k.
    ///
    /// Pointers advance with `wrapping_add` and loads are full-mask masked loads: the dev profile
    /// (tests, `bench/run`) keeps debug assertions, and the overflow / `read_unaligned` checks of
    /// the plain forms would otherwise outnumber the `vpdpbusd`s in the inner loop.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    ///
    /// `NIB`: 4-bit codes (+8 biased, quad 2o low / 2o+1 high nibbles of 64-byte oct o), unpacked in
    /// registers (`and`, `srli`, `sub`) and then used exactly like the int8 codes.
    unsafe fn vnni_tile<const MR: usize, const NP: usize, const NIB: bool>(
        w: &Int8Weights,
        xq: &QuantizedRows,
        i0: usize,
        p0: usize,
        y: *mut f32,
    ) {
        let (kp, ng) = (w.kp, w.n_groups());
        let quads = w.group / 4;
        let pstride = if NIB { kp * PANEL / 2 } else { kp * PANEL };
        let (low4, eight) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(8));
        let (steps, subs) = if NIB { (quads / 2, 2) } else { (quads, 1) };
        let mut wp = w.data.as_ptr().wrapping_add(p0 * pstride);
        let sb = w.scales.as_ptr().wrapping_add(p0 * ng * PANEL);
        let mut xr = [xq.data.as_ptr(); MR];
        for (r, x) in xr.iter_mut().enumerate() {
            *x = x.wrapping_add((i0 + r) * kp);
        }
        let mut facc = [[_mm512_setzero_ps(); NP]; MR];
        for g in 0..ng {
            let mut iacc = [[_mm512_setzero_si512(); NP]; MR];
            for _ in 0..steps {
                let mut wv = [[_mm512_setzero_si512(); NP]; 2];
                for p in 0..NP {
                    // SAFETY: panel p0+p < n_panels and the current quad (int8) or oct (4-bit)
                    // < kp/4 or kp/8: 64 bytes inside `data`.
                    let raw = _mm512_maskz_loadu_epi32(0xFFFF, wp.wrapping_add(p * pstride) as *const i32);
                    if NIB {
                        wv[0][p] = _mm512_sub_epi8(_mm512_and_si512(raw, low4), eight);
                        wv[1][p] = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(raw, 4), low4), eight);
                    } else {
                        wv[0][p] = raw;
                    }
                }
                for wq in wv.iter().take(subs) {
                    for (acc, x) in iacc.iter_mut().zip(xr.iter_mut()) {
                        // SAFETY: row i0+r < m and the current quad < kp/4: 4 bytes inside the activations.
                        let xv = _mm512_set1_epi32(i32::from_le_bytes((*x as *const [u8; 4]).read()));
                        *x = x.wrapping_add(4);
                        for p in 0..NP {
                            acc[p] = _mm512_dpbusd_epi32(acc[p], xv, wq[p]);
                        }
                    }
                }
                wp = wp.wrapping_add(64);
            }
            for p in 0..NP {
                // SAFETY: group g of panel p0+p is inside `scales`.
                let s = _mm512_maskz_loadu_ps(0xFFFF, sb.wrapping_add(p * ng * PANEL + g * PANEL));
                for r in 0..MR {
                    facc[r][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[r][p]), s, facc[r][p]);
                }
            }
        }
        let n = w.n;
        for p in 0..NP {
            let col0 = (p0 + p) * PANEL;
            let valid = (n - col0).min(PANEL);
            let mask: u16 = if valid == PANEL { 0xFFFF } else { (1u16 << valid) - 1 };
            // SAFETY: `comp` has n_panels·16 entries.
            let c = _mm512_maskz_loadu_ps(0xFFFF, w.comp.as_ptr().wrapping_add(col0));
            for r in 0..MR {
                let v = _mm512_mul_ps(_mm512_sub_ps(facc[r][p], c), _mm512_set1_ps(xq.scales[i0 + r]));
                // SAFETY: masked to the valid columns of row i0+r < m; this task owns these columns.
                _mm512_mask_storeu_ps(y.wrapping_add((i0 + r) * n + col0), mask, v);
            }
        }
    }

    /// Runs AVX2 tiles over panels `p0..p1`, one panel (two ymm halves) at a time.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn avx2_panels(w: &Int8Weights, xq: &QuantizedRows, m: usize, p0: usize, p1: usize, y: *mut f32) {
        for p in p0..p1 {
            let mut i = 0;
            while i < m {
                let mr = (m - i).min(MR_AVX2);
                match mr {
                    1 if w.nibbles => avx2_tile::<1, true>(w, xq, i, p, y),
                    2 if w.nibbles => avx2_tile::<2, true>(w, xq, i, p, y),
                    _ if w.nibbles => avx2_tile::<3, true>(w, xq, i, p, y),
                    1 => avx2_tile::<1, false>(w, xq, i, p, y),
                    2 => avx2_tile::<2, false>(w, xq, i, p, y),
                    _ => avx2_tile::<3, false>(w, xq, i, p, y),
                }
                i += mr;
            }
        }
    }

    /// One MR×16 tile with the sign trick: |x| (u8) × (w with x's sign) (i8) stays within i16.
    /// Loads use `lddqu` (an LLVM intrinsic, free of debug-build checks; see `vnni_tile`).
    #[target_feature(enable = "avx2,fma")]
    /// `NIB`: 4-bit codes, unpacked in registers as in `vnni_tile`.
    unsafe fn avx2_tile<const MR: usize, const NIB: bool>(
        w: &Int8Weights,
        xq: &QuantizedRows,
        i0: usize,
        p: usize,
        y: *mut f32,
    ) {
        let (kp, ng) = (w.kp, w.n_groups());
        let quads = w.group / 4;
        let (steps, subs) = if NIB { (quads / 2, 2) } else { (quads, 1) };
        let (low4, eight) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(8));
        let mut wp = w.data.as_ptr().wrapping_add(p * w.panel_bytes());
        let sb = w.scales.as_ptr().wrapping_add(p * ng * PANEL);
        let mut xr = [xq.data.as_ptr(); MR];
        for (r, x) in xr.iter_mut().enumerate() {
            *x = x.wrapping_add((i0 + r) * kp);
        }
        let ones = _mm256_set1_epi16(1);
        let mut facc = [[_mm256_setzero_ps(); 2]; MR];
        for g in 0..ng {
            let mut iacc = [[_mm256_setzero_si256(); 2]; MR];
            for _ in 0..steps {
                // SAFETY: the current 64-byte k-quad (int8) or k-oct (4-bit) of panel p lies inside `data`.
                let r0 = _mm256_lddqu_si256(wp as *const __m256i);
                let r1 = _mm256_lddqu_si256(wp.wrapping_add(32) as *const __m256i);
                wp = wp.wrapping_add(64);
                let wv = if NIB {
                    macro_rules! lo {
                        ($v:expr) => {
                            _mm256_sub_epi8(_mm256_and_si256($v, low4), eight)
                        };
                    }
                    macro_rules! hi {
                        ($v:expr) => {
                            _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16($v, 4), low4), eight)
                        };
                    }
                    [[lo!(r0), lo!(r1)], [hi!(r0), hi!(r1)]]
                } else {
                    [[r0, r1], [r0, r1]]
                };
                for [w0, w1] in wv.into_iter().take(subs) {
                    for (acc, x) in iacc.iter_mut().zip(xr.iter_mut()) {
                        // SAFETY: row i0+r < m and the current quad < kp/4.
                        let xv = _mm256_set1_epi32(i32::from_le_bytes((*x as *const [u8; 4]).read()));
                        *x = x.wrapping_add(4);
                        let ax = _mm256_abs_epi8(xv);
                        let d0 = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(w0, xv)), ones);
                        let d1 = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(w1, xv)), ones);
                        acc[0] = _mm256_add_epi32(acc[0], d0);
                        acc[1] = _mm256_add_epi32(acc[1], d1);
                    }
                }
            }
            // SAFETY: group g's 16 scales of panel p lie inside `scales`.
            let s0 = _mm256_castsi256_ps(_mm256_lddqu_si256(sb.wrapping_add(g * PANEL) as *const __m256i));
            let s1 = _mm256_castsi256_ps(_mm256_lddqu_si256(sb.wrapping_add(g * PANEL + 8) as *const __m256i));
            for r in 0..MR {
                facc[r][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[r][0]), s0, facc[r][0]);
                facc[r][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[r][1]), s1, facc[r][1]);
            }
        }
        let n = w.n;
        let col0 = p * PANEL;
        let valid = (n - col0).min(PANEL);
        for r in 0..MR {
            let sx = _mm256_set1_ps(xq.scales[i0 + r]);
            let mut tmp = [0.0f32; PANEL];
            _mm256_storeu_ps(tmp.as_mut_ptr(), _mm256_mul_ps(facc[r][0], sx));
            _mm256_storeu_ps(tmp.as_mut_ptr().add(8), _mm256_mul_ps(facc[r][1], sx));
            // SAFETY: row i0+r < m, columns col0..col0+valid < n are owned by this task.
            std::ptr::copy_nonoverlapping(tmp.as_ptr(), y.add((i0 + r) * n + col0), valid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
            let sw: Vec<f32> = (0..n * ng).map(|i| 0.001 + ((i as u64 * 31 + seed) % 17) as f32 * 0.003).collect();
            let sx: Vec<f32> = (0..m).map(|i| 0.01 + ((i as u64 * 7 + seed) % 13) as f32 * 0.01).collect();
            let qxp = pad(&qx, m, k, kp);
            for layout in LAYOUTS {
                let w = packed(layout, n, k, group, &qw, &sw);
                let mut want = vec![0.0f32; m * n];
                reference_gemm(&qxp, &sx, m, &pad(&qw, n, k, kp), &sw, n, kp, w.group, &mut want);
                let scale = want.iter().fold(1e-6f32, |a, v| a.max(v.abs()));
                for isa in isas(&w) {
                    let got = run(isa, &w, &qxp, &sx, m);
                    for (a, b) in got.iter().zip(&want) {
                        prop_assert!((a - b).abs() <= 1e-5 * scale, "{:?} {:?}: {} vs {}", isa, layout, a, b);
                    }
                }
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
            let sw: Vec<f32> = (0..n * ng).map(|i| 0.001 + ((i as u64 * 31 + seed) % 17) as f32 * 0.003).collect();
            let sx: Vec<f32> = (0..m).map(|i| 0.01 + ((i as u64 * 7 + seed) % 13) as f32 * 0.01).collect();
            for unit in [true, false] {
                let (sw, sx) = if unit { (vec![1.0; n * ng], vec![1.0; m]) } else { (sw.clone(), sx.clone()) };
                let w8 = packed(Layout::Quad4, n, k, group, &qw, &sw);
                let w4 = w8.clone().into_nibbles().ok().expect("codes are in [-8, 7]");
                prop_assert!(w4.nibbles && w4.bytes() < w8.bytes());
                prop_assert_eq!(w4.unpack(), w8.unpack());
                let mut want = vec![0.0f32; m * n];
                reference_gemm(&qx, &sx, m, &pad(&qw, n, k, kp), &sw, n, kp, w8.group, &mut want);
                let tol = if unit { 0.0 } else { 1e-5 * want.iter().fold(1e-6f32, |a, v| a.max(v.abs())) };
                for isa in isas(&w4) {
                    let got = run(isa, &w4, &qx, &sx, m);
                    for (a, b) in got.iter().zip(&want) {
                        prop_assert!((a - b).abs() <= tol, "{:?} unit={}: {} vs {}", isa, unit, a, b);
                    }
                }
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

    #[test]
    fn q8_0_and_q4_0_repack_exactly() {
        let (n, k) = (37, 96);
        let wf: Vec<f32> = (0..n * k).map(|i| ((i * 7919 % 211) as f32 - 105.0) / 50.0).collect();
        let q8 = crate::kernels::quant::quantize_q8_0(&wf).unwrap();
        let w = Int8Weights::from_blocks(DType::Q8_0, &q8, n, k).unwrap();
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
