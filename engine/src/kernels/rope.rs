//! Rotary position embeddings with precomputed tables; rows are rotated by a vectorised
//! variant per instruction set ([`super::simd::Simd`]), checked against the per-head reference.

use super::simd::{multiversion, Simd};

/// How rotary embeddings pair up the dimensions of a head (re-exported as
/// `model::config::RopeStyle`; kernels know no model types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RopeStyle {
    /// HF / NeoX convention: dimension i pairs with i + rotary_dim/2.
    RotateHalf,
    /// Original Llama / llama.cpp "NORM": adjacent dimensions (2i, 2i+1) pair up.
    Interleaved,
}

/// Positions whose angles are precomputed. Longer contexts compute the rest on the fly, so a
/// model that claims a huge context costs no memory until a request actually reaches it.
const PRECOMPUTED_POSITIONS: usize = 8192;

/// cos/sin tables for positions `0..max_pos`, `rotary_dim / 2` frequencies each (the first
/// [`PRECOMPUTED_POSITIONS`] stored, later ones computed with the same f64 formula on use).
#[derive(Debug, Clone)]
pub struct RopeTable {
    pub style: RopeStyle,
    pub rotary_dim: usize,
    max_pos: usize,
    inv_freq: Vec<f64>,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl RopeTable {
    /// Builds the tables (angles computed in f64, as LLaDA's `rope_full_precision`).
    pub fn new(style: RopeStyle, rotary_dim: usize, theta: f32, max_pos: usize) -> Self {
        let half = rotary_dim / 2;
        let stored = max_pos.min(PRECOMPUTED_POSITIONS);
        let inv_freq: Vec<f64> =
            (0..half).map(|i| 1.0 / (theta as f64).powf((2 * i) as f64 / rotary_dim as f64)).collect();
        let mut cos = Vec::with_capacity(stored * half);
        let mut sin = Vec::with_capacity(stored * half);
        for p in 0..stored {
            for &f in &inv_freq {
                let a = p as f64 * f;
                cos.push(a.cos() as f32);
                sin.push(a.sin() as f32);
            }
        }
        RopeTable { style, rotary_dim, max_pos, inv_freq, cos, sin }
    }

    /// Largest position the table covers (exclusive).
    pub fn max_pos(&self) -> usize {
        self.max_pos
    }

    fn stored(&self, pos: usize) -> Option<(&[f32], &[f32])> {
        let half = self.rotary_dim / 2;
        let end = (pos + 1).checked_mul(half)?;
        if end > self.cos.len() {
            return None;
        }
        Some((&self.cos[pos * half..end], &self.sin[pos * half..end]))
    }

    /// Writes the `rotary_dim / 2` cosines and sines of position `pos` (graph inputs of NPU backends).
    pub fn cos_sin_into(&self, pos: usize, cos: &mut [f32], sin: &mut [f32]) {
        if let Some((c, s)) = self.stored(pos) {
            cos.copy_from_slice(c);
            sin.copy_from_slice(s);
            return;
        }
        for ((c, s), &f) in cos.iter_mut().zip(sin.iter_mut()).zip(&self.inv_freq) {
            let a = pos as f64 * f;
            *c = a.cos() as f32;
            *s = a.sin() as f32;
        }
    }

    /// Rotates one head vector (`head.len() == head_dim`) for position `pos`.
    pub fn apply(&self, head: &mut [f32], pos: usize) {
        match self.stored(pos) {
            Some((c, s)) => rotate(self.style, head, c, s),
            None => {
                let half = self.rotary_dim / 2;
                let (mut c, mut s) = (vec![0.0f32; half], vec![0.0f32; half]);
                self.cos_sin_into(pos, &mut c, &mut s);
                rotate(self.style, head, &c, &s);
            }
        }
    }

    /// Rotates every head of every row: `x` is `[rows, n_heads * head_dim]`.
    pub fn apply_rows(&self, x: &mut [f32], positions: &[usize], n_heads: usize, head_dim: usize) {
        self.apply_rows_with(Simd::detect(), x, positions, n_heads, head_dim)
    }

    /// [`RopeTable::apply_rows`] with the variant of `simd` (rows past the stored table take the
    /// per-head path).
    pub fn apply_rows_with(&self, simd: Simd, x: &mut [f32], positions: &[usize], n_heads: usize, head_dim: usize) {
        let width = n_heads * head_dim;
        let half = self.rotary_dim / 2;
        if half == 0 || width == 0 {
            return;
        }
        for (row, &pos) in x.chunks_exact_mut(width).zip(positions) {
            match self.stored(pos) {
                Some((c, s)) => rotate_row(simd, self.style == RopeStyle::RotateHalf, row, head_dim, c, s),
                None => {
                    for head in row.chunks_exact_mut(head_dim) {
                        self.apply(head, pos);
                    }
                }
            }
        }
    }
}

multiversion! {
    /// Rotates every `head_dim` head of one row by the angles of `c`/`s` (`rotary_dim / 2` each).
    fn rotate_row(half_style: bool, row: &mut [f32], head_dim: usize, c: &[f32], s: &[f32]) {
        let half = c.len();
        for head in row.chunks_exact_mut(head_dim) {
            if half_style {
                let (a, b) = head[..2 * half].split_at_mut(half);
                for i in 0..half {
                    let (x, y) = (a[i], b[i]);
                    a[i] = F::mul_add(x, c[i], -(y * s[i]));
                    b[i] = F::mul_add(y, c[i], x * s[i]);
                }
            } else {
                for (i, p) in head[..2 * half].chunks_exact_mut(2).enumerate() {
                    let (x, y) = (p[0], p[1]);
                    p[0] = F::mul_add(x, c[i], -(y * s[i]));
                    p[1] = F::mul_add(y, c[i], x * s[i]);
                }
            }
        }
    }
}

/// Rotates the pairs of one head by the angles whose cosines and sines are `c` and `s`.
fn rotate(style: RopeStyle, head: &mut [f32], c: &[f32], s: &[f32]) {
    let half = c.len();
    match style {
        RopeStyle::RotateHalf => {
            for i in 0..half {
                let (a, b) = (head[i], head[i + half]);
                head[i] = a * c[i] - b * s[i];
                head[i + half] = b * c[i] + a * s[i];
            }
        }
        RopeStyle::Interleaved => {
            for i in 0..half {
                let (a, b) = (head[2 * i], head[2 * i + 1]);
                head[2 * i] = a * c[i] - b * s[i];
                head[2 * i + 1] = b * c[i] + a * s[i];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_zero_is_identity_and_norm_is_kept() {
        let t = RopeTable::new(RopeStyle::RotateHalf, 8, 10000.0, 16);
        let mut h = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        let orig = h;
        t.apply(&mut h, 0);
        assert_eq!(h, orig);
        t.apply(&mut h, 7);
        let n0: f32 = orig.iter().map(|v| v * v).sum();
        let n1: f32 = h.iter().map(|v| v * v).sum();
        assert!((n0 - n1).abs() < 1e-3);
    }

    #[test]
    fn every_variant_matches_the_per_head_reference() {
        for style in [RopeStyle::RotateHalf, RopeStyle::Interleaved] {
            for (hd, rot) in [(8usize, 8usize), (48, 48), (128, 128), (64, 32)] {
                let t = RopeTable::new(style, rot, 10000.0, 64);
                let (nh, rows) = (3, 5);
                let x: Vec<f32> = (0..rows * nh * hd).map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0).collect();
                let pos: Vec<usize> = (0..rows).map(|r| r * 13 % 64).collect();
                let mut want = x.clone();
                for (row, &p) in want.chunks_exact_mut(nh * hd).zip(&pos) {
                    for head in row.chunks_exact_mut(hd) {
                        t.apply(head, p);
                    }
                }
                for simd in Simd::all_available() {
                    let mut got = x.clone();
                    t.apply_rows_with(simd, &mut got, &pos, nh, hd);
                    for (a, b) in got.iter().zip(&want) {
                        assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "{simd:?} {style:?} {hd}: {a} vs {b}");
                    }
                }
            }
        }
    }

    #[test]
    fn interleaved_equals_rotate_half_after_permutation() {
        // llama.cpp permutes q/k rows so that interleaved RoPE reproduces HF rotate-half.
        let d = 8;
        let a = RopeTable::new(RopeStyle::RotateHalf, d, 10000.0, 8);
        let b = RopeTable::new(RopeStyle::Interleaved, d, 10000.0, 8);
        let h: Vec<f32> = (0..d).map(|i| i as f32 * 0.3 - 1.0).collect();
        let mut x = h.clone();
        a.apply(&mut x, 5);
        // permuted: [h0, h4, h1, h5, ...]
        let mut p: Vec<f32> = (0..d / 2).flat_map(|i| [h[i], h[i + d / 2]]).collect();
        b.apply(&mut p, 5);
        for i in 0..d / 2 {
            assert!((x[i] - p[2 * i]).abs() < 1e-6 && (x[i + d / 2] - p[2 * i + 1]).abs() < 1e-6);
        }
    }

    #[test]
    fn positions_past_the_stored_table_match_the_formula() {
        // A huge claimed context allocates only the stored prefix; later positions agree with it.
        let big = RopeTable::new(RopeStyle::RotateHalf, 8, 10000.0, usize::MAX / 2);
        assert_eq!(big.max_pos(), usize::MAX / 2);
        let full = RopeTable::new(RopeStyle::RotateHalf, 8, 10000.0, PRECOMPUTED_POSITIONS + 8);
        let h: Vec<f32> = (0..8).map(|i| i as f32 - 3.5).collect();
        let (mut a, mut b) = (h.clone(), h.clone());
        big.apply(&mut a, PRECOMPUTED_POSITIONS + 3);
        let (mut c, mut s) = ([0.0f32; 4], [0.0f32; 4]);
        full.cos_sin_into(PRECOMPUTED_POSITIONS + 3, &mut c, &mut s);
        rotate(RopeStyle::RotateHalf, &mut b, &c, &s);
        assert_eq!(a, b);
        let mut d = h.clone();
        big.apply(&mut d, 5);
        let mut e = h;
        full.apply(&mut e, 5);
        assert_eq!(d, e);
    }
}
