//! Every `unmask generate` example the README and docs/ show is run against the embedded models,
//! and every answer they promise ("PROMPT" answers ANSWER) is checked: the docs promise only what
//! this test passes.

mod common;

use std::path::{Path, PathBuf};

use common::Env;
use unmask_doc_promises::{documented_generates, pages, promises, Page};

fn repo_pages() -> Vec<Page> {
    let repo: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    pages(&repo).expect("README.md and docs/*.md read")
}

#[test]
fn every_documented_generate_example_runs_on_the_embedded_models() {
    let examples = documented_generates(&repo_pages());
    assert!(examples.len() >= 10, "expected the README's and docs' examples, found {}", examples.len());
    let env = Env::new();
    let mut ran = 0;
    for (place, args) in examples {
        // Files the examples name stand for the reader's own: a story to continue for --raw, a
        // question otherwise.
        let raw = args.iter().any(|a| a == "--raw");
        let args: Vec<String> = args
            .into_iter()
            .map(|a| {
                if !a.ends_with(".txt") {
                    return a;
                }
                let file = env.data().join(&a);
                let text = if raw { "It was a dark and stormy night, and the" } else { "What is 12+7?" };
                std::fs::write(&file, text).expect("prompt file");
                file.display().to_string()
            })
            .collect();
        let refs: Vec<&str> = std::iter::once("generate").chain(args.iter().map(String::as_str)).collect();
        let out = env.run(&refs);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{place}: `unmask {}` failed ({:?}): {}",
            refs.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!stdout.trim().is_empty(), "{place}: `unmask {}` printed nothing", refs.join(" "));
        ran += 1;
    }
    assert!(ran >= 10);
}

#[test]
fn every_promised_answer_is_what_the_embedded_model_answers() {
    let promises = promises(&repo_pages());
    assert!(!promises.is_empty(), "the README promises at least one answer");
    let env = Env::new();
    for p in promises {
        let v = env.json(&["generate", &p.prompt, "--json"]);
        let text = v["text"].as_str().unwrap_or_default().trim().to_owned();
        assert_eq!(text, p.answer, "{} says \"{}\" answers {}", p.page, p.prompt, p.answer);
    }
}

#[test]
fn an_empty_answer_is_explained_not_left_as_a_blank_line() {
    let env = Env::new();
    let file = env.data().join("q.txt");
    // A question without the chat template: the embedded chat model tends to end at once.
    std::fs::write(&file, "What is 12+7?").expect("prompt file");
    let out = env.run(&["generate", "--prompt-file", &file.display().to_string(), "--raw"]);
    assert!(out.status.success());
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if stdout.trim().is_empty() {
        assert!(stderr.contains("the answer is empty"), "an empty answer without a note: {stderr}");
    } else {
        assert!(!stderr.contains("the answer is empty"), "a note on a non-empty answer: {stdout}");
    }
}

/// `unmask chat ARGS` with `input` on standard input, run to its end.
fn piped_chat(env: &Env, args: &[&str], input: &str) -> std::process::Output {
    let mut cmd = env.cmd();
    cmd.arg("chat").args(args);
    assert_cmd::Command::from_std(cmd).write_stdin(input.to_owned()).output().expect("chat runs")
}

#[test]
fn the_readme_s_piped_chat_answers() {
    let out = piped_chat(&Env::new(), &[], "What is 2+3?\n");
    assert!(out.status.success(), "chat failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stdout).trim().is_empty(), "chat printed no reply");
}

#[test]
fn every_promised_answer_holds_as_a_later_turn_of_one_chat() {
    // The documented questions asked one after another in one conversation: each must be answered
    // as it is on its own, whatever the earlier turns were.
    let promises = promises(&repo_pages());
    assert!(promises.len() >= 2, "a conversation needs at least two promised answers");
    let input: String = promises.iter().map(|p| format!("{}\n", p.prompt)).collect();
    let out = piped_chat(&Env::new(), &["--json"], &input);
    assert!(out.status.success(), "chat failed: {}", String::from_utf8_lossy(&out.stderr));
    let replies: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("one JSON object per turn");
            v["text"].as_str().unwrap_or_default().trim().to_owned()
        })
        .collect();
    assert_eq!(replies.len(), promises.len(), "one reply per question: {replies:?}");
    for (turn, (p, reply)) in promises.iter().zip(&replies).enumerate() {
        assert_eq!(reply, &p.answer, "turn {}: {} says \"{}\" answers {}", turn + 1, p.page, p.prompt, p.answer);
    }
}
