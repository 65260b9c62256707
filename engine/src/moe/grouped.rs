//! Grouped expert execution: the experts of a group share one unified input buffer (each expert's
//! segment padded to its static capacity) and run as one launch, instead of one launch per expert.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::routing::Assignment;
use super::Expert;
use crate::kernels::activation::swiglu_inplace;

/// A partition of a layer's experts into groups, each run as one launch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpertGroups {
    pub groups: Vec<Vec<usize>>,
}

impl ExpertGroups {
    /// Experts sorted by popularity (most popular first, ties by index) and cut into groups of
    /// `size`, so experts with similar load (similar capacity tiers) share a graph.
    pub fn by_popularity(popularity: &[f64], size: usize) -> Self {
        let mut order: Vec<usize> = (0..popularity.len()).collect();
        order.sort_by(|&a, &b| popularity[b].total_cmp(&popularity[a]).then(a.cmp(&b)));
        ExpertGroups { groups: order.chunks(size.max(1)).map(<[usize]>::to_vec).collect() }
    }

    /// One expert per group: what naive per-expert dispatch launches.
    pub fn each(n_experts: usize) -> Self {
        ExpertGroups { groups: (0..n_experts).map(|e| vec![e]).collect() }
    }

    /// Whether every expert `0..n_experts` appears exactly once.
    pub fn is_partition_of(&self, n_experts: usize) -> bool {
        let mut seen = vec![false; n_experts];
        for &e in self.groups.iter().flatten() {
            if e >= n_experts || seen[e] {
                return false;
            }
            seen[e] = true;
        }
        seen.into_iter().all(|s| s)
    }
}

/// `y = down(silu(gate(x)) * up(x))` over `m` rows; returns FLOPs.
pub fn swiglu_rows(ex: &Expert, x: &[f32], m: usize, y: &mut [f32]) -> f64 {
    let (f, h) = (ex.gate.n_out, ex.gate.k_in);
    let (mut g, mut u) = (vec![0.0f32; m * f], vec![0.0f32; m * f]);
    ex.gate.forward(x, m, &mut g);
    ex.up.forward(x, m, &mut u);
    swiglu_inplace(&mut g, &u);
    ex.down.forward(&g, m, y);
    2.0 * (3 * m * h * f) as f64
}

/// As [`swiglu_rows`], each product on the calling thread (one tile of a grouped launch).
pub(crate) fn swiglu_rows_serial(ex: &Expert, x: &[f32], m: usize, y: &mut [f32]) -> f64 {
    let (f, h) = (ex.gate.n_out, ex.gate.k_in);
    let (mut g, mut u) = (vec![0.0f32; m * f], vec![0.0f32; m * f]);
    ex.gate.forward_serial(x, m, &mut g);
    ex.up.forward_serial(x, m, &mut u);
    swiglu_inplace(&mut g, &u);
    ex.down.forward_serial(&g, m, y);
    2.0 * (3 * m * h * f) as f64
}

/// Rows of one tile of a grouped launch.
const TILE_ROWS: usize = 16;

/// One expert's slice of a group's unified buffer.
struct Segment<'a> {
    expert: usize,
    /// Rows reserved (the static capacity).
    rows: usize,
    routed: &'a [Assignment],
}

/// Runs one group as one launch: gathers every member's tokens into one buffer (each segment
/// padded to its capacity with zero rows), runs the members in one parallel region, and adds the
/// weighted outputs into `x`. Returns the FLOPs computed (the used rows: see the padding note).
pub fn run_group(
    experts: &[Expert],
    group: &[usize],
    capacities: &[usize],
    routed: &[Vec<Assignment>],
    xn: &[f32],
    h: usize,
    x: &mut [f32],
) -> f64 {
    let segments: Vec<Segment> = group
        .iter()
        .map(|&e| {
            let list = routed.get(e).map_or(&[][..], Vec::as_slice);
            let cap = capacities.get(e).copied().unwrap_or(list.len()).max(list.len());
            Segment { expert: e, rows: cap, routed: list }
        })
        .collect();
    let total: usize = segments.iter().map(|s| s.rows).sum();
    if total == 0 || segments.iter().all(|s| s.routed.is_empty()) {
        return 0.0;
    }
    let mut input = vec![0.0f32; total * h];
    let mut output = vec![0.0f32; total * h];
    {
        let mut rest = input.as_mut_slice();
        for s in &segments {
            let (seg, tail) = rest.split_at_mut(s.rows * h);
            for (dst, a) in seg.chunks_exact_mut(h).zip(s.routed) {
                dst.copy_from_slice(&xn[a.token * h..(a.token + 1) * h]);
            }
            rest = tail;
        }
    }
    // One parallel region for the whole group: every member's rows cut into tiles of at most
    // TILE_ROWS, each tile a whole SwiGLU on one worker (no fork/join per matrix product).
    let mut work: Vec<(usize, &[f32], &mut [f32])> = Vec::with_capacity(total.div_ceil(TILE_ROWS) + segments.len());
    {
        let (mut inp, mut out) = (input.as_slice(), output.as_mut_slice());
        for s in &segments {
            let (i, it) = inp.split_at(s.rows * h);
            let (o, ot) = out.split_at_mut(s.rows * h);
            // Padding rows are part of the static shape an NPU graph computes; on the CPU they
            // hold zeros whose outputs are never read, so only the used rows are computed here.
            let used = s.routed.len() * h;
            for (ic, oc) in i[..used].chunks(TILE_ROWS * h).zip(o[..used].chunks_mut(TILE_ROWS * h)) {
                work.push((s.expert, ic, oc));
            }
            inp = it;
            out = ot;
        }
    }
    let flops: f64 = work.par_iter_mut().map(|(e, i, o)| swiglu_rows_serial(&experts[*e], i, i.len() / h, o)).sum();
    let mut offset = 0;
    for s in &segments {
        let seg = &output[offset * h..(offset + s.rows) * h];
        for (row, a) in seg.chunks_exact(h).zip(s.routed) {
            for (xi, yi) in x[a.token * h..(a.token + 1) * h].iter_mut().zip(row) {
                *xi += a.weight * yi;
            }
        }
        offset += s.rows;
    }
    flops
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_follow_popularity_and_partition() {
        let g = ExpertGroups::by_popularity(&[0.1, 0.4, 0.2, 0.3], 2);
        assert_eq!(g.groups, vec![vec![1, 3], vec![2, 0]]);
        assert!(g.is_partition_of(4));
        assert!(!g.is_partition_of(5));
        assert!(ExpertGroups::each(3).is_partition_of(3));
        assert!(!ExpertGroups { groups: vec![vec![0, 0]] }.is_partition_of(1));
    }
}
