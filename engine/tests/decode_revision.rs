//! Dual-path progressive revision on the tiny golden LLaDA (random weights: low confidences, so
//! tokens stay Visible and revisions happen) behind a recording fake backend: concurrency of the
//! CPU path, flags, selective logit skipping, delayed merges, the inline fallback.

#[path = "common/npu.rs"]
mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{model, prompt, run_npu, states_before_steps, FakeNpu};
use unmask_engine::decode::revision::{CpuPathEnd, CpuPathSchedule, RevisionSettings};
use unmask_engine::decode::speculative::SpeculativeSettings;
use unmask_engine::decode::{CacheMode, DecodeSettings, TokenState};

/// The llada test model on the virtual SM8750, timed at LLaDA-8B shapes (a CPU-path re-check on
/// the phone's cores lasts several dense NPU forwards there).
fn phone_8b_vnpu() -> unmask_engine::backend::vnpu::VirtualNpu {
    use unmask_engine::backend::vnpu::replay::ModelPreset;
    use unmask_engine::backend::vnpu::{DeviceProfile, VirtualNpu, VnpuConfig};
    let cfg = VnpuConfig { timed_as: Some(ModelPreset::Llada8B.config()), ..VnpuConfig::default() };
    VirtualNpu::new(model("llada"), DeviceProfile::builtin("sm8750").unwrap(), cfg).unwrap()
}

const MASK: u32 = 255;

fn settings(cache: CacheMode) -> DecodeSettings {
    DecodeSettings {
        gen_length: 32,
        block_length: 8,
        steps: 32,
        cache,
        // Random weights give probabilities of a few percent: a tiny margin lets revisions fire.
        revision: Some(RevisionSettings { revise_margin: 0.001, ..Default::default() }),
        ..Default::default()
    }
}

/// The CPU path runs on another thread, overlapping the dense forward in time; revised tokens
/// are flagged, stay Visible, and every Visible token ends Stable.
#[test]
fn cpu_path_runs_concurrently_and_flags_revisions() {
    let mut be = FakeNpu::new(model("llada"), Some(vec![16, 32, 64]));
    be.delay = Duration::from_millis(3);
    let p = prompt("llada", 0);
    let (out, stats, frames) = run_npu(&mut be, &p, &settings(CacheMode::Prefix));
    assert!(stats.concurrent);
    assert!(stats.cpu_forwards > 0);
    let dense = stats.dense_thread.unwrap();
    assert!(!stats.cpu_threads.is_empty() && !stats.cpu_threads.contains(&dense));
    let fwds = be.forwards();
    let (d, c): (Vec<_>, Vec<_>) = fwds.iter().partition(|f| f.thread == dense);
    assert_eq!(c.len(), stats.cpu_forwards);
    let overlaps = c.iter().filter(|cf| d.iter().any(|df| cf.began < df.ended && df.began < cf.ended)).count();
    assert!(overlaps > 0, "CPU-path forwards never overlapped a dense forward");

    let revised: Vec<_> = frames.iter().flat_map(|f| f.changes.iter()).filter(|c| c.revised).collect();
    assert!(stats.revisions > 0, "no revision on random weights");
    assert_eq!(revised.iter().filter(|c| c.state == TokenState::Visible).count(), stats.revisions);
    assert!(revised.iter().all(|c| !c.speculative && c.token != MASK));
    assert!(frames.iter().flat_map(|f| f.changes.iter()).any(|c| c.state == TokenState::Visible && !c.revised));
    assert!((p.len()..out.canvas.len()).all(|q| out.canvas.state(q) == TokenState::Stable));
    println!(
        "revisions {} promotions {} cpu forwards {} merges {}",
        stats.revisions,
        stats.promotions,
        stats.cpu_forwards,
        stats.merges.len()
    );
}

/// Dense rows go to masked positions only, CPU-path rows to Visible positions only: Stable
/// tokens (prompt, promoted) never get an LM-head row.
#[test]
fn stable_tokens_get_no_logit_rows() {
    for cache in [CacheMode::None, CacheMode::Prefix] {
        let mut be = FakeNpu::new(model("llada"), Some(vec![16, 32, 64]));
        let p = prompt("llada", 1);
        let mut s = settings(cache);
        s.speculative = Some(SpeculativeSettings::default());
        let (_, stats, frames) = run_npu(&mut be, &p, &s);
        let before = states_before_steps(&p, &s, MASK, &frames);
        let dense = stats.dense_thread.unwrap();
        let fwds = be.forwards();
        let dense_fwds: Vec<_> = fwds.iter().filter(|f| f.thread == dense).collect();
        assert_eq!(dense_fwds.len(), frames.len());
        for (f, canvas) in dense_fwds.iter().zip(&before) {
            assert!(
                f.rows.iter().all(|&r| canvas.state(r) == TokenState::Masked),
                "{cache:?}: dense row on a committed token"
            );
        }
        // The counted LM-head rows are the rows the forwards asked for, and fewer than a
        // full-logits forward of each window would compute.
        assert_eq!(stats.lm_head_rows, dense_fwds.iter().map(|f| f.rows.len()).sum::<usize>());
        assert_eq!(stats.lm_head_window_rows, dense_fwds.iter().map(|f| f.len).sum::<usize>());
        assert!(stats.lm_head_rows < stats.lm_head_window_rows);
        let cpu_rows: Vec<_> = fwds.iter().filter(|f| f.thread != dense && !f.rows.is_empty()).collect();
        assert_eq!(stats.lm_head_rows_cpu_path, cpu_rows.iter().map(|f| f.rows.len()).sum::<usize>());
        assert_eq!(cpu_rows.len(), stats.checks.len());
        for (f, (step, checked)) in cpu_rows.iter().zip(&stats.checks) {
            assert_eq!(&f.rows, checked);
            assert!(
                checked.iter().all(|&q| before[*step].state(q) == TokenState::Visible),
                "{cache:?}: CPU row on a non-Visible token"
            );
        }
        assert!(!stats.checks.is_empty());
    }
}

/// K/V of revised tokens reach the prefix cache only through merges recorded at the end of the
/// step that revised them, for positions the cache holds; without a cache nothing is merged.
#[test]
fn revised_kv_is_merged_only_at_step_boundaries() {
    let p = prompt("llada", 0);
    let mut be = FakeNpu::new(model("llada"), None);
    let (_, stats, frames) = run_npu(&mut be, &p, &settings(CacheMode::Prefix));
    assert!(!stats.merges.is_empty(), "no revision hit a cached position");
    for m in &stats.merges {
        let f = &frames[m.step];
        let revised: HashSet<usize> = f.changes.iter().filter(|c| c.revised).map(|c| c.pos).collect();
        assert!(
            m.positions.iter().all(|q| revised.contains(q)),
            "merged {:?} not revised in step {}",
            m.positions,
            m.step
        );
        assert!(m.positions.iter().all(|q| (f.block.0..f.block.1).contains(q)));
    }
    let mut be = FakeNpu::new(model("llada"), None);
    let (_, stats, _) = run_npu(&mut be, &p, &settings(CacheMode::None));
    assert!(stats.revisions > 0 && stats.merges.is_empty());
}

/// A backend without a revision twin runs the CPU path inline on the dense thread, same result.
#[test]
fn inline_fallback_gives_the_same_tokens() {
    let p = prompt("llada", 0);
    let s = settings(CacheMode::Prefix);
    let mut threaded = FakeNpu::new(model("llada"), None);
    let (a, sa, _) = run_npu(&mut threaded, &p, &s);
    let mut inline = FakeNpu::new(model("llada"), None);
    inline.twin = false;
    let (b, sb, _) = run_npu(&mut inline, &p, &s);
    assert!(sa.concurrent && !sb.concurrent);
    assert_eq!(sb.cpu_threads, vec![sb.dense_thread.unwrap()]);
    assert_eq!(a.tokens, b.tokens);
    assert_eq!((sa.revisions, sa.merges.clone()), (sb.revisions, sb.merges.clone()));
}

/// Strict thresholds: with stable_threshold 0 every commit is Stable at once, so the CPU path
/// has nothing to do and the run equals the same loop without revision.
#[test]
fn everything_stable_means_no_cpu_path() {
    let p = prompt("llada", 0);
    let mut s = settings(CacheMode::Prefix);
    s.revision = Some(RevisionSettings { visible_threshold: 0.0, stable_threshold: 0.0, ..Default::default() });
    let mut be = FakeNpu::new(model("llada"), None);
    let (a, stats, _) = run_npu(&mut be, &p, &s);
    assert_eq!(stats.cpu_forwards, 0);
    let mut be = FakeNpu::new(model("llada"), None);
    let (b, _, _) = run_npu(&mut be, &p, &DecodeSettings { revision: None, ..s.clone() });
    assert_eq!(a.tokens, b.tokens);
}

fn lockstep(cache: CacheMode) -> DecodeSettings {
    let mut s = settings(cache);
    if let Some(r) = s.revision.as_mut() {
        r.schedule = CpuPathSchedule::Lockstep;
    }
    s
}

/// With a look-back, tokens of completed blocks stay Visible and are re-checked (and revised,
/// their cached K/V merged in place) while later blocks commit, never further back than the
/// look-back; without one, no check ever reaches before its block. Everything ends Stable.
#[test]
fn lookback_keeps_completed_blocks_revisable() {
    let p = prompt("llada", 0);
    for lookback in [0usize, 16] {
        let mut s = lockstep(CacheMode::Prefix);
        if let Some(r) = s.revision.as_mut() {
            r.lookback = lookback;
        }
        let mut be = FakeNpu::new(model("llada"), None);
        let (out, stats, frames) = run_npu(&mut be, &p, &s);
        let mut behind = 0;
        for (step, positions) in &stats.checks {
            let block = frames[*step].block;
            assert!(positions.iter().all(|&q| q + lookback >= block.0 && q < block.1), "step {step}: {positions:?}");
            behind += positions.iter().filter(|&&q| q < block.0).count();
        }
        let revised_behind = frames
            .iter()
            .flat_map(|f| f.changes.iter().filter(|c| c.revised && c.pos < f.block.0))
            .count();
        let merged_behind =
            stats.merges.iter().filter(|m| m.positions.iter().any(|&q| q < frames[m.step].block.0)).count();
        if lookback == 0 {
            assert_eq!((behind, revised_behind, merged_behind), (0, 0, 0));
        } else {
            assert!(behind > 0, "no check reached a completed block");
            assert!(revised_behind > 0, "no revision in a completed block");
            assert!(merged_behind > 0, "no revised K/V merged behind the current block");
        }
        assert!((p.len()..out.canvas.len()).all(|q| out.canvas.state(q) == TokenState::Stable));
    }
}

/// On the virtual NPU the CPU path is the phone's CPU: its forwards are simulated on the profile's
/// CPU cores and appear on the device timeline as `cpu_path` tasks beside the dense forward of
/// their step; in lockstep a step lasts as long as the longer path.
#[test]
fn cpu_path_tasks_are_on_the_virtual_npu_timeline() {
    use unmask_engine::backend::vnpu::{DeviceProfile, VirtualNpu, VnpuConfig};
    use unmask_engine::trace::Lane;
    let mut npu =
        VirtualNpu::new(model("llada"), DeviceProfile::builtin("sm8750").unwrap(), VnpuConfig::default()).unwrap();
    let p = prompt("llada", 0);
    let (out, stats, frames) = run_npu(&mut npu, &p, &lockstep(CacheMode::Prefix));
    assert!(stats.lockstep);
    assert!(stats.concurrent && stats.cpu_forwards > 0);
    let totals = npu.totals();
    assert_eq!(totals.cpu_path.forwards, stats.cpu_forwards);
    assert!(totals.cpu_path.simulated_s > 0.0 && totals.cpu_path.energy_j > 0.0);
    let t = npu.timeline();
    let cpu: Vec<_> = t.events.iter().filter(|e| e.category == "cpu_path").collect();
    assert!(!cpu.is_empty());
    assert!(
        cpu.iter().all(|e| matches!(e.lane, Lane::Cpu(i) if i >= 1)),
        "the CPU path never uses the core driving the NPU"
    );
    // Dense forwards (summary events on the NPU lane) never overlap a CPU task of an earlier
    // step: each dense forward starts after everything recorded before it.
    let dense: Vec<_> = t.events.iter().filter(|e| e.lane == Lane::Npu && e.is_summary()).collect();
    for w in dense.windows(2) {
        let (a, b) = (w[0], w[1]);
        let between = cpu.iter().filter(|c| c.start_sim >= a.start_sim && c.start_sim < b.start_sim);
        for c in between {
            assert!(c.start_sim + c.dur_sim <= b.start_sim + 1e-12, "next dense forward starts after the CPU task");
        }
    }
    // Every CPU task starts with the dense forward it ran beside.
    assert!(cpu
        .iter()
        .all(|c| dense.iter().any(|d| (d.start_sim - c.start_sim).abs() < 1e-12 || c.start_sim >= d.start_sim)));
    // The decode's simulated total is the sum over steps of the longer path.
    let per_step: f64 = frames.iter().filter_map(|f| f.simulated_s).sum();
    assert!((out.simulated_s.unwrap() - per_step).abs() < 1e-9);
    assert!(
        (t.end_sim() - per_step).abs() < 1e-6 * per_step.max(1.0),
        "timeline span {} vs steps {per_step}",
        t.end_sim()
    );
}

/// The asynchronous schedule, timed at LLaDA-8B shapes (where a CPU-path forward on the phone's
/// cores lasts several dense NPU forwards): the dense path never waits, so the run's simulated
/// time is the dense forwards' alone and below lockstep's; jobs outlast their step, their verdicts
/// land later, steps find the CPU path busy; on the timeline dense forwards run back to back while
/// CPU tasks overlap later dense forwards and never each other.
#[test]
fn async_cpu_path_never_stalls_the_dense_path() {
    use unmask_engine::trace::Lane;
    let p = prompt("llada", 0);
    let mut a = phone_8b_vnpu();
    let (out, stats, frames) = run_npu(&mut a, &p, &settings(CacheMode::Prefix));
    assert!(!stats.lockstep && stats.concurrent);
    assert!(stats.deferred > 0 && stats.busy_steps > 0, "deferred {} busy {}", stats.deferred, stats.busy_steps);
    let t = a.timeline();
    let dense: Vec<_> = t.events.iter().filter(|e| e.lane == Lane::Npu && e.is_summary()).collect();
    assert_eq!(dense.len(), frames.len());
    let per_step: f64 = frames.iter().filter_map(|f| f.simulated_s).sum();
    let dense_s: f64 = dense.iter().map(|e| e.dur_sim).sum();
    assert!((out.simulated_s.unwrap() - per_step).abs() < 1e-9);
    assert!((per_step - dense_s).abs() < 1e-9 * per_step, "a step lasts its dense forward: {per_step} vs {dense_s}");
    for w in dense.windows(2) {
        assert!(w[1].start_sim + 1e-12 >= w[0].start_sim + w[0].dur_sim, "dense forwards never overlap");
    }
    let mut cpu: Vec<_> = t.events.iter().filter(|e| e.category == "cpu_path" && e.lane == Lane::Cpu(1)).collect();
    cpu.sort_by(|x, y| x.start_sim.total_cmp(&y.start_sim));
    for w in cpu.windows(2) {
        assert!(w[1].start_sim + 1e-12 >= w[0].start_sim + w[0].dur_sim, "the CPU path runs one task at a time");
    }
    let spans_later = cpu
        .iter()
        .any(|c| dense.iter().any(|d| d.start_sim > c.start_sim + 1e-12 && d.start_sim < c.start_sim + c.dur_sim));
    assert!(spans_later, "no CPU task overlapped a later dense forward");
    // The same run in lockstep takes longer in simulated time (it waits for every job).
    let mut b = phone_8b_vnpu();
    let (lo, ls, _) = run_npu(&mut b, &p, &lockstep(CacheMode::Prefix));
    assert!(ls.lockstep && ls.deferred == 0 && ls.busy_steps == 0);
    assert!(out.simulated_s.unwrap() < lo.simulated_s.unwrap());
    // Every Visible token still ends Stable.
    assert!((p.len()..out.canvas.len()).all(|q| out.canvas.state(q) == TokenState::Stable));
}

/// Draining the last job on the async schedule: the dense path waits for that job's simulated
/// end, and the wait is charged to the run's last step, so draining never looks free.
#[test]
fn async_drain_charges_the_wait_for_the_last_job() {
    let p = prompt("llada", 1);
    let mut s = settings(CacheMode::Prefix);
    if let Some(r) = s.revision.as_mut() {
        r.lookback = 16;
    }
    let (dropped, sd, fd) = run_npu(&mut phone_8b_vnpu(), &p, &s);
    if let Some(r) = s.revision.as_mut() {
        r.at_end = CpuPathEnd::Drain;
    }
    let (drained, sn, fn_) = run_npu(&mut phone_8b_vnpu(), &p, &s);
    assert_eq!((sd.dropped_jobs, sn.drained_jobs), (1, 1), "a job should be in flight at the end");
    // Identical runs up to the last step, whose time includes the wait.
    assert_eq!(fd.len(), fn_.len());
    let last = |f: &[unmask_engine::decode::StepFrame]| f.last().and_then(|f| f.simulated_s).unwrap();
    assert!(last(&fn_) > last(&fd), "{} vs {}", last(&fn_), last(&fd));
    let (a, b) = (dropped.simulated_s.unwrap(), drained.simulated_s.unwrap());
    assert!((b - a - (last(&fn_) - last(&fd))).abs() < 1e-9 * b);
    assert!((b - fn_.iter().filter_map(|f| f.simulated_s).sum::<f64>()).abs() < 1e-9 * b);
}

/// Final passes: when the run ends, the dense path re-checks the tokens still Visible (one
/// forward per pass, at most `final_passes`), and the run pays for it: the passes' forwards are
/// the run's, their simulated time is the last step's. Up to the end the run is the one without
/// them; afterwards tokens differ only where a pass revised them, and everything ends Stable.
#[test]
fn final_passes_recheck_on_the_dense_path_and_are_charged() {
    let p = prompt("llada", 2);
    let mut s = settings(CacheMode::Prefix);
    if let Some(r) = s.revision.as_mut() {
        r.lookback = 32;
    }
    let (plain, sp, fp) = run_npu(&mut phone_8b_vnpu(), &p, &s);
    assert_eq!((sp.final_pass_forwards, sp.final_pass_revisions, sp.lm_head_rows_final_passes), (0, 0, 0));
    if let Some(r) = s.revision.as_mut() {
        r.final_passes = 4;
    }
    let (fin, sf, ff) = run_npu(&mut phone_8b_vnpu(), &p, &s);
    assert!((1..=4).contains(&sf.final_pass_forwards), "{} final forwards", sf.final_pass_forwards);
    assert!(sf.final_pass_revisions > 0 && sf.revisions >= sf.final_pass_revisions);
    assert!(sf.lm_head_rows_final_passes > 0);
    assert_eq!(fin.forwards, plain.forwards + sf.final_pass_forwards);
    assert_eq!(ff.len(), fp.len(), "the passes add no step");
    let last = |f: &[unmask_engine::decode::StepFrame]| f.last().and_then(|f| f.simulated_s).unwrap();
    assert!(last(&ff) > last(&fp), "the passes' time is the last step's");
    let total = fin.simulated_s.unwrap();
    assert!((total - ff.iter().filter_map(|f| f.simulated_s).sum::<f64>()).abs() < 1e-9 * total);
    let revised_at_end: HashSet<usize> =
        ff.last().unwrap().changes.iter().filter(|c| c.revised).map(|c| c.pos).collect();
    for (i, (a, b)) in plain.tokens.iter().zip(&fin.tokens).enumerate() {
        assert!(a == b || revised_at_end.contains(&(p.len() + i)), "position {} changed unrevised", p.len() + i);
    }
    assert!((p.len()..fin.canvas.len()).all(|q| fin.canvas.state(q) == TokenState::Stable));
    // Without a look-back only the last block is still Visible at the end; its checks stay there.
    if let Some(r) = s.revision.as_mut() {
        r.lookback = 0;
    }
    let (_, s0, f0) = run_npu(&mut phone_8b_vnpu(), &p, &s);
    let last_block = f0.last().unwrap().block;
    let revised: Vec<usize> = f0.last().unwrap().changes.iter().filter(|c| c.revised).map(|c| c.pos).collect();
    assert!(s0.final_pass_forwards <= 4 && revised.iter().all(|&q| q >= last_block.0 && q < last_block.1));
    // Out of range is refused before anything runs.
    if let Some(r) = s.revision.as_mut() {
        r.final_passes = 65;
    }
    assert!(s.revision.as_ref().unwrap().validate().is_err());
}

/// Isolated final passes: no pass re-masks two neighbours, and the passes go on past a quiet
/// one until every Visible token had a check after the last revision (or the budget ends).
#[test]
fn isolated_final_passes_check_every_token_apart_from_its_neighbours() {
    let p = prompt("llada", 2);
    let mut s = settings(CacheMode::Prefix);
    if let Some(r) = s.revision.as_mut() {
        r.lookback = 32;
        r.final_passes = 8;
        r.max_checks = 64;
    }
    let (_, plain, _) = run_npu(&mut phone_8b_vnpu(), &p, &s);
    if let Some(r) = s.revision.as_mut() {
        r.isolated_checks = true;
    }
    let (fin, iso, frames) = run_npu(&mut phone_8b_vnpu(), &p, &s);
    // A whole-answer pass checks every Visible token at once; isolated, each pass at most every
    // other one, so the same tokens take at least two passes and as many rows or more.
    assert!(iso.final_pass_forwards >= 2 && iso.final_pass_forwards <= 8, "{}", iso.final_pass_forwards);
    assert!(iso.final_pass_forwards >= plain.final_pass_forwards);
    assert!(iso.lm_head_rows_final_passes > 0);
    let revised: Vec<usize> = frames.last().unwrap().changes.iter().filter(|c| c.revised).map(|c| c.pos).collect();
    assert!(revised.len() >= iso.final_pass_revisions);
    assert!((p.len()..fin.canvas.len()).all(|q| fin.canvas.state(q) == TokenState::Stable));
}

/// Fresh final passes forward the whole canvas without the cache (every position's K/V from the
/// finished answer); cached ones read the prefix cache and forward only from the first check.
/// Up to the end the two runs are the same run.
#[test]
fn fresh_final_passes_forward_the_whole_canvas_without_the_cache() {
    use unmask_engine::model::KvMode;
    let p = prompt("llada", 2);
    let mut s = settings(CacheMode::Prefix);
    if let Some(r) = s.revision.as_mut() {
        r.lookback = 32;
        r.final_passes = 4;
        r.isolated_checks = true;
        r.schedule = CpuPathSchedule::Inline;
    }
    let passes = |s: &DecodeSettings| {
        let mut be = FakeNpu::new(model("llada"), Some(vec![16, 32, 64]));
        let (out, st, frames) = run_npu(&mut be, &p, s);
        let fwds = be.forwards();
        assert!(st.final_pass_forwards > 0);
        let before = fwds[..fwds.len() - st.final_pass_forwards].to_vec();
        let last = fwds[fwds.len() - st.final_pass_forwards..].to_vec();
        (out, frames.len(), before, last)
    };
    let (cached, cached_steps, cached_before, cached_last) = passes(&s);
    if let Some(r) = s.revision.as_mut() {
        r.fresh_final_passes = true;
    }
    let (fresh, fresh_steps, fresh_before, fresh_last) = passes(&s);
    let canvas = fresh.canvas.len();
    assert!(fresh_last.iter().all(|f| f.start == 0 && f.len == canvas && f.kv == KvMode::Ignore));
    assert!(cached_last.iter().all(|f| f.start > 0 && f.len < canvas && f.kv == KvMode::Read));
    assert!(fresh_last.iter().all(|f| !f.rows.is_empty() && f.rows.iter().all(|&r| r >= p.len())));
    assert_eq!(cached_steps, fresh_steps);
    let shape = |f: &[common::Fwd]| f.iter().map(|f| (f.start, f.len, f.rows.clone())).collect::<Vec<_>>();
    assert_eq!(shape(&cached_before), shape(&fresh_before), "the runs differ only at the end");
    assert_eq!(cached.canvas.len(), canvas);
}

/// The inline schedule keeps revision off the CPU: on the virtual NPU (which has a CPU path) the
/// re-checks run on the dense device right after each forward, on the NPU lane; their forwards
/// are the run's and a step lasts both. Its verdicts are lockstep's, so the tokens are too.
#[test]
fn inline_schedule_runs_the_rechecks_on_the_dense_device() {
    use unmask_engine::backend::vnpu::{DeviceProfile, VirtualNpu, VnpuConfig};
    use unmask_engine::trace::Lane;
    let vnpu =
        || VirtualNpu::new(model("llada"), DeviceProfile::builtin("sm8750").unwrap(), VnpuConfig::default()).unwrap();
    let p = prompt("llada", 0);
    let mut s = lockstep(CacheMode::Prefix);
    let (locked, ls, _) = run_npu(&mut vnpu(), &p, &s);
    if let Some(r) = s.revision.as_mut() {
        r.schedule = CpuPathSchedule::Inline;
    }
    let mut npu = vnpu();
    let (inline, st, frames) = run_npu(&mut npu, &p, &s);
    assert!(!st.concurrent && st.lockstep && ls.concurrent);
    assert!(st.cpu_forwards > 0 && st.inline_forwards == st.cpu_forwards && ls.inline_forwards == 0);
    assert_eq!(inline.forwards, frames.len() + st.inline_forwards);
    assert_eq!(locked.forwards, frames.len());
    assert_eq!(inline.tokens, locked.tokens);
    assert_eq!(st.revisions, ls.revisions);
    let t = npu.timeline();
    assert!(t.events.iter().all(|e| e.category != "cpu_path" || e.lane == Lane::Npu), "no re-check on a CPU lane");
    assert_eq!(npu.totals().cpu_path.forwards, 0);
}

fn threaded(cache: CacheMode, at_end: CpuPathEnd) -> DecodeSettings {
    let mut s = settings(cache);
    if let Some(r) = s.revision.as_mut() {
        r.schedule = CpuPathSchedule::Threaded;
        r.at_end = at_end;
    }
    s
}

/// The threaded schedule in wall time: with a CPU path ten times slower than a dense forward,
/// the dense loop runs several forwards while one CPU-path job is on its thread (it never waits
/// for it), the job's verdicts land at a later step boundary, and every token still ends Stable.
#[test]
fn threaded_cpu_path_runs_across_dense_steps_without_blocking_them() {
    let mut be = FakeNpu::new(model("llada"), Some(vec![16, 32, 64]));
    be.delay = Duration::from_millis(3);
    be.cpu_delay = Some(Duration::from_millis(40));
    let p = prompt("llada", 0);
    let (out, stats, _) = run_npu(&mut be, &p, &threaded(CacheMode::Prefix, CpuPathEnd::Drop));
    assert!(stats.threaded && stats.concurrent && !stats.lockstep);
    let dense = stats.dense_thread.unwrap();
    assert!(!stats.cpu_threads.is_empty() && !stats.cpu_threads.contains(&dense));
    let fwds = be.forwards();
    let (d, c): (Vec<_>, Vec<_>) = fwds.iter().partition(|f| f.thread == dense);
    assert!(!c.is_empty());
    // Dense forwards that began and ended inside one CPU-path forward: the dense path went on.
    let most_inside =
        c.iter().map(|cf| d.iter().filter(|df| df.began >= cf.began && df.ended <= cf.ended).count()).max().unwrap();
    assert!(
        most_inside >= 2,
        "the dense path waited for the CPU path ({most_inside} dense forwards inside one CPU forward)"
    );
    assert!(stats.busy_steps > 0 && stats.deferred > 0, "busy {} deferred {}", stats.busy_steps, stats.deferred);
    assert!((p.len()..out.canvas.len()).all(|q| out.canvas.state(q) == TokenState::Stable));
}

/// A job still running when the run ends: `drain` waits for it and applies its verdicts, `drop`
/// discards them. (The CPU path is slower than the whole dense run, so its first job is still
/// running at the end.)
#[test]
fn threaded_cpu_path_drains_or_drops_the_last_job() {
    let p = prompt("llada", 0);
    for at_end in [CpuPathEnd::Drain, CpuPathEnd::Drop] {
        let mut be = FakeNpu::new(model("llada"), Some(vec![16, 32, 64]));
        be.cpu_delay = Some(Duration::from_millis(1500));
        let (out, stats, frames) = run_npu(&mut be, &p, &threaded(CacheMode::None, at_end));
        assert!(stats.threaded);
        match at_end {
            CpuPathEnd::Drain => {
                assert_eq!((stats.drained_jobs, stats.dropped_jobs), (1, 0), "{stats:?}");
                assert_eq!(stats.checks.len(), 1);
                // Its verdicts were applied in the last frame (or its tokens had been promoted).
                let last = frames.last().unwrap();
                assert!(stats.checks[0].1.iter().all(|&q| out.canvas.state(q) == TokenState::Stable));
                assert!(!last.changes.is_empty());
            }
            CpuPathEnd::Drop => {
                assert_eq!((stats.drained_jobs, stats.dropped_jobs), (0, 1), "{stats:?}");
                assert!(stats.checks.is_empty(), "a dropped job's checks are never booked");
            }
        }
        assert!((p.len()..out.canvas.len()).all(|q| out.canvas.state(q) == TokenState::Stable));
    }
}

/// The virtual NPU keeps K/V in 32×32 tiles and its CPU path reads and writes them in place: the
/// same generation as on the CPU backend (row-major cache), token for token.
#[test]
fn tiled_cache_on_the_virtual_npu_gives_the_cpu_tokens() {
    use unmask_engine::backend::vnpu::{DeviceProfile, VirtualNpu, VnpuConfig};
    use unmask_engine::backend::Backend;
    use unmask_engine::model::KvLayout;
    let m = model("llada");
    let mut npu = VirtualNpu::new(m.clone(), DeviceProfile::builtin("sm8750").unwrap(), VnpuConfig::default()).unwrap();
    assert_eq!(npu.new_cache(8).layout(), KvLayout::Tiled);
    assert_eq!(npu.cpu_path_host().unwrap().cpu_path_executor().unwrap().new_cache(8).layout(), KvLayout::Tiled);
    // A CPU backend (row-major cache, CPU-path twin) with the same shape buckets, so both runs
    // plan the same windows.
    let mut cpu = FakeNpu::new(m, Some(npu.cost_profile().unwrap().token_buckets));
    let p = prompt("llada", 1);
    // Lockstep: the fake backend reports no device time, so only then do both land every verdict
    // at the same step.
    let s = lockstep(CacheMode::Prefix);
    let (a, sa, _) = run_npu(&mut npu, &p, &s);
    let (b, sb, _) = run_npu(&mut cpu, &p, &s);
    assert!(sa.merges.len() + sb.merges.len() > 0, "revisions merged K/V");
    assert_eq!(sa.revisions, sb.revisions);
    assert_eq!(a.tokens, b.tokens);
}

/// Revision on Dream (shifted logits): the CPU path scores position p from row p − 1 of its own
/// re-masked window, revises, merges K/V, and with the dual cache too.
#[test]
fn revision_runs_on_dream_with_both_caches() {
    for cache in [CacheMode::Prefix, CacheMode::Dual] {
        let mut be = FakeNpu::new(model("dream"), Some(vec![16, 32, 64]));
        let p = prompt("dream", 0);
        let (out, stats, _) = run_npu(&mut be, &p, &settings(cache));
        assert!(stats.cpu_forwards > 0 && !stats.checks.is_empty(), "{cache:?}");
        assert!(stats.revisions > 0, "{cache:?}: no revision on random weights");
        assert!(!stats.merges.is_empty(), "{cache:?}: revised K/V never merged");
        assert!((p.len()..out.canvas.len()).all(|q| out.canvas.state(q) == TokenState::Stable));
    }
}

/// The recorder sees every dense forward and every CPU-path forward of a run, paired with its step;
/// replayed at LLaDA-8B shapes, each step lasts as long as the longer of its two paths.
#[test]
fn recorded_dual_path_run_replays_at_phone_scale() {
    use unmask_engine::backend::recorder::RecordingBackend;
    use unmask_engine::backend::vnpu::replay::{replay_dual_path_on, ModelPreset};
    use unmask_engine::backend::vnpu::{DeviceProfile, VirtualNpu, VnpuConfig};
    let npu =
        VirtualNpu::new(model("llada"), DeviceProfile::builtin("sm8750").unwrap(), VnpuConfig::default()).unwrap();
    let mut rec = RecordingBackend::new(Box::new(npu));
    let log = rec.log();
    let p = prompt("llada", 0);
    let (out, stats, frames) = run_npu(&mut rec, &p, &settings(CacheMode::Prefix));
    assert!(stats.concurrent && stats.cpu_forwards > 0);
    let trace = log.take_trace("llada", out.tokens.len());
    assert_eq!(trace.revision.len(), stats.cpu_forwards);
    assert!(trace.dense.len() >= frames.len(), "one dense forward per step at least");
    assert!(trace.revision.iter().all(|&(i, _)| i < trace.dense.len()), "every CPU forward pairs with a dense one");
    assert!(trace.dense.iter().all(|r| r.tokens > 0 && r.context >= r.tokens));
    let both = replay_dual_path_on(&trace, ModelPreset::Llada8B, "sm8750").unwrap();
    assert_eq!(both.cpu_forwards, stats.cpu_forwards);
    assert!(both.simulated_latency_s >= both.dense_s && both.simulated_latency_s >= both.cpu_path_s - 1e-12);
    assert!(both.simulated_latency_s <= both.dense_s + both.cpu_path_s + 1e-9);
    // Without the CPU path the replay is the dense path alone.
    let dense_only = unmask_engine::backend::vnpu::replay::DualPathTrace { revision: vec![], ..trace.clone() };
    let d = replay_dual_path_on(&dense_only, ModelPreset::Llada8B, "sm8750").unwrap();
    assert!((d.simulated_latency_s - both.dense_s).abs() < 1e-9 && d.cpu_bound_steps == 0);
    assert!(both.simulated_latency_s > d.simulated_latency_s || both.cpu_bound_steps == 0);
    // The asynchronous schedule never waits for the CPU path, and drops what finds it busy.
    assert!((both.async_latency_s - both.dense_s).abs() < 1e-9);
    let last = trace.dense.len() - 1;
    let jobs: std::collections::HashSet<usize> = trace.revision.iter().map(|&(i, _)| i.min(last)).collect();
    assert_eq!(both.async_jobs_run + both.async_jobs_dropped, jobs.len());
    assert!(both.async_jobs_run >= 1);
    if both.async_jobs_dropped > 0 {
        assert!(both.cpu_bound_steps > 0, "a job is dropped only behind one that outlasted its step");
    }
}
