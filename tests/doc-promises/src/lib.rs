//! What the README and docs/ promise a reader, read out of the pages themselves: the `unmask
//! generate` commands they show and every `"PROMPT" answers ANSWER`. The CLI test `doc_examples`
//! fails on any promise the embedded model does not keep; the quality benchmark counts them.

use std::io;
use std::path::{Path, PathBuf};

/// One page: its file name and text.
pub struct Page {
    pub name: String,
    pub text: String,
}

/// A promised answer: on `page`, running `prompt` answers `answer`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Promise {
    pub page: String,
    pub prompt: String,
    pub answer: String,
}

/// README.md and every docs/*.md under the repository `root`, README first, docs sorted.
pub fn pages(root: &Path) -> io::Result<Vec<Page>> {
    let mut files = vec![root.join("README.md")];
    let mut docs = Vec::new();
    for entry in std::fs::read_dir(root.join("docs"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "md") {
            docs.push(path);
        }
    }
    docs.sort();
    files.extend(docs);
    files
        .into_iter()
        .map(|f: PathBuf| {
            let text = std::fs::read_to_string(&f)
                .map_err(|e| io::Error::new(e.kind(), format!("reading {}: {e}", f.display())))?;
            Ok(Page { name: f.file_name().unwrap_or_default().to_string_lossy().into_owned(), text })
        })
        .collect()
}

/// Shell-like words of one command line: double-quoted strings stay one word, `#` starts a
/// comment, `[optional]` flags are left out.
pub fn words(line: &str) -> Vec<String> {
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

/// The arguments of every documented `generate` command (`$U generate ...` or `unmask generate
/// ...` at the start of a line), with `page:line` of where it was found.
pub fn documented_generates(pages: &[Page]) -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    for page in pages {
        for (n, line) in page.text.lines().enumerate() {
            let line = line.trim_start();
            let rest = line.strip_prefix("$U generate").or_else(|| line.strip_prefix("unmask generate"));
            if let Some(rest) = rest.filter(|r| r.starts_with(' ')) {
                found.push((format!("{}:{}", page.name, n + 1), words(rest)));
            }
        }
    }
    found
}

/// The answer after `answers `: a "quoted" answer (may hold spaces), else one word without
/// trailing punctuation.
pub fn promised_answer(after: &str) -> String {
    if let Some(q) = after.strip_prefix('"') {
        return q.split('"').next().unwrap_or_default().to_owned();
    }
    let word: String = after.chars().take_while(|c| !c.is_whitespace() && !")];,".contains(*c)).collect();
    word.trim_end_matches('.').to_owned()
}

/// Every `"PROMPT" answers ANSWER` in the pages (line breaks inside a sentence allowed).
pub fn promises(pages: &[Page]) -> Vec<Promise> {
    let mut found = Vec::new();
    for page in pages {
        let flat = page.text.replace('\n', " ");
        let mut rest = flat.as_str();
        while let Some(i) = rest.find("\" answers ") {
            let before = &rest[..i];
            let after = &rest[i + "\" answers ".len()..];
            if let Some(open) = before.rfind('"') {
                found.push(Promise {
                    page: page.name.clone(),
                    prompt: before[open + 1..].to_owned(),
                    answer: promised_answer(after),
                });
            }
            rest = after;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_read_as_a_shell_would() {
        assert_eq!(
            words(r#" "What is 347+586?" --cache prefix   # live canvas"#),
            ["What is 347+586?", "--cache", "prefix"]
        );
        assert_eq!(
            words(r#"-m tiny-llada-moe [--moe-keep-weights] --stats "hi""#),
            ["-m", "tiny-llada-moe", "--stats", "hi"]
        );
        assert_eq!(words(r#""" --raw"#), ["", "--raw"]);
    }

    #[test]
    fn answers_end_at_punctuation_or_the_closing_quote() {
        assert_eq!(promised_answer("933). More"), "933");
        assert_eq!(promised_answer("1000."), "1000");
        assert_eq!(promised_answer("\"fig apple pear\" and"), "fig apple pear");
    }

    #[test]
    fn promises_are_found_across_line_breaks() {
        let page = Page {
            name: "p.md".into(),
            text: "Try it: \"What is 2+2?\" answers\n4, and \"Reverse: a b\" answers \"b a\".".into(),
        };
        let got = promises(&[page]);
        let pairs: Vec<(&str, &str)> = got.iter().map(|p| (p.prompt.as_str(), p.answer.as_str())).collect();
        assert_eq!(pairs, [("What is 2+2?", "4"), ("Reverse: a b", "b a")]);
        assert!(got.iter().all(|p| p.page == "p.md"));
    }
}
