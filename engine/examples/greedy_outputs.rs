//! Greedy outputs of one autoregressive model for many prompts, in one process: the
//! distillation data of a draft model (`models/train/distill.py`), produced by the same engine,
//! weights and chat template that will verify the draft's proposals.
//!
//! ```sh
//! cargo run --release -p unmask-engine --example greedy_outputs -- \
//!     --model target/test-inputs/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
//!     --prompts prompts.jsonl --out outputs.jsonl [--gen-length 64] [--shard 0/2] \
//!     [--tokenizer-out models/smollm2-draft/tokenizer.json]
//! ```
//!
//! Each input line is `{"id": ..., "message": "..."}` (a user turn, rendered with the model's
//! chat template) or `{"id": ..., "text": "..."}` (raw text, no template). Each output line is
//! `{"id", "prompt_ids", "output_ids", "stop"}`; `output_ids` ends with the EOS/EOT token when
//! the model produced one. Ids already in `--out` are skipped, so an interrupted run resumes.
//! `--shard I/N` takes every N-th prompt starting at I (one process per core). Prompts that
//! share a prefix (the template's system turn) reuse its K/V.

use std::collections::HashSet;
use std::error::Error;
use std::io::{BufRead, BufWriter, Write};
use std::path::PathBuf;
use std::time::Instant;

use serde_json::{json, Value};
use unmask_engine::decode::ar::{generate_ar_reusing, ArPrefixCache};
use unmask_engine::decode::{discard_frames, CancelFlag, DecodeSettings, StopReason};
use unmask_engine::{load_model, ChatMessage, CpuBackend};

type Res<T> = Result<T, Box<dyn Error>>;

struct Args {
    model: PathBuf,
    prompts: PathBuf,
    out: PathBuf,
    gen_length: usize,
    shard: (usize, usize),
    tokenizer_out: Option<PathBuf>,
}

fn parse_args() -> Res<Args> {
    let mut it = std::env::args().skip(1);
    let (mut model, mut prompts, mut out, mut tokenizer_out) = (None, None, None, None);
    let (mut gen_length, mut shard) = (64usize, (0usize, 1usize));
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--model" => model = Some(PathBuf::from(value()?)),
            "--prompts" => prompts = Some(PathBuf::from(value()?)),
            "--out" => out = Some(PathBuf::from(value()?)),
            "--gen-length" => gen_length = value()?.parse()?,
            "--tokenizer-out" => tokenizer_out = Some(PathBuf::from(value()?)),
            "--shard" => {
                let v = value()?;
                let (i, n) = v.split_once('/').ok_or("--shard takes I/N")?;
                shard = (i.parse()?, n.parse()?);
                if shard.1 == 0 || shard.0 >= shard.1 {
                    return Err(format!("--shard {v}: need 0 <= I < N").into());
                }
            }
            other => return Err(format!("unknown flag {other} (see the module doc)").into()),
        }
    }
    Ok(Args {
        model: model.ok_or("--model is required")?,
        prompts: prompts.ok_or("--prompts is required")?,
        out: out.ok_or("--out is required")?,
        gen_length,
        shard,
        tokenizer_out,
    })
}

/// Ids already written by an earlier (interrupted) run.
fn done_ids(out: &PathBuf) -> Res<HashSet<String>> {
    let mut done = HashSet::new();
    if let Ok(f) = std::fs::File::open(out) {
        for line in std::io::BufReader::new(f).lines() {
            // A line cut by an interruption is not done: it is generated again.
            if let Ok(v) = serde_json::from_str::<Value>(&line?) {
                if let Some(id) = v.get("id") {
                    done.insert(id.to_string());
                }
            }
        }
    }
    Ok(done)
}

fn main() -> Res<()> {
    let args = parse_args()?;
    let m = load_model(&args.model)?;
    if let Some(path) = &args.tokenizer_out {
        // The tokenizer exactly as the engine builds it for this model (from GGUF metadata).
        let json = m.tokenizer.inner().to_string(true).map_err(|e| e.to_string())?;
        std::fs::write(path, json)?;
        eprintln!("wrote {}", path.display());
    }
    let done = done_ids(&args.out)?;
    let text = std::fs::read_to_string(&args.prompts)?;
    let mut out = BufWriter::new(std::fs::OpenOptions::new().create(true).append(true).open(&args.out)?);
    let mut backend = CpuBackend::new(std::sync::Arc::new(m.transformer));
    let settings = DecodeSettings { gen_length: args.gen_length, temperature: 0.0, ..Default::default() };
    let cancel = CancelFlag::new();
    let mut reuse = ArPrefixCache::default();
    let (t0, mut n_prompts, mut n_tokens) = (Instant::now(), 0usize, 0usize);
    for (i, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        if i % args.shard.1 != args.shard.0 {
            continue;
        }
        let row: Value =
            serde_json::from_str(line).map_err(|e| format!("{}: line {}: {e}", args.prompts.display(), i + 1))?;
        let id = row.get("id").cloned().unwrap_or(json!(i));
        if done.contains(&id.to_string()) {
            continue;
        }
        let prompt = match (row.get("message").and_then(Value::as_str), row.get("text").and_then(Value::as_str)) {
            (Some(msg), _) => m.template.render(&[ChatMessage::user(msg)], true),
            (None, Some(raw)) => raw.to_owned(),
            _ => {
                return Err(
                    format!("{}: line {} has neither `message` nor `text`", args.prompts.display(), i + 1).into()
                )
            }
        };
        let ids = m.tokenizer.encode(&prompt)?;
        let o = generate_ar_reusing(&mut backend, &ids, &settings, &cancel, &mut discard_frames, &mut reuse)?;
        let stop = if o.stop_reason == StopReason::Eos { "eos" } else { "length" };
        serde_json::to_writer(&mut out, &json!({"id": id, "prompt_ids": ids, "output_ids": o.tokens, "stop": stop}))?;
        out.write_all(b"\n")?;
        // Every line is flushed: a generator stopped by a signal loses at most the prompt at hand.
        out.flush()?;
        n_prompts += 1;
        n_tokens += o.tokens.len();
        if n_prompts.is_multiple_of(50) {
            let s = t0.elapsed().as_secs_f64();
            eprintln!("{n_prompts} prompts, {n_tokens} tokens, {s:.0} s ({:.1} tokens/s)", n_tokens as f64 / s);
        }
    }
    out.flush()?;
    let s = t0.elapsed().as_secs_f64();
    eprintln!(
        "done: {n_prompts} prompts, {n_tokens} generated tokens in {s:.1} s ({:.1} tokens/s)",
        n_tokens as f64 / s.max(1e-9)
    );
    Ok(())
}
