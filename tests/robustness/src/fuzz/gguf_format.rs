//! The GGUF container for the mutator: decode a file (with the engine's own reader) into an
//! editable document whose counts, lengths, types, dims and offsets can be set to lies, then
//! re-encode it, so mutations get past the first length check and into the later ones.

use std::path::Path;

use unmask_engine::model::gguf::{reader, GgufValue, DEFAULT_ALIGNMENT, GGUF_MAGIC};

use super::bytes;
use super::rng::Rng;

/// A metadata value; `len` fields, when set, are written instead of the true length.
#[derive(Debug, Clone)]
pub enum Val {
    /// A fixed-size value: type id and its little-endian bytes.
    Scalar {
        ty: u32,
        bytes: Vec<u8>,
    },
    Str {
        len: Option<u64>,
        bytes: Vec<u8>,
    },
    Array {
        elem: u32,
        len: Option<u64>,
        items: Vec<Val>,
    },
}

/// One key/value; `ty` overrides the written type id.
#[derive(Debug, Clone)]
pub struct Kv {
    pub key: Vec<u8>,
    pub ty: Option<u32>,
    pub value: Val,
}

/// One tensor info; `n_dims` overrides the written dimension count.
#[derive(Debug, Clone)]
pub struct TensorEntry {
    pub name: Vec<u8>,
    pub dims: Vec<u64>,
    pub n_dims: Option<u32>,
    pub ty: u32,
    pub offset: u64,
}

/// An editable GGUF file.
#[derive(Debug, Clone)]
pub struct GgufDoc {
    pub magic: u32,
    pub version: u32,
    pub n_tensors: Option<u64>,
    pub n_kv: Option<u64>,
    pub kvs: Vec<Kv>,
    pub tensors: Vec<TensorEntry>,
    /// Padding before the data section.
    pub align: usize,
    pub data: Vec<u8>,
}

impl Val {
    fn type_id(&self) -> u32 {
        match self {
            Val::Scalar { ty, .. } => *ty,
            Val::Str { .. } => 8,
            Val::Array { .. } => 9,
        }
    }
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Val::Scalar { bytes, .. } => out.extend_from_slice(bytes),
            Val::Str { len, bytes } => {
                out.extend_from_slice(&len.unwrap_or(bytes.len() as u64).to_le_bytes());
                out.extend_from_slice(bytes);
            }
            Val::Array { elem, len, items } => {
                out.extend_from_slice(&elem.to_le_bytes());
                out.extend_from_slice(&len.unwrap_or(items.len() as u64).to_le_bytes());
                for i in items {
                    i.encode(out);
                }
            }
        }
    }
    /// A string value.
    pub fn str(s: &str) -> Val {
        Val::Str { len: None, bytes: s.as_bytes().to_vec() }
    }
    /// A u32 value.
    pub fn u32(v: u32) -> Val {
        Val::Scalar { ty: 4, bytes: v.to_le_bytes().to_vec() }
    }
    /// An f32 value.
    pub fn f32(v: f32) -> Val {
        Val::Scalar { ty: 6, bytes: v.to_le_bytes().to_vec() }
    }
}

/// Converts an engine metadata value.
pub fn from_value(v: &GgufValue) -> Val {
    let scalar = |ty: u32, bytes: &[u8]| Val::Scalar { ty, bytes: bytes.to_vec() };
    match v {
        GgufValue::U8(x) => scalar(0, &[*x]),
        GgufValue::I8(x) => scalar(1, &x.to_le_bytes()),
        GgufValue::U16(x) => scalar(2, &x.to_le_bytes()),
        GgufValue::I16(x) => scalar(3, &x.to_le_bytes()),
        GgufValue::U32(x) => scalar(4, &x.to_le_bytes()),
        GgufValue::I32(x) => scalar(5, &x.to_le_bytes()),
        GgufValue::F32(x) => scalar(6, &x.to_le_bytes()),
        GgufValue::Bool(x) => scalar(7, &[*x as u8]),
        GgufValue::String(s) => Val::str(s),
        GgufValue::Array(t, items) => {
            Val::Array { elem: t.id(), len: None, items: items.iter().map(from_value).collect() }
        }
        GgufValue::U64(x) => scalar(10, &x.to_le_bytes()),
        GgufValue::I64(x) => scalar(11, &x.to_le_bytes()),
        GgufValue::F64(x) => scalar(12, &x.to_le_bytes()),
    }
}

/// Decodes a file the engine's reader accepts (None otherwise).
pub fn decode(file: &[u8]) -> Option<GgufDoc> {
    let h = reader::parse(Path::new("input.gguf"), file).ok()?;
    let kvs = h
        .metadata
        .entries()
        .iter()
        .map(|(k, v)| Kv { key: k.as_bytes().to_vec(), ty: None, value: from_value(v) })
        .collect();
    let tensors = h
        .tensors
        .iter()
        .map(|t| TensorEntry {
            name: t.name.as_bytes().to_vec(),
            dims: t.ne.clone(),
            n_dims: None,
            ty: t.ggml_type.id,
            offset: t.offset,
        })
        .collect();
    Some(GgufDoc {
        magic: GGUF_MAGIC,
        version: h.version,
        n_tensors: None,
        n_kv: None,
        kvs,
        tensors,
        align: h.alignment,
        data: file.get(h.data_start..).unwrap_or_default().to_vec(),
    })
}

/// Encodes the document, lies included.
pub fn encode(doc: &GgufDoc) -> Vec<u8> {
    let mut out = Vec::with_capacity(doc.data.len() + 4096);
    out.extend_from_slice(&doc.magic.to_le_bytes());
    out.extend_from_slice(&doc.version.to_le_bytes());
    out.extend_from_slice(&doc.n_tensors.unwrap_or(doc.tensors.len() as u64).to_le_bytes());
    out.extend_from_slice(&doc.n_kv.unwrap_or(doc.kvs.len() as u64).to_le_bytes());
    for kv in &doc.kvs {
        out.extend_from_slice(&(kv.key.len() as u64).to_le_bytes());
        out.extend_from_slice(&kv.key);
        out.extend_from_slice(&kv.ty.unwrap_or(kv.value.type_id()).to_le_bytes());
        kv.value.encode(&mut out);
    }
    for t in &doc.tensors {
        out.extend_from_slice(&(t.name.len() as u64).to_le_bytes());
        out.extend_from_slice(&t.name);
        out.extend_from_slice(&t.n_dims.unwrap_or(t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&t.ty.to_le_bytes());
        out.extend_from_slice(&t.offset.to_le_bytes());
    }
    let align = doc.align.clamp(1, 1 << 16);
    out.resize(out.len().div_ceil(align) * align, 0);
    out.extend_from_slice(&doc.data);
    out
}

impl GgufDoc {
    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Val> {
        self.kvs.iter().find(|kv| kv.key == key.as_bytes()).map(|kv| &kv.value)
    }
    /// Sets `key` (replacing the first entry or appending one).
    pub fn set(&mut self, key: &str, value: Val) {
        match self.kvs.iter_mut().find(|kv| kv.key == key.as_bytes()) {
            Some(kv) => {
                kv.value = value;
                kv.ty = None;
            }
            None => self.kvs.push(Kv { key: key.as_bytes().to_vec(), ty: None, value }),
        }
    }
    /// `general.architecture` as text (empty if absent).
    pub fn arch(&self) -> String {
        match self.get("general.architecture") {
            Some(Val::Str { bytes, .. }) => String::from_utf8_lossy(bytes).into_owned(),
            _ => String::new(),
        }
    }
}

/// ggml type ids: every known one plus unknown ones.
const GGML_TYPES: &[u32] = &[0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 30, 4, 99, u32::MAX];

/// A typed value chosen to break the reader's and the config mapping's assumptions.
pub fn hostile_val(rng: &mut Rng) -> Val {
    let scalar = |ty: u32, bytes: &[u8]| Val::Scalar { ty, bytes: bytes.to_vec() };
    match rng.below(16) {
        0 | 1 => Val::u32(*rng.pick(&[0, 1, 2, 3, 7, 1 << 31, u32::MAX, 65, 4096])),
        2 => scalar(10, &rng.pick(bytes::BOUNDARY_U64).to_le_bytes()),
        3 => scalar(5, &rng.pick(&[-1i32, i32::MIN, 0]).to_le_bytes()),
        4 => scalar(11, &rng.pick(&[-1i64, i64::MIN]).to_le_bytes()),
        5 => Val::f32(*rng.pick(&[f32::NAN, f32::INFINITY, -0.0, 1e38, -1.0, 0.5, f32::MIN_POSITIVE])),
        6 => scalar(12, &rng.pick(&[f64::NAN, f64::NEG_INFINITY, 1e300]).to_le_bytes()),
        7 => scalar(7, &[*rng.pick(&[0u8, 1, 2, 255])]),
        8 => scalar(0, &[*rng.pick(&[0u8, 1, 255])]),
        9 => Val::str(rng.pick::<&str>(&[
            "",
            "llama",
            "gpt2",
            "qwen2",
            "llada",
            "llada-moe",
            "dream",
            "unknown",
            "\u{0}",
        ])),
        10 => Val::Str { len: None, bytes: vec![0xC3, 0x28, 0xFF, 0xFE] },
        11 => Val::Str { len: Some(*rng.pick(bytes::BOUNDARY_U64)), bytes: b"abc".to_vec() },
        12 => Val::Array { elem: 4, len: None, items: Vec::new() },
        13 => Val::Array { elem: 8, len: None, items: vec![Val::str("a b"), Val::str(""), Val::str("a")] },
        14 => Val::Array { elem: 4, len: Some(*rng.pick(bytes::BOUNDARY_U64)), items: vec![Val::u32(1)] },
        _ => {
            let mut v = Val::u32(1);
            for _ in 0..rng.range(2, 6) {
                v = Val::Array { elem: v.type_id(), len: None, items: vec![v] };
            }
            v
        }
    }
}

/// Mutates a GGUF file: usually its decoded structure (keys in `focus` preferred, `{arch}`
/// standing for the file's architecture), else its bytes.
pub fn mutate(file: &mut Vec<u8>, rng: &mut Rng, donors: &[Vec<u8>], focus: &[&str]) {
    let parsed = if rng.chance(4, 5) { decode(file) } else { None };
    let Some(mut doc) = parsed else {
        bytes::mutate(file, rng, donors);
        return;
    };
    for _ in 0..rng.range(1, 3) {
        mutate_doc(&mut doc, rng, focus);
    }
    *file = encode(&doc);
    if rng.chance(1, 8) {
        bytes::mutate(file, rng, donors);
    }
}

fn mutate_doc(doc: &mut GgufDoc, rng: &mut Rng, focus: &[&str]) {
    match rng.below(20) {
        0 => doc.version = *rng.pick(&[0, 1, 2, 4, u32::MAX]),
        1 => doc.n_tensors = Some(mutated_count(doc.tensors.len(), rng)),
        2 => doc.n_kv = Some(mutated_count(doc.kvs.len(), rng)),
        3..=9 if !focus.is_empty() => {
            let key = rng.pick(focus).replace("{arch}", &doc.arch());
            let value = match doc.get(&key) {
                Some(v) if rng.chance(1, 2) => mutate_val(v.clone(), rng),
                _ => hostile_val(rng),
            };
            if rng.chance(1, 10) {
                doc.kvs.retain(|kv| kv.key != key.as_bytes());
            } else {
                doc.set(&key, value);
            }
        }
        10 | 11 if !doc.kvs.is_empty() => {
            let i = rng.below(doc.kvs.len());
            match rng.below(6) {
                0 => {
                    doc.kvs.remove(i);
                }
                1 => {
                    let kv = doc.kvs[i].clone();
                    doc.kvs.push(kv);
                }
                2 => doc.kvs[i].ty = Some(*rng.pick(&[0, 4, 6, 7, 8, 9, 10, 13, 99, u32::MAX])),
                3 => doc.kvs[i].key = rng.pick(&[&b""[..], &[0xFF, 0xFE][..], b"general.alignment"]).to_vec(),
                _ => {
                    let v = doc.kvs[i].value.clone();
                    doc.kvs[i].value = mutate_val(v, rng);
                }
            }
        }
        12 => {
            let v = if rng.chance(1, 2) { Val::u32(*rng.pick(&[0, 3, 1 << 21, 64, 1])) } else { hostile_val(rng) };
            doc.set("general.alignment", v);
        }
        13..=17 if !doc.tensors.is_empty() => mutate_tensor(doc, rng),
        18 => {
            let cut = rng.below(doc.data.len().min(4096) + 1);
            doc.data.truncate(doc.data.len() - cut);
        }
        _ => {
            if !doc.data.is_empty() {
                let at = rng.below(doc.data.len());
                let n = rng.range(1, 64).min(doc.data.len() - at);
                doc.data[at..at + n].fill(0xFF);
            }
        }
    }
}

fn mutated_count(actual: usize, rng: &mut Rng) -> u64 {
    match rng.below(3) {
        0 => actual as u64 + 1,
        1 => (actual as u64).saturating_sub(1),
        _ => *rng.pick(bytes::BOUNDARY_U64),
    }
}

/// A variation of an existing value (same kind where possible).
fn mutate_val(v: Val, rng: &mut Rng) -> Val {
    match v {
        Val::Array { elem, len, mut items } => {
            match rng.below(8) {
                0 => return Val::Array { elem, len: Some(mutated_count(items.len(), rng)), items },
                1 => return Val::Array { elem: *rng.pick(&[0, 4, 5, 6, 8, 9, 13]), len, items },
                2 => items.truncate(rng.below(items.len() + 1)),
                3 if !items.is_empty() => {
                    let dup = items[rng.below(items.len())].clone();
                    let at = rng.below(items.len() + 1);
                    items.insert(at, dup);
                }
                4 if !items.is_empty() => {
                    let i = rng.below(items.len());
                    let old = std::mem::replace(&mut items[i], Val::u32(0));
                    items[i] = mutate_val(old, rng);
                }
                5 => items.clear(),
                6 if !items.is_empty() => {
                    // A huge item (e.g. a 64 KiB token string).
                    let i = rng.below(items.len());
                    items[i] = match &items[i] {
                        Val::Str { bytes, .. } => {
                            Val::Str { len: None, bytes: bytes.repeat(4096).into_iter().take(65_536).collect() }
                        }
                        other => other.clone(),
                    };
                }
                _ => return hostile_val(rng),
            }
            Val::Array { elem, len, items }
        }
        Val::Str { len, mut bytes } => {
            match rng.below(6) {
                0 => return Val::Str { len: Some(bytes.len() as u64 + rng.range(1, 9) as u64), bytes },
                1 => bytes.clear(),
                2 => bytes.retain(|&b| b != b' '),
                3 => bytes.extend_from_slice(&[0xFF, 0x00]),
                4 => bytes = bytes.repeat(rng.range(2, 200)),
                _ => return hostile_val(rng),
            }
            Val::Str { len, bytes }
        }
        Val::Scalar { ty, mut bytes } => {
            if rng.chance(1, 3) || bytes.is_empty() {
                return hostile_val(rng);
            }
            let i = rng.below(bytes.len());
            bytes[i] = *rng.pick(&[0u8, 1, 0x7F, 0x80, 0xFF]);
            Val::Scalar { ty, bytes }
        }
    }
}

fn mutate_tensor(doc: &mut GgufDoc, rng: &mut Rng) {
    let n = doc.tensors.len();
    let i = rng.below(n);
    let other = rng.below(n);
    let other_offset = doc.tensors[other].offset;
    let other_name = doc.tensors[other].name.clone();
    let data_len = doc.data.len() as u64;
    let align = doc.align.max(1) as u64;
    let t = &mut doc.tensors[i];
    match rng.below(9) {
        0 if !t.dims.is_empty() => {
            let d = rng.below(t.dims.len());
            t.dims[d] = match rng.below(5) {
                0 => 0,
                1 => t.dims[d].saturating_mul(2),
                2 => t.dims[d].saturating_add(1),
                _ => *rng.pick(bytes::BOUNDARY_U64),
            };
        }
        1 => {
            if rng.chance(1, 2) {
                t.dims.push(*rng.pick(&[1, 2, 1 << 33]));
            } else {
                t.dims.pop();
            }
        }
        2 => t.n_dims = Some(*rng.pick(&[0, 5, 64, u32::MAX])),
        3 => t.ty = *rng.pick(GGML_TYPES),
        4 | 5 => {
            t.offset = match rng.below(7) {
                0 => 0,
                1 => t.offset.wrapping_add(1),
                2 => t.offset.wrapping_add(align),
                3 => data_len,
                4 => u64::MAX - 31,
                5 => other_offset,
                _ => *rng.pick(bytes::BOUNDARY_U64),
            }
        }
        6 => t.name = if rng.chance(1, 2) { other_name } else { rng.pick(&[&b""[..], &[0xFF][..]]).to_vec() },
        7 => {
            doc.tensors.remove(i);
        }
        _ => doc.tensors.swap(i, other),
    }
}

/// Alignment the writer pads to (re-exported for seeds).
pub const ALIGN: usize = DEFAULT_ALIGNMENT;

#[cfg(test)]
mod tests {
    use super::*;
    use unmask_engine::model::gguf::GgufWriter;
    use unmask_engine::tensor::DType;

    #[test]
    fn decode_encode_roundtrip_is_exact() {
        let mut w = GgufWriter::new();
        w.add_kv("general.architecture", GgufValue::String("llama".into()));
        w.add_kv("a", GgufValue::Array(unmask_engine::model::gguf::ValueType::U8, vec![GgufValue::U8(1)]));
        w.add_f32_tensor("t", DType::F32, &[2, 2], &[1.0; 4]).unwrap();
        let b = w.to_bytes();
        assert_eq!(encode(&decode(&b).unwrap()), b);
        let mut rng = Rng::new(11);
        for _ in 0..300 {
            let mut g = b.clone();
            mutate(&mut g, &mut rng, &[], &["{arch}.block_count"]);
        }
    }
}
