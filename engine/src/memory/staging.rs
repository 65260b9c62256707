//! Double-buffered staging: a real thread copies the next operator's swapped-in buffers into one of
//! two staging slots while the caller computes the current operator from the other slot.
//!
//! Slots are owned `Vec<u8>`s that travel between the two threads through channels, so neither side
//! can touch a slot the other is using (no shared mutable memory, no `unsafe`).

use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use crate::error::{EngineError, Result};

/// One operator's staging request: which sources to copy into its slot, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedOp {
    /// Name for traces.
    pub name: String,
    /// Indices into the source list.
    pub sources: Vec<usize>,
}

/// A wall-clock interval relative to the start of the run, seconds.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct WallSpan {
    /// Start, seconds since the run began.
    pub start: f64,
    /// End, seconds since the run began.
    pub end: f64,
}

/// What a staged run did and how much copying hid behind compute.
#[derive(Debug, Clone, PartialEq)]
pub struct StagingReport {
    /// Bytes copied into staging slots.
    pub bytes_transferred: u64,
    /// Slot fills (one per operator that needed sources).
    pub remaps: usize,
    /// Copy intervals (staging thread), one per filled operator.
    pub copy_spans: Vec<(usize, WallSpan)>,
    /// Compute intervals (caller thread), one per operator.
    pub compute_spans: Vec<(usize, WallSpan)>,
    /// Total copy time, seconds.
    pub copy_s: f64,
    /// Total compute time, seconds.
    pub compute_s: f64,
    /// Copy time that ran while an operator was computing, seconds.
    pub overlap_s: f64,
    /// Wall time of the whole run, seconds.
    pub wall_s: f64,
}

/// Two staging slots of a fixed size plus the thread that fills them.
#[derive(Debug)]
pub struct StagingArena {
    slot_bytes: usize,
}

struct Filled {
    op: usize,
    slot: Vec<u8>,
    len: usize,
    span: WallSpan,
}

impl StagingArena {
    /// An arena whose two slots each hold `slot_bytes`.
    pub fn new(slot_bytes: usize) -> Self {
        StagingArena { slot_bytes }
    }

    /// Bytes per slot.
    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// Runs `ops` in order: operator i's sources are copied into a slot by the staging thread (while
    /// operator i-1 computes), then `compute(i, staged_bytes)` runs on the caller's thread.
    pub fn run<F>(&self, ops: &[StagedOp], sources: &[Arc<[u8]>], mut compute: F) -> Result<StagingReport>
    where
        F: FnMut(usize, &[u8]),
    {
        for (i, op) in ops.iter().enumerate() {
            let need: usize = op.sources.iter().map(|&s| sources.get(s).map_or(usize::MAX, |b| b.len())).sum();
            if op.sources.iter().any(|&s| s >= sources.len()) || need > self.slot_bytes {
                return Err(EngineError::Backend {
                    backend: "vnpu".into(),
                    reason: format!("staged op {i} `{}` needs {need} bytes, slot holds {}", op.name, self.slot_bytes),
                });
            }
        }
        let t0 = Instant::now();
        let (req_tx, req_rx) = mpsc::channel::<(usize, Vec<u8>)>();
        let (done_tx, done_rx) = mpsc::channel::<Filled>();
        let plan: Vec<Vec<Arc<[u8]>>> =
            ops.iter().map(|o| o.sources.iter().map(|&s| sources[s].clone()).collect()).collect();
        let stager = thread::Builder::new()
            .name("vnpu-staging".into())
            .spawn(move || {
                for (op, mut slot) in req_rx {
                    let start = t0.elapsed().as_secs_f64();
                    let mut len = 0;
                    for src in &plan[op] {
                        slot[len..len + src.len()].copy_from_slice(src);
                        len += src.len();
                    }
                    let span = WallSpan { start, end: t0.elapsed().as_secs_f64() };
                    if done_tx.send(Filled { op, slot, len, span }).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| EngineError::Backend { backend: "vnpu".into(), reason: format!("staging thread: {e}") })?;

        let lost = || EngineError::Backend { backend: "vnpu".into(), reason: "staging thread stopped".into() };
        // Prime both slots: operators 0 and 1 start copying at once.
        for op in 0..ops.len().min(2) {
            req_tx.send((op, vec![0u8; self.slot_bytes])).map_err(|_| lost())?;
        }
        let mut report = StagingReport {
            bytes_transferred: 0,
            remaps: 0,
            copy_spans: Vec::new(),
            compute_spans: Vec::new(),
            copy_s: 0.0,
            compute_s: 0.0,
            overlap_s: 0.0,
            wall_s: 0.0,
        };
        for i in 0..ops.len() {
            let filled = done_rx.recv().map_err(|_| lost())?;
            if filled.op != i {
                return Err(EngineError::Backend {
                    backend: "vnpu".into(),
                    reason: format!("staged op {} arrived for {i}", filled.op),
                });
            }
            if filled.len > 0 {
                report.bytes_transferred += filled.len as u64;
                report.remaps += 1;
                report.copy_spans.push((i, filled.span));
            }
            let start = t0.elapsed().as_secs_f64();
            compute(i, &filled.slot[..filled.len]);
            report.compute_spans.push((i, WallSpan { start, end: t0.elapsed().as_secs_f64() }));
            // The slot is free again: hand it over for operator i + 2.
            if i + 2 < ops.len() {
                req_tx.send((i + 2, filled.slot)).map_err(|_| lost())?;
            }
        }
        drop(req_tx);
        stager.join().map_err(|_| lost())?;
        report.wall_s = t0.elapsed().as_secs_f64();
        report.copy_s = report.copy_spans.iter().map(|(_, s)| s.end - s.start).sum();
        report.compute_s = report.compute_spans.iter().map(|(_, s)| s.end - s.start).sum();
        report.overlap_s = overlap(&report.copy_spans, &report.compute_spans);
        Ok(report)
    }
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
    fn staged_bytes_arrive_intact_in_order() {
        let sources: Vec<Arc<[u8]>> = (0..4u8).map(|i| Arc::from(vec![i; 1000 + i as usize])).collect();
        let ops: Vec<StagedOp> =
            (0..4).map(|i| StagedOp { name: format!("op{i}"), sources: vec![i, (i + 1) % 4] }).collect();
        let arena = StagingArena::new(4096);
        let mut seen = Vec::new();
        let r = arena
            .run(&ops, &sources, |i, bytes| {
                let mut want = sources[i].to_vec();
                want.extend_from_slice(&sources[(i + 1) % 4]);
                assert_eq!(bytes, &want[..]);
                seen.push(i);
            })
            .unwrap();
        assert_eq!(seen, vec![0, 1, 2, 3]);
        assert_eq!(r.remaps, 4);
        assert_eq!(r.bytes_transferred, sources.iter().map(|s| s.len() as u64).sum::<u64>() * 2);
    }

    #[test]
    fn oversized_op_is_rejected() {
        let sources: Vec<Arc<[u8]>> = vec![Arc::from(vec![0u8; 100])];
        let ops = vec![StagedOp { name: "big".into(), sources: vec![0] }];
        assert!(StagingArena::new(10).run(&ops, &sources, |_, _| {}).is_err());
    }
}
