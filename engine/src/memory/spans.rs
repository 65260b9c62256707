//! Wall-clock spans of the staging thread and the compute thread of a streamed forward
//! ([`super::weight_stream`]), and how much of one set ran while the other did.

use serde::Serialize;

/// A wall-clock interval relative to the start of the run, seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WallSpan {
    /// Start, seconds since the run began.
    pub start: f64,
    /// End, seconds since the run began.
    pub end: f64,
}

/// Total length of the intersection of two sets of intervals (each set internally non-overlapping).
pub(crate) fn overlap(a: &[(usize, WallSpan)], b: &[(usize, WallSpan)]) -> f64 {
    let mut total = 0.0;
    for (_, x) in a {
        for (_, y) in b {
            let s = x.start.max(y.start);
            let e = x.end.min(y.end);
            if e > s {
                total += e - s;
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_is_the_length_of_the_intersection() {
        let span = |start, end| (0, WallSpan { start, end });
        let copies = [span(0.0, 1.0), span(2.0, 3.0)];
        let compute = [span(0.5, 2.5)];
        assert!((overlap(&copies, &compute) - 1.0).abs() < 1e-12);
        assert_eq!(overlap(&copies, &[span(1.0, 2.0)]), 0.0);
    }
}
