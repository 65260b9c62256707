//! The fuzz loop of one target: seeds first, then mutants of a small evolving corpus (inputs
//! that were accepted or drew a rejection message not seen before), each classified; a new
//! crash is minimised and saved.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::alloc::HARD_CAP;
use super::exec::{self, Execution, Verdict};
use super::regressions::{self, fingerprint};
use super::report::{Finding, FindingKind, TargetReport, WordingExample};
use super::rng::Rng;
use super::targets::Target;
use super::{bundle, wording, FuzzConfig};

/// Peak heap an execution may reach: `K` bytes per input byte, plus the target's allowance and
/// a fixed slack for the engine's own tables.
const BYTES_PER_INPUT_BYTE: u64 = 64;
const SLACK: u64 = 64 << 20;
const MAX_CORPUS: usize = 256;
/// Slow inputs kept per target.
const MAX_SLOW: usize = 3;
/// Wording examples kept per target and issue.
const EXAMPLES_PER_ISSUE: usize = 3;

/// The allocation bound for an input of `input_len` bytes.
pub fn peak_bound(input_len: usize, allowance: u64) -> u64 {
    input_len as u64 * BYTES_PER_INPUT_BYTE + allowance + SLACK
}

/// The crash or allocation violation an execution shows, if any.
pub fn classify(target: &dyn Target, input: &[u8], ex: &Execution, tracking: bool) -> Option<Finding> {
    let finding = |kind, message: String, location: String, engine_frame: Option<String>| Finding {
        target: target.name().to_owned(),
        kind,
        message,
        location,
        engine_frame,
        hits: 1,
        input: input.to_vec(),
        input_len: input.len(),
        saved_as: None,
        known: false,
    };
    if let Verdict::Panicked(p) = &ex.verdict {
        return Some(finding(FindingKind::Panic, p.message.clone(), p.location.clone(), p.engine_frame.clone()));
    }
    if !tracking {
        return None;
    }
    if let Some(size) = ex.alloc.over_cap_request {
        let site = ex.over_cap_site.clone().unwrap_or_default();
        let engine = site.starts_with("engine/src/").then(|| site.clone());
        let message = format!("single allocation of {size} bytes (cap {HARD_CAP}) for a {}-byte input", input.len());
        return Some(finding(FindingKind::OverAllocation, message, site, engine));
    }
    let bound = peak_bound(input.len(), target.allowance());
    if ex.alloc.peak_bytes > bound {
        let message =
            format!("peak heap {} bytes above the bound {bound} for a {}-byte input", ex.alloc.peak_bytes, input.len());
        return Some(finding(FindingKind::PeakAllocation, message, String::new(), None));
    }
    None
}

struct Corpus {
    entries: Vec<Vec<u8>>,
    n_seeds: usize,
    known: HashSet<u64>,
}

impl Corpus {
    fn new(seeds: Vec<Vec<u8>>) -> Corpus {
        let known = seeds.iter().map(|s| fingerprint(s)).collect();
        Corpus { n_seeds: seeds.len(), entries: seeds, known }
    }
    fn pick(&self, rng: &mut Rng) -> Vec<u8> {
        if self.entries.is_empty() {
            return Vec::new();
        }
        // A third of the time from the seeds, so valid structure keeps coming back.
        let i =
            if self.n_seeds > 0 && rng.chance(1, 3) { rng.below(self.n_seeds) } else { rng.below(self.entries.len()) };
        self.entries[i].clone()
    }
    fn offer(&mut self, input: &[u8], rng: &mut Rng) {
        if !self.known.insert(fingerprint(input)) {
            return;
        }
        if self.entries.len() < MAX_CORPUS {
            self.entries.push(input.to_vec());
        } else if self.entries.len() > self.n_seeds {
            let i = self.n_seeds + rng.below(self.entries.len() - self.n_seeds);
            self.entries[i] = input.to_vec();
        }
    }
}

/// Runs `target` for the configured budget.
pub fn run_target(target: &mut dyn Target, cfg: &FuzzConfig, tracking: bool) -> TargetReport {
    let name = target.name();
    let mut rng = Rng::new(cfg.seed ^ fingerprint(name.as_bytes()));
    let seeds = target.seeds();
    let mut pending: Vec<Vec<u8>> = seeds.iter().rev().cloned().collect();
    let mut corpus = Corpus::new(seeds);
    let mut rep = TargetReport { name: name.to_owned(), ..TargetReport::default() };
    let mut messages: HashSet<String> = HashSet::new();
    let mut wording_seen: HashSet<(String, String)> = HashSet::new();
    let mut by_signature: HashMap<String, (bool, usize)> = HashMap::new();
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    while started.elapsed() < cfg.time_per_target && cfg.max_execs_per_target.is_none_or(|m| rep.execs < m) {
        let input = match pending.pop() {
            Some(seed) => seed,
            None => {
                let mut x = corpus.pick(&mut rng);
                target.mutate(&mut x, &mut rng, &corpus.entries);
                x
            }
        };
        let ex = exec::execute(target, &input);
        rep.execs += 1;
        rep.max_peak_bytes = rep.max_peak_bytes.max(ex.alloc.peak_bytes);
        slowest = slowest.max(ex.elapsed);
        let mut interesting = false;
        match &ex.verdict {
            Verdict::Accepted => {
                rep.accepted += 1;
                interesting = true;
            }
            Verdict::Rejected { kind, message } => {
                rep.rejected += 1;
                *rep.rejections_by_kind.entry(kind.clone()).or_default() += 1;
                let norm = wording::normalise(message);
                let issues = wording::issues(message);
                if !issues.is_empty() {
                    rep.wording_count += 1;
                    for issue in issues {
                        let shown = rep.wording_examples.iter().filter(|w| w.issue == issue).count();
                        if shown < EXAMPLES_PER_ISSUE && wording_seen.insert((issue.to_owned(), norm.clone())) {
                            rep.wording_examples.push(WordingExample {
                                issue: issue.to_owned(),
                                error_kind: kind.clone(),
                                message: message.chars().take(300).collect(),
                            });
                        }
                    }
                }
                interesting = messages.insert(norm);
            }
            Verdict::Panicked(_) => rep.crash_execs += 1,
        }
        if let Some(f) = classify(target, &input, &ex, tracking) {
            let sig = f.signature();
            match by_signature.get(&sig) {
                Some(&(is_crash, i)) => {
                    let list = if is_crash { &mut rep.crashes } else { &mut rep.violations };
                    if let Some(known) = list.get_mut(i) {
                        known.hits += 1;
                    }
                }
                None => {
                    let f = keep(target, f, &sig, cfg, tracking);
                    let is_crash = f.kind == FindingKind::Panic;
                    let list = if is_crash { &mut rep.crashes } else { &mut rep.violations };
                    by_signature.insert(sig, (is_crash, list.len()));
                    list.push(f);
                }
            }
            interesting = false;
        }
        if ex.elapsed > cfg.slow_exec && !matches!(ex.verdict, Verdict::Panicked(_)) {
            note_slow(&mut rep, name, &input, &ex);
        }
        if interesting {
            corpus.offer(&input, &mut rng);
        }
    }
    rep.seconds = started.elapsed().as_secs_f64();
    rep.execs_per_sec = rep.execs as f64 / rep.seconds.max(1e-9);
    rep.slowest_exec_ms = slowest.as_secs_f64() * 1e3;
    rep.corpus_size = corpus.entries.len();
    rep
}

/// Keeps the slowest few inputs (hostile inputs that cost seconds are worth a look).
fn note_slow(rep: &mut TargetReport, target: &str, input: &[u8], ex: &Execution) {
    let ms = ex.elapsed.as_secs_f64() * 1e3;
    let verdict = match &ex.verdict {
        Verdict::Accepted => "accepted".to_owned(),
        Verdict::Rejected { message, .. } => message.chars().take(120).collect(),
        Verdict::Panicked(p) => p.message.clone(),
    };
    rep.slow.push(Finding {
        target: target.to_owned(),
        kind: FindingKind::Slow,
        message: format!("{ms:.0} ms ({verdict})"),
        location: String::new(),
        engine_frame: None,
        hits: 1,
        input: input.to_vec(),
        input_len: input.len(),
        saved_as: None,
        known: false,
    });
    rep.slow.sort_by_key(|f| std::cmp::Reverse(f.message.split(' ').next().and_then(|m| m.parse::<u64>().ok())));
    rep.slow.truncate(MAX_SLOW);
}

/// Minimises a new finding's input and saves it.
fn keep(target: &mut dyn Target, mut f: Finding, sig: &str, cfg: &FuzzConfig, tracking: bool) -> Finding {
    if cfg.known.is_some_and(|known| known(&f)) {
        f.known = true;
        return f;
    }
    if !cfg.minimize_time.is_zero() {
        f.input = minimize(target, &f.input, sig, cfg.minimize_time, tracking);
        f.input_len = f.input.len();
    }
    if let Some(dir) = &cfg.save_dir {
        let kind = match f.kind {
            FindingKind::Panic => "panic",
            FindingKind::OverAllocation => "overalloc",
            FindingKind::PeakAllocation => "peak",
            FindingKind::Slow => "slow",
        };
        f.saved_as = regressions::save(dir, target.name(), kind, &f.input).ok();
    }
    f
}

fn reproduces(target: &mut dyn Target, input: &[u8], sig: &str, tracking: bool) -> bool {
    let ex = exec::execute(target, input);
    classify(target, input, &ex, tracking).is_some_and(|f| f.signature() == sig)
}

/// Shrinks `input` while it still shows the same finding, until `budget` is spent: JSON inputs
/// lose keys, array items and string length; bundles lose files and then have each file shrunk
/// the same way; other bytes lose ranges of halving size.
pub fn minimize(target: &mut dyn Target, input: &[u8], sig: &str, budget: Duration, tracking: bool) -> Vec<u8> {
    let deadline = Instant::now() + budget;
    let mut test = |candidate: &[u8]| reproduces(target, candidate, sig, tracking);
    let files = bundle::decode(input);
    if files.is_empty() {
        return shrink(input, &mut test, deadline);
    }
    let mut files = files;
    let mut i = 0;
    while i < files.len() && Instant::now() < deadline {
        let mut trial = files.clone();
        trial.remove(i);
        if test(&bundle::encode(&trial)) {
            files = trial;
        } else {
            i += 1;
        }
    }
    for i in 0..files.len() {
        let data = files[i].1.clone();
        let shrunk = shrink(
            &data,
            &mut |candidate: &[u8]| {
                let mut trial = files.clone();
                trial[i].1 = candidate.to_vec();
                test(&bundle::encode(&trial))
            },
            deadline,
        );
        files[i].1 = shrunk;
    }
    bundle::encode(&files)
}

fn shrink(data: &[u8], test: &mut dyn FnMut(&[u8]) -> bool, deadline: Instant) -> Vec<u8> {
    match serde_json::from_slice::<serde_json::Value>(data) {
        Ok(v @ (serde_json::Value::Object(_) | serde_json::Value::Array(_))) => shrink_json(v, test, deadline),
        _ => shrink_bytes(data, test, deadline),
    }
}

/// Removes object keys and array items (latest first, so earlier pointers stay valid), then
/// shortens long strings.
fn shrink_json(mut v: serde_json::Value, test: &mut dyn FnMut(&[u8]) -> bool, deadline: Instant) -> Vec<u8> {
    use serde_json::Value;
    fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, c) in m {
                    let p = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                    out.push(p.clone());
                    pointers(c, p, out);
                }
            }
            Value::Array(a) => {
                for (i, c) in a.iter().enumerate() {
                    let p = format!("{at}/{i}");
                    out.push(p.clone());
                    pointers(c, p, out);
                }
            }
            _ => {}
        }
    }
    fn remove(v: &mut Value, ptr: &str) -> bool {
        let Some((parent, last)) = ptr.rsplit_once('/') else { return false };
        let key = last.replace("~1", "/").replace("~0", "~");
        match v.pointer_mut(parent) {
            Some(Value::Object(m)) => m.remove(&key).is_some(),
            Some(Value::Array(a)) => match key.parse::<usize>() {
                Ok(i) if i < a.len() => {
                    a.remove(i);
                    true
                }
                _ => false,
            },
            _ => false,
        }
    }
    let encode = |v: &Value| serde_json::to_vec(v).unwrap_or_default();
    let mut ptrs = Vec::new();
    pointers(&v, String::new(), &mut ptrs);
    for ptr in ptrs.iter().rev() {
        if Instant::now() > deadline {
            break;
        }
        let mut trial = v.clone();
        if remove(&mut trial, ptr) && test(&encode(&trial)) {
            v = trial;
        }
    }
    let mut ptrs = Vec::new();
    pointers(&v, String::new(), &mut ptrs);
    for ptr in &ptrs {
        if Instant::now() > deadline {
            break;
        }
        let mut trial = v.clone();
        if let Some(Value::String(s)) = trial.pointer_mut(ptr) {
            if s.chars().count() <= 16 {
                continue;
            }
            *s = s.chars().take(16).collect();
            if test(&encode(&trial)) {
                v = trial;
            }
        }
    }
    encode(&v)
}

/// Removes byte ranges of halving size.
fn shrink_bytes(data: &[u8], test: &mut dyn FnMut(&[u8]) -> bool, deadline: Instant) -> Vec<u8> {
    let mut best = data.to_vec();
    let mut chunk = (best.len() / 2).max(1);
    while Instant::now() < deadline && !best.is_empty() {
        let mut progressed = false;
        let mut i = 0;
        while i < best.len() && Instant::now() < deadline {
            let end = (i + chunk).min(best.len());
            let mut trial = best[..i].to_vec();
            trial.extend_from_slice(&best[end..]);
            if test(&trial) {
                best = trial;
                progressed = true;
            } else {
                i += chunk;
            }
        }
        if !progressed {
            if chunk == 1 {
                break;
            }
            chunk /= 2;
        }
    }
    best
}
