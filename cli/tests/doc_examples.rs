//! Every `unmask generate` example the README and docs/ show is run against the embedded models,
//! and every answer they promise ("PROMPT" answers ANSWER) is checked: the docs promise only what
//! this test passes.

mod common;

use std::path::{Path, PathBuf};

use common::Env;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The README and every docs/*.md page, with their names.
fn pages() -> Vec<(String, String)> {
    let mut files = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("docs entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).expect("page reads");
            (f.file_name().unwrap_or_default().to_string_lossy().into_owned(), text)
        })
        .collect()
}

/// Shell-like words of one command line: double-quoted strings stay one word, `#` starts a
/// comment, `[optional]` flags are left out.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let (mut quoted, mut any) = (false, false);
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            '#' if !quoted => break,
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out.into_iter().filter(|w| !(w.starts_with('[') && w.ends_with(']'))).collect()
}

/// The arguments of every documented `generate` command (`$U generate ...` or
/// `unmask generate ...` at the start of a line), with where it was found.
fn documented_generates() -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    for (page, text) in pages() {
        for (n, line) in text.lines().enumerate() {
            let line = line.trim_start();
            let rest = line.strip_prefix("$U generate").or_else(|| line.strip_prefix("unmask generate"));
            if let Some(rest) = rest.filter(|r| r.starts_with(' ')) {
                found.push((format!("{page}:{}", n + 1), words(rest)));
            }
        }
    }
    found
}

/// The answer after `answers `: a "quoted" answer (may hold spaces), else one word.
fn promised_answer(after: &str) -> String {
    if let Some(q) = after.strip_prefix('"') {
        return q.split('"').next().unwrap_or_default().to_owned();
    }
    let word: String = after.chars().take_while(|c| !c.is_whitespace() && !")];,".contains(*c)).collect();
    word.trim_end_matches('.').to_owned()
}

/// Every `"PROMPT" answers ANSWER` promise in the pages.
fn promised_answers() -> Vec<(String, String, String)> {
    let mut found = Vec::new();
    for (page, text) in pages() {
        let flat = text.replace('\n', " ");
        let mut rest = flat.as_str();
        while let Some(i) = rest.find("\" answers ") {
            let before = &rest[..i];
            let after = &rest[i + "\" answers ".len()..];
            if let Some(open) = before.rfind('"') {
                let prompt = &before[open + 1..];
                found.push((page.clone(), prompt.to_owned(), promised_answer(after)));
            }
            rest = after;
        }
    }
    found
}

#[test]
fn the_parser_reads_commands_as_a_shell_would() {
    assert_eq!(
        words(r#" "What is 347+586?" --cache prefix   # live canvas"#),
        ["What is 347+586?", "--cache", "prefix"]
    );
    assert_eq!(
        words(r#"-m tiny-llada-moe [--moe-keep-weights] --stats "hi""#),
        ["-m", "tiny-llada-moe", "--stats", "hi"]
    );
    assert_eq!(words(r#""" --raw"#), ["", "--raw"]);
    assert_eq!(promised_answer("933). More"), "933");
    assert_eq!(promised_answer("\"fig apple pear\" and"), "fig apple pear");
}

#[test]
fn every_documented_generate_example_runs_on_the_embedded_models() {
    let examples = documented_generates();
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
    let promises = promised_answers();
    assert!(!promises.is_empty(), "the README promises at least one answer");
    let env = Env::new();
    for (page, prompt, answer) in promises {
        let v = env.json(&["generate", &prompt, "--json"]);
        let text = v["text"].as_str().unwrap_or_default().trim().to_owned();
        assert_eq!(text, answer, "{page} says \"{prompt}\" answers {answer}");
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

#[test]
fn the_readme_s_piped_chat_answers() {
    let env = Env::new();
    let mut child = env
        .cmd()
        .arg("chat")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("chat starts");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"What is 2+3?\n").expect("writes");
    }
    let out = child.wait_with_output().expect("chat ends");
    assert!(out.status.success(), "chat failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stdout).trim().is_empty(), "chat printed no reply");
}
