//! Suite `versus`: unmask side by side with llama.cpp's `llama-diffusion-cli` (the copy vendored
//! in the PyPI sdist of `llama-cpp-python`, built on demand by `scripts/versus/build-llamacpp.sh`
//! into `target/llamacpp/`; never committed, never a CI dependency) on the same GGUF files, the
//! same prompt tokens, canvas, blocks, steps and threads, runs interleaved, medians.
//!
//! Models: the embedded tiny-llada exported with `export_gguf` (what `unmask models export`
//! runs) as F32 and Q8_0, and a LLaDA-8B-shaped random-weight Q8_0 GGUF (2 layers) written by
//! `scripts/versus/make_llada8b_gguf.py` with the tiny model's tokenizer padded to 126464 tokens.
//! llama.cpp's decoder always forwards the whole canvas (no cache); ours runs with no cache (same
//! work per step), the prefix cache and the dual cache; speedups are per denoising step (llama.cpp
//! runs one extra forward for the empty last block its schedule has, so totals are normalised by
//! each engine's own forward count). Parity: on the F32 export with one step per block (every
//! masked token of a block committed at once, greedy: `--top-k 1`), the fraction of generated
//! tokens both engines commit identically. Cache accuracy comes from the embedded model's held-out
//! tasks (as in the `decoding` suite). Phases: the 8B model's no-cache forward, the caches'
//! block-start refresh and their per-step forwards, timed with VNNI peak samples interleaved,
//! with FLOPs per step and the achieved fraction of the same-run int8 peak.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use unmask_engine::backend::cpu::CpuBackend;
use unmask_engine::backend::Backend;
use unmask_engine::decode::{generate, CacheMode, CancelFlag, DecodeSettings, StepFrame};
use crate::peak::PeakKind;
use unmask_engine::tensor::DType;
use unmask_engine::model::{load_model, ForwardRequest, KvMode, Transformer};

use crate::kernels::{interleaved, median, peak_fraction, stats};
use crate::tasks;

const CANVAS: usize = 256;
const BLOCK: usize = 32;
const STEPS_PER_BLOCK: usize = 8;
const PROMPT: usize = 32;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A path as results record it: relative to the repository root, so a result names no
/// machine's folders.
fn shown(p: &Path) -> String {
    let (Ok(root), Ok(full)) = (root().canonicalize(), p.canonicalize()) else {
        return p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    };
    match full.strip_prefix(&root) {
        Ok(rel) => rel.display().to_string(),
        Err(_) => full.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
    }
}

/// Builds (or finds) `llama-diffusion-cli`.
fn llama_cli() -> Result<PathBuf> {
    let script = root().join("scripts/versus/build-llamacpp.sh");
    eprintln!("[versus] building llama.cpp's llama-diffusion-cli on demand ({})", script.display());
    let out = Command::new("bash").arg(&script).output().context("running build-llamacpp.sh")?;
    if !out.status.success() {
        bail!(
            "versus: cannot build llama.cpp's llama-diffusion-cli (needs pip access to the llama-cpp-python sdist, cmake and a C++ compiler); \
             the suite compares against it and does not run without it:\n{}",
            String::from_utf8_lossy(&out.stderr).lines().rev().take(15).collect::<Vec<_>>().join("\n")
        );
    }
    let path = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or("").trim().to_owned();
    Ok(PathBuf::from(path))
}

/// The chat prompt llama.cpp builds from `q` (the GGUF's template renders `bos_token` and
/// `common_tokenize` adds BOS again), as token ids.
fn prompt_ids(tok: &unmask_engine::model::TextTokenizer, bos: u32, q: &str) -> Result<Vec<u32>> {
    let text = format!(
        "<|startoftext|><|start_header_id|>user<|end_header_id|>\n\n{q}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    );
    let mut ids = vec![bos];
    ids.extend(tok.encode(&text)?);
    Ok(ids)
}

/// A question whose prompt is exactly [`PROMPT`] tokens (so the generated region is whole blocks).
fn question(tok: &unmask_engine::model::TextTokenizer, bos: u32) -> Result<(String, Vec<u32>)> {
    question_from(tok, bos, &["What", "is", "two", "plus", "three", "and", "why", "do", "we", "add", "numbers", "at", "all", "in", "school", "today"])
}

/// Parity prompts: several questions of [`PROMPT`] tokens.
const PARITY_WORDS: [&[&str]; 4] = [
    &["What", "is", "two", "plus", "three", "and", "why", "do", "we", "add", "numbers", "at", "all", "in", "school", "today"],
    &["Name", "a", "color", "of", "the", "sky", "on", "a", "clear", "day", "and", "say", "why", "it", "looks", "so"],
    &["Reverse", "the", "word", "cat", "and", "then", "tell", "me", "how", "many", "letters", "it", "has", "in", "total", "now"],
    &["What", "comes", "after", "seven", "when", "we", "count", "up", "by", "one", "from", "zero", "to", "ten", "slowly", "please"],
];

fn question_from(tok: &unmask_engine::model::TextTokenizer, bos: u32, words: &[&str]) -> Result<(String, Vec<u32>)> {
    for n in 1..=words.len() {
        for extra in ["", "?", " ?", "!"] {
            let q = format!("{}{extra}", words[..n].join(" "));
            let ids = prompt_ids(tok, bos, &q)?;
            if ids.len() == PROMPT {
                return Ok((q, ids));
            }
        }
    }
    bail!("versus: no question gives a {PROMPT}-token prompt with this tokenizer")
}

/// One llama-diffusion-cli run: per-step seconds (from its step-callback log timestamps), total
/// seconds it reports, forwards run, and the generated text.
struct LlamaRun {
    steps_s: Vec<f64>,
    total_s: f64,
    forwards: usize,
    text: String,
}

fn run_llama(cli: &Path, gguf: &Path, q: &str, steps: usize, threads: usize) -> Result<LlamaRun> {
    // llama.cpp logs from a worker thread and now and then exits before the log is flushed:
    // such a run is repeated (it is counted in the JSON).
    let mut last = None;
    for _ in 0..4 {
        match run_llama_once(cli, gguf, q, steps, threads) {
            Ok(r) => return Ok(r),
            Err(e) => {
                eprintln!("[versus] llama-diffusion-cli run incomplete, repeating: {}", e.to_string().lines().next().unwrap_or(""));
                last = Some(e);
            }
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("llama-diffusion-cli did not run")))
}

fn run_llama_once(cli: &Path, gguf: &Path, q: &str, steps: usize, threads: usize) -> Result<LlamaRun> {
    let out = Command::new(cli)
        .args(["-m"])
        .arg(gguf)
        .args(["-p", q, "-ub", &CANVAS.to_string(), "-c", &CANVAS.to_string(), "-b", &CANVAS.to_string()])
        .args(["--diffusion-block-length", &BLOCK.to_string(), "--diffusion-steps", &steps.to_string()])
        .args(["-t", &threads.to_string(), "-tb", &threads.to_string(), "--top-k", "1", "--temp", "0", "--seed", "1"])
        .output()
        .context("running llama-diffusion-cli")?;
    let log = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("llama-diffusion-cli failed: {}", log.lines().rev().take(10).collect::<Vec<_>>().join("\n"));
    }
    // "M.SS.mmm.uuu I diffusion step: N/T" (the log prefix may be followed by a newline).
    let mut marks: Vec<f64> = Vec::new();
    let bytes = log.as_str();
    let mut pos = 0;
    while let Some(i) = bytes[pos..].find("diffusion step: ") {
        let at = pos + i;
        let head = bytes[..at].trim_end();
        let head = head.strip_suffix('I').unwrap_or(head).trim_end();
        let stamp = head.rsplit(|c: char| !(c.is_ascii_digit() || c == '.')).next().unwrap_or("");
        let f: Vec<f64> = stamp.split('.').filter_map(|x| x.parse().ok()).collect();
        if f.len() == 4 {
            marks.push(f[0] * 60.0 + f[1] + f[2] / 1e3 + f[3] / 1e6);
        }
        pos = at + 16;
    }
    let total_ms: f64 = log
        .split("total time: ")
        .nth(1)
        .and_then(|r| r.split("ms").next())
        .and_then(|x| x.trim().parse().ok())
        .with_context(|| format!("llama-diffusion-cli printed no total time:\n{}", log.chars().rev().take(1500).collect::<String>().chars().rev().collect::<String>()))?;
    // The step callback runs before each forward; the last step ends at "total time".
    let end = log.find("total time").map(|_| marks.last().copied().unwrap_or(0.0)).unwrap_or(0.0);
    let _ = end;
    let steps_s: Vec<f64> = marks.windows(2).map(|w| w[1] - w[0]).collect();
    // After the "total time" line: "M.SS.mmm.uuu I " then a newline, then the text.
    let after = log.rsplit("total time").next().unwrap_or("");
    let after = after.split_once('\n').map(|x| x.1).unwrap_or("");
    let text = after.split_once(" I ").map(|x| x.1).unwrap_or("");
    let text = text.strip_prefix('\n').unwrap_or(text).trim_end_matches('\n').to_owned();
    Ok(LlamaRun { steps_s, total_s: total_ms / 1e3, forwards: marks.len(), text })
}

/// Our decode of `prompt` on the same canvas: (seconds, forwards, per-step seconds, generated tokens).
fn run_ours(backend: &mut CpuBackend, prompt: &[u32], s: &DecodeSettings) -> Result<(f64, usize, Vec<f64>, Vec<u32>)> {
    let mut marks = vec![Instant::now()];
    let out = generate(backend as &mut dyn Backend, prompt, s, &CancelFlag::new(), |_: &StepFrame| {
        marks.push(Instant::now());
        ControlFlow::Continue(())
    })?;
    let steps: Vec<f64> = marks.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect();
    Ok((out.wall_s, out.forwards, steps, out.tokens))
}

fn settings(cache: CacheMode, steps: usize) -> DecodeSettings {
    DecodeSettings {
        gen_length: CANVAS - PROMPT,
        block_length: BLOCK,
        steps,
        cache,
        early_stop_eos: false,
        ..Default::default()
    }
}

/// Interleaved timing of one model: llama.cpp vs our three cache modes.
fn compare(cli: &Path, gguf: &Path, reps: usize, threads: usize) -> Result<Value> {
    let m = load_model(gguf)?;
    let bos = m.config().bos_token_id.unwrap_or(0);
    let (q, prompt) = question(&m.tokenizer, bos)?;
    let mut backend = CpuBackend::new(Arc::new(m.transformer));
    let blocks = (CANVAS - PROMPT) / BLOCK;
    let ours_steps = blocks * STEPS_PER_BLOCK;
    // llama.cpp splits its steps over canvas/block blocks (one more than ours: the last is empty).
    let llama_steps = CANVAS / BLOCK * STEPS_PER_BLOCK;
    let modes = [("no_cache", CacheMode::None), ("prefix", CacheMode::Prefix), ("dual", CacheMode::Dual)];
    let mut ll_step = Vec::new();
    let mut ll_fwd_median = Vec::new();
    let mut ours: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); modes.len()];
    let mut forwards = [0usize; 3];
    let mut ll_forwards = 0;
    for rep in 0..reps {
        eprintln!("[versus] {} rep {}/{reps}", gguf.file_name().and_then(|n| n.to_str()).unwrap_or("?"), rep + 1);
        let ll = run_llama(cli, gguf, &q, llama_steps, threads)?;
        ll_step.push(ll.total_s / ll.forwards.max(1) as f64);
        ll_fwd_median.push(median(&ll.steps_s[1.min(ll.steps_s.len())..]));
        ll_forwards = ll.forwards;
        for (i, (_, mode)) in modes.iter().enumerate() {
            let (wall, fw, steps, _) = run_ours(&mut backend, &prompt, &settings(*mode, ours_steps))?;
            ours[i].0.push(wall / fw.max(1) as f64);
            ours[i].1.push(median(&steps[1.min(steps.len())..]));
            forwards[i] = fw;
        }
    }
    let ll_med = median(&ll_step);
    let mut rows = serde_json::Map::new();
    for (i, (name, _)) in modes.iter().enumerate() {
        rows.insert(
            (*name).into(),
            json!({"per_step_s": stats(&ours[i].0), "median_step_s": stats(&ours[i].1), "forwards": forwards[i],
                   "speedup_vs_llamacpp": ll_med / median(&ours[i].0)}),
        );
    }
    Ok(json!({
        "gguf": shown(&gguf), "question": q, "prompt_tokens": prompt.len(),
        "canvas": CANVAS, "block": BLOCK, "steps_per_block": STEPS_PER_BLOCK, "threads": threads, "reps": reps,
        "llamacpp": {"per_step_s": stats(&ll_step), "median_step_s": stats(&ll_fwd_median), "forwards": ll_forwards,
                     "steps_arg": llama_steps},
        "unmask": Value::Object(rows),
    }))
}

/// F32 parity: one step per block, both engines greedy; fraction of generated tokens identical.
fn parity(cli: &Path, gguf: &Path, threads: usize) -> Result<Value> {
    let m = load_model(gguf)?;
    let bos = m.config().bos_token_id.unwrap_or(0);
    let tok = m.tokenizer;
    let mut backend = CpuBackend::new(Arc::new(m.transformer));
    let blocks = (CANVAS - PROMPT) / BLOCK;
    let specials: Vec<u32> = (0..tok.vocab_size() as u32).filter(|&i| tok.decode(&[i], true).is_empty()).collect();
    let (mut same, mut total) = (0usize, 0usize);
    let mut cases = Vec::new();
    for words in PARITY_WORDS {
        let Ok((q, prompt)) = question_from(&tok, bos, words) else { continue };
        let (_, _, _, ours) = run_ours(&mut backend, &prompt, &settings(CacheMode::None, blocks))?;
        let ll = run_llama(cli, gguf, &q, CANVAS / BLOCK, threads)?;
        // llama.cpp prints the generated region detokenised without special tokens; compare it
        // with ours the same way, token by token after re-encoding (identical text re-encodes
        // identically).
        let ours_plain: Vec<u32> = ours.iter().copied().filter(|t| !specials.contains(t)).collect();
        let ours_text = tok.decode(&ours_plain, true);
        // Our tokens whose text lies inside the common prefix of the two texts are identical;
        // the rest (and any text llama.cpp has beyond ours, in re-encoded tokens) differ.
        let common = ours_text.chars().zip(ll.text.chars()).take_while(|(a, b)| a == b).count();
        let s = (1..=ours_plain.len()).take_while(|&i| tok.decode(&ours_plain[..i], true).chars().count() <= common).count();
        let extra = if ll.text.chars().count() > common { tok.encode(&ll.text.chars().skip(common).collect::<String>())?.len() } else { 0 };
        let n = ours_plain.len().max(s + extra);
        same += s;
        total += n;
        cases.push(json!({"question": q, "tokens_compared": n, "identical": s, "text_identical": ours_text == ll.text,
                          "ours_text": ours_text, "llamacpp_text": ll.text}));
    }
    Ok(json!({"fraction_identical": same as f64 / total.max(1) as f64, "tokens_compared": total, "steps": blocks,
              "cases": cases, "method": "greedy (top-k 1), one step per block; generated text without special tokens (llama.cpp prints it so): our tokens inside the common text prefix count as identical"}))
}

/// What running only the LM head's rows through the last layer saves in a forward of `n` rows
/// asking for `m` over `ctx` keys that did `flops`: the FLOPs skipped, their share of the forward
/// that runs every row, and that share on the same model with LLaDA-8B's 32 layers (the 2-layer
/// stand-in has half its layers last, so it overstates the saving for the real model).
fn last_layer_skip(c: &unmask_engine::model::ModelConfig, n: usize, m: usize, ctx: usize, flops: f64) -> Value {
    let (h, qd) = (c.hidden, c.q_dim());
    let per_row = 2.0 * (2 * h * qd + 3 * h * c.ffn) as f64 + 4.0 * (ctx * qd) as f64;
    let skipped = n.saturating_sub(m) as f64 * per_row;
    let all_rows = flops + skipped;
    let head = 2.0 * (m * h * c.vocab) as f64;
    let per_layer = (all_rows - head) / c.n_layers.max(1) as f64;
    json!({"flops_skipped": skipped, "fraction_of_all_rows_forward": skipped / all_rows,
           "fraction_at_32_layers": skipped / (head + 32.0 * per_layer)})
}

/// The 8B model's forward phases, each interleaved with int8 (VNNI) peak samples.
fn phases(t: &Transformer, samples: usize) -> Result<(Value, f64)> {
    let n = CANVAS;
    let mut cache = t.new_cache(n);
    let mask = t.config.mask_token_id.unwrap_or(0);
    let tokens: Vec<u32> = (0..n as u32).map(|i| if i < PROMPT as u32 { 100 + i } else { mask }).collect();
    let all: Vec<usize> = (0..n).collect();
    let kind = PeakKind::int8();
    if !kind.available() {
        return Ok((json!("no int8 peak stream (VNNI or AVX2) on this CPU"), f64::NAN));
    }
    // A block in the middle of the canvas.
    let (bs, be) = (PROMPT + 3 * BLOCK, PROMPT + 4 * BLOCK);
    let block_rows: Vec<usize> = (0..BLOCK).collect();
    let mut out = serde_json::Map::new();
    let mut no_cache_frac = f64::NAN;
    let cases: [(&str, usize, usize, KvMode, bool); 4] = [
        ("no_cache_forward", 0, n, KvMode::Ignore, false),
        ("block_start_refresh", 0, n, KvMode::ReadWrite, false),
        ("prefix_step", bs, n, KvMode::Read, true),
        ("dual_step", bs, be, KvMode::ReadWrite, false),
    ];
    for (name, start, end, kv, prefix_only) in cases {
        let toks = &tokens[start..end];
        let pos = &all[start..end];
        let rows: Vec<usize> = if start == 0 { (bs..be).collect() } else { block_rows.clone() };
        // The cache as that step sees it: everything valid after a refresh, only the prefix for
        // prefix-cache steps.
        let full = ForwardRequest { tokens: &tokens, positions: &all, logits_rows: &[], kv: KvMode::ReadWrite };
        t.forward(&full, Some(&mut cache))?;
        if prefix_only {
            cache.invalidate_from(bs);
        }
        let req = ForwardRequest { tokens: toks, positions: pos, logits_rows: &rows, kv };
        let flops = t.forward(&req, Some(&mut cache))?.flops;
        let mut snapshot = cache.clone();
        let (secs, peak) = interleaved(samples, kind, 4_000_000, || {
            let _ = t.forward(&req, Some(&mut snapshot));
        });
        let r = peak_fraction(&format!("versus phase {name}"), flops, &secs, &peak)?;
        if name == "no_cache_forward" {
            no_cache_frac = r["peak_fraction"].as_f64().unwrap_or(f64::NAN);
        }
        eprintln!("[versus] 8b {name}: {} tokens, {:.1} GFLOP, {:.3} s, {:.2} of int8 peak", end - start, flops / 1e9,
                  median(&secs), r["peak_fraction"].as_f64().unwrap_or(0.0));
        let skip = last_layer_skip(&t.config, end - start, rows.len(), n, flops);
        out.insert(name.into(), json!({"tokens": end - start, "flops": flops, "result": r, "last_layer_skip": skip}));
    }
    Ok((Value::Object(out), no_cache_frac))
}

/// Task accuracy of the caches on the embedded model (held-out tasks, as the `decoding` suite).
fn cache_accuracy(quick: bool) -> Result<Value> {
    let dir = root().join("models/tiny-llada");
    let m = load_model(&dir)?;
    let stop: Vec<u32> = [m.config().eos_token_id, m.config().eot_token_id].into_iter().flatten().collect();
    let tok = m.tokenizer;
    let mut backend = CpuBackend::new(Arc::new(m.transformer));
    let examples = tasks::load(&tasks::test_split(), if quick { 4 } else { 15 })?;
    let base = DecodeSettings { gen_length: 32, block_length: 8, steps: 32, ..Default::default() };
    let mut out = serde_json::Map::new();
    for (name, cache) in [("no_cache", CacheMode::None), ("prefix", CacheMode::Prefix), ("dual", CacheMode::Dual)] {
        eprintln!("[versus] cache accuracy: tiny-llada {name} on {} examples", examples.len());
        let r = tasks::evaluate(&mut backend, &tok, &examples, &DecodeSettings { cache, ..base.clone() }, &stop)?;
        out.insert(name.into(), json!(r.accuracy()));
    }
    Ok(json!({"accuracy": Value::Object(out), "examples": examples.len(), "settings": base}))
}

pub fn run(quick: bool) -> Result<Value> {
    let cli = llama_cli()?;
    let threads = unmask_engine::threads::count();
    let dir = root().join("target/versus");
    std::fs::create_dir_all(&dir)?;
    let tiny = root().join("models/tiny-llada");
    let (f32_gguf, q8_gguf) = (dir.join("tiny-llada-f32.gguf"), dir.join("tiny-llada-q8_0.gguf"));
    eprintln!("[versus] exporting tiny-llada to GGUF (export_gguf, as `unmask models export`)");
    unmask_engine::model::gguf::export_gguf(&tiny, &f32_gguf, DType::F32)?;
    unmask_engine::model::gguf::export_gguf(&tiny, &q8_gguf, DType::Q8_0)?;
    let big = dir.join("llada8b-2l-q8_0.gguf");
    eprintln!("[versus] generating the LLaDA-8B-shaped GGUF (scripts/versus/make_llada8b_gguf.py)");
    let st = Command::new("python3")
        .arg(root().join("scripts/versus/make_llada8b_gguf.py"))
        .arg(&q8_gguf)
        .arg(&big)
        .status()
        .context("running make_llada8b_gguf.py")?;
    if !st.success() {
        bail!("versus: make_llada8b_gguf.py failed");
    }
    let reps = if quick { 3 } else { 5 };
    let par = parity(&cli, &f32_gguf, threads)?;
    if std::env::var("UNMASK_VERSUS_ONLY").as_deref() == Ok("parity") {
        return Ok(json!({"headline": {"parity_f32": par["fraction_identical"]}, "parity_tiny_f32": par}));
    }
    eprintln!("[versus] parity (F32, one step per block): {:.3} identical", par["fraction_identical"].as_f64().unwrap_or(0.0));
    let tiny_cmp = compare(&cli, &q8_gguf, reps, threads)?;
    let big_cmp = compare(&cli, &big, if quick { 1 } else { 3 }, threads)?;
    let (phase, frac) = {
        let m = load_model(&big)?;
        phases(&m.transformer, if quick { 5 } else { 9 })?
    };
    let acc = cache_accuracy(quick)?;
    let sp = |c: &Value, mode: &str| c["unmask"][mode]["speedup_vs_llamacpp"].clone();
    let headline = json!({
        "speedup_8b_no_cache": sp(&big_cmp, "no_cache"),
        "speedup_8b_prefix": sp(&big_cmp, "prefix"),
        "speedup_8b_dual": sp(&big_cmp, "dual"),
        "speedup_tiny_no_cache": sp(&tiny_cmp, "no_cache"),
        "parity_f32": par["fraction_identical"],
        "forward_peak_fraction_8b": frac,
        // How much of the 8B-shaped refresh the last-layer row skip saves here, and at the real
        // model's depth: the ratios above include it at the stand-in's 2 layers.
        "refresh_last_layer_skip_fraction": phase["block_start_refresh"]["last_layer_skip"]["fraction_of_all_rows_forward"],
        "refresh_last_layer_skip_fraction_at_32_layers": phase["block_start_refresh"]["last_layer_skip"]["fraction_at_32_layers"],
    });
    Ok(json!({
        "headline": headline,
        "llamacpp": {"binary": shown(&cli), "source": "llama-cpp-python 0.3.36 sdist (vendored llama.cpp), scripts/versus/build-llamacpp.sh",
                     "flags": "-ub/-c/-b 256, --diffusion-block-length 32, --top-k 1 --temp 0, -t/-tb = threads"},
        "llada8b_2layer_q8_0": big_cmp,
        "tiny_llada_q8_0": tiny_cmp,
        "parity_tiny_f32": par,
        "phases_8b": phase,
        "cache_accuracy_tiny": acc,
        "notes": "speedup = llama.cpp seconds per denoising step / ours (each engine's total over its own forwards; llama.cpp's schedule has one extra, empty block). \
                  llama.cpp always forwards the whole canvas; prefix/dual caches are approximations (their accuracy is cache_accuracy_tiny). \
                  phases: forward FLOPs / median seconds / median VNNI peak, samples interleaved in one loop. \
                  Our last layer runs only the rows whose logits are read (the others still give their K/V); \
                  last_layer_skip says what that saves here and what it would save at LLaDA-8B's 32 layers: \
                  this 2-layer stand-in overstates it.",
    }))
}
