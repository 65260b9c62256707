//! Compact encoding of step traces: a chunk of consecutive [`StepFrame`]s as varint-packed
//! deltas, deflate-compressed. Positions inside a frame are delta-coded, so a typical frame
//! (a few changes) takes ~10 bytes per change before compression. A change's flag byte holds its
//! state (bits 0-1), speculative (2), revised (3) and refused draft (4: the draft's token follows
//! as a varint); chunks written before bit 4 existed decode unchanged.

use std::io::{Read, Write};

use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use flate2::Compression;
use unmask_engine::decode::{StepFrame, TokenChange, TokenState};

use crate::error::{Result, StoreError};

/// Name of this encoding in `trace_chunks.encoding`.
pub const FRAMES_V1: &str = "frames-v1+deflate";

/// Refuse chunks that would decompress to more than this (corrupt or hostile data).
const MAX_CHUNK_BYTES: u64 = 256 * 1024 * 1024;

/// Encodes and compresses `frames` into one chunk.
pub fn encode_chunk(frames: &[StepFrame]) -> Vec<u8> {
    let mut raw = Vec::with_capacity(64 + frames.len() * 48);
    put_varint(&mut raw, frames.len() as u64);
    for f in frames {
        encode_frame(&mut raw, f);
    }
    let mut enc = DeflateEncoder::new(Vec::with_capacity(raw.len() / 2 + 16), Compression::new(6));
    // Writing into a Vec cannot fail.
    let _ = enc.write_all(&raw);
    enc.finish().unwrap_or_default()
}

/// Decompresses and decodes a chunk written by [`encode_chunk`].
pub fn decode_chunk(data: &[u8]) -> Result<Vec<StepFrame>> {
    let mut raw = Vec::new();
    DeflateDecoder::new(data)
        .take(MAX_CHUNK_BYTES + 1)
        .read_to_end(&mut raw)
        .map_err(|e| StoreError::corrupt("trace chunk", format!("deflate: {e}")))?;
    if raw.len() as u64 > MAX_CHUNK_BYTES {
        return Err(StoreError::corrupt("trace chunk", "decompresses to more than 256 MiB"));
    }
    let mut r = Reader { buf: &raw, at: 0 };
    let n = r.varint()? as usize;
    // Each frame takes at least 15 bytes, so a huge count is corruption, not a big allocation.
    if n > raw.len() / 15 + 1 {
        return Err(StoreError::corrupt("trace chunk", format!("{n} frames in {} bytes", raw.len())));
    }
    let mut frames = Vec::with_capacity(n);
    for _ in 0..n {
        frames.push(decode_frame(&mut r)?);
    }
    if r.at != raw.len() {
        return Err(StoreError::corrupt("trace chunk", "trailing bytes after the last frame"));
    }
    Ok(frames)
}

fn encode_frame(out: &mut Vec<u8>, f: &StepFrame) {
    put_varint(out, f.step as u64);
    put_varint(out, f.block.0 as u64);
    put_varint(out, f.block.1 as u64);
    put_varint(out, f.forward_tokens as u64);
    put_varint(out, f.committed_total as u64);
    out.extend_from_slice(&f.step_wall_s.to_le_bytes());
    match f.simulated_s {
        Some(s) => {
            out.push(1);
            out.extend_from_slice(&s.to_le_bytes());
        }
        None => out.push(0),
    }
    put_varint(out, f.changes.len() as u64);
    let mut prev = f.block.0 as i64;
    for c in &f.changes {
        put_varint(out, zigzag(c.pos as i64 - prev));
        prev = c.pos as i64;
        put_varint(out, c.token as u64);
        out.extend_from_slice(&c.confidence.to_le_bytes());
        let state = match c.state {
            TokenState::Masked => 0u8,
            TokenState::Visible => 1,
            TokenState::Stable => 2,
        };
        let rejected = c.rejected_draft.is_some() as u8;
        out.push(state | (c.speculative as u8) << 2 | (c.revised as u8) << 3 | rejected << 4);
        if let Some(t) = c.rejected_draft {
            put_varint(out, t as u64);
        }
    }
}

fn decode_frame(r: &mut Reader) -> Result<StepFrame> {
    let step = r.usize()?;
    let block = (r.usize()?, r.usize()?);
    let forward_tokens = r.usize()?;
    let committed_total = r.usize()?;
    let step_wall_s = r.f64()?;
    let simulated_s = match r.byte()? {
        0 => None,
        1 => Some(r.f64()?),
        b => return Err(StoreError::corrupt("trace chunk", format!("bad simulated-time flag {b}"))),
    };
    let n = r.usize()?;
    if n > r.remaining() / 6 {
        return Err(StoreError::corrupt("trace chunk", format!("{n} changes in {} bytes", r.remaining())));
    }
    let mut changes = Vec::with_capacity(n);
    let mut prev = block.0 as i64;
    for _ in 0..n {
        let pos = prev
            .checked_add(unzigzag(r.varint()?))
            .filter(|p| *p >= 0)
            .ok_or_else(|| StoreError::corrupt("trace chunk", "position out of range"))?;
        prev = pos;
        let token = u32::try_from(r.varint()?).map_err(|_| StoreError::corrupt("trace chunk", "token id > u32"))?;
        let confidence = f32::from_le_bytes(r.array::<4>()?);
        let flags = r.byte()?;
        let state = match flags & 3 {
            0 => TokenState::Masked,
            1 => TokenState::Visible,
            2 => TokenState::Stable,
            _ => return Err(StoreError::corrupt("trace chunk", "bad token state")),
        };
        if flags >> 5 != 0 {
            return Err(StoreError::corrupt("trace chunk", "unknown change flags"));
        }
        let rejected_draft = if flags & 16 != 0 {
            Some(u32::try_from(r.varint()?).map_err(|_| StoreError::corrupt("trace chunk", "draft token id > u32"))?)
        } else {
            None
        };
        changes.push(TokenChange {
            pos: pos as usize,
            token,
            confidence,
            state,
            speculative: flags & 4 != 0,
            revised: flags & 8 != 0,
            rejected_draft,
        });
    }
    Ok(StepFrame { step, block, forward_tokens, changes, step_wall_s, simulated_s, committed_total })
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn remaining(&self) -> usize {
        self.buf.len() - self.at
    }
    fn byte(&mut self) -> Result<u8> {
        let b = *self.buf.get(self.at).ok_or_else(|| StoreError::corrupt("trace chunk", "truncated"))?;
        self.at += 1;
        Ok(b)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let s = self.buf.get(self.at..self.at + N).ok_or_else(|| StoreError::corrupt("trace chunk", "truncated"))?;
        self.at += N;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    fn f64(&mut self) -> Result<f64> {
        Ok(f64::from_le_bytes(self.array::<8>()?))
    }
    fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(StoreError::corrupt("trace chunk", "varint longer than 10 bytes"))
    }
    fn usize(&mut self) -> Result<usize> {
        usize::try_from(self.varint()?).map_err(|_| StoreError::corrupt("trace chunk", "value exceeds usize"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn change() -> impl Strategy<Value = TokenChange> {
        (
            0usize..1 << 20,
            any::<u32>(),
            any::<f32>(),
            0u8..3,
            any::<bool>(),
            any::<bool>(),
            proptest::option::of(any::<u32>()),
        )
            .prop_map(|(pos, token, confidence, s, speculative, revised, rejected_draft)| TokenChange {
                pos,
                token,
                confidence,
                state: [TokenState::Masked, TokenState::Visible, TokenState::Stable][s as usize],
                speculative,
                revised,
                rejected_draft,
            })
    }

    fn frame() -> impl Strategy<Value = StepFrame> {
        (
            0usize..100_000,
            (0usize..4096, 0usize..4096),
            0usize..4096,
            proptest::collection::vec(change(), 0..12),
            any::<f64>(),
            proptest::option::of(any::<f64>()),
            0usize..4096,
        )
            .prop_map(|(step, block, forward_tokens, changes, step_wall_s, simulated_s, committed_total)| {
                StepFrame { step, block, forward_tokens, changes, step_wall_s, simulated_s, committed_total }
            })
    }

    /// Bitwise comparison, so NaN confidences and times count as equal to themselves.
    fn same(a: &[StepFrame], b: &[StepFrame]) -> bool {
        a.len() == b.len()
            && a.iter().zip(b).all(|(x, y)| {
                x.step == y.step
                    && x.block == y.block
                    && x.forward_tokens == y.forward_tokens
                    && x.committed_total == y.committed_total
                    && x.step_wall_s.to_bits() == y.step_wall_s.to_bits()
                    && x.simulated_s.map(f64::to_bits) == y.simulated_s.map(f64::to_bits)
                    && x.changes.len() == y.changes.len()
                    && x.changes.iter().zip(&y.changes).all(|(c, d)| {
                        c.pos == d.pos
                            && c.token == d.token
                            && c.confidence.to_bits() == d.confidence.to_bits()
                            && c.state == d.state
                            && c.speculative == d.speculative
                            && c.revised == d.revised
                            && c.rejected_draft == d.rejected_draft
                    })
            })
    }

    proptest! {
        #[test]
        fn chunks_round_trip(frames in proptest::collection::vec(frame(), 0..40)) {
            let data = encode_chunk(&frames);
            let back = decode_chunk(&data).unwrap();
            prop_assert!(same(&frames, &back));
        }

        #[test]
        fn garbage_is_an_error_not_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_chunk(&bytes);
        }
    }

    #[test]
    fn truncated_chunk_is_corrupt() {
        let f = StepFrame {
            step: 3,
            block: (10, 42),
            forward_tokens: 32,
            changes: vec![TokenChange {
                pos: 12,
                token: 99,
                confidence: 0.5,
                state: TokenState::Visible,
                speculative: false,
                revised: true,
                rejected_draft: None,
            }],
            step_wall_s: 0.01,
            simulated_s: Some(0.002),
            committed_total: 1,
        };
        // Re-encode the raw bytes without the last byte and compress them.
        let mut raw = Vec::new();
        put_varint(&mut raw, 1);
        encode_frame(&mut raw, &f);
        raw.pop();
        let mut enc = DeflateEncoder::new(Vec::new(), Compression::new(6));
        enc.write_all(&raw).unwrap();
        let err = decode_chunk(&enc.finish().unwrap()).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
        assert!(same(&decode_chunk(&encode_chunk(std::slice::from_ref(&f))).unwrap(), &[f]));
    }
}
