//! Held-out prose metrics run by our engine: masked-token accuracy for dLLMs and perplexity for
//! AR models, on the fixed test-split windows of `models/data/test_prose.json` (written by
//! `models/train/eval.py`, which computes the same numbers in PyTorch).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use serde_json::{json, Value};
use unmask_engine::model::{ForwardRequest, KvMode, Transformer};

/// The shared prose windows.
#[derive(Debug, Deserialize)]
pub struct ProseSet {
    pub seq_len: usize,
    pub windows: Vec<Vec<u32>>,
    /// Mask ratio (as written, e.g. "0.15") → masked positions per window.
    pub masked_positions: BTreeMap<String, Vec<Vec<usize>>>,
}

/// Path of the held-out prose windows.
pub fn test_prose() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/data/test_prose.json")
}

/// Reads and checks the prose set.
pub fn load(path: &Path) -> Result<ProseSet> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let set: ProseSet = serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    for (r, m) in &set.masked_positions {
        if m.len() != set.windows.len() || m.iter().flatten().any(|&p| p >= set.seq_len) {
            bail!("{}: masked positions for ratio {r} do not fit the windows", path.display());
        }
    }
    Ok(set)
}

fn full_forward(t: &Transformer, ids: &[u32]) -> Result<Vec<f32>> {
    let pos: Vec<usize> = (0..ids.len()).collect();
    Ok(t.forward(&ForwardRequest { tokens: ids, positions: &pos, logits_rows: &pos, kv: KvMode::Ignore }, None)?.logits)
}

/// Negative log-likelihood of `target` under a logits row, and whether it is the argmax.
fn score(row: &[f32], target: u32) -> (f64, bool) {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
    let lse = max + row.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln();
    let best = row.iter().enumerate().fold(0, |b, (i, &v)| if v > row[b] { i } else { b });
    (lse - row[target as usize] as f64, best == target as usize)
}

/// Masked-token accuracy per mask ratio (one forward per window, argmax at the masked positions).
pub fn masked_token_accuracy(t: &Transformer, set: &ProseSet) -> Result<Value> {
    let mask = t.config.mask_token_id.context("dLLM without a mask token")?;
    let v = t.config.vocab;
    let mut out = serde_json::Map::new();
    for (ratio, positions) in &set.masked_positions {
        let (mut correct, mut n, mut nll) = (0usize, 0usize, 0.0f64);
        for (w, pos) in set.windows.iter().zip(positions) {
            let mut ids = w.clone();
            for &p in pos {
                ids[p] = mask;
            }
            let logits = full_forward(t, &ids)?;
            for &p in pos {
                let (l, ok) = score(&logits[p * v..(p + 1) * v], w[p]);
                nll += l;
                correct += ok as usize;
                n += 1;
            }
        }
        out.insert(
            format!("mask{ratio}"),
            json!({"acc": correct as f64 / n.max(1) as f64, "nll": nll / n.max(1) as f64, "n_tokens": n}),
        );
    }
    Ok(Value::Object(out))
}

/// Perplexity of a causal model over the windows (every next-token prediction inside a window).
pub fn perplexity(t: &Transformer, set: &ProseSet) -> Result<Value> {
    let v = t.config.vocab;
    let (mut n, mut nll) = (0usize, 0.0f64);
    for w in &set.windows {
        let logits = full_forward(t, w)?;
        for p in 0..w.len() - 1 {
            nll += score(&logits[p * v..(p + 1) * v], w[p + 1]).0;
            n += 1;
        }
    }
    let mean = nll / n.max(1) as f64;
    Ok(json!({"perplexity": mean.exp(), "nll": mean, "n_tokens": n}))
}
