//! `specar`: speculative decoding of autoregressive models, measured on this machine.
//!
//! For each target/draft pair and the same prompts, side by side per prompt: plain AR, the
//! synchronous fixed-length schedule, the adaptive one and the asynchronous one (drafter and
//! verifier on their own cores). Every speculative output is checked token by token against
//! plain AR (greedy). A sweep over draft length and the controls justifies the defaults.
//! Nothing here is simulated.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use unmask_engine::backend::cpu::CpuBackend;
use unmask_engine::decode::ar::generate_ar;
use unmask_engine::decode::spec_ar::{generate_speculative, SpecArCaches, SpecArSettings, SpecArStats, SpecSchedule};
use unmask_engine::decode::{discard_frames, CancelFlag, DecodeSettings};
use unmask_engine::model::weights::ModelWeights;
use unmask_engine::model::{load_model, LoadedModel, Transformer};

use crate::tasks;

/// One way of decoding, as measured over all prompts.
#[derive(Default, Clone)]
struct Tally {
    tokens: usize,
    wall_s: f64,
    stats: SpecArStats,
    mismatches: usize,
    runs: usize,
}

impl Tally {
    fn tokens_per_s(&self) -> f64 {
        self.tokens as f64 / self.wall_s.max(1e-9)
    }
    fn add(&mut self, s: &SpecArStats) {
        let t = &mut self.stats;
        t.verify_forwards += s.verify_forwards;
        t.draft_forwards += s.draft_forwards;
        t.drafted += s.drafted;
        t.offered += s.offered;
        t.accepted += s.accepted;
        t.rejections += s.rejections;
        t.discarded += s.discarded;
        t.pre_dropped += s.pre_dropped;
        t.verifier_wait_s += s.verifier_wait_s;
        t.drafter_wait_s += s.drafter_wait_s;
        t.queue_depths.extend_from_slice(&s.queue_depths);
    }
    fn to_json(&self, baseline_tps: f64) -> Value {
        let s = &self.stats;
        let depth = if s.queue_depths.is_empty() { 0.0 } else { s.queue_depths.iter().sum::<usize>() as f64 / s.queue_depths.len() as f64 };
        json!({
            "tokens": self.tokens, "wall_s": self.wall_s, "tokens_per_s": self.tokens_per_s(),
            "speedup_vs_ar": self.tokens_per_s() / baseline_tps.max(1e-9),
            "identical_outputs": self.runs - self.mismatches, "runs": self.runs,
            "acceptance_rate": s.acceptance_rate(), "drafted": s.drafted, "judged": s.offered, "accepted": s.accepted,
            "wasted_drafts": s.wasted(), "discarded_unjudged": s.discarded, "pre_dropped": s.pre_dropped,
            "target_forwards": s.verify_forwards, "draft_forwards": s.draft_forwards,
            "tokens_per_target_forward": self.tokens as f64 / s.verify_forwards.max(1) as f64,
            "verifier_wait_s": s.verifier_wait_s, "drafter_wait_s": s.drafter_wait_s, "mean_queue_depth": depth,
        })
    }
}

/// A target/draft pair with its prompts.
struct Pair {
    name: String,
    target: Arc<Transformer>,
    draft: Arc<Transformer>,
    draft_note: String,
    prompts: Vec<(String, Vec<u32>)>,
    gen_length: usize,
}

fn models_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models")
}

fn tiny_pair(n: usize) -> Result<Pair> {
    let target = load_model(&models_dir().join("tiny-ar")).context("loading tiny-ar")?;
    let draft = load_model(&models_dir().join("tiny-draft")).context("loading tiny-draft")?;
    let prompts = task_prompts(&target, n)?;
    Ok(Pair {
        name: "tiny-ar/tiny-draft".into(),
        target: Arc::new(target.transformer),
        draft: Arc::new(draft.transformer),
        draft_note: "models/tiny-draft (2 of tiny-ar's 6 layers, trained)".into(),
        prompts,
        gen_length: 64,
    })
}

/// The SmolLM2-135M-Instruct GGUF the tests fetch, if present.
fn smollm2_gguf() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("UNMASK_SMOLLM2_GGUF").map(PathBuf::from).filter(|p| p.is_file()) {
        return Some(p);
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-inputs/smollm2");
    std::fs::read_dir(dir).ok()?.flatten().map(|e| e.path()).find(|p| p.extension().is_some_and(|x| x == "gguf"))
}

/// SmolLM2 as target; the draft is SmolLM2's own first `keep` layers with its final norm and
/// (tied) LM head: an untrained layer-skip self-draft, until a trained draft exists.
fn smollm2_pair(path: &Path, keep: usize, n: usize) -> Result<Pair> {
    let target = load_model(path).with_context(|| format!("loading {}", path.display()))?;
    let mut cfg = target.transformer.config.clone();
    if keep == 0 || keep >= cfg.n_layers {
        bail!("self-draft layer count {keep} must be in 1..{}", cfg.n_layers);
    }
    cfg.n_layers = keep;
    let w = &target.transformer.weights;
    let weights = ModelWeights {
        embedding: w.embedding.clone(),
        layers: w.layers[..keep].to_vec(),
        final_norm: w.final_norm.clone(),
        lm_head: w.lm_head.clone(),
        tied_head: w.tied_head,
    };
    let draft = Transformer::new(cfg, weights);
    let prompts = task_prompts(&target, n)?;
    Ok(Pair {
        name: "smollm2-135m/self-draft".into(),
        draft_note: format!("SmolLM2's first {keep} of 30 layers + its final norm and LM head (untrained layer-skip self-draft)"),
        target: Arc::new(target.transformer),
        draft: Arc::new(draft),
        prompts,
        gen_length: 48,
    })
}

/// The held-out task prompts (the user messages), rendered with the target's chat template.
fn task_prompts(m: &LoadedModel, n: usize) -> Result<Vec<(String, Vec<u32>)>> {
    let per_task = n.div_ceil(9).max(1);
    let examples = tasks::load(&tasks::test_split(), per_task)?;
    let mut out = Vec::new();
    // Round-robin over tasks so a short run still covers every family.
    let mut by_task: std::collections::BTreeMap<String, Vec<tasks::TaskExample>> = Default::default();
    for ex in examples {
        by_task.entry(ex.task.clone()).or_default().push(ex);
    }
    let mut i = 0;
    while out.len() < n {
        let mut any = false;
        for list in by_task.values() {
            if let Some(ex) = list.get(i) {
                any = true;
                if out.len() < n {
                    out.push((ex.task.clone(), m.tokenizer.encode(&ex.prompt_for(&m.template))?));
                }
            }
        }
        if !any {
            break;
        }
        i += 1;
    }
    Ok(out)
}

/// Runs every method on every prompt of `pair`, side by side per prompt.
fn measure(pair: &Pair, methods: &[(String, Option<SpecArSettings>)]) -> Result<Vec<Tally>> {
    let mut target = CpuBackend::new(pair.target.clone());
    let mut draft = CpuBackend::new(pair.draft.clone());
    let settings = DecodeSettings { gen_length: pair.gen_length, temperature: 0.0, ..Default::default() };
    let cancel = CancelFlag::new();
    let mut tallies = vec![Tally::default(); methods.len()];
    let bar = indicatif::ProgressBar::new(pair.prompts.len() as u64);
    for (_, ids) in &pair.prompts {
        bar.inc(1);
        let mut reference: Option<Vec<u32>> = None;
        for ((_, spec), tally) in methods.iter().zip(tallies.iter_mut()) {
            let t0 = Instant::now();
            let tokens = match spec {
                None => generate_ar(&mut target, ids, &settings, &cancel, &mut discard_frames)?.tokens,
                Some(spec) => {
                    let (out, stats) = generate_speculative(
                        &mut target,
                        &mut draft,
                        ids,
                        &settings,
                        spec,
                        &cancel,
                        &mut discard_frames,
                        &mut SpecArCaches::default(),
                    )?;
                    tally.add(&stats);
                    out.tokens
                }
            };
            tally.wall_s += t0.elapsed().as_secs_f64();
            tally.tokens += tokens.len();
            tally.runs += 1;
            match &reference {
                None => reference = Some(tokens),
                Some(r) if *r != tokens => tally.mismatches += 1,
                Some(_) => {}
            }
        }
    }
    bar.finish_and_clear();
    Ok(tallies)
}

fn spec(schedule: SpecSchedule, draft_len: usize) -> SpecArSettings {
    SpecArSettings { schedule, draft_len, ..Default::default() }
}

/// The three schedules against plain AR.
fn main_methods(draft_len: usize) -> Vec<(String, Option<SpecArSettings>)> {
    vec![
        ("ar".into(), None),
        ("sync".into(), Some(spec(SpecSchedule::Sync, draft_len))),
        ("adaptive".into(), Some(spec(SpecSchedule::Adaptive, draft_len))),
        ("async".into(), Some(spec(SpecSchedule::Async, draft_len))),
    ]
}

fn pair_json(pair: &Pair, methods: &[(String, Option<SpecArSettings>)], tallies: &[Tally]) -> Value {
    let base = tallies[0].tokens_per_s();
    let rows: serde_json::Map<String, Value> = methods
        .iter()
        .zip(tallies)
        .map(|((name, s), t)| {
            let mut v = t.to_json(base);
            if let (Value::Object(m), Some(s)) = (&mut v, s) {
                m.insert("settings".into(), serde_json::to_value(s).unwrap_or(Value::Null));
            }
            (name.clone(), v)
        })
        .collect();
    json!({
        "pair": pair.name, "draft": pair.draft_note, "prompts": pair.prompts.len(), "gen_length": pair.gen_length,
        "target_layers": pair.target.config.n_layers, "draft_layers": pair.draft.config.n_layers,
        "methods": rows,
    })
}

pub fn run(quick: bool) -> Result<Value> {
    let threads = unmask_engine::threads::count();
    let n_tiny = if quick { 27 } else { 108 };
    let n_smol = if quick { 9 } else { 100 };
    let mut lossless = true;
    let mut result = serde_json::Map::new();
    let mut headline = serde_json::Map::new();

    eprintln!("[specar] tiny-ar / tiny-draft: {n_tiny} prompts");
    let tiny = tiny_pair(n_tiny)?;
    let methods = main_methods(4);
    let t = measure(&tiny, &methods)?;
    lossless &= t.iter().all(|x| x.mismatches == 0);
    let tiny_json = pair_json(&tiny, &methods, &t);
    headline.insert("tiny_speedup_vs_ar".into(), json!(t[3].tokens_per_s() / t[0].tokens_per_s()));
    headline.insert("tiny_speedup_vs_sync_spec".into(), json!(t[3].tokens_per_s() / t[1].tokens_per_s()));
    headline.insert("tiny_acceptance_rate".into(), json!(t[3].stats.acceptance_rate()));
    result.insert("tiny".into(), tiny_json);

    // Sweep on the tiny pair: draft length per schedule, and the controls of the async one.
    eprintln!("[specar] sweep on tiny-ar / tiny-draft");
    let sweep_pair = Pair { prompts: tiny.prompts[..tiny.prompts.len().min(if quick { 18 } else { 54 })].to_vec(), ..tiny };
    let mut sweep_methods: Vec<(String, Option<SpecArSettings>)> = vec![("ar".into(), None)];
    for k in [2, 4, 6, 8] {
        sweep_methods.push((format!("sync k={k}"), Some(spec(SpecSchedule::Sync, k))));
        sweep_methods.push((format!("async k={k}"), Some(spec(SpecSchedule::Async, k))));
    }
    let base = SpecArSettings { schedule: SpecSchedule::Async, ..Default::default() };
    sweep_methods.push(("async no controls".into(), Some(SpecArSettings { history_control: false, time_control: false, ..base.clone() })));
    sweep_methods.push(("async history only".into(), Some(SpecArSettings { time_control: false, ..base.clone() })));
    sweep_methods.push(("async time only".into(), Some(SpecArSettings { history_control: false, ..base.clone() })));
    for b in [0.3, 0.5] {
        sweep_methods.push((format!("async stop_bound={b}"), Some(SpecArSettings { stop_bound: b, ..base.clone() })));
        sweep_methods.push((format!("adaptive stop_bound={b}"), Some(SpecArSettings { schedule: SpecSchedule::Adaptive, stop_bound: b, ..base.clone() })));
    }
    sweep_methods.push(("async pre_verify=0.2".into(), Some(SpecArSettings { pre_verify_floor: 0.2, ..base.clone() })));
    let st = measure(&sweep_pair, &sweep_methods)?;
    lossless &= st.iter().all(|x| x.mismatches == 0);
    result.insert("sweep_tiny".into(), pair_json(&sweep_pair, &sweep_methods, &st));

    match smollm2_gguf() {
        Some(path) => {
            eprintln!("[specar] SmolLM2-135M / self-draft: {n_smol} prompts ({})", path.display());
            // Layer count of the self-draft: the best of a short probe.
            let mut probe = serde_json::Map::new();
            let mut best = (0.0f64, 4usize);
            for keep in [2, 4, 8] {
                let p = smollm2_pair(&path, keep, if quick { 3 } else { 9 })?;
                let m = vec![("ar".into(), None), ("sync".into(), Some(spec(SpecSchedule::Sync, 4)))];
                let r = measure(&p, &m)?;
                let speed = r[1].tokens_per_s() / r[0].tokens_per_s();
                lossless &= r.iter().all(|x| x.mismatches == 0);
                probe.insert(format!("keep {keep}"), json!({"speedup_sync_vs_ar": speed, "acceptance_rate": r[1].stats.acceptance_rate()}));
                if speed > best.0 {
                    best = (speed, keep);
                }
            }
            let smol = smollm2_pair(&path, best.1, n_smol)?;
            let methods = main_methods(4);
            let s = measure(&smol, &methods)?;
            lossless &= s.iter().all(|x| x.mismatches == 0);
            headline.insert("measured_speedup_vs_ar".into(), json!(s[3].tokens_per_s() / s[0].tokens_per_s()));
            headline.insert("measured_speedup_vs_sync_spec".into(), json!(s[3].tokens_per_s() / s[1].tokens_per_s()));
            headline.insert("acceptance_rate".into(), json!(s[3].stats.acceptance_rate()));
            let mut j = pair_json(&smol, &methods, &s);
            if let Value::Object(m) = &mut j {
                m.insert("self_draft_probe".into(), Value::Object(probe));
                m.insert("verify_cost".into(), verify_cost(&smol.target, if quick { 5 } else { 15 })?);
            }
            result.insert("smollm2".into(), j);
        }
        None => {
            eprintln!("[specar] SmolLM2 GGUF not found (tests/fetch-test-inputs.sh fetches it): pair skipped");
            result.insert("smollm2".into(), json!({"skipped": "SmolLM2-135M-Instruct GGUF not found; run tests/fetch-test-inputs.sh"}));
        }
    }
    // Simulated phone: Llama-3-8B verifying on the SM8750 NPU, Llama-3.2-1B drafting on the NPU
    // or on LPDDR5-PIM, at the per-draft acceptance measured above (and a sweep of it).
    let alpha = t[3].stats.acceptance_rate();
    let sim = simulate(alpha, if quick { 256 } else { 1024 })?;
    let row = |name: &str, v: &Value| v["schedules"][name].clone();
    let at_measured = &sim["at_measured_alpha"];
    let (sync_pim, ours) = (row("sync-pim", at_measured), row("async-pim", at_measured));
    let ratio = |a: &Value, b: &Value, k: &str| a[k].as_f64().unwrap_or(f64::NAN) / b[k].as_f64().unwrap_or(f64::NAN);
    headline.insert("sim_throughput_vs_sync_pim".into(), json!(ratio(&ours, &sync_pim, "tokens_per_s")));
    headline.insert("sim_energy_eff_vs_sync_pim".into(), json!(ratio(&sync_pim, &ours, "j_per_token")));
    headline.insert("sim_throughput_vs_npu_only".into(), json!(ratio(&ours, &row("npu-only", at_measured), "tokens_per_s")));
    headline.insert("simulated".into(), json!(true));
    result.insert("simulated_sm8750".into(), sim);
    headline.insert("lossless".into(), json!(lossless));
    result.insert("headline".into(), Value::Object(headline));
    result.insert("threads".into(), json!(threads));
    result.insert(
        "method".into(),
        json!("greedy decoding; per prompt, every method runs in turn (side by side); tokens/s = generated tokens (up to and including EOS) over wall time; sync/adaptive use all threads for each forward, async gives the drafter one thread and the verifier the rest"),
    );
    Ok(Value::Object(result))
}

/// The three schedules on the simulated SM8750 + LPDDR5-PIM (**simulated**).
fn simulate(measured_alpha: f64, answer: usize) -> Result<Value> {
    use unmask_engine::backend::vnpu::pim::PimProfile;
    use unmask_engine::backend::vnpu::profile::DeviceProfile;
    use unmask_engine::backend::vnpu::replay::ModelPreset;
    use unmask_engine::backend::vnpu::spec_schedule::{simulate_schedules, SimSchedule, SpecWorkload};
    use unmask_engine::decode::spec_ar::control::worthwhile_batch;

    let profile = DeviceProfile::builtin("sm8750")?;
    let pim = PimProfile::lpddr5()?;
    let schedules = [
        ("npu-only", SimSchedule::NpuOnly { draft_len: 4 }),
        ("sync-pim", SimSchedule::SyncPim { draft_len: 8 }),
        ("async-pim", SimSchedule::AsyncPim { max_batch: 8, max_ahead: 16 }),
    ];
    let run = |alpha: f64| -> Result<Value> {
        let w = SpecWorkload {
            target: ModelPreset::Llama3_8B.config(),
            draft: ModelPreset::Llama32_1B.config(),
            prompt: 128,
            answer,
            alpha,
            seed: 11,
        };
        let list: Vec<SimSchedule> = schedules.iter().map(|(_, s)| *s).collect();
        let r = simulate_schedules(&w, &profile, &pim, &list, worthwhile_batch)?;
        let m: serde_json::Map<String, Value> =
            schedules.iter().zip(r).map(|((n, _), x)| (n.to_string(), serde_json::to_value(x).unwrap_or(Value::Null))).collect();
        Ok(json!({"alpha": alpha, "schedules": m}))
    };
    let sweep: Vec<Value> = [0.5, 0.6, 0.7, 0.8, 0.9].iter().map(|&a| run(a)).collect::<Result<_>>()?;
    Ok(json!({
        "simulated": true,
        "device": "sm8750 NPU (verifier) + lpddr5-pim (drafter), engine/profiles",
        "target": "Llama-3-8B shapes (W4A16 as the validated NPU deployments)", "draft": "Llama-3.2-1B shapes (INT8 on PIM)",
        "prompt": 128, "answer": answer,
        "alpha_source": "per-draft acceptance measured in this run (tiny-ar/tiny-draft, async)",
        "at_measured_alpha": run(measured_alpha)?,
        "alpha_sweep": sweep,
        "note": "npu-only stands in for AHASD's GPU-only baseline (no GPU profile); sync-pim is SpecPIM's operator-level mapping with its fixed draft length 8",
    }))
}

/// What verifying k drafts costs the target relative to one token (one forward of 1 + k tokens
/// after a 128-token context, median of `reps`): the ceiling a perfect draft could reach is
/// `(k + 1) / ratio`. Measured.
fn verify_cost(target: &Arc<Transformer>, reps: usize) -> Result<Value> {
    use unmask_engine::backend::Backend;
    use unmask_engine::model::{ForwardRequest, KvMode};
    let mut be = CpuBackend::new(target.clone());
    let ctx = 128usize;
    let mut cache = be.new_cache(ctx + 16);
    let toks: Vec<u32> = (0..ctx as u32 + 16).map(|i| 100 + (i * 7) % 1000).collect();
    let pos: Vec<usize> = (0..ctx + 16).collect();
    be.forward(&ForwardRequest { tokens: &toks[..ctx], positions: &pos[..ctx], logits_rows: &[ctx - 1], kv: KvMode::ReadWrite }, Some(&mut cache))?;
    let mut rows = serde_json::Map::new();
    let mut base = f64::NAN;
    for m in [1usize, 2, 3, 5, 9] {
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            cache.invalidate_from(ctx);
            let req_rows: Vec<usize> = (0..m).collect();
            let t0 = Instant::now();
            be.forward(
                &ForwardRequest { tokens: &toks[ctx..ctx + m], positions: &pos[ctx..ctx + m], logits_rows: &req_rows, kv: KvMode::ReadWrite },
                Some(&mut cache),
            )?;
            times.push(t0.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        let med = times[times.len() / 2];
        if m == 1 {
            base = med;
        }
        rows.insert(format!("{m}"), json!({"median_s": med, "ratio_to_one_token": med / base}));
    }
    Ok(json!({"context": ctx, "reps": reps, "tokens": rows}))
}
