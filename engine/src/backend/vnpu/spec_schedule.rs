//! Speculative AR decoding schedules on a simulated phone (**simulated**): the target verifies
//! on the virtual NPU (its cost model, `sim.rs`), the draft runs on the NPU too or on the PIM
//! unit (`pim.rs`). Three schedules, as AHASD compares them:
//! - **NPU only**: draft and verify alternate on the one unit (AHASD's GPU-only baseline; our
//!   profiles have no GPU, so the NPU plays that part);
//! - **sync NPU+PIM**: draft on PIM, verify on the NPU, in turn, fixed draft length (SpecPIM's
//!   operator-level synchronous mapping);
//! - **async NPU+PIM**: drafter and verifier as independent tasks; the drafter keeps drafting
//!   while the verifier works, up to a bound; a rejection discards the drafts made on the
//!   rejected path; the verifier takes the batch the time-aware rule says is worthwhile
//!   (`decode::spec_ar` runs the same policy for real on two CPU cores).
//!
//! Acceptance is drawn per draft with probability `alpha` (seeded), the i.i.d. model of
//! Leviathan et al. §3; the benchmark sets `alpha` from a measured run.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::pim::PimProfile;
use super::profile::DeviceProfile;
use super::replay::{ar_npu_simulator, DecodeTrace};
use super::sim::StepSimulator;
use crate::error::Result;
use crate::memory::graph::StepShape;
use crate::model::ModelConfig;
use crate::trace::LanePower;

/// Which schedule to simulate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SimSchedule {
    NpuOnly { draft_len: usize },
    SyncPim { draft_len: usize },
    AsyncPim { max_batch: usize, max_ahead: usize },
}

/// The workload: a target/draft pair, prompt and answer length, acceptance.
#[derive(Debug, Clone)]
pub struct SpecWorkload {
    pub target: ModelConfig,
    pub draft: ModelConfig,
    pub prompt: usize,
    pub answer: usize,
    /// Per-draft acceptance probability.
    pub alpha: f64,
    pub seed: u64,
}

/// One schedule's simulated run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpecSimResult {
    pub schedule: SimSchedule,
    pub tokens: usize,
    pub time_s: f64,
    pub tokens_per_s: f64,
    pub energy_j: f64,
    pub j_per_token: f64,
    pub npu_busy_s: f64,
    pub pim_busy_s: f64,
    pub verifications: usize,
    pub drafted: usize,
    pub wasted_drafts: usize,
}

/// Costs the schedules share.
struct Costs<'a> {
    verify: StepSimulator,
    draft_npu: StepSimulator,
    pim: &'a PimProfile,
    draft_cfg: &'a ModelConfig,
    power: LanePower,
}

impl Costs<'_> {
    /// Target forward of `tokens` tokens at `context` on the NPU: (seconds, joules).
    fn verify(&mut self, tokens: usize, context: usize) -> Result<(f64, f64)> {
        let s = self.verify.simulate(StepShape { tokens, context, logit_rows: tokens })?;
        Ok((s.time_s, s.energy_j))
    }
    fn draft_on_npu(&mut self, context: usize) -> Result<(f64, f64)> {
        let s = self.draft_npu.simulate(StepShape { tokens: 1, context, logit_rows: 1 })?;
        Ok((s.time_s, s.energy_j))
    }
    fn draft_on_pim(&self, context: usize) -> (f64, f64) {
        let c = self.pim.token_cost(self.draft_cfg, context);
        (c.time_s, c.energy_j)
    }
}

/// Accepted drafts of a run of `n`: each accepted with probability `alpha` until the first
/// rejection.
fn accepted(n: usize, alpha: f64, rng: &mut ChaCha8Rng) -> usize {
    (0..n).take_while(|_| rng.random::<f64>() < alpha).count()
}

/// How many drafts the asynchronous verifier takes: `(alpha, verify seconds per call if known,
/// draft seconds per token, drafts ready, most allowed) -> batch`. The decoder's own rule
/// (`decode::spec_ar::control::worthwhile_batch`) is passed in by the caller, so the simulated
/// schedule follows the real one without this module depending on the decoder.
pub type BatchRule = fn(f64, Option<f64>, f64, usize, usize) -> usize;

/// Simulates `schedules` for `w` on `profile`'s NPU with `pim` beside it.
pub fn simulate_schedules(
    w: &SpecWorkload,
    profile: &DeviceProfile,
    pim: &PimProfile,
    schedules: &[SimSchedule],
    batch_rule: BatchRule,
) -> Result<Vec<SpecSimResult>> {
    let trace = DecodeTrace::autoregressive(w.prompt, w.answer);
    let (verify, _) = ar_npu_simulator(&w.target, profile, &trace)?;
    let (draft_npu, _) = ar_npu_simulator(&w.draft, profile, &trace)?;
    let mut costs = Costs { verify, draft_npu, pim, draft_cfg: &w.draft, power: LanePower::from_profile(profile) };
    schedules.iter().map(|&s| run_schedule(w, s, &mut costs, batch_rule)).collect()
}

fn run_schedule(w: &SpecWorkload, schedule: SimSchedule, c: &mut Costs<'_>, batch_rule: BatchRule) -> Result<SpecSimResult> {
    let mut rng = ChaCha8Rng::seed_from_u64(w.seed);
    let (mut t, mut e_dyn, mut npu_busy, mut pim_busy) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    let (mut committed, mut verifications, mut drafted, mut wasted) = (0usize, 0usize, 0usize, 0usize);
    // Prefill of the prompt on the NPU (the target; the draft's prefill on its own unit).
    let (pt, pe) = c.verify(w.prompt, w.prompt)?;
    t += pt;
    e_dyn += pe;
    npu_busy += pt;
    let uses_pim = !matches!(schedule, SimSchedule::NpuOnly { .. });
    match schedule {
        SimSchedule::NpuOnly { draft_len } | SimSchedule::SyncPim { draft_len } => {
            while committed < w.answer {
                let ctx = w.prompt + committed;
                let k = draft_len.min(w.answer - committed);
                for i in 0..k {
                    let (dt, de) = if uses_pim { c.draft_on_pim(ctx + i) } else { c.draft_on_npu(ctx + i)? };
                    t += dt;
                    e_dyn += de;
                    if uses_pim {
                        pim_busy += dt;
                    } else {
                        npu_busy += dt;
                    }
                }
                drafted += k;
                let (vt, ve) = c.verify(k + 1, ctx + k + 1)?;
                t += vt;
                e_dyn += ve;
                npu_busy += vt;
                verifications += 1;
                let a = accepted(k, w.alpha, &mut rng);
                wasted += k - a;
                // The correction, or the bonus token after a fully accepted run.
                committed += a + 1;
            }
        }
        SimSchedule::AsyncPim { max_batch, max_ahead } => {
            // Ready times of drafts produced and not yet taken; when the drafter finishes its next.
            let mut ahead: std::collections::VecDeque<f64> = Default::default();
            let mut draft_per_token = 0.0f64;
            let mut verify_per_call: Option<f64> = None;
            let (pim, draft_cfg) = (c.pim, c.draft_cfg);
            // Produces drafts due by `until` (at most `max_ahead` waiting).
            let fill = |until: f64,
                            ahead: &mut std::collections::VecDeque<f64>,
                            next_ready: &mut Option<f64>,
                            ctx: usize,
                            drafted: &mut usize,
                            pim_busy: &mut f64,
                            e_dyn: &mut f64,
                            per: &mut f64| {
                loop {
                    if ahead.len() >= max_ahead {
                        *next_ready = None; // stalled until the verifier takes drafts
                        return;
                    }
                    let c = pim.token_cost(draft_cfg, ctx + ahead.len());
                    let (dt, de) = (c.time_s, c.energy_j);
                    *per = dt;
                    let ready = next_ready.unwrap_or(until);
                    if ready > until {
                        return;
                    }
                    ahead.push_back(ready);
                    *drafted += 1;
                    *pim_busy += dt;
                    *e_dyn += de;
                    *next_ready = Some(ready + dt);
                }
            };
            // The drafter starts right after the prompt is known.
            let (dt0, _) = c.draft_on_pim(w.prompt);
            let mut next_ready: Option<f64> = Some(t + dt0);
            while committed < w.answer {
                let ctx = w.prompt + committed;
                fill(t, &mut ahead, &mut next_ready, ctx, &mut drafted, &mut pim_busy, &mut e_dyn, &mut draft_per_token);
                // Wait for the first draft, then for as many as are worth waiting for.
                let want = batch_rule(w.alpha, verify_per_call, draft_per_token, ahead.len(), max_batch.min(w.answer - committed));
                while ahead.len() < want.max(1) {
                    let Some(r) = next_ready else { break };
                    t = t.max(r);
                    fill(t, &mut ahead, &mut next_ready, ctx, &mut drafted, &mut pim_busy, &mut e_dyn, &mut draft_per_token);
                }
                let n = ahead.len().min(max_batch).min(w.answer - committed).max(1);
                for _ in 0..n.min(ahead.len()) {
                    ahead.pop_front();
                }
                if next_ready.is_none() {
                    next_ready = Some(t + draft_per_token);
                }
                let (vt, ve) = c.verify(n + 1, ctx + n + 1)?;
                verify_per_call = Some(vt);
                t += vt;
                e_dyn += ve;
                npu_busy += vt;
                verifications += 1;
                // The drafter kept drafting during the verification.
                fill(t, &mut ahead, &mut next_ready, ctx + n, &mut drafted, &mut pim_busy, &mut e_dyn, &mut draft_per_token);
                let a = accepted(n, w.alpha, &mut rng);
                if a < n {
                    committed += a + 1;
                    // Drafts on the rejected path are lost; the drafter restarts at the verdict.
                    wasted += (n - a) + ahead.len();
                    ahead.clear();
                    next_ready = Some(t + draft_per_token);
                } else {
                    committed += n;
                }
            }
            wasted += ahead.len();
        }
    }
    let tokens = committed.min(w.answer);
    let idle_npu = (t - npu_busy).max(0.0);
    let mut energy = e_dyn + idle_npu * c.power.npu_idle_w;
    if uses_pim {
        energy += c.pim.leakage_w() * t;
    }
    Ok(SpecSimResult {
        schedule,
        tokens,
        time_s: t,
        tokens_per_s: tokens as f64 / t.max(1e-12),
        energy_j: energy,
        j_per_token: energy / tokens.max(1) as f64,
        npu_busy_s: npu_busy,
        pim_busy_s: pim_busy,
        verifications,
        drafted,
        wasted_drafts: wasted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::vnpu::replay::ModelPreset;

    fn workload(alpha: f64) -> SpecWorkload {
        SpecWorkload {
            target: ModelPreset::Llama3_8B.config(),
            draft: ModelPreset::Llama32_1B.config(),
            prompt: 128,
            answer: 256,
            alpha,
            seed: 7,
        }
    }

    #[test]
    fn async_overlaps_and_perfect_drafts_beat_imperfect_ones() {
        let profile = DeviceProfile::builtin("sm8750").unwrap();
        let pim = PimProfile::lpddr5().unwrap();
        let schedules = [
            SimSchedule::NpuOnly { draft_len: 4 },
            SimSchedule::SyncPim { draft_len: 8 },
            SimSchedule::AsyncPim { max_batch: 8, max_ahead: 16 },
        ];
        let rule: BatchRule = |_, _, _, ready, max| ready.min(max).max(1);
        let good = simulate_schedules(&workload(0.8), &profile, &pim, &schedules, rule).unwrap();
        for r in &good {
            assert_eq!(r.tokens, 256, "{r:?}");
            assert!(r.time_s > 0.0 && r.energy_j > 0.0);
        }
        // Sync: the units never work at once; async overlaps them.
        let (sync, asy) = (&good[1], &good[2]);
        assert!(sync.time_s >= sync.npu_busy_s + sync.pim_busy_s - 1e-9);
        assert!(asy.time_s < asy.npu_busy_s + asy.pim_busy_s, "{asy:?}");
        let bad = simulate_schedules(&workload(0.2), &profile, &pim, &schedules, rule).unwrap();
        for (g, b) in good.iter().zip(&bad) {
            assert!(g.tokens_per_s > b.tokens_per_s, "{g:?} vs {b:?}");
        }
    }
}
