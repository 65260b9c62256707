//! What a speculative run's two tasks did and when, measured on this machine: each draft and
//! each verification as a span, and the draft queue's depth at each verification start. The
//! profiler draws it as a Drafter lane and a Verifier lane ([`SpecTrace::to_timeline`]).

use std::time::Instant;

use crate::trace::{Lane, Timeline, TraceEvent};

/// Which task a span belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecTask {
    /// The draft model proposing one token.
    Draft,
    /// The target model judging a batch of drafts in one forward.
    Verify,
}

/// One measured span (seconds since the run began).
#[derive(Debug, Clone, PartialEq)]
pub struct SpecSpan {
    pub task: SpecTask,
    pub start_s: f64,
    pub dur_s: f64,
    /// Draft: the position drafted. Verify: tokens in the target forward.
    pub tokens: usize,
    /// Verify: drafts judged and drafts accepted.
    pub offered: usize,
    pub accepted: usize,
}

/// The spans and queue samples of one run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpecTrace {
    pub spans: Vec<SpecSpan>,
    /// (seconds since the run began, drafts waiting for verification).
    pub queue_depth: Vec<(f64, usize)>,
    /// Each judged draft's entropy (nats) and whether the target accepted it, in verification
    /// order: the accepted drafts of a verification and its first refused one (drafts after a
    /// refusal are not judged). The simulated phone draws its drafts from these.
    pub verdicts: Vec<(f64, bool)>,
}

/// Name of the queue-depth counter on the timeline.
pub const QUEUE_DEPTH_COUNTER: &str = "draft_queue_depth";

impl SpecTrace {
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Records a span that started at `start` (measured against the run's `t0`).
    pub(crate) fn span(
        &mut self,
        t0: Instant,
        start: Instant,
        task: SpecTask,
        tokens: usize,
        offered: usize,
        accepted: usize,
    ) {
        let start_s = start.saturating_duration_since(t0).as_secs_f64();
        let dur_s = start.elapsed().as_secs_f64();
        self.spans.push(SpecSpan { task, start_s, dur_s, tokens, offered, accepted });
    }

    /// Records the judged drafts of one verification: the first `accepted` of `entropies`
    /// accepted, the next one refused if `accepted < offered`.
    pub(crate) fn record_verdicts(&mut self, entropies: impl Iterator<Item = f64>, offered: usize, accepted: usize) {
        let judged = if accepted < offered { accepted + 1 } else { accepted };
        self.verdicts.extend(entropies.take(judged).enumerate().map(|(i, h)| (h, i < accepted)));
    }

    /// Adds another trace's spans and samples (the drafter thread's), keeping time order.
    pub(crate) fn merge(&mut self, other: SpecTrace) {
        self.spans.extend(other.spans);
        self.spans.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
        self.queue_depth.extend(other.queue_depth);
        self.queue_depth.sort_by(|a, b| a.0.total_cmp(&b.0));
        self.verdicts.extend(other.verdicts);
    }

    /// The trace as a timeline on `device`: drafts on the Drafter lane, verifications on the
    /// Verifier lane, and the queue depth as the [`QUEUE_DEPTH_COUNTER`] counter. Times are
    /// measured seconds held in the `*_sim` fields (label the device as measured, e.g.
    /// [`crate::trace::MEASURED_DEVICE`]); the `wall_*` fields stay empty so exports draw each
    /// span once.
    pub fn to_timeline(&self, device: impl Into<String>) -> Timeline {
        let mut t = Timeline::new(device);
        for s in &self.spans {
            let (lane, name, category) = match s.task {
                SpecTask::Draft => (Lane::Drafter, format!("draft @{}", s.tokens), "draft"),
                SpecTask::Verify => (
                    Lane::Verifier,
                    format!("verify {} tok: {} of {} drafts accepted", s.tokens, s.accepted, s.offered),
                    "verify",
                ),
            };
            t.push(TraceEvent {
                lane,
                name,
                category: category.into(),
                start_sim: s.start_s,
                dur_sim: s.dur_s,
                wall_start: 0.0,
                wall_dur: 0.0,
                bytes: 0,
            });
        }
        for &(at, depth) in &self.queue_depth {
            t.push_counter(QUEUE_DEPTH_COUNTER, at, depth as f64);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drafts_and_verifications_land_on_their_lanes_with_the_queue_counter() {
        let span = |task, start_s, tokens, offered, accepted| SpecSpan {
            task,
            start_s,
            dur_s: 0.5,
            tokens,
            offered,
            accepted,
        };
        let mut drafter = SpecTrace::default();
        drafter.spans.push(span(SpecTask::Draft, 0.0, 7, 0, 0));
        drafter.spans.push(span(SpecTask::Draft, 1.0, 8, 0, 0));
        let mut trace = SpecTrace::default();
        trace.spans.push(span(SpecTask::Verify, 0.6, 3, 2, 1));
        trace.queue_depth.push((0.6, 2));
        trace.merge(drafter);
        let starts: Vec<f64> = trace.spans.iter().map(|s| s.start_s).collect();
        assert_eq!(starts, [0.0, 0.6, 1.0]);
        let t = trace.to_timeline("host");
        assert_eq!(t.lanes(), [Lane::Verifier, Lane::Drafter]);
        assert_eq!(t.busy_s(Lane::Drafter), 1.0);
        let v = t.events.iter().find(|e| e.lane == Lane::Verifier).unwrap();
        assert_eq!(v.name, "verify 3 tok: 1 of 2 drafts accepted");
        assert_eq!(t.counters.len(), 1);
        assert_eq!((t.counters[0].name.as_str(), t.counters[0].value), (QUEUE_DEPTH_COUNTER, 2.0));
    }
}
