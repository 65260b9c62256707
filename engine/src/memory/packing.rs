//! Interval packing of short-lived buffers into one arena: buffers whose lifetimes overlap get disjoint
//! byte ranges, buffers that are never live together may share bytes. First-fit-decreasing by size
//! keeps the arena close to the peak of live bytes (little fragmentation).

/// A buffer to place: its size and the inclusive operator interval during which it is live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackItem {
    /// Bytes to reserve.
    pub bytes: u64,
    /// First operator that touches it.
    pub first: usize,
    /// Last operator that touches it.
    pub last: usize,
}

impl PackItem {
    /// Whether two items are live at the same time.
    pub fn overlaps_in_time(&self, other: &PackItem) -> bool {
        self.first <= other.last && other.first <= self.last
    }
}

/// Where each item went and how large the arena must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packing {
    /// Byte offset of item i in the arena.
    pub offsets: Vec<u64>,
    /// Arena size (end of the highest placed item, aligned).
    pub arena_bytes: u64,
    /// Largest sum of bytes live at one operator (the lower bound any packing must reach).
    pub peak_live_bytes: u64,
}

/// Rounds `x` up to a multiple of `align` (`align` ≥ 1).
pub fn align_up(x: u64, align: u64) -> u64 {
    let a = align.max(1);
    x.div_ceil(a) * a
}

/// Packs `items` with every offset a multiple of `align`.
pub fn pack_by_lifetime(items: &[PackItem], align: u64) -> Packing {
    let mut order: Vec<usize> = (0..items.len()).collect();
    // Largest first, then earliest: big buffers claim low offsets, small ones fill the gaps.
    order.sort_by(|&a, &b| items[b].bytes.cmp(&items[a].bytes).then(items[a].first.cmp(&items[b].first)));
    let mut offsets = vec![0u64; items.len()];
    let mut placed: Vec<usize> = Vec::with_capacity(items.len());
    let mut arena = 0u64;
    for &i in &order {
        let it = items[i];
        let size = align_up(it.bytes, align);
        // Byte ranges already taken by buffers live at the same time, by offset.
        let mut busy: Vec<(u64, u64)> = placed
            .iter()
            .filter(|&&j| items[j].overlaps_in_time(&it))
            .map(|&j| (offsets[j], offsets[j] + align_up(items[j].bytes, align)))
            .collect();
        busy.sort_unstable();
        let mut off = 0u64;
        for (s, e) in busy {
            if off + size <= s {
                break;
            }
            off = off.max(e);
        }
        offsets[i] = off;
        arena = arena.max(off + size);
        placed.push(i);
    }
    Packing { offsets, arena_bytes: arena, peak_live_bytes: peak_live(items, align) }
}

fn peak_live(items: &[PackItem], align: u64) -> u64 {
    let Some(last) = items.iter().map(|i| i.last).max() else { return 0 };
    let mut delta = vec![0i128; last + 2];
    for it in items {
        let b = align_up(it.bytes, align) as i128;
        delta[it.first] += b;
        delta[it.last + 1] -= b;
    }
    let mut cur = 0i128;
    let mut peak = 0i128;
    for d in delta {
        cur += d;
        peak = peak.max(cur);
    }
    peak as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn disjoint_lifetimes_share_bytes() {
        let items = [PackItem { bytes: 100, first: 0, last: 1 }, PackItem { bytes: 100, first: 2, last: 3 }];
        let p = pack_by_lifetime(&items, 1);
        assert_eq!(p.offsets, vec![0, 0]);
        assert_eq!(p.arena_bytes, 100);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn live_overlapping_buffers_never_share_bytes(
            raw in proptest::collection::vec((1u64..10_000, 0usize..40, 0usize..10), 1..60),
            align in prop_oneof![Just(1u64), Just(64), Just(4096)],
        ) {
            let items: Vec<PackItem> = raw.iter().map(|&(b, s, l)| PackItem { bytes: b, first: s, last: s + l }).collect();
            let p = pack_by_lifetime(&items, align);
            for i in 0..items.len() {
                prop_assert_eq!(p.offsets[i] % align, 0);
                prop_assert!(p.offsets[i] + items[i].bytes <= p.arena_bytes);
                for j in i + 1..items.len() {
                    if items[i].overlaps_in_time(&items[j]) {
                        let (a0, a1) = (p.offsets[i], p.offsets[i] + items[i].bytes);
                        let (b0, b1) = (p.offsets[j], p.offsets[j] + items[j].bytes);
                        prop_assert!(a1 <= b0 || b1 <= a0, "items {} and {} overlap", i, j);
                    }
                }
            }
            let total: u64 = items.iter().map(|i| align_up(i.bytes, align)).sum();
            prop_assert!(p.arena_bytes <= total);
            prop_assert!(p.arena_bytes >= p.peak_live_bytes);
        }
    }
}
