//! Safetensors checkpoints (single file or sharded with `model.safetensors.index.json`), memory-mapped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;
use serde_json::Value;

use crate::tensor::{corrupt, map_file, Backing, DType, RawTensor, TensorBytes, TensorSource};
use crate::error::{EngineError, Result};
use crate::model::config::describe;

const FORMAT: &str = "safetensors";
/// Refuse absurd headers before allocating for them.
const MAX_HEADER: u64 = 100 * 1024 * 1024;
/// No checkpoint tensor has more dimensions than this (MoE experts stacked: 3).
const MAX_DIMS: usize = 8;

struct Entry {
    file: usize,
    dtype: DType,
    shape: Vec<usize>,
    start: usize,
    len: usize,
}

/// Tensors of one or more safetensors files.
pub struct SafetensorsSource {
    path: PathBuf,
    maps: Vec<Arc<Mmap>>,
    entries: HashMap<String, Entry>,
    data_bytes: u64,
}

impl SafetensorsSource {
    /// Opens `model.safetensors`, a sharded index, or a single `.safetensors` file.
    pub fn open(path: &Path) -> Result<Self> {
        if path.is_dir() {
            let index = path.join("model.safetensors.index.json");
            if index.exists() {
                return Self::open_index(&index);
            }
            let single = path.join("model.safetensors");
            if single.exists() {
                return Self::open_files(&single, &[single.clone()]);
            }
            return Err(EngineError::config(path, "no model.safetensors or model.safetensors.index.json"));
        }
        if path.extension().and_then(|e| e.to_str()) == Some("json") {
            return Self::open_index(path);
        }
        Self::open_files(path, &[path.to_owned()])
    }

    fn open_index(index: &Path) -> Result<Self> {
        const INDEX: &str = "safetensors index";
        let text = crate::files::read_text(index)?;
        let json: Value =
            serde_json::from_str(&text).map_err(|e| corrupt(index, INDEX, format!("not valid JSON ({e})")))?;
        let map = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| corrupt(index, INDEX, "no `weight_map` object"))?;
        let dir = index.parent().unwrap_or(Path::new("."));
        let mut files: Vec<PathBuf> = Vec::new();
        let mut claimed: Vec<(&str, PathBuf)> = Vec::with_capacity(map.len());
        for (tensor, v) in map {
            let name = v.as_str().ok_or_else(|| {
                corrupt(index, INDEX, format!("the shard of `{tensor}` is {}, expected a file name", describe(v)))
            })?;
            // Shards live beside the index: no absolute paths, no climbing out of the folder.
            let rel = Path::new(name);
            let safe = !name.is_empty()
                && rel.components().all(|c| matches!(c, std::path::Component::Normal(_)));
            if !safe {
                return Err(corrupt(index, INDEX, format!("shard `{name}` of `{tensor}` is not a file name inside the model folder")));
            }
            let p = dir.join(name);
            if !files.contains(&p) {
                files.push(p.clone());
            }
            claimed.push((tensor.as_str(), p));
        }
        files.sort();
        let src = Self::open_files(index, &files)?;
        for (tensor, shard) in claimed {
            let held_by = src.entries.get(tensor).map(|e| &files[e.file]);
            if held_by != Some(&shard) {
                let found = match held_by {
                    Some(f) => format!("it is in {}", f.display()),
                    None => "no shard holds it".into(),
                };
                return Err(corrupt(
                    index,
                    INDEX,
                    format!("`weight_map` puts `{tensor}` in {}, but {found}", shard.display()),
                ));
            }
        }
        Ok(src)
    }

    /// Opens `files`; `label` (the single file, or the index of a sharded checkpoint) is the path
    /// errors about missing or bad tensors name.
    fn open_files(label: &Path, files: &[PathBuf]) -> Result<Self> {
        let mut maps = Vec::new();
        let mut entries = HashMap::new();
        let mut data_bytes = 0u64;
        for (fi, file) in files.iter().enumerate() {
            let map = map_file(file)?;
            let (header_end, tensors) = parse_header(file, &map)?;
            for (name, dtype, shape, begin, end) in tensors {
                data_bytes += (end - begin) as u64;
                let start = header_end + begin;
                if entries.insert(name.clone(), Entry { file: fi, dtype, shape, start, len: end - begin }).is_some() {
                    return Err(corrupt(file, FORMAT, format!("tensor `{name}` appears twice")));
                }
            }
            maps.push(map);
        }
        Ok(SafetensorsSource { path: label.to_owned(), maps, entries, data_bytes })
    }
}

type HeaderTensor = (String, DType, Vec<usize>, usize, usize);

/// The header's entries in file order. A JSON map would keep only the last of two entries with
/// the same name and load a forged tensor silently, so duplicates are an error here.
struct HeaderEntries(Vec<(String, Value)>);

impl<'de> serde::Deserialize<'de> for HeaderEntries {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = HeaderEntries;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object of tensors")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<HeaderEntries, A::Error> {
                let mut seen = std::collections::HashSet::new();
                let mut out = Vec::new();
                while let Some((name, info)) = map.next_entry::<String, Value>()? {
                    if !seen.insert(name.clone()) {
                        return Err(serde::de::Error::custom(format!("tensor `{name}` appears twice")));
                    }
                    out.push((name, info));
                }
                Ok(HeaderEntries(out))
            }
        }
        d.deserialize_map(Entries)
    }
}

/// Parses and validates the JSON header; returns the data start and every tensor's byte range.
fn parse_header(path: &Path, bytes: &[u8]) -> Result<(usize, Vec<HeaderTensor>)> {
    if bytes.len() < 8 {
        return Err(corrupt(
            path,
            FORMAT,
            format!("file is {} bytes, shorter than the 8-byte header length", bytes.len()),
        ));
    }
    let n = u64::from_le_bytes(bytes[..8].try_into().map_err(|_| corrupt(path, FORMAT, "short header"))?);
    if n > MAX_HEADER || n + 8 > bytes.len() as u64 {
        return Err(corrupt(path, FORMAT, format!("header length {n} exceeds the file size of {} bytes", bytes.len())));
    }
    let header_end = 8 + n as usize;
    let header: HeaderEntries = serde_json::from_slice(&bytes[8..header_end])
        .map_err(|e| corrupt(path, FORMAT, format!("header is not a valid JSON object ({e})")))?;
    let data_len = bytes.len() - header_end;
    let mut out = Vec::new();
    for (name, info) in &header.0 {
        if name == "__metadata__" {
            continue;
        }
        let dtype_s = info
            .get("dtype")
            .and_then(|d| d.as_str())
            .ok_or_else(|| corrupt(path, FORMAT, format!("`{name}` has no `dtype` string")))?;
        let dtype = match dtype_s {
            "F32" => DType::F32,
            "F16" => DType::F16,
            "BF16" => DType::BF16,
            "I64" => DType::I64,
            "I32" => DType::I32,
            "U8" => DType::U8,
            other => {
                return Err(corrupt(
                    path,
                    FORMAT,
                    format!("`{name}` has dtype `{other}`, which Unmask does not read (F32, F16, BF16, I64, I32, U8)"),
                ))
            }
        };
        let dims = info
            .get("shape")
            .and_then(|s| s.as_array())
            .ok_or_else(|| corrupt(path, FORMAT, format!("`{name}` has no `shape` list")))?;
        if dims.len() > MAX_DIMS {
            return Err(corrupt(path, FORMAT, format!("`{name}` has {} dimensions (at most {MAX_DIMS})", dims.len())));
        }
        let mut shape = Vec::with_capacity(dims.len());
        for d in dims {
            let d = d.as_u64().and_then(|d| usize::try_from(d).ok()).ok_or_else(|| {
                corrupt(path, FORMAT, format!("`{name}` has a dimension that is {}, not a size", describe(d)))
            })?;
            shape.push(d);
        }
        let offs = info
            .get("data_offsets")
            .and_then(|s| s.as_array())
            .filter(|a| a.len() == 2)
            .ok_or_else(|| corrupt(path, FORMAT, format!("`{name}` has no `data_offsets` pair")))?;
        let offset = |v: &Value| {
            v.as_u64().and_then(|d| usize::try_from(d).ok()).ok_or_else(|| {
                corrupt(path, FORMAT, format!("`{name}` has a data offset that is {}, not a byte offset", describe(v)))
            })
        };
        let (begin, end) = (offset(&offs[0])?, offset(&offs[1])?);
        if begin > end || end > data_len {
            return Err(corrupt(
                path,
                FORMAT,
                format!("`{name}` data [{begin}, {end}) outside the {data_len} data bytes (truncated file?)"),
            ));
        }
        let numel = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        let expect = numel.and_then(|n| dtype.bytes_for(n));
        if expect != Some(end - begin) {
            let needs = match expect {
                Some(n) => format!("needs {n} bytes"),
                None => "has a size that overflows".into(),
            };
            let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
            return Err(corrupt(
                path,
                FORMAT,
                format!("`{name}` of shape {} as {dtype} {needs}, the header gives {}", dims.join(" x "), end - begin),
            ));
        }
        out.push((name.clone(), dtype, shape, begin, end));
    }
    // Two tensors sharing bytes means a damaged or forged header: one of them reads the other's data.
    let mut ranges: Vec<(usize, usize, &str)> =
        out.iter().filter(|t| t.4 > t.3).map(|t| (t.3, t.4, t.0.as_str())).collect();
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        if w[1].0 < w[0].1 {
            return Err(corrupt(
                path,
                FORMAT,
                format!("tensors `{}` and `{}` overlap (bytes {}..{} and {}..{})", w[0].2, w[1].2, w[0].0, w[0].1, w[1].0, w[1].1),
            ));
        }
    }
    Ok((header_end, out))
}

impl TensorSource for SafetensorsSource {
    fn path(&self) -> &Path {
        &self.path
    }
    fn get(&self, name: &str) -> Result<RawTensor> {
        let e = self
            .entries
            .get(name)
            .ok_or_else(|| EngineError::MissingTensor { path: self.path.clone(), name: name.to_owned() })?;
        Ok(RawTensor {
            name: name.to_owned(),
            dtype: e.dtype,
            shape: e.shape.clone(),
            data: TensorBytes::new(Backing::Mapped(self.maps[e.file].clone()), e.start, e.len),
        })
    }
    fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }
    fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.entries.keys().cloned().collect();
        v.sort();
        v
    }
    fn data_bytes(&self) -> u64 {
        self.data_bytes
    }
}

/// Writes tensors as a safetensors file (f32/i64 only; used by tests, tools and exports).
pub fn write_safetensors(path: &Path, tensors: &[(&str, DType, Vec<usize>, Vec<u8>)]) -> Result<()> {
    let mut header = serde_json::Map::new();
    let mut offset = 0usize;
    for (name, dtype, shape, data) in tensors {
        header.insert(
            (*name).to_owned(),
            serde_json::json!({"dtype": dtype.name(), "shape": shape, "data_offsets": [offset, offset + data.len()]}),
        );
        offset += data.len();
    }
    let mut h = serde_json::to_vec(&Value::Object(header)).map_err(|e| corrupt(path, FORMAT, e.to_string()))?;
    // Pad so tensor data starts 8-byte aligned, as the reference writer does.
    while (8 + h.len()) % 8 != 0 {
        h.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + h.len() + offset);
    out.extend_from_slice(&(h.len() as u64).to_le_bytes());
    out.extend_from_slice(&h);
    for (_, _, _, data) in tensors {
        out.extend_from_slice(data);
    }
    std::fs::write(path, out).map_err(|e| EngineError::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::quant::TensorToF32;

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn roundtrip_and_zero_copy() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("model.safetensors");
        write_safetensors(&p, &[("a", DType::F32, vec![2, 2], f32_bytes(&[1.0, 2.0, 3.0, 4.0]))]).unwrap();
        let s = SafetensorsSource::open(dir.path()).unwrap();
        let t = s.get("a").unwrap();
        assert!(t.data.is_mapped());
        assert_eq!(t.to_f32_vec().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
        assert!(matches!(s.require("b"), Err(EngineError::MissingTensor { .. })));
    }

    #[test]
    fn truncated_file_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("model.safetensors");
        write_safetensors(&p, &[("a", DType::F32, vec![4], f32_bytes(&[1.0; 4]))]).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 3]).unwrap();
        let e = SafetensorsSource::open(&p).err().unwrap().to_string();
        assert!(e.contains("model.safetensors") && e.contains("outside"), "{e}");
    }

    #[test]
    fn huge_header_length_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.safetensors");
        let mut b = (1u64 << 40).to_le_bytes().to_vec();
        b.extend_from_slice(b"{}");
        std::fs::write(&p, b).unwrap();
        let e = SafetensorsSource::open(&p).err().unwrap().to_string();
        assert!(e.contains("header length"), "{e}");
    }

    #[test]
    fn shape_dtype_mismatch_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.safetensors");
        // Declares 3 elements of F32 but provides 8 bytes.
        let h = br#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#;
        let mut b = (h.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(h);
        b.extend_from_slice(&[0u8; 8]);
        std::fs::write(&p, b).unwrap();
        let e = SafetensorsSource::open(&p).err().unwrap().to_string();
        assert!(e.contains("needs"), "{e}");
    }

    #[test]
    fn sharded_index_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        write_safetensors(&dir.path().join("m-1.safetensors"), &[("a", DType::F32, vec![1], f32_bytes(&[1.0]))])
            .unwrap();
        write_safetensors(&dir.path().join("m-2.safetensors"), &[("b", DType::F32, vec![1], f32_bytes(&[2.0]))])
            .unwrap();
        std::fs::write(
            dir.path().join("model.safetensors.index.json"),
            r#"{"metadata":{},"weight_map":{"a":"m-1.safetensors","b":"m-2.safetensors"}}"#,
        )
        .unwrap();
        let s = SafetensorsSource::open(dir.path()).unwrap();
        assert_eq!(s.get("b").unwrap().to_f32_vec().unwrap(), vec![2.0]);
        assert_eq!(s.names(), vec!["a".to_string(), "b".to_string()]);
    }
}
