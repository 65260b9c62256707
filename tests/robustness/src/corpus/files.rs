//! File helpers of corpus building: errors that name the path, linking the untouched files of a
//! model copy, and writing damaged files without touching the originals.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::Result;

/// Why the corpus could not be built (the embedded models are missing or not as expected).
#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Source { path: PathBuf, reason: String },
    #[error("exporting GGUF: {0}")]
    Engine(#[from] unmask_engine::EngineError),
    #[error("{0}")]
    Build(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CorpusError + '_ {
    move |source| CorpusError::Io { path: path.to_owned(), source }
}

/// A source file that does not look like the embedded model should.
pub fn source_err(path: &Path, reason: impl Into<String>) -> CorpusError {
    CorpusError::Source { path: path.to_owned(), reason: reason.into() }
}

pub fn create_dir(path: &Path) -> Result<()> {
    std::fs::create_dir_all(path).map_err(io(path))
}

pub fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(io(path))
}

/// Writes `bytes` as a new file. An existing entry is removed first: it may be a hard link to an
/// embedded model file, which writing through would damage.
pub fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    remove_if_present(path)?;
    std::fs::write(path, bytes).map_err(io(path))
}

pub fn remove_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(path)(e)),
    }
}

/// Hard-links `src` to `dst` (cheap: the weights are megabytes and many cases share them),
/// copying when the corpus lives on another file system.
pub fn link_or_copy(src: &Path, dst: &Path) -> Result<()> {
    remove_if_present(dst)?;
    if std::fs::hard_link(src, dst).is_ok() {
        return Ok(());
    }
    std::fs::copy(src, dst).map(|_| ()).map_err(io(dst))
}

pub fn read_json(path: &Path) -> Result<Map<String, Value>> {
    let bytes = read(path)?;
    match serde_json::from_slice(&bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(source_err(path, "not a JSON object")),
        Err(e) => Err(source_err(path, e.to_string())),
    }
}

pub fn write_json(path: &Path, value: &Map<String, Value>) -> Result<()> {
    let text = serde_json::to_vec_pretty(value).map_err(|e| CorpusError::Build(e.to_string()))?;
    write(path, &text)
}

/// A safetensors file split into its JSON header and its data section.
pub struct Safetensors {
    pub header: Map<String, Value>,
    pub data: Vec<u8>,
}

/// One tensor's entry of a safetensors header.
pub struct TensorEntry {
    pub dtype: String,
    pub shape: Vec<u64>,
    pub begin: usize,
    pub end: usize,
}

impl Safetensors {
    pub fn read(path: &Path) -> Result<Safetensors> {
        let bytes = read(path)?;
        let bad = |r: &str| source_err(path, r.to_owned());
        let len_bytes: [u8; 8] =
            bytes.get(..8).and_then(|b| b.try_into().ok()).ok_or_else(|| bad("shorter than 8 bytes"))?;
        let n = usize::try_from(u64::from_le_bytes(len_bytes)).map_err(|_| bad("header length overflows"))?;
        let header_end = n.checked_add(8).filter(|&e| e <= bytes.len()).ok_or_else(|| bad("header past the end"))?;
        let header = match serde_json::from_slice(&bytes[8..header_end]) {
            Ok(Value::Object(m)) => m,
            _ => return Err(bad("header is not a JSON object")),
        };
        Ok(Safetensors { header, data: bytes[header_end..].to_vec() })
    }

    /// The entry of tensor `name`.
    pub fn entry(&self, name: &str) -> Option<TensorEntry> {
        let e = self.header.get(name)?;
        let offs = e.get("data_offsets")?.as_array()?;
        Some(TensorEntry {
            dtype: e.get("dtype")?.as_str()?.to_owned(),
            shape: e.get("shape")?.as_array()?.iter().map(|d| d.as_u64()).collect::<Option<_>>()?,
            begin: usize::try_from(offs.first()?.as_u64()?).ok()?,
            end: usize::try_from(offs.get(1)?.as_u64()?).ok()?,
        })
    }

    /// Tensor names in data order.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<(usize, String)> = self
            .header
            .keys()
            .filter(|k| *k != "__metadata__")
            .filter_map(|k| self.entry(k).map(|e| (e.begin, k.clone())))
            .collect();
        v.sort();
        v.into_iter().map(|(_, k)| k).collect()
    }

    /// The bytes of tensor `name`.
    pub fn tensor_bytes(&self, name: &str) -> Option<&[u8]> {
        let e = self.entry(name)?;
        self.data.get(e.begin..e.end)
    }

    /// Sets one field of tensor `name`'s header entry.
    pub fn set_field(&mut self, name: &str, field: &str, value: Value) {
        if let Some(Value::Object(e)) = self.header.get_mut(name) {
            e.insert(field.to_owned(), value);
        }
    }

    /// Serialises with `header_text` as the header (padded to 8 bytes, as writers do).
    pub fn to_bytes_with_header(header_text: &[u8], data: &[u8]) -> Vec<u8> {
        let mut h = header_text.to_vec();
        while !(8 + h.len()).is_multiple_of(8) {
            h.push(b' ');
        }
        let mut out = Vec::with_capacity(8 + h.len() + data.len());
        out.extend_from_slice(&(h.len() as u64).to_le_bytes());
        out.extend_from_slice(&h);
        out.extend_from_slice(data);
        out
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let text = serde_json::to_vec(&Value::Object(self.header.clone())).unwrap_or_default();
        Self::to_bytes_with_header(&text, &self.data)
    }

    /// A file of only the tensors `names` (data repacked contiguously).
    pub fn subset(&self, names: &[String]) -> Safetensors {
        let mut header = Map::new();
        let mut data = Vec::new();
        for n in names {
            let (Some(e), Some(bytes)) = (self.entry(n), self.tensor_bytes(n)) else { continue };
            header.insert(
                n.clone(),
                serde_json::json!({"dtype": e.dtype, "shape": e.shape, "data_offsets": [data.len(), data.len() + bytes.len()]}),
            );
            data.extend_from_slice(bytes);
        }
        Safetensors { header, data }
    }
}
