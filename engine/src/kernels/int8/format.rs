//! The packed int8 weight format (see the parent module's docs for the layout).

use rayon::prelude::*;

use crate::kernels::int8_aarch64 as a64;
use crate::kernels::quant::dequantize_into;
use crate::tensor::DType;

use super::reference::quantize_into;

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

/// Weight scales in the panel order `[panel][group][row 0..16]`.
///
/// f16 where every scale is exactly an f16 and there are several groups per row: GGUF Q8_0 / Q4_0
/// block scales are f16 in the file, and at decode block sizes the GEMM streams its weights from
/// DRAM, so the 2 bytes saved per 32 codes (1.125 -> 1.0625 bytes per weight) are time saved. The
/// kernels widen them in registers; every output is identical to the f32 form.
#[derive(Debug, Clone, PartialEq)]
pub enum WeightScales {
    F32(Vec<f32>),
    F16(Vec<half::f16>),
}

impl WeightScales {
    /// Scale `i` (panel order).
    #[inline]
    pub fn get(&self, i: usize) -> f32 {
        match self {
            WeightScales::F32(v) => v[i],
            WeightScales::F16(v) => v[i].to_f32(),
        }
    }

    /// Number of scales.
    pub fn len(&self) -> usize {
        match self {
            WeightScales::F32(v) => v.len(),
            WeightScales::F16(v) => v.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        match self {
            WeightScales::F32(v) => 4 * v.len(),
            WeightScales::F16(v) => 2 * v.len(),
        }
    }

    /// The f32 form's slice (`None` for f16 scales).
    pub fn f32s(&self) -> Option<&[f32]> {
        match self {
            WeightScales::F32(v) => Some(v),
            WeightScales::F16(_) => None,
        }
    }

    /// Whether the scales are stored as f16.
    pub fn is_f16(&self) -> bool {
        matches!(self, WeightScales::F16(_))
    }

    /// Overwrites these scales with `src`'s (same form and length, else false).
    fn copy_from(&mut self, src: &WeightScales) -> bool {
        match (self, src) {
            (WeightScales::F32(a), WeightScales::F32(b)) if a.len() == b.len() => a.copy_from_slice(b),
            (WeightScales::F16(a), WeightScales::F16(b)) if a.len() == b.len() => a.copy_from_slice(b),
            _ => return false,
        }
        true
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
    pub(super) data: Vec<i8>,
    pub(super) scales: WeightScales,
    pub(super) comp: Vec<f32>,
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
        self.data.len() + self.scales.bytes() + 4 * self.comp.len()
    }

    /// Overwrites these weights with `src`'s in place (no allocation; a staging-slot fill of the
    /// memory runtime). False when the formats or shapes differ.
    pub fn copy_from(&mut self, src: &Int8Weights) -> bool {
        let same = (self.n, self.k, self.kp, self.group, self.layout, self.nibbles)
            == (src.n, src.k, src.kp, src.group, src.layout, src.nibbles)
            && self.scales.is_f16() == src.scales.is_f16()
            && (self.data.len(), self.scales.len(), self.comp.len())
                == (src.data.len(), src.scales.len(), src.comp.len());
        if !same {
            return false;
        }
        self.data.copy_from_slice(&src.data);
        self.scales.copy_from(&src.scales);
        self.comp.copy_from_slice(&src.comp);
        self.source = src.source;
        true
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
        Int8Weights { n, k, kp, group, source, layout, nibbles: false, data, scales: WeightScales::F32(scales), comp }
    }

    /// These weights with f16 scales where that changes no output: `Quad4` layout (the x86
    /// kernels widen f16 in registers; the aarch64 kernels read f32), several scale groups per row,
    /// and every scale exactly an f16. Otherwise unchanged.
    pub fn with_f16_scales(self) -> Self {
        let WeightScales::F32(v) = &self.scales else { return self };
        let exact = v.iter().all(|&s| half::f16::from_f32(s).to_f32() == s);
        if self.layout != Layout::Quad4 || self.n_groups() < 2 || !exact {
            return self;
        }
        let scales = WeightScales::F16(v.iter().map(|&s| half::f16::from_f32(s)).collect());
        Int8Weights { scales, ..self }
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
    /// and block-32 already; the scales stay f16 where the layout allows, see
    /// [`Int8Weights::with_f16_scales`]); other types are dequantised per row and requantised per 32.
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
            })
            .with_f16_scales(),
            DType::Q4_0 => Self::pack(n, k, ScaleGroup::Block32, dtype, |j, q, s| {
                for (b, blk) in bytes[j * rb..(j + 1) * rb].chunks_exact(18).enumerate() {
                    s[b] = f16(blk);
                    for t in 0..16 {
                        let v = blk[2 + t];
                        q[b * 32 + t] = (v & 0x0F) as i8 - 8;
                        q[b * 32 + t + 16] = (v >> 4) as i8 - 8;
                    }
                }
            })
            .with_f16_scales(),
            _ => Self::from_f32_rows(n, k, ScaleGroup::Block32, dtype, |j, out| {
                let _ = dequantize_into(dtype, &bytes[j * rb..(j + 1) * rb], out);
            }),
        })
    }

    /// Code bytes per panel.
    pub(super) fn panel_bytes(&self) -> usize {
        if self.nibbles {
            self.kp * PANEL / 2
        } else {
            self.kp * PANEL
        }
    }

    /// Code of (panel `p`, panel row `r`, k index `t`).
    #[inline]
    pub(super) fn code_in_panel(&self, p: usize, r: usize, t: usize) -> i8 {
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
        let s = self.scales.get(p * self.n_groups() * PANEL + (t / self.group) * PANEL + r);
        (q, s)
    }

    /// The 4-bit form of these weights; `Err(self)` unchanged unless they are `Quad4` with every
    /// code in [-8, 7] (Q4_0 repacks exactly so). Halves the code bytes (0.5625 bytes per weight with the
    /// block-32 f16 scales, against 1.0625 as int8); scales and compensation are unchanged.
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
