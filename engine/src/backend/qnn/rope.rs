//! RoPE as graph data: `rope(x) = x ⊙ cos + (x · R) ⊙ sin` with a constant signed permutation
//! `R` (`x · R` is rotate-half, or the interleaved pair swap) and per-row `cos`/`sin` inputs
//! spread over the whole head (1 and 0 past `rotary_dim`). `x · R` is exact (one ±1 term per
//! output), so the lowering reproduces the CPU's `a·c − b·s` bit for bit.

use crate::kernels::rope::RopeTable;
use crate::model::config::RopeStyle;

/// The `[head_dim, head_dim]` matrix with `(x · R)[i]` = the value `x[i]`'s rotation partner
/// contributes: `-x[i+h]` / `x[i-h]` (rotate-half) or `-x[2i+1]` / `x[2i]` (interleaved).
pub fn rotation_matrix(style: RopeStyle, rotary_dim: usize, head_dim: usize) -> Vec<f32> {
    let half = rotary_dim / 2;
    let mut r = vec![0.0f32; head_dim * head_dim];
    // r[j * head_dim + i]: weight of input j in output i.
    for i in 0..half {
        let (a, b) = match style {
            RopeStyle::RotateHalf => (i, i + half),
            RopeStyle::Interleaved => (2 * i, 2 * i + 1),
        };
        r[b * head_dim + a] = -1.0;
        r[a * head_dim + b] = 1.0;
    }
    r
}

/// `cos` and `sin` over a whole head for each position (`positions.len() × head_dim` each).
pub fn cos_sin_rows(table: &RopeTable, positions: &[usize], head_dim: usize) -> (Vec<f32>, Vec<f32>) {
    let half = table.rotary_dim / 2;
    let mut cos = vec![1.0f32; positions.len() * head_dim];
    let mut sin = vec![0.0f32; positions.len() * head_dim];
    for (r, &p) in positions.iter().enumerate() {
        let (mut c, mut s) = (vec![0.0f32; half], vec![0.0f32; half]);
        table.cos_sin_into(p, &mut c, &mut s);
        let (cr, sr) = (&mut cos[r * head_dim..(r + 1) * head_dim], &mut sin[r * head_dim..(r + 1) * head_dim]);
        for i in 0..half {
            let (a, b) = match table.style {
                RopeStyle::RotateHalf => (i, i + half),
                RopeStyle::Interleaved => (2 * i, 2 * i + 1),
            };
            cr[a] = c[i];
            cr[b] = c[i];
            sr[a] = s[i];
            sr[b] = s[i];
        }
    }
    (cos, sin)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The graph formula on the CPU equals the engine's RoPE kernel exactly, both styles,
    /// including partial rotary (dims past `rotary_dim` pass through).
    #[test]
    fn graph_formula_equals_kernel_bit_for_bit() {
        for style in [RopeStyle::RotateHalf, RopeStyle::Interleaved] {
            for (rot, hd) in [(8, 8), (4, 8)] {
                let table = RopeTable::new(style, rot, 10000.0, 32);
                let r = rotation_matrix(style, rot, hd);
                let x: Vec<f32> = (0..hd).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
                let (cos, sin) = cos_sin_rows(&table, &[17], hd);
                let xr: Vec<f32> = (0..hd).map(|i| (0..hd).map(|j| x[j] * r[j * hd + i]).sum()).collect();
                let got: Vec<f32> = (0..hd).map(|i| x[i] * cos[i] + xr[i] * sin[i]).collect();
                let mut want = x.clone();
                table.apply(&mut want, 17);
                assert_eq!(got, want, "{style:?} rot {rot} hd {hd}");
            }
        }
    }
}
