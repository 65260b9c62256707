//! The answers the README and docs/ promise (`"PROMPT" answers ANSWER`), run through the `unmask`
//! binary as a reader would type them; the quality suite counts how many hold. (The CLI test
//! `doc_examples` fails on any that does not; this is the number for the results file.)

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};
use serde::Serialize;
use unmask_doc_promises::{pages, promises, Promise};

/// One promise and what the binary answered.
#[derive(Debug, Clone, Serialize)]
pub struct DocExample {
    pub page: String,
    pub prompt: String,
    pub promised: String,
    pub answered: Option<String>,
    pub passed: bool,
}

/// Runs every promise through `unmask generate PROMPT --json --no-record` on the default model.
pub fn check(root: &Path, unmask: &Path) -> Result<Vec<DocExample>> {
    let data = tempfile::tempdir()?;
    let mut out = Vec::new();
    for promise in promises(&pages(root)?) {
        let Promise { page, prompt, answer: promised } = promise;
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
