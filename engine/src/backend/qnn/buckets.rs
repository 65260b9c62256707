//! Static shape buckets: QNN graphs have fixed shapes, so a forward of `n` block tokens over `c`
//! cached positions runs the graph of the smallest (tokens ≥ n, cached ≥ c) bucket, padded.

use crate::error::{EngineError, Result};
use crate::model::ModelConfig;

/// One compiled shape: `tokens` block rows attending to `cached` cache rows plus themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bucket {
    /// Block rows (queries and fresh K/V).
    pub tokens: usize,
    /// Cached K/V rows passed in as graph inputs (0 = a graph without cache inputs).
    pub cached: usize,
}

impl Bucket {
    /// Attention context length of the graph (cached rows, then block rows).
    pub fn context(&self) -> usize {
        self.cached + self.tokens
    }
}

/// The bucket sizes graphs are compiled for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketPlan {
    tokens: Vec<usize>,
    cached: Vec<usize>,
}

impl BucketPlan {
    /// Sorted, de-duplicated buckets. Token buckets must be ≥ 1; a 0 cached bucket is implied
    /// (forwards without cache use graphs without cache inputs).
    pub fn new(tokens: &[usize], cached: &[usize]) -> Result<Self> {
        let mut t: Vec<usize> = tokens.to_vec();
        t.sort_unstable();
        t.dedup();
        if t.is_empty() || t[0] == 0 {
            return Err(EngineError::InvalidRequest(format!(
                "QNN token buckets must be non-empty and ≥ 1, got {tokens:?}"
            )));
        }
        let mut c: Vec<usize> = cached.iter().copied().filter(|&c| c > 0).collect();
        c.sort_unstable();
        c.dedup();
        Ok(BucketPlan { tokens: t, cached: c })
    }

    /// Default buckets for `cfg`: tokens 1, 8, 32, 128, 512, … and cached 64, 256, 1024, …
    /// (×4 steps, like the AR-1/AR-32/AR-128 graphs of phone runtimes), each capped by `max_seq`.
    pub fn for_config(cfg: &ModelConfig) -> Self {
        let ladder = |first: usize, factor: usize| -> Vec<usize> {
            let mut v = Vec::new();
            let mut b = first;
            while b < cfg.max_seq {
                v.push(b);
                b = if b == 1 { 8 } else { b * factor };
            }
            v.push(cfg.max_seq.max(1));
            v
        };
        let tokens = ladder(1, 4);
        let cached = ladder(64, 4);
        // Both ladders are non-empty and ≥ 1, so `new` cannot fail here.
        BucketPlan::new(&tokens, &cached).unwrap_or(BucketPlan { tokens: vec![1], cached: Vec::new() })
    }

    /// Token bucket sizes, ascending.
    pub fn token_buckets(&self) -> &[usize] {
        &self.tokens
    }

    /// Cached bucket sizes (without the implied 0), ascending.
    pub fn cached_buckets(&self) -> &[usize] {
        &self.cached
    }

    /// The bucket for `tokens` block rows over `cached` cache rows.
    pub fn select(&self, tokens: usize, cached: usize) -> Result<Bucket> {
        let t = self.rows(tokens)?;
        let c = if cached == 0 {
            0
        } else {
            *self.cached.iter().find(|&&c| c >= cached).ok_or_else(|| {
                EngineError::InvalidRequest(format!(
                    "{cached} cached positions exceed the largest QNN context bucket {:?}",
                    self.cached.last()
                ))
            })?
        };
        Ok(Bucket { tokens: t, cached: c })
    }

    /// The row bucket for `rows` rows (LM head graphs reuse the token buckets).
    pub fn rows(&self, rows: usize) -> Result<usize> {
        self.tokens.iter().copied().find(|&t| t >= rows.max(1)).ok_or_else(|| {
            EngineError::InvalidRequest(format!(
                "a block of {rows} tokens exceeds the largest QNN token bucket {}",
                self.tokens.last().copied().unwrap_or(0)
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_smallest_fitting_bucket() {
        let p = BucketPlan::new(&[32, 1, 8, 8], &[0, 256, 64]).unwrap();
        assert_eq!(p.token_buckets(), &[1, 8, 32]);
        assert_eq!(p.cached_buckets(), &[64, 256]);
        assert_eq!(p.select(1, 0).unwrap(), Bucket { tokens: 1, cached: 0 });
        assert_eq!(p.select(9, 1).unwrap(), Bucket { tokens: 32, cached: 64 });
        assert_eq!(p.select(8, 64).unwrap(), Bucket { tokens: 8, cached: 64 });
        assert_eq!(p.select(2, 65).unwrap(), Bucket { tokens: 8, cached: 256 });
        assert_eq!(p.select(2, 65).unwrap().context(), 264);
        assert!(matches!(p.select(33, 0), Err(EngineError::InvalidRequest(_))));
        assert!(matches!(p.select(1, 257), Err(EngineError::InvalidRequest(_))));
        assert_eq!(p.rows(0).unwrap(), 1);
        assert!(BucketPlan::new(&[], &[]).is_err());
        assert!(BucketPlan::new(&[0, 4], &[]).is_err());
    }

    #[test]
    fn default_ladders_stop_at_max_seq() {
        let mut cfg: ModelConfig = serde_json::from_value(serde_json::json!({
            "arch": "llada", "hidden": 8, "n_layers": 1, "n_heads": 1, "n_kv_heads": 1, "head_dim": 8,
            "ffn": 8, "vocab": 8, "max_seq": 256, "rope_theta": 1e4, "rope_style": "RotateHalf",
            "rotary_dim": 8, "rms_eps": 1e-5, "qkv_bias": false, "qk_norm": false, "moe": null,
            "causal": false, "shift_logits": false, "tie_embeddings": false, "mask_token_id": 7,
            "bos_token_id": null, "eos_token_id": null, "eot_token_id": null, "pad_token_id": null
        }))
        .unwrap();
        let p = BucketPlan::for_config(&cfg);
        assert_eq!(p.token_buckets(), &[1, 8, 32, 128, 256]);
        assert_eq!(p.cached_buckets(), &[64, 256]);
        cfg.max_seq = 40;
        let p = BucketPlan::for_config(&cfg);
        assert_eq!((p.token_buckets(), p.cached_buckets()), (&[1, 8, 32, 40][..], &[40][..]));
    }
}
