//! Batching of step frames for the UI: a decode can produce hundreds of steps per second, the
//! screen shows ~60; frames that arrive within one interval travel in one `frames` event, so IPC
//! traffic stays bounded without dropping a step (the scrubber needs every one), and whatever is
//! pending when decoding ends is always delivered.

use std::time::{Duration, Instant};

use crate::dto::FrameDelta;

/// Default interval between `frames` events (~60 Hz).
pub const FRAME_INTERVAL: Duration = Duration::from_millis(16);

/// Collects frames and says when a batch is due.
#[derive(Debug)]
pub struct FrameBatcher {
    interval: Duration,
    pending: Vec<FrameDelta>,
    last_sent: Option<Instant>,
}

impl FrameBatcher {
    /// A batcher that emits at most once per `interval` (except for the final flush).
    pub fn new(interval: Duration) -> Self {
        FrameBatcher { interval, pending: Vec::new(), last_sent: None }
    }

    /// Adds a frame at time `now`; returns a batch when one is due. The first frame goes out at
    /// once, so the canvas starts moving without waiting for an interval.
    pub fn push(&mut self, frame: FrameDelta, now: Instant) -> Option<Vec<FrameDelta>> {
        self.pending.push(frame);
        let due = self.last_sent.is_none_or(|t| now.duration_since(t) >= self.interval);
        if due {
            self.last_sent = Some(now);
            Some(std::mem::take(&mut self.pending))
        } else {
            None
        }
    }

    /// Whatever is pending (the final frames); `None` when nothing is.
    pub fn finish(&mut self) -> Option<Vec<FrameDelta>> {
        (!self.pending.is_empty()).then(|| std::mem::take(&mut self.pending))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(step: u32) -> FrameDelta {
        FrameDelta {
            step,
            block: (0, 4),
            forward_tokens: 4,
            changes: Vec::new(),
            step_wall_s: 0.0,
            simulated_s: None,
            committed_total: step,
        }
    }

    #[test]
    fn fast_frames_are_grouped_and_the_final_frame_is_kept() {
        let mut b = FrameBatcher::new(Duration::from_millis(16));
        let t0 = Instant::now();
        let mut batches = Vec::new();
        // 100 steps 1 ms apart: about one batch per 16 ms.
        for i in 0..100u32 {
            if let Some(batch) = b.push(frame(i), t0 + Duration::from_millis(u64::from(i))) {
                batches.push(batch);
            }
        }
        batches.extend(b.finish());
        let steps: Vec<u32> = batches.iter().flatten().map(|f| f.step).collect();
        assert_eq!(steps, (0..100).collect::<Vec<_>>(), "every frame delivered once, in order");
        assert_eq!(batches.last().and_then(|b| b.last()).map(|f| f.step), Some(99));
        assert!(batches.len() <= 8, "{} batches for 100 ms of frames", batches.len());
        assert!(batches.len() >= 6, "{} batches", batches.len());
        assert_eq!(batches[0].len(), 1, "first frame goes out at once");
    }

    #[test]
    fn slow_frames_go_out_one_by_one() {
        let mut b = FrameBatcher::new(Duration::from_millis(16));
        let t0 = Instant::now();
        for i in 0..5u32 {
            let batch = b.push(frame(i), t0 + Duration::from_millis(50 * u64::from(i))).expect("due");
            assert_eq!(batch.len(), 1);
        }
        assert!(b.finish().is_none());
    }
}
