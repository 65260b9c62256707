//! Format-blind mutations of a byte string, and [`ByteSource`], which turns fuzz bytes into
//! structured choices for the targets whose input is not a file.

use super::rng::Rng;

/// Integers that break size arithmetic: zero, one, sign and width boundaries, huge powers of two.
pub const BOUNDARY_U64: &[u64] = &[
    0,
    1,
    2,
    7,
    0x7f,
    0xff,
    0xffff,
    1 << 31,
    (1 << 31) - 1,
    u32::MAX as u64,
    1 << 32,
    1 << 40,
    1 << 48,
    1 << 62,
    1 << 63,
    i64::MAX as u64,
    u64::MAX,
    u64::MAX - 1,
    u64::MAX - 31,
];

/// Inputs never grow beyond this (keeps each execution fast; hostile sizes come from fields).
pub const MAX_INPUT: usize = 4 << 20;

/// Applies 1–4 random format-blind mutations; `donors` supplies splice material.
pub fn mutate(data: &mut Vec<u8>, rng: &mut Rng, donors: &[Vec<u8>]) {
    for _ in 0..rng.range(1, 4) {
        mutate_once(data, rng, donors);
    }
    data.truncate(MAX_INPUT);
}

fn mutate_once(data: &mut Vec<u8>, rng: &mut Rng, donors: &[Vec<u8>]) {
    let len = data.len();
    match rng.below(10) {
        0 if len > 0 => {
            let i = rng.below(len);
            data[i] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let i = rng.below(len);
            data[i] = *rng.pick(&[0, 1, 0x7f, 0x80, 0xff, b'"', b'{', b'}', b'-', b'9']);
        }
        2 => {
            let at = rng.below(len + 1);
            data.truncate(at);
        }
        3 if len > 0 => {
            let start = rng.below(len);
            let n = rng.range(1, (len - start).min(256));
            data.drain(start..start + n);
        }
        4 => {
            let at = rng.below(len + 1);
            let n = rng.range(1, 64);
            let fill: Vec<u8> = (0..n).map(|_| rng.byte()).collect();
            data.splice(at..at, fill);
        }
        5 if len > 1 => {
            // Duplicate a range elsewhere (repeats structures: keys, tensor infos).
            let start = rng.below(len);
            let n = rng.range(1, (len - start).min(512));
            let chunk = data[start..start + n].to_vec();
            let at = rng.below(len + 1);
            data.splice(at..at, chunk);
        }
        6 | 7 if len >= 4 => overwrite_int(data, rng),
        8 if !donors.is_empty() => {
            let donor = rng.pick(donors);
            if !donor.is_empty() {
                let from = rng.below(donor.len());
                let n = rng.range(1, (donor.len() - from).min(1024));
                let at = rng.below(len + 1);
                let end = (at + n).min(len);
                data.splice(at..end, donor[from..from + n].iter().copied());
            }
        }
        _ => {
            if len > 0 {
                let i = rng.below(len);
                data[i] = rng.byte();
            }
        }
    }
}

/// Overwrites a little-endian u32 or u64 at a (usually aligned) offset with a boundary value or
/// a value just past the input length (lengths and offsets that point outside the file).
pub fn overwrite_int(data: &mut [u8], rng: &mut Rng) {
    let width = if rng.chance(1, 2) { 8 } else { 4 };
    if data.len() < width {
        return;
    }
    let mut at = rng.below(data.len() - width + 1);
    if rng.chance(3, 4) {
        at -= at % 4;
    }
    let len = data.len() as u64;
    let v = match rng.below(4) {
        0 => len + rng.below(64) as u64,
        1 => len.saturating_sub(rng.below(16) as u64),
        _ => *rng.pick(BOUNDARY_U64),
    };
    if width == 8 {
        data[at..at + 8].copy_from_slice(&v.to_le_bytes());
    } else {
        data[at..at + 4].copy_from_slice(&(v as u32).to_le_bytes());
    }
}

/// Reads structured choices from fuzz bytes; past the end every read is zero, so any input
/// (including the empty one) decodes.
#[derive(Debug)]
pub struct ByteSource<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> ByteSource<'a> {
    /// A reader over `data`.
    pub fn new(data: &'a [u8]) -> Self {
        ByteSource { data, pos: 0 }
    }
    /// The next byte (0 past the end).
    pub fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    /// A little-endian u32.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    /// A little-endian u64.
    pub fn u64(&mut self) -> u64 {
        (self.u32() as u64) | ((self.u32() as u64) << 32)
    }
    /// An index in `0..n` (0 when `n` is 0).
    pub fn index(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            self.u8() as usize % n
        }
    }
    /// One element of a non-empty table.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.index(items.len())]
    }
    /// True with probability about `1 / n` (`n` > 0).
    pub fn one_in(&mut self, n: u8) -> bool {
        self.u8().is_multiple_of(n.max(1))
    }
    /// Up to `n` raw bytes (fewer near the end).
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let start = self.pos.min(self.data.len());
        let end = start.saturating_add(n).min(self.data.len());
        self.pos = self.pos.saturating_add(n);
        &self.data[start..end]
    }
    /// Whether unread bytes remain.
    pub fn has_more(&self) -> bool {
        self.pos < self.data.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutation_never_panics_on_tiny_inputs() {
        let mut rng = Rng::new(3);
        for n in 0..8 {
            for _ in 0..200 {
                let mut d = vec![7u8; n];
                mutate(&mut d, &mut rng, &[vec![1, 2, 3]]);
            }
        }
        let mut s = ByteSource::new(&[5]);
        assert_eq!((s.u8(), s.u8(), s.index(3), s.take(4).len()), (5, 0, 0, 0));
    }
}
