//! The embedded SmolLM2 draft (`models/smollm2-draft`) with SmolLM2-135M-Instruct's GGUF as
//! target: the pair loads and passes the pair check, greedy speculative output is plain AR
//! output token for token under every schedule, and the draft is accepted often (it was trained
//! on SmolLM2's own greedy outputs). Skips when the GGUF is absent (`tests/fetch-test-inputs.sh`
//! fetches it; `UNMASK_SMOLLM2_GGUF` points elsewhere).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use unmask_engine::backend::cpu::CpuBackend;
use unmask_engine::decode::ar::generate_ar;
use unmask_engine::decode::spec_ar::{check_pair, generate_speculative, SpecArCaches, SpecArSettings, SpecSchedule};
use unmask_engine::decode::{discard_frames, CancelFlag, DecodeSettings};
use unmask_engine::model::load_model;
use unmask_engine::ChatMessage;

#[path = "common/smollm2.rs"]
mod smollm2;
use smollm2::find_smollm2 as smollm2_gguf;

fn draft_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/smollm2-draft")
}

#[test]
fn smollm2_draft_speculation_is_lossless_and_accepted() {
    let Some(gguf) = smollm2_gguf() else {
        println!("SKIPPED smollm2_draft_speculation_is_lossless_and_accepted: no SmolLM2 GGUF (tests/fetch-test-inputs.sh or UNMASK_SMOLLM2_GGUF)");
        return;
    };
    let target = load_model(&gguf).unwrap();
    let draft = load_model(&draft_dir()).unwrap();
    check_pair(target.config(), draft.config()).unwrap();
    assert_eq!(draft.tokenizer.vocab_size(), target.tokenizer.vocab_size());

    // Test-split style prompts and a free chat turn (not from the training prompts).
    let prompts =
        ["Reverse: lamp river stone", "What is 215+348?", "Repeat: green house small dog", "Tell me about the sea."];
    let settings = DecodeSettings { gen_length: 24, temperature: 0.0, ..Default::default() };
    let cancel = CancelFlag::new();
    let (tokenizer, template) = (&target.tokenizer, &target.template);
    let mut t_be = CpuBackend::new(Arc::new(target.transformer));
    let mut d_be = CpuBackend::new(Arc::new(draft.transformer));
    let (mut accepted, mut judged) = (0, 0);
    for text in prompts {
        let ids = tokenizer.encode(&template.render(&[ChatMessage::user(text)], true)).unwrap();
        let want = generate_ar(&mut t_be, &ids, &settings, &cancel, &mut discard_frames).unwrap().tokens;
        for (schedule, draft_len) in [(SpecSchedule::Sync, 2), (SpecSchedule::Adaptive, 6), (SpecSchedule::Async, 3)] {
            let spec = SpecArSettings { schedule, draft_len, ..Default::default() };
            let (out, stats) = generate_speculative(
                &mut t_be,
                &mut d_be,
                &ids,
                &settings,
                &spec,
                &cancel,
                &mut discard_frames,
                &mut SpecArCaches::default(),
            )
            .unwrap();
            assert_eq!(out.tokens, want, "{text:?} under {schedule}: speculative output differs from plain AR");
            if schedule == SpecSchedule::Sync {
                accepted += stats.accepted;
                judged += stats.offered;
            }
        }
    }
    let rate = accepted as f64 / judged.max(1) as f64;
    println!("smollm2-draft sync acceptance on {} prompts: {accepted}/{judged} = {rate:.2}", prompts.len());
    // The untrained layer-skip self-draft was accepted 4 % of the time; the trained one several
    // times as often (the bound leaves room for other CPUs' rounding in both models).
    assert!(rate > 0.15, "the trained draft should be accepted far more often than an untrained one, got {rate:.2}");
}
