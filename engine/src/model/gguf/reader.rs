//! Parsing of the GGUF v2/v3 container: header, metadata key/values and tensor infos.
//! Every length read from the file is checked against the bytes that remain before anything is
//! allocated for it, so hostile files produce a `Corrupt` error instead of a panic or a huge buffer.

use std::path::Path;

use super::metadata::{GgufValue, Metadata, ValueType};
use crate::error::{EngineError, Result};
use crate::tensor::corrupt;

pub(crate) const FORMAT: &str = "GGUF";
/// `"GGUF"` read as a little-endian u32.
pub const GGUF_MAGIC: u32 = 0x4655_4747;
/// Alignment of tensor data when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: usize = 32;
/// Arrays nested deeper than this are refused (bounds recursion on hostile input).
const MAX_NESTING: usize = 4;
/// ggml tensors have at most four dimensions.
const MAX_DIMS: usize = 4;
/// Array items in all metadata together. A parsed item takes ~32 bytes however small its
/// encoding (a u8), so this bounds the metadata's memory (~512 MiB) whatever the file claims;
/// the largest real tables (vocabulary, merges, scores, types) hold a few million.
const MAX_ARRAY_ITEMS: usize = 1 << 24;

/// Storage layout of a ggml tensor type: name, elements per block, bytes per block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GgmlType {
    pub id: u32,
    pub name: &'static str,
    pub block_elems: usize,
    pub block_bytes: usize,
}

/// Every ggml type whose block size we know (readable ones and ones we can only size).
const GGML_TYPES: &[GgmlType] = &[
    GgmlType { id: 0, name: "F32", block_elems: 1, block_bytes: 4 },
    GgmlType { id: 1, name: "F16", block_elems: 1, block_bytes: 2 },
    GgmlType { id: 2, name: "Q4_0", block_elems: 32, block_bytes: 18 },
    GgmlType { id: 3, name: "Q4_1", block_elems: 32, block_bytes: 20 },
    GgmlType { id: 6, name: "Q5_0", block_elems: 32, block_bytes: 22 },
    GgmlType { id: 7, name: "Q5_1", block_elems: 32, block_bytes: 24 },
    GgmlType { id: 8, name: "Q8_0", block_elems: 32, block_bytes: 34 },
    GgmlType { id: 9, name: "Q8_1", block_elems: 32, block_bytes: 36 },
    GgmlType { id: 10, name: "Q2_K", block_elems: 256, block_bytes: 84 },
    GgmlType { id: 11, name: "Q3_K", block_elems: 256, block_bytes: 110 },
    GgmlType { id: 12, name: "Q4_K", block_elems: 256, block_bytes: 144 },
    GgmlType { id: 13, name: "Q5_K", block_elems: 256, block_bytes: 176 },
    GgmlType { id: 14, name: "Q6_K", block_elems: 256, block_bytes: 210 },
    GgmlType { id: 15, name: "Q8_K", block_elems: 256, block_bytes: 292 },
    GgmlType { id: 24, name: "I8", block_elems: 1, block_bytes: 1 },
    GgmlType { id: 25, name: "I16", block_elems: 1, block_bytes: 2 },
    GgmlType { id: 26, name: "I32", block_elems: 1, block_bytes: 4 },
    GgmlType { id: 27, name: "I64", block_elems: 1, block_bytes: 8 },
    GgmlType { id: 28, name: "F64", block_elems: 1, block_bytes: 8 },
    GgmlType { id: 30, name: "BF16", block_elems: 1, block_bytes: 2 },
];

impl GgmlType {
    /// Looks up a ggml type id.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        GGML_TYPES.iter().copied().find(|t| t.id == id)
    }
}

/// One entry of the tensor-info table.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub name: String,
    /// ggml `ne`: innermost (contiguous) dimension first.
    pub ne: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset from the start of the data section.
    pub offset: u64,
    /// Byte length of the tensor data.
    pub n_bytes: u64,
}

/// Everything before the tensor data.
#[derive(Debug)]
pub struct Header {
    pub version: u32,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    pub alignment: usize,
    /// Absolute file offset of the data section.
    pub data_start: usize,
}

/// A bounds-checked little-endian reader over the file bytes.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    path: &'a Path,
    /// Array items still allowed (see [`MAX_ARRAY_ITEMS`]).
    items_left: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(corrupt(
                self.path,
                FORMAT,
                format!(
                    "truncated file: {what} needs {n} bytes at offset {}, only {} left",
                    self.pos,
                    self.remaining()
                ),
            ));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    /// A length that must fit in the remaining bytes given each item takes at least `min_item` bytes.
    fn len(&mut self, what: &str, min_item: usize) -> Result<usize> {
        let n = self.u64(what)?;
        let max = (self.remaining() / min_item.max(1)) as u64;
        if n > max {
            return Err(corrupt(
                self.path,
                FORMAT,
                format!(
                    "{what} of {n} at offset {} exceeds the {} bytes left in the file",
                    self.pos - 8,
                    self.remaining()
                ),
            ));
        }
        Ok(n as usize)
    }
    fn string_bytes(&mut self, what: &str) -> Result<&'a [u8]> {
        let n = self.len(&format!("{what} length"), 1)?;
        self.take(n, what)
    }
    fn value(&mut self, ty: ValueType, depth: usize) -> Result<GgufValue> {
        Ok(match ty {
            ValueType::U8 => GgufValue::U8(self.array::<1>("u8")?[0]),
            ValueType::I8 => GgufValue::I8(self.array::<1>("i8")?[0] as i8),
            ValueType::U16 => GgufValue::U16(u16::from_le_bytes(self.array("u16")?)),
            ValueType::I16 => GgufValue::I16(i16::from_le_bytes(self.array("i16")?)),
            ValueType::U32 => GgufValue::U32(self.u32("u32")?),
            ValueType::I32 => GgufValue::I32(i32::from_le_bytes(self.array("i32")?)),
            ValueType::F32 => GgufValue::F32(f32::from_le_bytes(self.array("f32")?)),
            ValueType::Bool => {
                let b = self.array::<1>("bool")?[0];
                if b > 1 {
                    return Err(corrupt(self.path, FORMAT, format!("bool value {b} at offset {}", self.pos - 1)));
                }
                GgufValue::Bool(b == 1)
            }
            ValueType::String => {
                // Token strings may hold partial UTF-8 in some converters; keep them lossily rather than fail.
                GgufValue::String(String::from_utf8_lossy(self.string_bytes("string")?).into_owned())
            }
            ValueType::U64 => GgufValue::U64(self.u64("u64")?),
            ValueType::I64 => GgufValue::I64(i64::from_le_bytes(self.array("i64")?)),
            ValueType::F64 => GgufValue::F64(f64::from_le_bytes(self.array("f64")?)),
            ValueType::Array => {
                if depth >= MAX_NESTING {
                    return Err(corrupt(self.path, FORMAT, format!("arrays nested deeper than {MAX_NESTING}")));
                }
                let et = self.value_type("array element type")?;
                let n = self.len("array length", et.min_encoded_size())?;
                if n > self.items_left {
                    return Err(corrupt(
                        self.path,
                        FORMAT,
                        format!("metadata arrays hold more than {MAX_ARRAY_ITEMS} items in all"),
                    ));
                }
                self.items_left -= n;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.value(et, depth + 1)?);
                }
                GgufValue::Array(et, items)
            }
        })
    }
    fn value_type(&mut self, what: &str) -> Result<ValueType> {
        let at = self.pos;
        let t = self.u32(what)?;
        ValueType::from_id(t)
            .ok_or_else(|| corrupt(self.path, FORMAT, format!("unknown value type {t} at offset {at}")))
    }
}

/// Parses the header, metadata and tensor infos of a GGUF file held in `bytes`.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Header> {
    let mut c = Cursor { bytes, pos: 0, path, items_left: MAX_ARRAY_ITEMS };
    let magic = c.u32("magic")?;
    if magic != GGUF_MAGIC {
        return Err(corrupt(path, FORMAT, format!("bad magic 0x{magic:08x} (expected \"GGUF\")")));
    }
    let version = c.u32("version")?;
    if version != 2 && version != 3 {
        return Err(corrupt(path, FORMAT, format!("unsupported version {version} (only 2 and 3 are read)")));
    }
    // Minimal encodings: a tensor info is name len 8 + n_dims 4 + type 4 + offset 8; a KV is key len 8 + type 4 + 1.
    let n_tensors = c.len("tensor count", 24)?;
    let n_kv = c.len("metadata count", 13)?;
    let mut metadata = Metadata::default();
    for _ in 0..n_kv {
        let key = std::str::from_utf8(c.string_bytes("metadata key")?)
            .map_err(|_| corrupt(path, FORMAT, format!("metadata key at offset {} is not UTF-8", c.pos)))?
            .to_owned();
        // Errors inside a value name its key: "`tokenizer.ggml.tokens`: array length ...".
        let in_key = |e: EngineError| match e {
            EngineError::Corrupt { path, format, reason } => {
                EngineError::Corrupt { path, format, reason: format!("metadata `{key}`: {reason}") }
            }
            other => other,
        };
        let ty = c.value_type("metadata value type").map_err(in_key)?;
        let v = c.value(ty, 0).map_err(in_key)?;
        if !metadata.insert(key.clone(), v) {
            return Err(corrupt(path, FORMAT, format!("metadata key `{key}` appears twice")));
        }
    }
    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(v) => match v.as_u64() {
            Some(a) if a > 0 && a.is_power_of_two() && a <= 1 << 20 => a as usize,
            _ => {
                return Err(corrupt(
                    path,
                    FORMAT,
                    format!("`general.alignment` is {}, expected a power of two up to 1 MiB", v.describe()),
                ))
            }
        },
    };
    let mut tensors = Vec::with_capacity(n_tensors);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..n_tensors {
        tensors.push(read_tensor_info(&mut c, alignment)?);
        let name = &tensors[tensors.len() - 1].name;
        if !seen.insert(name.clone()) {
            return Err(corrupt(path, FORMAT, format!("tensor `{name}` appears twice")));
        }
    }
    let data_start = c.pos.div_ceil(alignment) * alignment;
    let data_len = (bytes.len().saturating_sub(data_start)) as u64;
    for t in &tensors {
        let end = t.offset.checked_add(t.n_bytes);
        if data_start > bytes.len() || end.is_none_or(|e| e > data_len) {
            return Err(corrupt(
                path,
                FORMAT,
                format!(
                    "tensor `{}` data [{}, +{}) lies outside the {data_len} data bytes (truncated file?)",
                    t.name, t.offset, t.n_bytes
                ),
            ));
        }
    }
    // Tensors sharing bytes means a damaged or forged table: one would read the other's data.
    let mut ranges: Vec<(u64, u64, &str)> =
        tensors.iter().filter(|t| t.n_bytes > 0).map(|t| (t.offset, t.offset + t.n_bytes, t.name.as_str())).collect();
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        if w[1].0 < w[0].1 {
            return Err(corrupt(
                path,
                FORMAT,
                format!("tensors `{}` and `{}` overlap in the data section", w[0].2, w[1].2),
            ));
        }
    }
    Ok(Header { version, metadata, tensors, alignment, data_start })
}

fn read_tensor_info(c: &mut Cursor<'_>, alignment: usize) -> Result<TensorInfo> {
    let path = c.path;
    let name = std::str::from_utf8(c.string_bytes("tensor name")?)
        .map_err(|_| corrupt(path, FORMAT, format!("tensor name at offset {} is not UTF-8", c.pos)))?
        .to_owned();
    let n_dims = c.u32("tensor n_dims")? as usize;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(corrupt(path, FORMAT, format!("tensor `{name}` has {n_dims} dimensions (1..={MAX_DIMS} allowed)")));
    }
    let mut ne = Vec::with_capacity(n_dims);
    for _ in 0..n_dims {
        ne.push(c.u64("tensor dimension")?);
    }
    let type_id = c.u32("tensor type")?;
    let offset = c.u64("tensor offset")?;
    let ggml_type = GgmlType::from_id(type_id).ok_or_else(|| EngineError::UnsupportedDType {
        name: name.clone(),
        dtype: format!("unknown ggml type id {type_id}"),
    })?;
    let numel = ne.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
    let numel = numel.ok_or_else(|| {
        let dims: Vec<String> = ne.iter().map(|d| d.to_string()).collect();
        corrupt(path, FORMAT, format!("tensor `{name}` of shape {} has too many elements", dims.join(" x ")))
    })?;
    if ne[0] % ggml_type.block_elems as u64 != 0 {
        return Err(corrupt(
            path,
            FORMAT,
            format!(
                "tensor `{name}`: row of {} elements is not a whole number of {}-element {} blocks",
                ne[0], ggml_type.block_elems, ggml_type.name
            ),
        ));
    }
    let n_bytes = (numel / ggml_type.block_elems as u64)
        .checked_mul(ggml_type.block_bytes as u64)
        .ok_or_else(|| corrupt(path, FORMAT, format!("tensor `{name}` size overflows")))?;
    if offset % alignment as u64 != 0 {
        return Err(corrupt(path, FORMAT, format!("tensor `{name}` offset {offset} is not aligned to {alignment}")));
    }
    Ok(TensorInfo { name, ne, ggml_type, offset, n_bytes })
}
