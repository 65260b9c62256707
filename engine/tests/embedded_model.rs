//! The embedded default model (`models/tiny-llada`) through our engine, cross-checked against the
//! PyTorch training code's own decoder (`models/train/eval.py` wrote `eval_predictions.jsonl`).

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use unmask_engine::backend::cpu::CpuBackend;
use unmask_engine::decode::{generate, CancelFlag, DecodeSettings, StepFrame};
use unmask_engine::model::{load_model, load_transformer_with, KernelChoice};

fn model_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/tiny-llada")
}

#[test]
fn loads_with_tokenizer_template_and_defaults() {
    let m = load_model(&model_dir()).unwrap();
    assert_eq!(m.config().mask_token_id, Some(2));
    assert_eq!(m.tokenizer.vocab_size(), m.config().vocab);
    let ids = m.tokenizer.encode("<|startoftext|>What is 347+586?<|eot_id|>").unwrap();
    assert_eq!(ids[0], 0);
    assert_eq!(*ids.last().unwrap(), 5);
    // Digits are split one token each (the tokenizer's pre-tokenizer).
    assert_eq!(m.tokenizer.decode(&ids, true), "What is 347+586?");
    assert_eq!(m.generation.gen_length, Some(32));
}

/// Reference LLaDA decoding at temperature 0 reproduces PyTorch's generated ids token for token.
#[test]
fn decoding_matches_pytorch_eval() {
    let dir = model_dir();
    let m = load_model(&dir).unwrap();
    // PyTorch ran the float weights in f32: compare with the float path.
    let (t, _) = load_transformer_with(&dir, KernelChoice::Float).unwrap();
    let mut backend = CpuBackend::new(Arc::new(t));
    let text = std::fs::read_to_string(dir.join("eval_predictions.jsonl")).unwrap();
    let settings = DecodeSettings { gen_length: 32, block_length: 32, steps: 32, ..Default::default() };
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    let (mut same, mut total) = (0, 0);
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let task = v["task"].as_str().unwrap().to_owned();
        let n = seen.entry(task).or_default();
        if *n >= 2 {
            continue;
        }
        *n += 1;
        let ids = m.tokenizer.encode(v["prompt"].as_str().unwrap()).unwrap();
        let want: Vec<u32> = v["generated_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
        let out = generate(&mut backend, &ids, &settings, &CancelFlag::new(), |_: &StepFrame| ControlFlow::Continue(()))
            .unwrap();
        total += 1;
        if out.tokens == want {
            same += 1;
        } else {
            eprintln!("differs: {}\n ours {:?}\n torch {:?}", v["prompt"], out.tokens, want);
        }
    }
    assert_eq!(same, total, "{same}/{total} decodes identical to PyTorch");
}
