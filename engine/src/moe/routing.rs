//! The router's decision: softmax over expert scores, top-k per token, mixing weights.

use crate::kernels::activation::softmax_inplace;

/// One token routed to one expert.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Assignment {
    /// Row of the token in the block.
    pub token: usize,
    /// Mixing weight of this expert's output for that token.
    pub weight: f32,
}

/// Which tokens go to which expert, for one layer and one block.
#[derive(Debug, Clone, PartialEq)]
pub struct Routing {
    /// Per expert, its tokens in ascending row order.
    pub per_expert: Vec<Vec<Assignment>>,
    /// Tokens in the block.
    pub tokens: usize,
    /// Experts chosen per token.
    pub top_k: usize,
}

impl Routing {
    /// Routes `n` tokens from raw router scores (`n × n_experts`, overwritten with the softmax).
    /// Ties go to the lower expert index; with `norm_topk_prob` the top-k weights sum to one.
    pub fn from_scores(scores: &mut [f32], n: usize, n_experts: usize, top_k: usize, norm_topk_prob: bool) -> Self {
        let top_k = top_k.min(n_experts);
        let mut per_expert: Vec<Vec<Assignment>> = vec![Vec::new(); n_experts];
        let mut idx: Vec<usize> = Vec::with_capacity(n_experts);
        for (t, s) in scores.chunks_exact_mut(n_experts).take(n).enumerate() {
            softmax_inplace(s);
            idx.clear();
            idx.extend(0..n_experts);
            idx.sort_by(|&a, &b| s[b].total_cmp(&s[a]).then(a.cmp(&b)));
            let top = &idx[..top_k];
            let norm: f32 = if norm_topk_prob { top.iter().map(|&i| s[i]).sum() } else { 1.0 };
            for &e in top {
                per_expert[e].push(Assignment { token: t, weight: s[e] / norm });
            }
        }
        Routing { per_expert, tokens: n, top_k }
    }

    /// Routed (token, expert) pairs.
    pub fn pairs(&self) -> usize {
        self.per_expert.iter().map(Vec::len).sum()
    }

    /// Tokens per expert.
    pub fn counts(&self) -> Vec<usize> {
        self.per_expert.iter().map(Vec::len).collect()
    }
}

/// Saliency of each token: the L2 norm of its row of `x` (`n × h`). Tokens with a small residual
/// activation change least when an expert's contribution is left out, so they are dropped first.
pub fn saliency(x: &[f32], n: usize, h: usize) -> Vec<f32> {
    x.chunks_exact(h).take(n).map(|r| r.iter().map(|v| v * v).sum::<f32>().sqrt()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_with_and_without_renormalisation() {
        // Two tokens, three experts.
        let raw = vec![2.0f32, 1.0, 0.0, 0.0, 0.0, 3.0];
        let mut s = raw.clone();
        let r = Routing::from_scores(&mut s, 2, 3, 2, false);
        assert_eq!(r.counts(), vec![2, 1, 1]);
        assert_eq!(r.pairs(), 4);
        let w0: f32 = r.per_expert.iter().flatten().filter(|a| a.token == 0).map(|a| a.weight).sum();
        assert!(w0 < 1.0 && w0 > 0.8, "{w0}");
        let mut s = raw;
        let r = Routing::from_scores(&mut s, 2, 3, 2, true);
        let w0: f32 = r.per_expert.iter().flatten().filter(|a| a.token == 0).map(|a| a.weight).sum();
        assert!((w0 - 1.0).abs() < 1e-6);
        // Token 1: expert 2 first, then a tie between 0 and 1 goes to 0.
        assert!(r.per_expert[0].iter().any(|a| a.token == 1));
        assert!(!r.per_expert[1].iter().any(|a| a.token == 1));
    }

    #[test]
    fn saliency_is_row_norm() {
        let x = [3.0f32, 4.0, 0.0, 1.0];
        assert_eq!(saliency(&x, 2, 2), vec![5.0, 1.0]);
    }
}
