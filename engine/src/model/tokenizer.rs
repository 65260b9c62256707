//! Text <-> token ids through HF `tokenizers` (from `tokenizer.json` or built from GGUF metadata).

use std::path::{Path, PathBuf};

use crate::error::{EngineError, Result};

/// A tokenizer plus the special-token facts decoding needs.
pub struct TextTokenizer {
    inner: tokenizers::Tokenizer,
    /// The file it was built from, named in every error it reports.
    source: PathBuf,
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TextTokenizer(vocab={})", self.vocab_size())
    }
}

impl TextTokenizer {
    /// Loads a `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        if !path.exists() {
            return Err(EngineError::Tokenizer { path: path.to_owned(), reason: "file not found".into() });
        }
        let text = std::fs::read_to_string(path).map_err(|e| EngineError::io(path, e))?;
        let inner = text.parse::<tokenizers::Tokenizer>().map_err(|e| EngineError::Tokenizer {
            path: path.to_owned(),
            reason: one_line(&format!("not a valid tokenizer.json ({e})")),
        })?;
        Self::checked(inner, path)
    }

    /// Wraps an already built tokenizer (`source` names it in errors).
    pub fn from_tokenizer(inner: tokenizers::Tokenizer, source: &Path) -> Result<Self> {
        Self::checked(inner, source)
    }

    /// A tokenizer that fails on ordinary text (broken merges, a regex that does not compile at
    /// use, a normaliser that errors) is refused at load, naming its file, not at the first prompt.
    fn checked(inner: tokenizers::Tokenizer, source: &Path) -> Result<Self> {
        let t = TextTokenizer { inner, source: source.to_owned() };
        if t.vocab_size() == 0 {
            return Err(EngineError::Tokenizer { path: t.source.clone(), reason: "the vocabulary is empty".into() });
        }
        let probe = "Hello, world! 12+7=19. Reverse: fig pear";
        let ids = t.encode(probe)?;
        if ids.is_empty() {
            return Err(EngineError::Tokenizer {
                path: t.source.clone(),
                reason: "encodes ordinary text to no tokens".into(),
            });
        }
        Ok(t)
    }

    /// The underlying HF tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// Encodes text; special-token strings in it (e.g. from a chat template) map to their ids.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| EngineError::Tokenizer { path: self.source.clone(), reason: one_line(&e.to_string()) })?;
        Ok(enc.get_ids().to_vec())
    }

    /// Decodes ids to text, optionally dropping special tokens.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        self.inner.decode(ids, skip_special).unwrap_or_default()
    }

    /// Text of a single token (specials included), for per-token displays.
    pub fn token_text(&self, id: u32) -> String {
        self.inner.decode(&[id], false).unwrap_or_default()
    }

    /// Id of a token string, if present.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}

/// Error texts from dependencies may span lines; ours are one line each.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
