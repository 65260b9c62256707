//! Raw tensors as stored in a checkpoint: dtype, shape and (usually memory-mapped) bytes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;

use crate::error::{EngineError, Result};

/// Storage types of checkpoint tensors (dense and GGUF block-quantised).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[allow(non_camel_case_types)]
pub enum DType {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q4_K,
    Q6_K,
    I64,
    I32,
    U8,
}

impl DType {
    /// Elements per storage block (1 for dense types).
    pub fn block_elems(self) -> usize {
        match self {
            DType::Q8_0 | DType::Q4_0 | DType::Q4_1 => 32,
            DType::Q4_K | DType::Q6_K => 256,
            _ => 1,
        }
    }
    /// Bytes per storage block.
    pub fn block_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::I64 => 8,
            DType::U8 => 1,
            DType::Q8_0 => 34,
            DType::Q4_0 => 18,
            DType::Q4_1 => 20,
            DType::Q4_K => 144,
            DType::Q6_K => 210,
        }
    }
    /// Bytes needed for `n` elements (`n` must be a whole number of blocks).
    pub fn bytes_for(self, n: usize) -> Option<usize> {
        let b = self.block_elems();
        if n % b != 0 {
            return None;
        }
        (n / b).checked_mul(self.block_bytes())
    }
    /// Name as written in safetensors headers / GGUF type tables.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::Q8_0 => "Q8_0",
            DType::Q4_0 => "Q4_0",
            DType::Q4_1 => "Q4_1",
            DType::Q4_K => "Q4_K",
            DType::Q6_K => "Q6_K",
            DType::I64 => "I64",
            DType::I32 => "I32",
            DType::U8 => "U8",
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Shared backing memory of tensors: a file map or an owned buffer.
#[derive(Clone, Debug)]
pub enum Backing {
    /// Bytes of a memory-mapped file (zero-copy).
    Mapped(Arc<Mmap>),
    /// Bytes owned by the process.
    Owned(Arc<Vec<u8>>),
}

/// A byte range of a backing buffer.
#[derive(Clone, Debug)]
pub struct TensorBytes {
    backing: Backing,
    start: usize,
    len: usize,
}

impl TensorBytes {
    /// A view of `len` bytes at `start` (caller checked the bounds).
    pub fn new(backing: Backing, start: usize, len: usize) -> Self {
        TensorBytes { backing, start, len }
    }
    /// Takes ownership of a byte vector.
    pub fn owned(bytes: Vec<u8>) -> Self {
        let len = bytes.len();
        TensorBytes { backing: Backing::Owned(Arc::new(bytes)), start: 0, len }
    }
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        let all: &[u8] = match &self.backing {
            Backing::Mapped(m) => m,
            Backing::Owned(v) => v,
        };
        &all[self.start..self.start + self.len]
    }
    /// A sub-range of this view (`start + len` must not exceed `self.len()`).
    pub fn slice(&self, start: usize, len: usize) -> TensorBytes {
        assert!(start + len <= self.len, "sub-range outside tensor bytes");
        TensorBytes { backing: self.backing.clone(), start: self.start + start, len }
    }
    /// Drops the resident pages of a mapped view (after its contents were repacked elsewhere), so
    /// they stop counting towards RSS; a later read faults them back in from the file.
    pub fn release_pages(&self) {
        #[cfg(unix)]
        if let Backing::Mapped(m) = &self.backing {
            // SAFETY: the map is a read-only file mapping: MADV_DONTNEED only discards clean pages,
            // which the kernel re-reads from the file if anything touches them again.
            let _ = unsafe { m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, self.start, self.len) };
        }
    }
    /// Whether the bytes live in a file map rather than process memory.
    pub fn is_mapped(&self) -> bool {
        matches!(self.backing, Backing::Mapped(_))
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Overwrites the bytes in place with `src` when this view is a whole owned buffer nothing
    /// else shares (a staging slot of the memory runtime); false otherwise or when lengths differ.
    pub fn copy_in_place(&mut self, src: &[u8]) -> bool {
        let (start, len) = (self.start, self.len);
        match &mut self.backing {
            Backing::Owned(v) if len == src.len() => match Arc::get_mut(v) {
                Some(buf) => {
                    buf[start..start + len].copy_from_slice(src);
                    true
                }
                None => false,
            },
            _ => false,
        }
    }
}

/// One tensor of a checkpoint, with its shape in row-major order (outermost dimension first).
#[derive(Clone, Debug)]
pub struct RawTensor {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: TensorBytes,
}

impl RawTensor {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        // Readers bound every tensor by its bytes, but a zero dimension can hide an overflowing
        // product of the others: zero wins, else the product saturates.
        if self.shape.contains(&0) {
            return 0;
        }
        self.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).unwrap_or(usize::MAX)
    }
    /// Fails unless the shape equals `expected`.
    pub fn expect_shape(&self, expected: &[usize]) -> Result<()> {
        if self.shape != expected {
            return Err(EngineError::ShapeMismatch {
                name: self.name.clone(),
                expected: expected.to_vec(),
                found: self.shape.clone(),
            });
        }
        Ok(())
    }
    /// Integer tensors (I64/I32) as i64 values.
    pub fn to_i64_vec(&self) -> Result<Vec<i64>> {
        let b = self.data.as_slice();
        match self.dtype {
            DType::I64 => Ok(b.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect()),
            DType::I32 => {
                Ok(b.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap_or([0; 4])) as i64).collect())
            }
            _ => Err(EngineError::UnsupportedDType { name: self.name.clone(), dtype: self.dtype.to_string() }),
        }
    }
}

/// A checkpoint's tensors by name (safetensors directory or GGUF file).
/// Where a tensor's values stop being finite: the first element (for block formats, the first
/// element of the block whose scale is not finite) and the offending value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NonFiniteAt {
    pub index: usize,
    pub value: f32,
}

impl RawTensor {
    /// The first non-finite value of the tensor, if any: every float element, or every block
    /// scale of a quantised format (the quants themselves are integers). Large tensors are
    /// scanned in parallel; this reads each byte once, about what one forward pass reads.
    pub fn first_non_finite(&self) -> Option<NonFiniteAt> {
        use rayon::prelude::*;
        let b = self.data.as_slice();
        let f16_at = |c: &[u8], o: usize| half::f16::from_le_bytes([c[o], c[o + 1]]).to_f32();
        // (bytes per unit, elements per unit, decoder of the unit's non-finite value)
        let (unit, elems, probe): (usize, usize, &(dyn Fn(&[u8]) -> Option<f32> + Sync)) = match self.dtype {
            DType::F32 => (4, 1, &|c: &[u8]| {
                let v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                (!v.is_finite()).then_some(v)
            }),
            DType::F16 => (2, 1, &|c: &[u8]| {
                let v = f16_at(c, 0);
                (!v.is_finite()).then_some(v)
            }),
            DType::BF16 => (2, 1, &|c: &[u8]| {
                let v = half::bf16::from_le_bytes([c[0], c[1]]).to_f32();
                (!v.is_finite()).then_some(v)
            }),
            // Block scales: Q8_0/Q4_0 `d`; Q4_1 `d, m`; Q4_K `d, dmin`; Q6_K `d` at the end.
            DType::Q8_0 | DType::Q4_0 => (self.dtype.block_bytes(), self.dtype.block_elems(), &|c: &[u8]| {
                let v = f16_at(c, 0);
                (!v.is_finite()).then_some(v)
            }),
            DType::Q4_1 | DType::Q4_K => (self.dtype.block_bytes(), self.dtype.block_elems(), &|c: &[u8]| {
                [f16_at(c, 0), f16_at(c, 2)].into_iter().find(|v| !v.is_finite())
            }),
            DType::Q6_K => (self.dtype.block_bytes(), self.dtype.block_elems(), &|c: &[u8]| {
                let v = f16_at(c, c.len() - 2);
                (!v.is_finite()).then_some(v)
            }),
            DType::I64 | DType::I32 | DType::U8 => return None,
        };
        const CHUNK_UNITS: usize = 1 << 14;
        b.par_chunks(unit * CHUNK_UNITS).enumerate().find_map_first(|(ci, chunk)| {
            chunk.chunks_exact(unit).enumerate().find_map(|(ui, c)| {
                probe(c).map(|value| NonFiniteAt { index: (ci * CHUNK_UNITS + ui) * elems, value })
            })
        })
    }
}

pub trait TensorSource: Send + Sync {
    /// File or directory the tensors come from (for error messages).
    fn path(&self) -> &Path;
    /// The tensor called `name`.
    fn get(&self, name: &str) -> Result<RawTensor>;
    /// Whether a tensor called `name` exists.
    fn contains(&self, name: &str) -> bool;
    /// All tensor names.
    fn names(&self) -> Vec<String>;
    /// Total bytes of tensor data.
    fn data_bytes(&self) -> u64;

    /// `get` that reports a missing tensor with the checkpoint path.
    fn require(&self, name: &str) -> Result<RawTensor> {
        if !self.contains(name) {
            return Err(EngineError::MissingTensor { path: self.path().to_owned(), name: name.to_owned() });
        }
        self.get(name)
    }

    /// [`TensorSource::require`], refusing a tensor that holds NaN or infinity: such weights
    /// would turn every logit into NaN and the decoder into a random-token generator.
    fn require_finite(&self, name: &str) -> Result<RawTensor> {
        let t = self.require(name)?;
        if let Some(at) = t.first_non_finite() {
            return Err(EngineError::NonFiniteWeight {
                path: self.path().to_owned(),
                name: name.to_owned(),
                index: at.index,
                value: at.value,
            });
        }
        Ok(t)
    }
}

/// Memory-maps a whole file read-only.
pub fn map_file(path: &Path) -> Result<Arc<Mmap>> {
    crate::files::require_regular(path)?;
    let file = std::fs::File::open(path).map_err(|e| EngineError::io(path, e))?;
    // SAFETY: the file is opened read-only and we never write through the map; if another
    // process truncates it underneath us we may fault, which is the documented mmap contract.
    let map = unsafe { Mmap::map(&file) }.map_err(|e| EngineError::io(path, e))?;
    Ok(Arc::new(map))
}

/// Helper for sources: a path-owning error builder.
pub(crate) fn corrupt(path: &Path, format: &'static str, reason: impl Into<String>) -> EngineError {
    EngineError::Corrupt { path: PathBuf::from(path), format, reason: reason.into() }
}
