//! The answers the README and docs/ promise (`"PROMPT" answers ANSWER`), run through the `unmask`
//! binary as a reader would type them; the quality suite counts how many hold. (The CLI test
//! `doc_examples` fails on any that does not; this is the number for the results file.)

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};
use serde::Serialize;

/// One promise and what the binary answered.
#[derive(Debug, Clone, Serialize)]
pub struct DocExample {
    pub page: String,
    pub prompt: String,
    pub promised: String,
    pub answered: Option<String>,
    pub passed: bool,
}

fn pages(root: &Path) -> Result<Vec<(String, String)>> {
    let mut files: Vec<PathBuf> = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
            Ok((f.file_name().unwrap_or_default().to_string_lossy().into_owned(), text))
        })
        .collect()
}

/// The answer after `answers `: a "quoted" answer (may hold spaces), else one word.
fn promised_answer(after: &str) -> String {
    if let Some(q) = after.strip_prefix('"') {
        return q.split('"').next().unwrap_or_default().to_owned();
    }
    let word: String = after.chars().take_while(|c| !c.is_whitespace() && !")];,".contains(*c)).collect();
    word.trim_end_matches('.').to_owned()
}

/// Every `"PROMPT" answers ANSWER` in the pages: (page, prompt, answer).
pub fn promises(root: &Path) -> Result<Vec<(String, String, String)>> {
    let mut found = Vec::new();
    for (page, text) in pages(root)? {
        let flat = text.replace('\n', " ");
        let mut rest = flat.as_str();
        while let Some(i) = rest.find("\" answers ") {
            let before = &rest[..i];
            let after = &rest[i + "\" answers ".len()..];
            if let Some(open) = before.rfind('"') {
                found.push((page.clone(), before[open + 1..].to_owned(), promised_answer(after)));
            }
            rest = after;
        }
    }
    Ok(found)
}

/// Runs every promise through `unmask generate PROMPT --json --no-record` on the default model.
pub fn check(root: &Path, unmask: &Path) -> Result<Vec<DocExample>> {
    let data = tempfile::tempdir()?;
    let mut out = Vec::new();
    for (page, prompt, promised) in promises(root)? {
        let run = Command::new(unmask)
            .args(["generate", &prompt, "--json", "--no-record"])
            .env("UNMASK_DATA_DIR", data.path())
            .output()
            .with_context(|| format!("running {}", unmask.display()))?;
        let answered = serde_json::from_slice::<serde_json::Value>(&run.stdout)
            .ok()
            .and_then(|v| v["text"].as_str().map(|s| s.trim().to_owned()));
        let passed = run.status.success() && answered.as_deref() == Some(promised.as_str());
        out.push(DocExample { page, prompt, promised, answered, passed });
    }
    Ok(out)
}
