//! Rotary position embeddings with precomputed tables.

use crate::model::config::RopeStyle;

/// cos/sin tables for positions `0..max_pos`, `rotary_dim / 2` frequencies each.
#[derive(Debug, Clone)]
pub struct RopeTable {
    pub style: RopeStyle,
    pub rotary_dim: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl RopeTable {
    /// Builds the tables (angles computed in f64, as LLaDA's `rope_full_precision`).
    pub fn new(style: RopeStyle, rotary_dim: usize, theta: f32, max_pos: usize) -> Self {
        let half = rotary_dim / 2;
        let mut cos = Vec::with_capacity(max_pos * half);
        let mut sin = Vec::with_capacity(max_pos * half);
        let inv_freq: Vec<f64> =
            (0..half).map(|i| 1.0 / (theta as f64).powf((2 * i) as f64 / rotary_dim as f64)).collect();
        for p in 0..max_pos {
            for &f in &inv_freq {
                let a = p as f64 * f;
                cos.push(a.cos() as f32);
                sin.push(a.sin() as f32);
            }
        }
        RopeTable { style, rotary_dim, cos, sin }
    }

    /// Largest position the table covers (exclusive).
    pub fn max_pos(&self) -> usize {
        self.cos.len() / (self.rotary_dim / 2).max(1)
    }

    /// The `rotary_dim / 2` cosines and sines of position `pos` (graph inputs of NPU backends).
    pub fn cos_sin(&self, pos: usize) -> (&[f32], &[f32]) {
        let half = self.rotary_dim / 2;
        (&self.cos[pos * half..(pos + 1) * half], &self.sin[pos * half..(pos + 1) * half])
    }

    /// Rotates one head vector (`head.len() == head_dim`) for position `pos`.
    pub fn apply(&self, head: &mut [f32], pos: usize) {
        let half = self.rotary_dim / 2;
        let c = &self.cos[pos * half..(pos + 1) * half];
        let s = &self.sin[pos * half..(pos + 1) * half];
        match self.style {
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

    /// Rotates every head of every row: `x` is `[rows, n_heads * head_dim]`.
    pub fn apply_rows(&self, x: &mut [f32], positions: &[usize], n_heads: usize, head_dim: usize) {
        let width = n_heads * head_dim;
        for (row, &pos) in x.chunks_exact_mut(width).zip(positions) {
            for head in row.chunks_exact_mut(head_dim) {
                self.apply(head, pos);
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
}
