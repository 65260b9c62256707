//! Speculative AR decoding schedules on a simulated phone (**simulated**): the target verifies
//! on the virtual NPU (its cost model, `sim.rs`), the draft runs on the NPU too or on the PIM
//! unit (`pim.rs`). Three schedules, as AHASD compares them:
//! - **NPU only**: draft and verify alternate on the one unit (AHASD's GPU-only baseline; our
//!   profiles have no GPU, so the NPU plays that part);
//! - **sync NPU+PIM**: draft on PIM, verify on the NPU, in turn, fixed draft length (SpecPIM's
//!   operator-level synchronous mapping);
//! - **async NPU+PIM**: drafter and verifier as independent tasks; the drafter keeps drafting
//!   while the verifier works, up to a bound and, with a drafting control, only while the
//!   control says drafting further ahead is worth it; a rejection discards the drafts made on
//!   the rejected path; the verifier takes the batch the time-aware rule says is worthwhile
//!   (`decode::spec_ar` runs the same policies for real on two CPU cores).
//!
//! Each draft gets an outcome when it is drafted (seeded): either drawn from measured
//! (entropy, accepted) pairs of a real run, so the drafting control sees the entropies that go
//! with acceptance, or accepted with a fixed probability and no entropy, the i.i.d. model of
//! Leviathan et al. §3. A verification accepts its drafts up to the first refused one.

use std::collections::VecDeque;

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
    /// `control_batch`: drafts per batch of the drafting control (0 = no control: the drafter
    /// fills the queue up to `max_ahead`). `min_batch`: drafts the verifier waits for at least
    /// (fewer, fuller verifications: each costs the target's whole weight stream); 1 leaves the
    /// batch to the time-aware rule alone.
    AsyncPim { max_batch: usize, max_ahead: usize, control_batch: usize, min_batch: usize },
}

/// Whether the asynchronous drafter drafts another batch ahead of verification, learning from
/// each verdict. The decoder's entropy-history control implements it
/// (`decode::spec_ar::control`); it is passed in, like [`BatchRule`], so this module does not
/// depend on the decoder. Batches are recorded with the mean entropy of their drafts' outcomes
/// (under the i.i.d. model all 0: one bin, so the control learns from the leading length and
/// the verdicts alone).
pub trait DraftingControl {
    /// Records a finished draft batch by its mean entropy (nats).
    fn record_batch(&mut self, mean_entropy: f64);
    /// Whether to draft another batch while `leading_batches` batches wait for verification.
    fn keep_drafting(&mut self, leading_batches: usize) -> bool;
    /// Learns from a verdict (every offered draft accepted, or not).
    fn on_verified(&mut self, fully_accepted: bool);
}

/// Makes a fresh drafting control for one simulated run.
pub type NewDraftingControl<'a> = &'a dyn Fn() -> Box<dyn DraftingControl>;

/// The workload: a target/draft pair, prompt and answer length, acceptance.
#[derive(Debug, Clone)]
pub struct SpecWorkload {
    pub target: ModelConfig,
    pub draft: ModelConfig,
    pub prompt: usize,
    pub answer: usize,
    pub outcomes: DraftOutcomes,
    pub seed: u64,
}

/// Where each simulated draft's fate comes from.
#[derive(Debug, Clone)]
pub enum DraftOutcomes {
    /// Accepted with this probability, entropy 0.
    Iid(f64),
    /// Drawn uniformly, with replacement, from measured (entropy in nats, accepted) pairs (not
    /// empty).
    Measured(Vec<(f64, bool)>),
}

/// A draft's fate, fixed when it is drafted.
#[derive(Debug, Clone, Copy)]
struct Outcome {
    entropy: f64,
    accepted: bool,
}

impl SpecWorkload {
    /// The outcome of the next draft.
    fn draw(&self, rng: &mut ChaCha8Rng) -> Outcome {
        match &self.outcomes {
            DraftOutcomes::Iid(alpha) => Outcome { entropy: 0.0, accepted: rng.random::<f64>() < *alpha },
            DraftOutcomes::Measured(v) => {
                let (entropy, accepted) = v[rng.random_range(0..v.len())];
                Outcome { entropy, accepted }
            }
        }
    }

    /// Per-draft acceptance of the model drafts follow (what the batch rule is told).
    pub fn acceptance(&self) -> f64 {
        match &self.outcomes {
            DraftOutcomes::Iid(alpha) => *alpha,
            DraftOutcomes::Measured(v) => v.iter().filter(|p| p.1).count() as f64 / v.len().max(1) as f64,
        }
    }
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

/// Drafts a verification accepts: those before the first refused one.
fn accepted<'a>(drafts: impl IntoIterator<Item = &'a Outcome>) -> usize {
    drafts.into_iter().take_while(|o| o.accepted).count()
}

/// How many drafts the asynchronous verifier takes: `(alpha, verify seconds per call if known,
/// draft seconds per token, drafts ready, most allowed) -> batch`. The decoder's own rule
/// (`decode::spec_ar::control::worthwhile_batch`) is passed in by the caller, so the simulated
/// schedule follows the real one without this module depending on the decoder.
pub type BatchRule = fn(f64, Option<f64>, f64, usize, usize) -> usize;

/// Simulates `schedules` for `w` on `profile`'s NPU with `pim` beside it (`new_control`: the
/// drafting control of asynchronous schedules with a `control_batch`).
pub fn simulate_schedules(
    w: &SpecWorkload,
    profile: &DeviceProfile,
    pim: &PimProfile,
    schedules: &[SimSchedule],
    batch_rule: BatchRule,
    new_control: NewDraftingControl<'_>,
) -> Result<Vec<SpecSimResult>> {
    let trace = DecodeTrace::autoregressive(w.prompt, w.answer);
    let (verify, _) = ar_npu_simulator(&w.target, profile, &trace)?;
    let (draft_npu, _) = ar_npu_simulator(&w.draft, profile, &trace)?;
    let mut costs = Costs { verify, draft_npu, pim, draft_cfg: &w.draft, power: LanePower::from_profile(profile) };
    schedules.iter().map(|&s| run_schedule(w, s, &mut costs, batch_rule, new_control)).collect()
}

/// The asynchronous drafter's state between events.
struct Drafter {
    /// When its next draft is ready (`None`: stalled).
    next_ready: Option<f64>,
    /// Stopped by the drafting control until the next verdict.
    held: bool,
    /// Seconds per draft token (the last one's).
    per_token: f64,
}

/// What the asynchronous drafter spent.
struct Tally {
    drafted: usize,
    pim_busy: f64,
    e_dyn: f64,
}

fn run_schedule(
    w: &SpecWorkload,
    schedule: SimSchedule,
    c: &mut Costs<'_>,
    batch_rule: BatchRule,
    new_control: NewDraftingControl<'_>,
) -> Result<SpecSimResult> {
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
                let outcomes: Vec<Outcome> = (0..k).map(|_| w.draw(&mut rng)).collect();
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
                let a = accepted(&outcomes);
                wasted += k - a;
                // The correction, or the bonus token after a fully accepted run.
                committed += a + 1;
            }
        }
        SimSchedule::AsyncPim { max_batch, max_ahead, control_batch, min_batch } => {
            let mut control = (control_batch > 0).then(new_control);
            let (pim, draft_cfg) = (c.pim, c.draft_cfg);
            let draft = |ctx: usize| pim.token_cost(draft_cfg, ctx);
            // Drafts produced and not yet taken (ready time, outcome). Drafts the verifier is
            // checking lead verification as much as the queued ones (`in_flight`, as in the
            // decoder, whose control counts every unverified draft).
            let mut ahead: VecDeque<(f64, Outcome)> = VecDeque::new();
            let mut drafter = Drafter { next_ready: None, held: false, per_token: 0.0 };
            let mut verify_per_call: Option<f64> = None;
            let mut spent = Tally { drafted: 0, pim_busy: 0.0, e_dyn: 0.0 };
            let alpha = w.acceptance();
            // Produces drafts due by `until`: at most `max_ahead` waiting, and at a batch boundary
            // only if the drafting control says so (held: the next draft starts at the next
            // verdict).
            type Control = Option<Box<dyn DraftingControl>>;
            let fill = |until: f64,
                        d: &mut Drafter,
                        control: &mut Control,
                        ahead: &mut VecDeque<(f64, Outcome)>,
                        in_flight: &[Outcome],
                        ctx: usize,
                        spent: &mut Tally,
                        rng: &mut ChaCha8Rng| {
                loop {
                    if ahead.len() >= max_ahead {
                        d.next_ready = None; // stalled until the verifier takes drafts
                        return;
                    }
                    let lead = in_flight.len() + ahead.len();
                    if let Some(ctl) = control.as_mut() {
                        if d.held {
                            return;
                        }
                        if lead > 0 && lead.is_multiple_of(control_batch) && !ctl.keep_drafting(lead / control_batch) {
                            d.held = true;
                            d.next_ready = None;
                            return;
                        }
                    }
                    let cost = draft(ctx + ahead.len());
                    d.per_token = cost.time_s;
                    let ready = d.next_ready.unwrap_or(until);
                    if ready > until {
                        return;
                    }
                    ahead.push_back((ready, w.draw(rng)));
                    if let Some(ctl) = control.as_mut() {
                        if (lead + 1).is_multiple_of(control_batch) {
                            // The batch just finished: the last drafts of those leading.
                            let leading = in_flight.iter().chain(ahead.iter().map(|(_, o)| o));
                            let h: f64 = leading.skip(lead + 1 - control_batch).map(|o| o.entropy).sum();
                            ctl.record_batch(h / control_batch as f64);
                        }
                    }
                    spent.drafted += 1;
                    spent.pim_busy += cost.time_s;
                    spent.e_dyn += cost.energy_j;
                    d.next_ready = Some(ready + cost.time_s);
                }
            };
            // The drafter starts right after the prompt is known.
            drafter.next_ready = Some(t + draft(w.prompt).time_s);
            while committed < w.answer {
                let ctx = w.prompt + committed;
                fill(t, &mut drafter, &mut control, &mut ahead, &[], ctx, &mut spent, &mut rng);
                // Wait for the first draft, then for as many as are worth waiting for.
                let most = max_batch.min(w.answer - committed);
                let want = batch_rule(alpha, verify_per_call, drafter.per_token, ahead.len(), most).max(min_batch.min(most));
                while ahead.len() < want.max(1) {
                    let Some(r) = drafter.next_ready else { break };
                    t = t.max(r);
                    fill(t, &mut drafter, &mut control, &mut ahead, &[], ctx, &mut spent, &mut rng);
                }
                let take = ahead.len().min(max_batch).min(w.answer - committed);
                let batch: Vec<Outcome> = ahead.drain(..take).map(|(_, o)| o).collect();
                let n = batch.len();
                if drafter.next_ready.is_none() && !drafter.held {
                    drafter.next_ready = Some(t + drafter.per_token);
                }
                let (vt, ve) = c.verify(n + 1, ctx + n + 1)?;
                verify_per_call = Some(vt);
                t += vt;
                e_dyn += ve;
                npu_busy += vt;
                verifications += 1;
                // The drafter kept drafting during the verification.
                fill(t, &mut drafter, &mut control, &mut ahead, &batch, ctx + n, &mut spent, &mut rng);
                let a = accepted(&batch);
                if let Some(ctl) = control.as_mut() {
                    ctl.on_verified(a == n);
                }
                if a < n {
                    committed += a + 1;
                    // Drafts on the rejected path are lost; the drafter restarts at the verdict.
                    wasted += (n - a) + ahead.len();
                    ahead.clear();
                    drafter.next_ready = Some(t + drafter.per_token);
                } else {
                    // Every draft accepted (a forward with none, nothing being ready, still
                    // commits the target's own next token).
                    committed += n.max(1);
                    if drafter.held {
                        drafter.next_ready = Some(t + drafter.per_token);
                    }
                }
                drafter.held = false;
            }
            wasted += ahead.len();
            drafted += spent.drafted;
            pim_busy += spent.pim_busy;
            e_dyn += spent.e_dyn;
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
            outcomes: DraftOutcomes::Iid(alpha),
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
            SimSchedule::AsyncPim { max_batch: 8, max_ahead: 16, control_batch: 0, min_batch: 1 },
        ];
        let rule: BatchRule = |_, _, _, ready, max| ready.min(max).max(1);
        let good = simulate_schedules(&workload(0.8), &profile, &pim, &schedules, rule, &no_control).unwrap();
        for r in &good {
            assert_eq!(r.tokens, 256, "{r:?}");
            assert!(r.time_s > 0.0 && r.energy_j > 0.0);
        }
        // Sync: the units never work at once; async overlaps them.
        let (sync, asy) = (&good[1], &good[2]);
        assert!(sync.time_s >= sync.npu_busy_s + sync.pim_busy_s - 1e-9);
        assert!(asy.time_s < asy.npu_busy_s + asy.pim_busy_s, "{asy:?}");
        let bad = simulate_schedules(&workload(0.2), &profile, &pim, &schedules, rule, &no_control).unwrap();
        for (g, b) in good.iter().zip(&bad) {
            assert!(g.tokens_per_s > b.tokens_per_s, "{g:?} vs {b:?}");
        }
    }

    fn no_control() -> Box<dyn DraftingControl> {
        unreachable!("no schedule here has a drafting control")
    }

    /// Drafts at most `limit` batches ahead of verification; counts what it is told.
    struct Limit {
        limit: usize,
        batches: std::rc::Rc<std::cell::Cell<usize>>,
        verdicts: std::rc::Rc<std::cell::Cell<usize>>,
    }

    impl DraftingControl for Limit {
        fn record_batch(&mut self, _: f64) {
            self.batches.set(self.batches.get() + 1);
        }
        fn keep_drafting(&mut self, leading_batches: usize) -> bool {
            leading_batches < self.limit
        }
        fn on_verified(&mut self, _: bool) {
            self.verdicts.set(self.verdicts.get() + 1);
        }
    }

    /// A drafting control that stops the drafter early wastes fewer drafts and less PIM time at
    /// low acceptance, hears every verdict, and still produces every token. (Not less energy:
    /// verifications cost far more than drafts here, and a drafter held back leaves the verifier
    /// smaller batches, so more verifications.)
    #[test]
    fn a_drafting_control_cuts_wasted_drafts() {
        let profile = DeviceProfile::builtin("sm8750").unwrap();
        let pim = PimProfile::lpddr5().unwrap();
        let (batches, verdicts) = (std::rc::Rc::new(std::cell::Cell::new(0)), std::rc::Rc::new(std::cell::Cell::new(0)));
        let (b2, v2) = (batches.clone(), verdicts.clone());
        let limit = move || -> Box<dyn DraftingControl> { Box::new(Limit { limit: 1, batches: b2.clone(), verdicts: v2.clone() }) };
        let rule: BatchRule = |_, _, _, ready, max| ready.min(max).max(1);
        let free = SimSchedule::AsyncPim { max_batch: 8, max_ahead: 16, control_batch: 0, min_batch: 1 };
        let held = SimSchedule::AsyncPim { max_batch: 8, max_ahead: 16, control_batch: 2, min_batch: 1 };
        let r = simulate_schedules(&workload(0.4), &profile, &pim, &[free, held], rule, &limit).unwrap();
        let (free, held) = (&r[0], &r[1]);
        assert_eq!((free.tokens, held.tokens), (256, 256));
        assert!(held.wasted_drafts < free.wasted_drafts && held.drafted < free.drafted, "{held:?} vs {free:?}");
        assert!(held.pim_busy_s < free.pim_busy_s && held.verifications >= free.verifications, "{held:?} vs {free:?}");
        assert_eq!(verdicts.get(), held.verifications);
        assert!(batches.get() > 0);
    }

    /// A verifier that waits for at least `min_batch` drafts verifies less often, with fuller
    /// batches: fewer target weight streams.
    #[test]
    fn a_minimum_batch_means_fewer_fuller_verifications() {
        let profile = DeviceProfile::builtin("sm8750").unwrap();
        let pim = PimProfile::lpddr5().unwrap();
        // The rule alone would verify whatever one draft is ready.
        let rule: BatchRule = |_, _, _, _, _| 1;
        let at = |m| SimSchedule::AsyncPim { max_batch: 8, max_ahead: 16, control_batch: 0, min_batch: m };
        let r = simulate_schedules(&workload(0.8), &profile, &pim, &[at(1), at(4)], rule, &no_control).unwrap();
        let (eager, patient) = (&r[0], &r[1]);
        assert_eq!((eager.tokens, patient.tokens), (256, 256));
        assert!(patient.verifications < eager.verifications, "{patient:?} vs {eager:?}");
        assert!(patient.npu_busy_s < eager.npu_busy_s, "{patient:?} vs {eager:?}");
        let per = |x: &SpecSimResult| x.tokens as f64 / x.verifications as f64;
        assert!(per(patient) > per(eager) + 0.5, "{patient:?} vs {eager:?}");
    }

    /// Keeps drafting while the last finished batch's mean entropy is low.
    struct Calm {
        last: f64,
    }

    impl DraftingControl for Calm {
        fn record_batch(&mut self, mean_entropy: f64) {
            self.last = mean_entropy;
        }
        fn keep_drafting(&mut self, _: usize) -> bool {
            self.last < 1.0
        }
        fn on_verified(&mut self, _: bool) {}
    }

    /// Drafts drawn from measured (entropy, accepted) pairs carry their entropies to the
    /// drafting control: where refusals come with high entropy, a control that stops on it
    /// wastes fewer drafts; where entropy says nothing, it changes nothing.
    #[test]
    fn drawn_drafts_carry_their_entropy_to_the_control() {
        let profile = DeviceProfile::builtin("sm8750").unwrap();
        let pim = PimProfile::lpddr5().unwrap();
        let calm = || -> Box<dyn DraftingControl> { Box::new(Calm { last: 0.0 }) };
        let rule: BatchRule = |_, _, _, ready, max| ready.min(max).max(1);
        let free = SimSchedule::AsyncPim { max_batch: 8, max_ahead: 16, control_batch: 0, min_batch: 1 };
        let held = SimSchedule::AsyncPim { max_batch: 8, max_ahead: 16, control_batch: 1, min_batch: 1 };
        let telling = SpecWorkload { outcomes: DraftOutcomes::Measured(vec![(0.1, true), (0.1, true), (0.1, true), (3.0, false)]), ..workload(0.0) };
        assert_eq!(telling.acceptance(), 0.75);
        let r = simulate_schedules(&telling, &profile, &pim, &[free, held], rule, &calm).unwrap();
        assert_eq!((r[0].tokens, r[1].tokens), (256, 256));
        assert!(r[1].wasted_drafts < r[0].wasted_drafts, "{:?} vs {:?}", r[1], r[0]);
        let mute = SpecWorkload { outcomes: DraftOutcomes::Measured(vec![(0.1, true), (0.1, true), (0.1, true), (0.1, false)]), ..workload(0.0) };
        let r = simulate_schedules(&mute, &profile, &pim, &[free, held], rule, &calm).unwrap();
        assert_eq!((r[0].drafted, r[0].wasted_drafts, r[0].time_s), (r[1].drafted, r[1].wasted_drafts, r[1].time_s));
    }
}
