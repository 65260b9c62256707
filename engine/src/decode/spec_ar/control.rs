//! When to stop drafting ahead: the entropy-history drafting control and the time-aware
//! pre-verification control of AHASD (arXiv 2604.25326 §4; see
//! `shared/reference/moe-and-speculative.md` §4–5), plus AdaEDL's per-token entropy bound.
//!
//! Drafting ahead of verification is free in time when the drafter has a core of its own, but a
//! draft that verification will reject is wasted work (energy) and delays the correction; the
//! controls decide how far ahead is worth it.

use std::collections::VecDeque;

/// AdaEDL's training-free lower bound on a drafted token's acceptance probability from the
/// draft's entropy `h` (nats): `1 − √(γ·h)`, clamped to [0, 1].
pub fn acceptance_bound(h: f64, gamma: f64) -> f64 {
    (1.0 - (gamma * h.max(0.0)).sqrt()).clamp(0.0, 1.0)
}

/// AHASD's Entropy-History-Aware Drafting Control (EDC): the mean entropy of each draft batch
/// is bucketed into 8 bins over `[0, h_max]` and kept in an 8-entry history; with the number of
/// batches already drafted ahead of verification (the "leading length", 3 bits) it indexes a
/// 512-entry table of 2-bit saturating counters whose high bit says "keep drafting ahead".
/// Verification trains the counters it consulted: a fully accepted batch run increments them
/// and checkpoints the history; a rejection decrements them and rolls the history back to the
/// checkpoint (the rejected batches' entropies describe drafts that no longer exist).
#[derive(Debug, Clone)]
pub struct EntropyHistoryControl {
    h_max: f64,
    history: [u8; 8],
    checkpoint: [u8; 8],
    counters: Vec<u8>,
    consulted: Vec<usize>,
}

impl EntropyHistoryControl {
    /// A control with bins over `[0, h_max]` nats; counters start "weakly keep drafting".
    pub fn new(h_max: f64) -> Self {
        EntropyHistoryControl {
            h_max: h_max.max(1e-6),
            history: [0; 8],
            checkpoint: [0; 8],
            counters: vec![2; 512],
            consulted: Vec::new(),
        }
    }

    /// Records one finished draft batch by its mean entropy (nats).
    pub fn record_batch(&mut self, mean_entropy: f64) {
        let bin = ((mean_entropy / self.h_max) * 8.0).floor().clamp(0.0, 7.0) as u8;
        self.history.rotate_right(1);
        self.history[0] = bin;
    }

    fn index(&self, leading_batches: usize) -> usize {
        let avg = |s: &[u8]| (s.iter().map(|&b| b as usize).sum::<usize>() / s.len()).min(7);
        let recent = avg(&self.history[0..4]);
        let older = avg(&self.history[4..8]);
        (older << 6) | (recent << 3) | leading_batches.min(7)
    }

    /// Whether to draft another batch while `leading_batches` batches wait for verification.
    pub fn keep_drafting(&mut self, leading_batches: usize) -> bool {
        let i = self.index(leading_batches);
        self.consulted.push(i);
        self.counters[i] >= 2
    }

    /// Trains the counters consulted since the last verification.
    pub fn on_verified(&mut self, fully_accepted: bool) {
        for &i in &self.consulted {
            let c = &mut self.counters[i];
            *c = if fully_accepted { (*c + 1).min(3) } else { c.saturating_sub(1) };
        }
        self.consulted.clear();
        if fully_accepted {
            self.checkpoint = self.history;
        } else {
            self.history = self.checkpoint;
        }
    }
}

/// The simulated phone's asynchronous schedule runs this same control
/// (`backend::vnpu::spec_schedule`).
impl crate::backend::vnpu::spec_schedule::DraftingControl for EntropyHistoryControl {
    fn record_batch(&mut self, mean_entropy: f64) {
        EntropyHistoryControl::record_batch(self, mean_entropy)
    }
    fn keep_drafting(&mut self, leading_batches: usize) -> bool {
        EntropyHistoryControl::keep_drafting(self, leading_batches)
    }
    fn on_verified(&mut self, fully_accepted: bool) {
        EntropyHistoryControl::on_verified(self, fully_accepted)
    }
}

/// Seconds per token of a kind of task, averaged over its last four records (AHASD's cycle
/// tables keep four records per task kind).
#[derive(Debug, Clone, Default)]
pub struct CostPredictor {
    records: VecDeque<(f64, usize)>,
}

impl CostPredictor {
    /// Records a task of `tokens` tokens that took `secs`.
    pub fn record(&mut self, secs: f64, tokens: usize) {
        if tokens == 0 || !secs.is_finite() {
            return;
        }
        if self.records.len() == 4 {
            self.records.pop_front();
        }
        self.records.push_back((secs, tokens));
    }
    /// Mean seconds per token over the kept records; `None` before the first.
    pub fn per_token(&self) -> Option<f64> {
        if self.records.is_empty() {
            return None;
        }
        Some(self.records.iter().map(|(s, n)| s / *n as f64).sum::<f64>() / self.records.len() as f64)
    }
}

/// AHASD's Time-Aware Pre-Verification Control (TVC), for a drafter on its own core: knowing
/// when the verifier will be free (its running call's predicted length minus elapsed time) and
/// what a draft token costs, it says how many more drafts are worth producing before the
/// verifier takes its next batch, and whether there is slack for a pre-verification.
///
/// Our pre-verification is the drafter's own check of its unsent drafts against the entropy
/// bound ([`acceptance_bound`]): drafts past the point where the estimated probability that all
/// of them are accepted falls below a floor are dropped before the verifier sees them. It runs
/// only with slack (the verifier predicted busy for longer than one more draft), so it never
/// makes the verifier wait; with no slack everything drafted is sent as is. (AHASD pre-verifies
/// on PIM ranks that hold target weights; our drafter core has no copy of the target.)
#[derive(Debug, Clone, Default)]
pub struct PreVerifyControl {
    pub verify: CostPredictor,
    pub draft: CostPredictor,
}

impl PreVerifyControl {
    /// Predicted seconds until a verification of `tokens` tokens that has run `elapsed_s` ends.
    pub fn verifier_remaining_s(&self, tokens: usize, elapsed_s: f64) -> Option<f64> {
        self.verify.per_token().map(|t| (t * tokens as f64 - elapsed_s).max(0.0))
    }

    /// Slack for pre-verification: time left in the running verification after one more draft
    /// token (AHASD's `C_PIM-Left`); `None` when the verifier is idle or nothing is predicted.
    pub fn slack_s(&self, verifier: Option<(usize, f64)>) -> Option<f64> {
        let (tokens, elapsed) = verifier?;
        let left = self.verifier_remaining_s(tokens, elapsed)?;
        Some(left - self.draft.per_token()?)
    }

    /// How many drafts ahead of verification are worth having: what the drafter can produce
    /// before the verifier is free plus one batch for its next call, clamped to `[min, max]`.
    pub fn ahead_budget(&self, verifier: Option<(usize, f64)>, batch: usize, min: usize, max: usize) -> usize {
        let by_time = match (verifier.and_then(|(n, e)| self.verifier_remaining_s(n, e)), self.draft.per_token()) {
            (Some(left), Some(per)) if per > 0.0 => (left / per).ceil() as usize + batch,
            _ => max,
        };
        by_time.clamp(min.max(1), max.max(1))
    }
}

/// Length of the prefix of drafts worth sending: stops before the first draft at which the
/// product of acceptance bounds (the estimated probability that every draft so far is accepted)
/// falls below `floor`. Always keeps at least one draft.
pub fn pre_verified_len(entropies: &[f64], gamma: f64, floor: f64) -> usize {
    let mut all = 1.0;
    for (i, &h) in entropies.iter().enumerate() {
        all *= acceptance_bound(h, gamma);
        if all < floor {
            return i.max(1);
        }
    }
    entropies.len()
}

/// How many drafts a verification should wait for: the `k ≤ max` that maximises expected
/// committed tokens per second, `E(k) / (T_verify + T_draft · max(0, k − ready))`, with
/// `E(k) = (1 − α^k) / (1 − α)` for per-draft acceptance `α` (no bonus token: the drafter runs
/// ahead). Without cost estimates yet, whatever is ready.
pub fn worthwhile_batch(alpha: f64, verify_s: Option<f64>, draft_s: f64, ready: usize, max: usize) -> usize {
    let Some(tv) = verify_s else { return ready.min(max).max(1) };
    if draft_s.is_nan() || draft_s <= 0.0 {
        return ready.min(max).max(1);
    }
    let a = alpha.clamp(0.0, 0.999);
    let mut best = (0.0, 1);
    for k in 1..=max.max(1) {
        let e = (1.0 - a.powi(k as i32)) / (1.0 - a);
        let rate = e / (tv + draft_s * k.saturating_sub(ready) as f64);
        if rate > best.0 {
            best = (rate, k);
        }
    }
    best.1
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edc_learns_to_stop_after_rejections_and_to_go_on_after_acceptances() {
        let mut c = EntropyHistoryControl::new(8.0);
        for _ in 0..8 {
            c.record_batch(6.0);
        }
        assert!(c.keep_drafting(1), "weakly taken at start");
        c.on_verified(false);
        assert!(c.keep_drafting(1));
        c.on_verified(false);
        assert!(!c.keep_drafting(1), "two rejections in this state turn it off");
        // A different state (low entropy) is unaffected.
        let mut low = c.clone();
        for _ in 0..8 {
            low.record_batch(0.1);
        }
        low.on_verified(true); // checkpoint the low-entropy history
        assert!(low.keep_drafting(1));
    }

    #[test]
    fn rejection_rolls_the_history_back_to_the_last_checkpoint() {
        let mut c = EntropyHistoryControl::new(8.0);
        c.record_batch(1.0);
        c.on_verified(true);
        let kept = c.history;
        c.record_batch(7.9);
        c.on_verified(false);
        assert_eq!(c.history, kept);
    }

    #[test]
    fn predictor_averages_the_last_four_records() {
        let mut p = CostPredictor::default();
        assert_eq!(p.per_token(), None);
        for s in [100.0, 1.0, 1.0, 1.0, 1.0] {
            p.record(s, 1);
        }
        assert_eq!(p.per_token(), Some(1.0));
        p.record(4.0, 2);
        assert_eq!(p.per_token(), Some(1.25));
    }

    #[test]
    fn ahead_budget_follows_the_verifier_clock() {
        let mut t = PreVerifyControl::default();
        t.verify.record(0.010, 5); // 2 ms per verified token
        t.draft.record(0.001, 1); // 1 ms per draft
        // A 5-token verification 2 ms in: 8 ms left → 8 drafts + one batch of 2.
        assert_eq!(t.ahead_budget(Some((5, 0.002)), 2, 1, 64), 10);
        assert_eq!(t.ahead_budget(None, 2, 1, 16), 16, "idle verifier: no time bound");
        let slack = t.slack_s(Some((5, 0.002))).unwrap();
        assert!((slack - 0.007).abs() < 1e-12);
    }

    #[test]
    fn pre_verification_drops_the_low_confidence_tail() {
        // γ = 0.2: h = 0 → bound 1; h = 1.25 → bound 0.5.
        assert_eq!(pre_verified_len(&[0.0, 0.0, 1.25, 1.25], 0.2, 0.3), 3);
        assert_eq!(pre_verified_len(&[5.0], 0.2, 0.9), 1, "at least one draft");
        assert_eq!(pre_verified_len(&[0.0; 4], 0.2, 0.5), 4);
    }

    #[test]
    fn batch_waits_only_when_drafts_are_cheap_and_likely_accepted() {
        // Drafts cost a tenth of a verification and are mostly accepted: wait for all 4.
        assert_eq!(worthwhile_batch(0.8, Some(0.010), 0.001, 1, 4), 4);
        // Drafts as expensive as a verification: take what is ready.
        assert_eq!(worthwhile_batch(0.5, Some(0.010), 0.010, 1, 4), 1);
        // Already enough ready.
        assert_eq!(worthwhile_batch(0.8, Some(0.010), 0.010, 4, 4), 4);
        // No estimates yet.
        assert_eq!(worthwhile_batch(0.8, None, 0.001, 2, 4), 2);
    }
}
