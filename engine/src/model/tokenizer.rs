//! Text <-> token ids through HF `tokenizers` (from `tokenizer.json` or built from GGUF metadata).

use std::path::Path;

use crate::error::{EngineError, Result};

/// A tokenizer plus the special-token facts decoding needs.
pub struct TextTokenizer {
    inner: tokenizers::Tokenizer,
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
        let inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| EngineError::Tokenizer { path: path.to_owned(), reason: e.to_string() })?;
        Ok(TextTokenizer { inner })
    }

    /// Wraps an already built tokenizer.
    pub fn from_tokenizer(inner: tokenizers::Tokenizer) -> Self {
        TextTokenizer { inner }
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
            .map_err(|e| EngineError::Tokenizer { path: "<tokenizer>".into(), reason: e.to_string() })?;
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
