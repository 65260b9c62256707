//! GGUF (llama.cpp) checkpoints: our own v2/v3 reader over a memory map, metadata → config and
//! tokenizer, and a small writer/exporter.

pub(crate) mod config;
pub(crate) mod metadata;
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

use crate::tensor::{map_file, Backing, DType, RawTensor, TensorBytes, TensorSource};
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
        write!(
            f,
            "GgufFile({}, v{}, {} keys, {} tensors)",
            self.path.display(),
            self.version,
            self.metadata.len(),
            self.tensors.len()
        )
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
        let dtype = dtype_of(t.ggml_type).ok_or_else(|| EngineError::UnsupportedDType {
            name: name.to_owned(),
            dtype: t.ggml_type.name.to_owned(),
        })?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::quant::TensorToF32;

    fn s(out: &mut Vec<u8>, x: &str) {
        out.extend_from_slice(&(x.len() as u64).to_le_bytes());
        out.extend_from_slice(x.as_bytes());
    }

    /// A hand-built file: given KV bytes and tensor-info bytes, pads to `align` and appends `data`.
    fn build(version: u32, n_kv: u64, kvs: &[u8], n_t: u64, infos: &[u8], align: usize, data: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&GGUF_MAGIC.to_le_bytes());
        b.extend_from_slice(&version.to_le_bytes());
        b.extend_from_slice(&n_t.to_le_bytes());
        b.extend_from_slice(&n_kv.to_le_bytes());
        b.extend_from_slice(kvs);
        b.extend_from_slice(infos);
        b.resize(b.len().div_ceil(align) * align, 0);
        b.extend_from_slice(data);
        b
    }

    fn info(name: &str, ne: &[u64], ty: u32, offset: u64) -> Vec<u8> {
        let mut b = Vec::new();
        s(&mut b, name);
        b.extend_from_slice(&(ne.len() as u32).to_le_bytes());
        for d in ne {
            b.extend_from_slice(&d.to_le_bytes());
        }
        b.extend_from_slice(&ty.to_le_bytes());
        b.extend_from_slice(&offset.to_le_bytes());
        b
    }

    fn open_bytes(bytes: &[u8]) -> (tempfile::TempDir, Result<GgufFile>) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.gguf");
        std::fs::write(&p, bytes).unwrap();
        let r = GgufFile::open(&p);
        (dir, r)
    }

    fn corrupt_reason(bytes: &[u8]) -> String {
        match open_bytes(bytes).1 {
            Err(e @ EngineError::Corrupt { .. }) => {
                let s = e.to_string();
                assert!(s.contains("t.gguf"), "error must name the file: {s}");
                s
            }
            Err(e) => panic!("expected Corrupt, got {e}"),
            Ok(f) => panic!("expected an error, parsed {f:?}"),
        }
    }

    fn f32_tensor_file() -> Vec<u8> {
        let data: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
        build(3, 0, &[], 1, &info("w", &[3, 2], 0, 0), 32, &data)
    }

    #[test]
    fn minimal_file_reads_zero_copy_with_reversed_shape() {
        let (_d, f) = open_bytes(&f32_tensor_file());
        let f = f.unwrap();
        let t = f.get("w").unwrap();
        assert_eq!(t.shape, vec![2, 3]);
        assert!(t.data.is_mapped());
        assert_eq!(t.to_f32_vec().unwrap(), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(f.data_bytes(), 24);
    }

    #[test]
    fn all_value_types_and_nested_arrays_roundtrip_through_the_writer() {
        let mut w = GgufWriter::new();
        let vals = vec![
            ("a.u8", GgufValue::U8(7)),
            ("a.i8", GgufValue::I8(-7)),
            ("a.u16", GgufValue::U16(700)),
            ("a.i16", GgufValue::I16(-700)),
            ("a.u32", GgufValue::U32(70000)),
            ("a.i32", GgufValue::I32(-70000)),
            ("a.f32", GgufValue::F32(1.5)),
            ("a.bool", GgufValue::Bool(true)),
            ("a.str", GgufValue::String("héllo".into())),
            ("a.u64", GgufValue::U64(1 << 40)),
            ("a.i64", GgufValue::I64(-(1 << 40))),
            ("a.f64", GgufValue::F64(-2.25)),
            (
                "a.nested",
                GgufValue::Array(
                    ValueType::Array,
                    vec![
                        GgufValue::Array(ValueType::I32, vec![GgufValue::I32(1), GgufValue::I32(2)]),
                        GgufValue::Array(ValueType::String, vec![GgufValue::String("x".into())]),
                    ],
                ),
            ),
        ];
        for (k, v) in &vals {
            w.add_kv(*k, v.clone());
        }
        w.add_f32_tensor("t", DType::F32, &[2, 2], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        let (_d, f) = open_bytes(&w.to_bytes());
        let f = f.unwrap();
        for (k, v) in &vals {
            assert_eq!(f.metadata().get(k), Some(v), "{k}");
        }
        assert_eq!(f.get("t").unwrap().to_f32_vec().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
    }

    #[test]
    fn custom_alignment_is_honoured() {
        let mut kv = Vec::new();
        s(&mut kv, "general.alignment");
        kv.extend_from_slice(&4u32.to_le_bytes());
        kv.extend_from_slice(&64u32.to_le_bytes());
        let data: Vec<u8> = (0..4).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let bytes = build(3, 1, &kv, 1, &info("w", &[4], 0, 0), 64, &data);
        let (_d, f) = open_bytes(&bytes);
        let f = f.unwrap();
        assert_eq!((f.alignment(), f.data_start() % 64), (64, 0));
        assert_eq!(f.get("w").unwrap().to_f32_vec().unwrap(), vec![0.0, 1.0, 2.0, 3.0]);
        // Offset 32 is not a multiple of 64.
        let bytes = build(3, 1, &kv, 1, &info("w", &[4], 0, 32), 64, &[0u8; 128]);
        assert!(corrupt_reason(&bytes).contains("not aligned"));
    }

    #[test]
    fn version_2_is_accepted() {
        let mut b = f32_tensor_file();
        b[4..8].copy_from_slice(&2u32.to_le_bytes());
        assert_eq!(open_bytes(&b).1.unwrap().version(), 2);
    }

    #[test]
    fn bad_magic_is_reported() {
        let mut b = f32_tensor_file();
        b[0] = b'X';
        assert!(corrupt_reason(&b).contains("bad magic"));
    }

    #[test]
    fn wrong_version_is_reported() {
        for v in [1u32, 4, 0xFFFF_FFFF] {
            let mut b = f32_tensor_file();
            b[4..8].copy_from_slice(&v.to_le_bytes());
            assert!(corrupt_reason(&b).contains("unsupported version"), "version {v}");
        }
    }

    #[test]
    fn truncated_files_are_reported_at_every_cut() {
        let b = f32_tensor_file();
        for cut in 0..b.len() {
            let r = corrupt_reason(&b[..cut]);
            assert!(r.contains("truncated") || r.contains("exceeds") || r.contains("outside"), "cut {cut}: {r}");
        }
    }

    #[test]
    fn huge_counts_and_lengths_are_refused_without_allocating() {
        // Tensor count far beyond the file.
        let b = build(3, 0, &[], u64::MAX, &[], 1, &[]);
        assert!(corrupt_reason(&b).contains("tensor count"));
        let b = build(3, 1 << 60, &[], 0, &[], 1, &[]);
        assert!(corrupt_reason(&b).contains("metadata count"));
        // Key string length beyond the file.
        let mut kv = Vec::new();
        kv.extend_from_slice(&(1u64 << 50).to_le_bytes());
        let b = build(3, 1, &kv, 0, &[], 1, &[0u8; 64]);
        assert!(corrupt_reason(&b).contains("metadata key length"));
        // String value length beyond the file.
        let mut kv = Vec::new();
        s(&mut kv, "k");
        kv.extend_from_slice(&8u32.to_le_bytes());
        kv.extend_from_slice(&u64::MAX.to_le_bytes());
        let b = build(3, 1, &kv, 0, &[], 1, &[0u8; 64]);
        assert!(corrupt_reason(&b).contains("string length"));
        // Array length beyond the file (u32 items).
        let mut kv = Vec::new();
        s(&mut kv, "k");
        kv.extend_from_slice(&9u32.to_le_bytes());
        kv.extend_from_slice(&4u32.to_le_bytes());
        kv.extend_from_slice(&(1u64 << 40).to_le_bytes());
        let b = build(3, 1, &kv, 0, &[], 1, &[0u8; 16]);
        assert!(corrupt_reason(&b).contains("array length"));
        // Arrays nested without end.
        let mut kv = Vec::new();
        s(&mut kv, "k");
        kv.extend_from_slice(&9u32.to_le_bytes());
        for _ in 0..10 {
            kv.extend_from_slice(&9u32.to_le_bytes());
            kv.extend_from_slice(&1u64.to_le_bytes());
        }
        let b = build(3, 1, &kv, 0, &[], 1, &[0u8; 16]);
        assert!(corrupt_reason(&b).contains("nested"));
    }

    #[test]
    fn unknown_value_type_and_bad_bool_are_reported() {
        let mut kv = Vec::new();
        s(&mut kv, "k");
        kv.extend_from_slice(&99u32.to_le_bytes());
        assert!(corrupt_reason(&build(3, 1, &kv, 0, &[], 1, &[0u8; 8])).contains("unknown value type"));
        let mut kv = Vec::new();
        s(&mut kv, "k");
        kv.extend_from_slice(&7u32.to_le_bytes());
        kv.push(2);
        assert!(corrupt_reason(&build(3, 1, &kv, 0, &[], 1, &[])).contains("bool"));
    }

    #[test]
    fn duplicate_keys_and_tensors_are_reported() {
        let mut kv = Vec::new();
        for _ in 0..2 {
            s(&mut kv, "k");
            kv.extend_from_slice(&0u32.to_le_bytes());
            kv.push(1);
        }
        assert!(corrupt_reason(&build(3, 2, &kv, 0, &[], 1, &[])).contains("twice"));
        let mut infos = info("w", &[8], 0, 0);
        infos.extend(info("w", &[8], 0, 32));
        assert!(corrupt_reason(&build(3, 0, &[], 2, &infos, 32, &[0u8; 64])).contains("twice"));
    }

    #[test]
    fn tensor_data_outside_the_file_is_reported() {
        let b = build(3, 0, &[], 1, &info("w", &[3, 2], 0, 0), 32, &[0u8; 20]);
        let r = corrupt_reason(&b);
        assert!(r.contains("`w`") && r.contains("outside"), "{r}");
        // Offset near u64::MAX must not overflow.
        let b = build(3, 0, &[], 1, &info("w", &[8], 0, u64::MAX - 31), 32, &[0u8; 32]);
        assert!(corrupt_reason(&b).contains("outside"));
        // Dimensions whose product overflows.
        let b = build(3, 0, &[], 1, &info("w", &[1 << 40, 1 << 40], 0, 0), 32, &[]);
        assert!(corrupt_reason(&b).contains("too many elements"));
    }

    #[test]
    fn too_many_dims_are_reported() {
        let b = build(3, 0, &[], 1, &info("w", &[1, 1, 1, 1, 1], 0, 0), 32, &[0u8; 4]);
        assert!(corrupt_reason(&b).contains("5 dimensions"));
        let b = build(3, 0, &[], 1, &info("w", &[], 0, 0), 32, &[0u8; 4]);
        assert!(corrupt_reason(&b).contains("0 dimensions"));
    }

    #[test]
    fn misaligned_offset_is_reported() {
        let b = build(3, 0, &[], 1, &info("w", &[4], 0, 4), 32, &[0u8; 64]);
        assert!(corrupt_reason(&b).contains("not aligned to 32"));
    }

    #[test]
    fn partial_blocks_are_reported() {
        // Q8_0 with a 33-element row.
        let b = build(3, 0, &[], 1, &info("w", &[33, 2], 8, 0), 32, &[0u8; 128]);
        let r = corrupt_reason(&b);
        assert!(r.contains("whole number") && r.contains("Q8_0"), "{r}");
    }

    #[test]
    fn unknown_and_unsupported_types_name_the_tensor() {
        let b = build(3, 0, &[], 1, &info("blk.0.odd", &[32], 77, 0), 32, &[0u8; 64]);
        match open_bytes(&b).1 {
            Err(EngineError::UnsupportedDType { name, .. }) => assert_eq!(name, "blk.0.odd"),
            other => panic!("{other:?}"),
        }
        // Q5_K is sized (the file opens) but not computable: `get` says so.
        let b = build(3, 0, &[], 1, &info("blk.0.q5", &[256], 13, 0), 32, &[0u8; 176]);
        let (_d, f) = open_bytes(&b);
        let f = f.unwrap();
        match f.get("blk.0.q5") {
            Err(EngineError::UnsupportedDType { name, dtype }) => {
                assert_eq!((name.as_str(), dtype.as_str()), ("blk.0.q5", "Q5_K"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn fuzzed_headers_never_panic() {
        let mut w = GgufWriter::new();
        w.add_kv("general.architecture", GgufValue::String("llama".into()));
        w.add_kv("tokenizer.ggml.tokens", writer::string_array(&["a", "b", "c"]));
        w.add_f32_tensor("t", DType::Q8_0, &[1, 32], &[0.5; 32]).unwrap();
        let good = w.to_bytes();
        let mut rng = 0x2545F4914F6CDD1Du64;
        for _ in 0..2000 {
            let mut b = good.clone();
            for _ in 0..3 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let i = (rng as usize) % b.len();
                b[i] = (rng >> 32) as u8;
            }
            let (_d, r) = open_bytes(&b);
            if let Ok(f) = r {
                for n in f.names() {
                    let _ = f.get(&n).map(|t| t.to_f32_vec());
                }
            }
        }
    }
}
