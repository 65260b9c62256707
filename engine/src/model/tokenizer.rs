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
        let text = crate::files::read_text(path)?;
        check_model_section(&text).map_err(|reason| EngineError::Tokenizer { path: path.to_owned(), reason })?;
        let parsed = guarded(|| text.parse::<tokenizers::Tokenizer>().map_err(|e| e.to_string()));
        let mut inner = parsed.map_err(|e| EngineError::Tokenizer {
            path: path.to_owned(),
            reason: one_line(&format!("not a valid tokenizer.json ({e})")),
        })?;
        // Padding and truncation are batch settings of the file's training setup; honouring them
        // would let a file pad every prompt to an arbitrary length.
        inner.with_padding(None);
        let _ = inner.with_truncation(None);
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
        let enc = guarded(|| self.inner.encode(text, false).map_err(|e| e.to_string()))
            .map_err(|e| EngineError::Tokenizer { path: self.source.clone(), reason: one_line(&e) })?;
        Ok(enc.get_ids().to_vec())
    }

    /// Decodes ids to text, optionally dropping special tokens.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        guarded(|| self.inner.decode(ids, skip_special).map_err(|e| e.to_string())).unwrap_or_default()
    }

    /// Text of a single token (specials included), for per-token displays.
    pub fn token_text(&self, id: u32) -> String {
        guarded(|| self.inner.decode(&[id], false).map_err(|e| e.to_string())).unwrap_or_default()
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

/// A SentencePiece `Precompiled` normaliser's charsmap starts with the byte size of its trie;
/// the `tokenizers` crate allocates that size before checking it against the data, so a damaged
/// size would make loading allocate gigabytes.
fn check_precompiled(n: &serde_json::Value, at: &str) -> std::result::Result<(), String> {
    use serde_json::Value;
    if let Some(Value::Array(items)) = n.get("normalizers") {
        for (i, item) in items.iter().enumerate() {
            check_precompiled(item, &format!("{at}.normalizers[{i}]"))?;
        }
    }
    if n.get("type").and_then(Value::as_str) != Some("Precompiled") {
        return Ok(());
    }
    let Some(map) = n.get("precompiled_charsmap").and_then(Value::as_str) else { return Ok(()) };
    let bytes = base64_decode(map).ok_or_else(|| format!("`{at}.precompiled_charsmap` is not base64"))?;
    let trie = bytes.get(..4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
    match trie {
        Some(t) if t <= bytes.len() - 4 => Ok(()),
        Some(t) => Err(format!("`{at}.precompiled_charsmap` is damaged: its trie claims {t} bytes of the {} it holds", bytes.len() - 4)),
        None => Err(format!("`{at}.precompiled_charsmap` is shorter than its 4-byte header")),
    }
}

/// Standard base64 (with or without padding); `None` on any other character.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let clean: Vec<u8> = s.bytes().filter(|&c| c != b'=' && !c.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let mut acc = 0u32;
        for &c in chunk {
            acc = (acc << 6) | val(c)?;
        }
        acc <<= 6 * (4 - chunk.len() as u32);
        let n = match chunk.len() {
            4 => 3,
            3 => 2,
            2 => 1,
            _ => return None,
        };
        out.extend_from_slice(&acc.to_be_bytes()[1..1 + n]);
    }
    Some(out)
}

/// Longest added (special) token accepted; real ones are a few dozen bytes.
const MAX_ADDED_TOKEN_BYTES: usize = 256;

/// Error texts from dependencies may span lines; ours are one line each.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Checks the `model` section of a `tokenizer.json` for what the `tokenizers` crate accepts but
/// cannot use (an unknown-token that is not in the vocabulary, merges of tokens that do not
/// exist), and words its shape errors by key rather than by the crate's enum names.
fn check_model_section(text: &str) -> std::result::Result<(), String> {
    use serde_json::Value;
    let json: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON ({e})"))?;
    if let Some(n) = json.get("normalizer") {
        check_precompiled(n, "normalizer")?;
    }
    let Some(model) = json.get("model") else { return Err("no `model` section".into()) };
    let kind = model.get("type").and_then(Value::as_str).unwrap_or("");
    let describe = crate::model::config::describe;
    if !matches!(kind, "BPE" | "WordLevel" | "WordPiece") {
        return Ok(());
    }
    let vocab = match model.get("vocab") {
        Some(Value::Object(v)) => v,
        Some(other) => return Err(format!("`model.vocab` is {}, expected an object of tokens", describe(other))),
        None => return Err("no `model.vocab`".into()),
    };
    let added: std::collections::HashSet<&str> = json
        .get("added_tokens")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|t| t.get("content").and_then(Value::as_str)).collect())
        .unwrap_or_default();
    // The added-token matcher is quadratic in a token's length: a hostile file stalls loading.
    if let Some(long) = added.iter().find(|t| t.len() > MAX_ADDED_TOKEN_BYTES) {
        let shown: String = long.chars().take(24).collect();
        return Err(format!("added token `{}…` is {} bytes long (at most {MAX_ADDED_TOKEN_BYTES})", shown.escape_default(), long.len()));
    }
    if let Some(unk) = model.get("unk_token").and_then(Value::as_str) {
        if !vocab.contains_key(unk) && !added.contains(unk) {
            return Err(format!("`model.unk_token` `{unk}` is not in `model.vocab`"));
        }
    }
    if kind != "BPE" {
        return Ok(());
    }
    let merges = match model.get("merges") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Array(m)) => m,
        Some(other) => return Err(format!("`model.merges` is {}, expected a list of merges", describe(other))),
    };
    for (i, m) in merges.iter().enumerate() {
        let parts: Vec<&str> = match m {
            Value::String(s) => s.splitn(2, ' ').collect(),
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            other => return Err(format!("`model.merges` entry {i} is {}, expected \"a b\" or [a, b]", describe(other))),
        };
        if parts.len() != 2 {
            return Err(format!("`model.merges` entry {i} is not a pair of tokens"));
        }
        if let Some(missing) = parts.iter().find(|p| !vocab.contains_key(**p)) {
            return Err(format!("`model.merges` entry {i} (`{} {}`) uses `{missing}`, which is not in `model.vocab`", parts[0], parts[1]));
        }
    }
    Ok(())
}

/// Runs a call into the `tokenizers` crate, turning a panic inside it (some malformed
/// normalisers and decoders panic instead of returning an error) into an error.
fn guarded<T>(f: impl FnOnce() -> std::result::Result<T, String>) -> std::result::Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err("the tokenizer failed inside the tokenizers library (malformed normalizer, decoder or added tokens)".into()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_decodes_and_damaged_charsmaps_are_refused() {
        assert_eq!(super::base64_decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(super::base64_decode("aGVsbG8").unwrap(), b"hello");
        assert!(super::base64_decode("a$b").is_none());
        let n = serde_json::json!({"type": "Precompiled", "precompiled_charsmap": "////////////"});
        assert!(super::check_precompiled(&n, "normalizer").unwrap_err().contains("damaged"));
        let ok = serde_json::json!({"type": "Precompiled", "precompiled_charsmap": "AAAAAA=="});
        assert!(super::check_precompiled(&ok, "normalizer").is_ok());
    }
}
