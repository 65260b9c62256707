//! Per-forward graph inputs, built on our side and padded to the bucket: embeddings of the block,
//! RoPE tables of its positions, the additive attention mask and the cached K/V rows.
//!
//! Padding rules: padded block rows are zero embeddings at position 0 whose outputs are dropped;
//! padded cache rows are zeros. Real queries never see a padded key (mask), and padded queries see
//! every key (so their softmax row is finite; nothing reads it).

use super::buckets::Bucket;
use super::quantize::encode;
use super::rope::cos_sin_rows;
use crate::kernels::rope::RopeTable;
use crate::model::{KvCache, Transformer};
use qnn_sys::DType;

/// Additive mask value for hidden keys: the most negative finite fp16, so it stays finite in
/// A16 graphs and still underflows `exp` to exactly 0.
pub const MASKED: f32 = -65504.0;

/// One forward's shape: the block and the cached positions it attends to.
pub struct ForwardShape<'a> {
    /// Absolute positions of the block rows.
    pub positions: &'a [usize],
    /// Cached positions the block attends to, ascending (block positions excluded).
    pub cached: &'a [usize],
    /// The bucket the forward runs in.
    pub bucket: Bucket,
}

/// `[T, hidden]` embeddings of `tokens`, zero-padded to the bucket.
pub fn embeddings(model: &Transformer, tokens: &[u32], bucket_tokens: usize, dtype: DType) -> Vec<u8> {
    let h = model.config.hidden;
    let mut x = vec![0.0f32; bucket_tokens * h];
    for (row, &t) in x.chunks_exact_mut(h).zip(tokens) {
        model.weights.embedding.row_into(t as usize, row);
    }
    encode(&x, dtype)
}

/// `[T, 1, head_dim]` cos and sin of the block positions (padded rows at position 0).
pub fn rope_inputs(table: &RopeTable, shape: &ForwardShape<'_>, head_dim: usize, dtype: DType) -> (Vec<u8>, Vec<u8>) {
    let mut pos = shape.positions.to_vec();
    pos.resize(shape.bucket.tokens, 0);
    let (c, s) = cos_sin_rows(table, &pos, head_dim);
    (encode(&c, dtype), encode(&s, dtype))
}

/// `[T, Cc + T]` additive mask: key columns are the cached rows (padded to `Cc`) then the block
/// rows (padded to `T`). With `causal`, key `j` is visible to query `i` iff `pos_j <= pos_i`.
pub fn mask(shape: &ForwardShape<'_>, causal: bool) -> Vec<f32> {
    let Bucket { tokens: t, cached: cc } = shape.bucket;
    let n = shape.positions.len();
    let width = cc + t;
    let mut m = vec![0.0f32; t * width];
    for (i, row) in m.chunks_exact_mut(width).enumerate().take(n) {
        let qp = shape.positions[i];
        let visible = |kp: usize| !causal || kp <= qp;
        for (j, v) in row.iter_mut().enumerate() {
            let key = if j < cc { shape.cached.get(j) } else { shape.positions.get(j - cc).filter(|_| j - cc < n) };
            *v = match key {
                Some(&kp) if visible(kp) => 0.0,
                _ => MASKED,
            };
        }
    }
    m
}

/// Layer `layer`'s cached K and V rows at `cached` positions, zero-padded to `rows`.
pub fn cached_kv(cache: &KvCache, layer: usize, cached: &[usize], rows: usize, dtype: DType) -> (Vec<u8>, Vec<u8>) {
    let d = cache.kv_dim();
    let mut k = vec![0.0f32; rows * d];
    let mut v = vec![0.0f32; rows * d];
    for (i, &p) in cached.iter().enumerate().take(rows) {
        k[i * d..(i + 1) * d].copy_from_slice(&cache.k_row(layer, p));
        v[i * d..(i + 1) * d].copy_from_slice(&cache.v_row(layer, p));
    }
    (encode(&k, dtype), encode(&v, dtype))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_hides_padding_and_future_keys() {
        let shape = ForwardShape { positions: &[5, 6], cached: &[0, 3], bucket: Bucket { tokens: 4, cached: 4 } };
        let m = mask(&shape, true);
        let row = |i: usize| &m[i * 8..(i + 1) * 8];
        let (o, x) = (0.0, MASKED);
        // cached 0, 3, pad, pad | block 5, 6, pad, pad
        assert_eq!(row(0), &[o, o, x, x, o, x, x, x]);
        assert_eq!(row(1), &[o, o, x, x, o, o, x, x]);
        // Padded queries see everything (finite softmax).
        assert_eq!(row(2), &[o; 8]);
        let b = mask(&shape, false);
        assert_eq!(&b[..8], &[o, o, x, x, o, o, x, x]);
        // Without a cache bucket the mask is just the block.
        let shape = ForwardShape { positions: &[2, 1], cached: &[], bucket: Bucket { tokens: 2, cached: 0 } };
        assert_eq!(mask(&shape, true), vec![o, o, x, o]);
    }
}
