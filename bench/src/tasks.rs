//! The embedded models' held-out task set (`models/data/test.jsonl`) and exact-match scoring
//! with our Rust engine.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Deserialize;
use serde_json::{json, Value};
use unmask_engine::backend::Backend;
use unmask_engine::decode::{generate, trim_at_stop, CancelFlag, DecodeSettings, StepFrame};
use unmask_engine::model::{ChatMessage, ChatTemplate, TextTokenizer};

/// One held-out example.
#[derive(Debug, Clone, Deserialize)]
pub struct TaskExample {
    pub task: String,
    /// Chat-formatted prompt (LLaDA template already applied).
    pub prompt: String,
    pub answer: String,
    /// The user message alone, for rendering with another family's template.
    #[serde(default)]
    pub message: Option<String>,
    /// Earlier turns of the conversation (user message, assistant answer) this message ends.
    #[serde(default)]
    pub history: Vec<(String, String)>,
}

impl TaskExample {
    /// The prompt in `template`'s format (the stored prompt for LLaDA's own template and no
    /// earlier turns).
    pub fn prompt_for(&self, template: &ChatTemplate) -> String {
        match &self.message {
            Some(m) if *template != ChatTemplate::Llada || !self.history.is_empty() => {
                let mut conversation = Vec::with_capacity(2 * self.history.len() + 1);
                for (user, assistant) in &self.history {
                    conversation.push(ChatMessage::user(user.clone()));
                    conversation.push(ChatMessage::assistant(assistant.clone()));
                }
                conversation.push(ChatMessage::user(m.clone()));
                template.render(&conversation, true)
            }
            _ => self.prompt.clone(),
        }
    }
}

/// Each example as the last message of a conversation whose `turns` earlier turns are other
/// examples of the set with their right answers, taken far apart in the (family-ordered) set so
/// they are mostly other families; the pairing is `models/train/eval.py --history`'s. A later
/// turn must be answered as a first one is. Examples without a stored message stay as they are.
pub fn as_later_turns(examples: &[TaskExample], turns: usize) -> Vec<TaskExample> {
    let n = examples.len();
    examples
        .iter()
        .enumerate()
        .map(|(i, ex)| {
            let history = (0..turns)
                .filter_map(|j| {
                    let h = &examples[(i + (j + 1) * (n / (turns + 1)) + j) % n];
                    h.message.clone().map(|m| (m, h.answer.clone()))
                })
                .collect();
            TaskExample { history, ..ex.clone() }
        })
        .collect()
}

/// Path of the held-out test split.
pub fn test_split() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/data/test.jsonl")
}

/// Path of the held-out validation split (same generators, another seed): for tuning settings
/// without looking at the test split.
pub fn val_split() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/data/val.jsonl")
}

/// Reads up to `per_task` examples of each task (file order, so runs are comparable).
pub fn load(path: &Path, per_task: usize) -> Result<Vec<TaskExample>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let ex: TaskExample = serde_json::from_str(line)?;
        let c = counts.entry(ex.task.clone()).or_default();
        if *c < per_task {
            *c += 1;
            out.push(ex);
        }
    }
    Ok(out)
}

/// Aggregate of one evaluation run.
#[derive(Debug, Clone, Default)]
pub struct EvalResult {
    pub per_task: BTreeMap<String, (usize, usize)>,
    pub forwards: usize,
    pub steps: usize,
    pub generated_tokens: usize,
    /// Canvas positions decoded (gen_length per example).
    pub canvas_tokens: usize,
    pub wall_s: f64,
    pub simulated_s: f64,
    /// Generated token ids per example, for agreement comparisons between settings.
    pub outputs: Vec<Vec<u32>>,
}

impl EvalResult {
    /// Right answers and examples over all task families.
    pub fn correct(&self) -> (usize, usize) {
        self.per_task.values().fold((0, 0), |a, v| (a.0 + v.0, a.1 + v.1))
    }
    /// Wilson 95 % interval of the accuracy over all examples.
    pub fn accuracy_ci95(&self) -> [f64; 2] {
        let (ok, n) = self.correct();
        let (lo, hi) = wilson(ok, n);
        [lo, hi]
    }
    /// Exact-match accuracy over all examples.
    pub fn accuracy(&self) -> f64 {
        let (ok, n) = self.correct();
        if n == 0 {
            0.0
        } else {
            ok as f64 / n as f64
        }
    }
    /// JSON summary.
    pub fn to_json(&self) -> Value {
        let tasks: serde_json::Map<String, Value> = self
            .per_task
            .iter()
            .map(|(k, (ok, n))| {
                (k.clone(), json!({"correct": ok, "n": n, "accuracy": *ok as f64 / (*n).max(1) as f64}))
            })
            .collect();
        json!({
            "accuracy": self.accuracy(), "tasks": tasks, "forwards": self.forwards, "steps": self.steps,
            "tokens_per_forward": self.generated_tokens as f64 / self.forwards.max(1) as f64,
            "forwards_per_token": self.forwards as f64 / self.generated_tokens.max(1) as f64,
            "canvas_tokens_per_forward": self.canvas_tokens as f64 / self.forwards.max(1) as f64,
            "wall_s": self.wall_s, "simulated_s": self.simulated_s,
        })
    }
}

/// Decodes every example with `settings` and scores exact match of the trimmed answer
/// (prompts in the LLaDA template; see [`evaluate_with`] for other families).
pub fn evaluate(
    backend: &mut dyn Backend,
    tok: &TextTokenizer,
    examples: &[TaskExample],
    settings: &DecodeSettings,
    stop_ids: &[u32],
) -> Result<EvalResult> {
    evaluate_with(backend, tok, &ChatTemplate::Llada, examples, settings, stop_ids)
}

/// As [`evaluate`], rendering each prompt with `template`.
pub fn evaluate_with(
    backend: &mut dyn Backend,
    tok: &TextTokenizer,
    template: &ChatTemplate,
    examples: &[TaskExample],
    settings: &DecodeSettings,
    stop_ids: &[u32],
) -> Result<EvalResult> {
    let mut r = EvalResult::default();
    let cancel = CancelFlag::new();
    let bar = indicatif::ProgressBar::new(examples.len() as u64).with_style(
        indicatif::ProgressStyle::with_template("  {bar:30} {pos}/{len} examples · {elapsed} · eta {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    for ex in examples {
        bar.inc(1);
        let ids = tok.encode(&ex.prompt_for(template))?;
        let out = generate(backend, &ids, settings, &cancel, |_: &StepFrame| ControlFlow::Continue(()))?;
        let answer_ids = trim_at_stop(&out.tokens, stop_ids);
        let text = tok.decode(answer_ids, true);
        let e = r.per_task.entry(ex.task.clone()).or_default();
        e.1 += 1;
        if text.trim() == ex.answer.trim() {
            e.0 += 1;
        }
        r.forwards += out.forwards;
        r.steps += out.steps;
        r.generated_tokens += answer_ids.len().max(1);
        r.canvas_tokens += settings.gen_length;
        r.wall_s += out.wall_s;
        r.simulated_s += out.simulated_s.unwrap_or(0.0);
        r.outputs.push(out.tokens);
    }
    bar.finish_and_clear();
    Ok(r)
}

/// Fraction of positions where two runs produced the same token.
pub fn token_agreement(a: &EvalResult, b: &EvalResult) -> f64 {
    let (mut same, mut n) = (0usize, 0usize);
    for (x, y) in a.outputs.iter().zip(&b.outputs) {
        for (p, q) in x.iter().zip(y) {
            n += 1;
            same += (p == q) as usize;
        }
    }
    same as f64 / n.max(1) as f64
}

/// Wilson 95 % interval of `ok / n`.
pub fn wilson(ok: usize, n: usize) -> (f64, f64) {
    if n == 0 {
        return (0.0, 0.0);
    }
    let (z, n_f, p) = (1.96f64, n as f64, ok as f64 / n as f64);
    let denom = 1.0 + z * z / n_f;
    let centre = (p + z * z / (2.0 * n_f)) / denom;
    let half = z * ((p * (1.0 - p) + z * z / (4.0 * n_f)) / n_f).sqrt() / denom;
    (centre - half, centre + half)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unseen() -> Vec<TaskExample> {
        load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/data/unseen.jsonl"), usize::MAX).unwrap()
    }

    /// `models/train/skills.py` holds a word out when crc32("w:" + lowercase word) % 4 == 0.
    fn held_out(word: &str) -> bool {
        crc32fast::hash(format!("w:{}", word.to_lowercase()).as_bytes()) % 4 == 0
    }

    #[test]
    fn the_unseen_set_has_300_prompts_per_family_none_shared_with_the_test_split() {
        let rows = unseen();
        let mut per: BTreeMap<&str, usize> = BTreeMap::new();
        for r in &rows {
            *per.entry(r.task.as_str()).or_default() += 1;
        }
        assert_eq!(per.len(), 8, "{per:?}");
        assert!(per.values().all(|&n| n >= 300), "{per:?}");
        let test: std::collections::HashSet<String> =
            load(&test_split(), usize::MAX).unwrap().into_iter().filter_map(|r| r.message).collect();
        let mut seen = std::collections::HashSet::new();
        for r in &rows {
            let m = r.message.clone().expect("unseen rows carry the message");
            assert!(!test.contains(&m), "{m:?} is also in the test split");
            assert!(seen.insert(m.clone()), "{m:?} twice");
            assert_eq!(r.prompt, ChatTemplate::Llada.render(&[ChatMessage::user(m)], true));
        }
    }

    /// The ablation tunes on `unseen_val.jsonl` and judges on `unseen.jsonl`: 200 prompts per
    /// family, held-out words only, none of them an evaluation prompt.
    #[test]
    fn the_unseen_tuning_split_shares_no_prompt_with_the_evaluation_set() {
        let eval: std::collections::HashSet<String> = unseen().into_iter().filter_map(|r| r.message).collect();
        let tune = load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/data/unseen_val.jsonl"), usize::MAX)
            .unwrap();
        let mut per: BTreeMap<&str, usize> = BTreeMap::new();
        for r in &tune {
            *per.entry(r.task.as_str()).or_default() += 1;
            let m = r.message.as_deref().expect("tuning rows carry the message");
            assert!(!eval.contains(m), "{m:?} is also an evaluation prompt");
            if ["reverse", "sort", "copy", "count"].contains(&r.task.as_str()) {
                let list = &m[m.find(": ").expect("instruction: list") + 2..];
                assert!(list.split([' ', ',']).filter(|w| !w.is_empty()).all(held_out), "{m:?}");
            }
        }
        assert_eq!(per.len(), 8, "{per:?}");
        assert!(per.values().all(|&n| n == 200), "{per:?}");
        // Its chat rows ask for the same replies as often as the evaluation set's do (within a
        // row per reply), so a search does not tune on mostly out-of-scope questions.
        let replies = |rows: &[TaskExample]| {
            let chat: Vec<&TaskExample> = rows.iter().filter(|r| r.task == "chat").collect();
            let mut share: BTreeMap<String, f64> = BTreeMap::new();
            for r in &chat {
                *share.entry(r.answer.clone()).or_default() += 1.0 / chat.len() as f64;
            }
            share
        };
        let (eval_mix, tune_mix) = (replies(&unseen()), replies(&tune));
        assert_eq!(eval_mix.len(), 7, "{eval_mix:?}");
        for (reply, share) in &eval_mix {
            let tuned = tune_mix.get(reply).copied().unwrap_or(0.0);
            assert!((tuned - share).abs() <= 1.0 / 200.0 + 1e-9, "{reply:?}: {tuned} vs {share}");
        }
    }

    #[test]
    fn every_listed_word_of_the_unseen_set_is_a_held_out_word() {
        let mut checked = 0;
        for r in unseen().iter().filter(|r| ["reverse", "sort", "copy", "count"].contains(&r.task.as_str())) {
            let m = r.message.as_deref().unwrap();
            let list = &m[m.find(": ").expect("instruction: list") + 2..];
            for w in list.split([' ', ',']).filter(|w| !w.is_empty()) {
                assert!(held_out(w), "{w:?} in {m:?} is a training word");
                checked += 1;
            }
        }
        assert!(checked > 5000, "{checked}");
        // and the training side is not empty: the split is a quarter, not everything
        assert!(!held_out("the") || !held_out("of"));
    }

    #[test]
    fn a_later_turn_follows_another_family_s_exchange_rendered_as_the_chat_renders_it() {
        let rows = load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/data/unseen.jsonl"), 4).unwrap();
        let later = as_later_turns(&rows, 1);
        assert_eq!(later.len(), rows.len());
        for (i, (ex, turn)) in rows.iter().zip(&later).enumerate() {
            // eval.py --history 1: the row half the set away
            let h = &rows[(i + rows.len() / 2) % rows.len()];
            assert_ne!(h.task, ex.task, "row {i}");
            assert_eq!(turn.history, vec![(h.message.clone().unwrap(), h.answer.clone())]);
            let want = ChatTemplate::Llada.render(
                &[
                    ChatMessage::user(h.message.clone().unwrap()),
                    ChatMessage::assistant(h.answer.clone()),
                    ChatMessage::user(ex.message.clone().unwrap()),
                ],
                true,
            );
            assert_eq!(turn.prompt_for(&ChatTemplate::Llada), want);
            // with no history the stored prompt is the same rendering of the message alone
            assert_eq!(
                ex.prompt_for(&ChatTemplate::Llada),
                ChatTemplate::Llada.render(&[ChatMessage::user(ex.message.clone().unwrap())], true)
            );
        }
    }
}
