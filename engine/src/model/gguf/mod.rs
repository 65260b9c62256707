//! GGUF (llama.cpp) checkpoints: our own v2/v3 reader over a memory map, metadata → config and
//! tokenizer, and a small writer/exporter.

pub mod config;
pub mod metadata;
pub mod reader;
pub mod tokenizer;
pub mod writer;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;

pub use metadata::{GgufValue, Metadata, ValueType};
pub use reader::{GgmlType, TensorInfo, DEFAULT_ALIGNMENT, GGUF_MAGIC};
pub use writer::{export_gguf, GgufWriter};

use super::tensor::{map_file, Backing, DType, RawTensor, TensorBytes, TensorSource};
use crate::error::{EngineError, Result};

/// A memory-mapped GGUF file: metadata plus zero-copy tensors.
pub struct GgufFile {
    path: PathBuf,
    map: Arc<Mmap>,
    version: u32,
    metadata: Metadata,
    tensors: Vec<TensorInfo>,
    by_name: HashMap<String, usize>,
    alignment: usize,
    data_start: usize,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GgufFile({}, v{}, {} keys, {} tensors)", self.path.display(), self.version, self.metadata.len(), self.tensors.len())
    }
}

/// Our dtype for a ggml type, if the engine can compute with it.
pub fn dtype_of(t: GgmlType) -> Option<DType> {
    Some(match t.id {
        0 => DType::F32,
        1 => DType::F16,
        2 => DType::Q4_0,
        3 => DType::Q4_1,
        8 => DType::Q8_0,
        12 => DType::Q4_K,
        14 => DType::Q6_K,
        30 => DType::BF16,
        _ => return None,
    })
}

/// The ggml type id of one of our dtypes (None for integer types GGUF models do not use).
pub fn ggml_id_of(d: DType) -> Option<u32> {
    Some(match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::Q4_0 => 2,
        DType::Q4_1 => 3,
        DType::Q8_0 => 8,
        DType::Q4_K => 12,
        DType::Q6_K => 14,
        DType::BF16 => 30,
        DType::I32 => 26,
        DType::I64 => 27,
        DType::U8 => return None,
    })
}

impl GgufFile {
    /// Maps and parses a GGUF file.
    pub fn open(path: &Path) -> Result<Self> {
        let map = map_file(path)?;
        let h = reader::parse(path, &map)?;
        let by_name = h.tensors.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
        Ok(GgufFile {
            path: path.to_owned(),
            map,
            version: h.version,
            metadata: h.metadata,
            tensors: h.tensors,
            by_name,
            alignment: h.alignment,
            data_start: h.data_start,
        })
    }
    /// Format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }
    /// The metadata table.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }
    /// Tensor infos in file order.
    pub fn tensor_infos(&self) -> &[TensorInfo] {
        &self.tensors
    }
    /// Info of one tensor.
    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }
    /// Data alignment (`general.alignment`, default 32).
    pub fn alignment(&self) -> usize {
        self.alignment
    }
    /// Absolute file offset of the data section.
    pub fn data_start(&self) -> usize {
        self.data_start
    }
    /// `general.architecture`, if present.
    pub fn architecture(&self) -> Option<&str> {
        self.metadata.str("general.architecture")
    }
}

impl TensorSource for GgufFile {
    fn path(&self) -> &Path {
        &self.path
    }
    fn get(&self, name: &str) -> Result<RawTensor> {
        let t = self
            .tensor_info(name)
            .ok_or_else(|| EngineError::MissingTensor { path: self.path.clone(), name: name.to_owned() })?;
        let dtype = dtype_of(t.ggml_type)
            .ok_or_else(|| EngineError::UnsupportedDType { name: name.to_owned(), dtype: t.ggml_type.name.to_owned() })?;
        // ggml lists the innermost dimension first; our shapes are row-major, outermost first.
        let shape: Vec<usize> = t.ne.iter().rev().map(|&d| d as usize).collect();
        // Bounds were checked against the file length in `reader::parse`.
        let start = self.data_start + t.offset as usize;
        Ok(RawTensor {
            name: name.to_owned(),
            dtype,
            shape,
            data: TensorBytes::new(Backing::Mapped(self.map.clone()), start, t.n_bytes as usize),
        })
    }
    fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }
    fn names(&self) -> Vec<String> {
        self.tensors.iter().map(|t| t.name.clone()).collect()
    }
    fn data_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.n_bytes).sum()
    }
}
