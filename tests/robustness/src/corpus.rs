//! The bad-input corpus: damaged copies of the embedded tiny models, hostile prompts and extreme
//! settings, each paired with the outcome a user should see from the `unmask` binary.
//!
//! [`build`] writes every damaged file under one folder and returns the cases; [`crate::runner`]
//! runs them. Expectations follow the exit-code table of the README: a bad or unusable file is 3
//! (the one-line error names the file and the field or tensor), a request that does not fit the
//! model or prompt is 4, a bad command line is 2. They describe what a user should see, not what
//! the binary does today.

mod config;
mod files;
mod gguf;
mod paths;
mod prompts;
mod safetensors;
mod settings;
mod shards;
mod tokenizer;
mod weights;

use std::path::{Path, PathBuf};

use serde::Serialize;

pub use files::CorpusError;

/// Result alias of corpus building.
pub type Result<T, E = CorpusError> = std::result::Result<T, E>;

/// Short decode settings for every run that should succeed (a few forwards of the tiny model).
pub const SHORT: [&str; 4] = ["--gen-length", "16", "--steps", "4"];

/// One run of the `unmask` binary and what it must do.
#[derive(Debug, Clone, Serialize)]
pub struct Case {
    /// Unique, descriptive name (`safetensors_overlapping_tensors`).
    pub name: String,
    /// Family of damage (`safetensors`, `gguf`, `config-hf`, `settings`, ...).
    pub class: &'static str,
    /// Arguments after `unmask`; paths are absolute paths into the corpus folder.
    pub args: Vec<String>,
    /// Bytes fed to standard input (closed at once when `None`).
    #[serde(skip)]
    pub stdin: Option<Vec<u8>>,
    pub expect: Expect,
}

/// The outcome a case must have.
#[derive(Debug, Clone, Serialize)]
pub struct Expect {
    /// Exit code (README table: 0 ok, 2 usage, 3 bad/unusable file, 4 request does not fit).
    pub exit: u8,
    /// Words the error line must contain, compared case-insensitively (for successful runs:
    /// words standard error must contain, e.g. a warning).
    pub stderr_contains: Vec<String>,
    /// Words the error line must not contain (e.g. "missing" for a key that is present but of
    /// the wrong type).
    pub stderr_excludes: Vec<String>,
    /// A failed run prints nothing on standard output.
    pub stdout_empty: bool,
}

impl Expect {
    /// Exit 0 (standard output not checked).
    pub fn ok() -> Expect {
        Expect { exit: 0, stderr_contains: Vec::new(), stderr_excludes: Vec::new(), stdout_empty: false }
    }
    /// Exit 3: a model file or path that is missing or unusable; `words` name the file and field.
    pub fn bad_file(words: &[&str]) -> Expect {
        Expect::failure(3, words)
    }
    /// Exit 4: a request that does not fit the model or prompt.
    pub fn invalid(words: &[&str]) -> Expect {
        Expect::failure(4, words)
    }
    /// Exit 2: a bad command line.
    pub fn usage(words: &[&str]) -> Expect {
        Expect::failure(2, words)
    }
    fn failure(exit: u8, words: &[&str]) -> Expect {
        Expect {
            exit,
            stderr_contains: words.iter().map(|w| (*w).to_owned()).collect(),
            stderr_excludes: Vec::new(),
            stdout_empty: true,
        }
    }
    /// Also requires standard error to contain `words` (for successful runs).
    pub fn with_stderr(mut self, words: &[&str]) -> Expect {
        self.stderr_contains.extend(words.iter().map(|w| (*w).to_owned()));
        self
    }
    /// Forbids `words` in the error line.
    pub fn excluding(mut self, words: &[&str]) -> Expect {
        self.stderr_excludes.extend(words.iter().map(|w| (*w).to_owned()));
        self
    }
    /// Does not check standard output (e.g. `--live` may draw before failing).
    pub fn any_stdout(mut self) -> Expect {
        self.stdout_empty = false;
        self
    }
}

/// Writes every damaged model under `out_dir` (built from the embedded models in `models_dir`)
/// and returns all cases.
pub fn build(out_dir: &Path, models_dir: &Path) -> Result<Vec<Case>> {
    let mut c = Corpus::new(out_dir, models_dir)?;
    paths::add(&mut c)?;
    safetensors::add(&mut c)?;
    shards::add(&mut c)?;
    config::add(&mut c)?;
    tokenizer::add(&mut c)?;
    gguf::add(&mut c)?;
    weights::add(&mut c)?;
    prompts::add(&mut c)?;
    settings::add(&mut c)?;
    c.check_unique()?;
    Ok(c.cases)
}

/// Shared state while building: where things go and the cases so far.
pub(crate) struct Corpus {
    out: PathBuf,
    models: PathBuf,
    /// Private store folder for every run (`--data-dir`), so no user data is touched.
    data: PathBuf,
    /// Model folders made so far.
    folders: usize,
    cases: Vec<Case>,
}

impl Corpus {
    fn new(out: &Path, models: &Path) -> Result<Corpus> {
        let data = out.join("data-dir");
        files::create_dir(&data)?;
        Ok(Corpus { out: out.to_owned(), models: models.to_owned(), data, folders: 0, cases: Vec::new() })
    }

    /// Folder of an embedded model (`tiny-llada`, `tiny-ar`, `tiny-llada-moe`).
    fn embedded(&self, name: &str) -> PathBuf {
        self.models.join(name)
    }

    /// A fresh path under the corpus folder.
    fn path(&self, rel: &str) -> PathBuf {
        self.out.join(rel)
    }

    /// A new model folder holding every file of embedded model `from` except `skip` (hard links
    /// where possible: the damaged file is then written in place of the link). Folders are
    /// numbered, not named after the case, so an error naming the folder cannot satisfy the
    /// words a case expects by accident.
    fn model_copy(&mut self, from: &str, skip: &[&str]) -> Result<PathBuf> {
        self.folders += 1;
        let dst = self.out.join("models").join(format!("{:03}", self.folders));
        files::create_dir(&dst)?;
        for file in MODEL_FILES {
            if skip.contains(file) {
                continue;
            }
            let src = self.embedded(from).join(file);
            if src.exists() {
                files::link_or_copy(&src, &dst.join(file))?;
            }
        }
        Ok(dst)
    }

    /// `unmask generate` on `model` with short settings and a plain prompt: the run that must
    /// fail on a damaged model and succeed on a sound one.
    fn generate(&self, model: &Path) -> Vec<String> {
        self.generate_with(model, &SHORT, &["hello there"])
    }

    /// `unmask generate` on `model` with `settings` and `prompt` (positional text or
    /// `--prompt-file ...`).
    fn generate_with(&self, model: &Path, settings: &[&str], prompt: &[&str]) -> Vec<String> {
        let mut args = self.base("generate", model);
        args.extend(settings.iter().map(|s| (*s).to_owned()));
        args.extend(prompt.iter().map(|s| (*s).to_owned()));
        args
    }

    /// `unmask SUBCOMMAND --no-record --no-live --data-dir D -m MODEL`.
    fn base(&self, sub: &str, model: &Path) -> Vec<String> {
        vec![
            sub.to_owned(),
            "--no-record".into(),
            "--no-live".into(),
            "--data-dir".into(),
            self.data.display().to_string(),
            "-m".into(),
            model.display().to_string(),
        ]
    }

    fn push(&mut self, name: &str, class: &'static str, args: Vec<String>, expect: Expect) {
        self.cases.push(Case { name: name.to_owned(), class, args, stdin: None, expect });
    }

    fn push_stdin(&mut self, name: &str, class: &'static str, args: Vec<String>, stdin: Vec<u8>, expect: Expect) {
        self.cases.push(Case { name: name.to_owned(), class, args, stdin: Some(stdin), expect });
    }

    fn check_unique(&self) -> Result<()> {
        let mut names: Vec<&str> = self.cases.iter().map(|c| c.name.as_str()).collect();
        names.sort_unstable();
        match names.windows(2).find(|w| w[0] == w[1]) {
            Some(w) => Err(CorpusError::Build(format!("case name `{}` is used twice", w[0]))),
            None => Ok(()),
        }
    }
}

/// Files of an embedded model folder a run can read.
const MODEL_FILES: &[&str] = &[
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
];
