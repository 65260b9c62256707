//! The safetensors container for the mutator: split a file into its JSON header and data, mutate
//! the header's entries (dtypes, shapes, data_offsets, names) and re-serialise it with a correct
//! length prefix, so mutations reach the checks behind the prefix.

use serde_json::{json, Value};

use super::bytes;
use super::json;
use super::rng::Rng;

/// A safetensors file: the parsed header and the bytes after it.
#[derive(Debug, Clone)]
pub struct SafetensorsFile {
    pub header: Value,
    pub data: Vec<u8>,
}

/// Splits a well-formed file (None when the prefix or header JSON is broken).
pub fn split(file: &[u8]) -> Option<SafetensorsFile> {
    let n = u64::from_le_bytes(file.get(..8)?.try_into().ok()?);
    let end = 8usize.checked_add(usize::try_from(n).ok()?)?;
    let header = serde_json::from_slice(file.get(8..end)?).ok()?;
    Some(SafetensorsFile { header, data: file[end..].to_vec() })
}

/// Serialises header and data with a correct, 8-byte aligned length prefix.
pub fn join_bytes(header_json: &[u8], data: &[u8]) -> Vec<u8> {
    let mut h = header_json.to_vec();
    while !(8 + h.len()).is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + h.len() + data.len());
    out.extend_from_slice(&(h.len() as u64).to_le_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out
}

/// A tensor to write: name, dtype name, shape, bytes.
pub type TensorSpec = (String, &'static str, Vec<usize>, Vec<u8>);

/// A file holding `tensors` back to back.
pub fn build(tensors: &[TensorSpec]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let begin = data.len();
        data.extend_from_slice(bytes);
        header.insert(name.clone(), json!({"dtype": dtype, "shape": shape, "data_offsets": [begin, data.len()]}));
    }
    let text = serde_json::to_vec(&Value::Object(header)).unwrap_or_default();
    join_bytes(&text, &data)
}

const DTYPES: &[&str] = &["F32", "F16", "BF16", "I64", "I32", "U8", "F64", "I8", "BOOL", "Q8_0", "", "f32"];

/// Mutates a safetensors file: usually its header entries (re-serialised), else its bytes.
pub fn mutate(file: &mut Vec<u8>, rng: &mut Rng, donors: &[Vec<u8>]) {
    let parsed = if rng.chance(4, 5) { split(file) } else { None };
    let Some(mut st) = parsed else {
        if file.len() >= 8 && rng.chance(1, 4) {
            let v = *rng.pick(bytes::BOUNDARY_U64);
            file[..8].copy_from_slice(&v.to_le_bytes());
        } else {
            bytes::mutate(file, rng, donors);
        }
        return;
    };
    for _ in 0..rng.range(1, 3) {
        mutate_structure(&mut st, rng);
    }
    let header = json::to_bytes(&st.header, rng);
    *file = join_bytes(&header, &st.data);
    if rng.chance(1, 10) {
        // A wrong prefix on an otherwise valid layout.
        let v = match rng.below(3) {
            0 => header.len() as u64 + 1,
            1 => (file.len() as u64).saturating_sub(7),
            _ => *rng.pick(bytes::BOUNDARY_U64),
        };
        file[..8].copy_from_slice(&v.to_le_bytes());
    }
}

fn tensor_names(header: &Value) -> Vec<String> {
    header.as_object().map(|m| m.keys().filter(|k| *k != "__metadata__").cloned().collect()).unwrap_or_default()
}

fn mutate_structure(st: &mut SafetensorsFile, rng: &mut Rng) {
    let names = tensor_names(&st.header);
    let data_len = st.data.len() as u64;
    if names.is_empty() || rng.chance(1, 10) {
        match rng.below(3) {
            0 => json::mutate(&mut st.header, rng, &["__metadata__", "dtype", "shape", "data_offsets"]),
            1 => json::set_key(&mut st.header, "", "__metadata__", rng),
            _ => st.header = json::hostile_value(rng),
        }
        return;
    }
    let name = rng.pick(&names).clone();
    let other = rng.pick(&names).clone();
    let other_offsets = st.header.get(&other).and_then(|e| e.get("data_offsets")).cloned();
    let Some(obj) = st.header.as_object_mut() else { return };
    match rng.below(12) {
        0 => {
            if let Some(Value::Object(e)) = obj.get_mut(&name) {
                let v = if rng.chance(3, 4) { json!(rng.pick(DTYPES)) } else { json::hostile_value(rng) };
                e.insert("dtype".into(), v);
            }
        }
        1 | 2 => {
            if let Some(Value::Array(shape)) = obj.get_mut(&name).and_then(|e| e.get_mut("shape")) {
                mutate_shape(shape, rng);
            }
        }
        3 | 4 => {
            if let Some(Value::Object(e)) = obj.get_mut(&name) {
                let (b, en) = offsets(e.get("data_offsets"));
                let v = match rng.below(10) {
                    0 => json!([en, b]),
                    1 => json!([0, data_len + 1]),
                    2 => json!([b, b]),
                    3 => other_offsets.clone().unwrap_or(json!([0, 0])),
                    4 => json!([u64::MAX, u64::MAX]),
                    5 => json!([b, u64::MAX]),
                    6 => json!([-1, en]),
                    7 => json!([b as f64 + 0.5, en]),
                    8 => json!([b.saturating_add(1), en.saturating_add(1)]),
                    _ => json!([b]),
                };
                e.insert("data_offsets".into(), v);
            }
        }
        5 => {
            if let Some(Value::Object(e)) = obj.get_mut(&name) {
                let field = *rng.pick(&["dtype", "shape", "data_offsets"]);
                e.remove(field);
            }
        }
        6 => {
            // Rename onto another tensor's name: that tensor disappears, this one takes its place.
            if let Some(e) = obj.remove(&name) {
                obj.insert(other, e);
            }
        }
        7 => {
            obj.remove(&name);
        }
        8 => {
            // Alias another tensor's bytes.
            if let Some(o) = other_offsets {
                if let Some(Value::Object(e)) = obj.get_mut(&name) {
                    e.insert("data_offsets".into(), o);
                }
            }
        }
        9 => {
            let cut = rng.below(st.data.len().min(4096) + 1);
            st.data.truncate(st.data.len() - cut);
        }
        10 => {
            if !st.data.is_empty() {
                // Non-finite floats: 0xFF.. is NaN in F32/F16/BF16.
                let at = rng.below(st.data.len());
                let n = rng.range(1, 64).min(st.data.len() - at);
                st.data[at..at + n].fill(0xFF);
            }
        }
        _ => {
            if let Some(e) = obj.get_mut(&name) {
                json::mutate(e, rng, &["dtype", "shape", "data_offsets"]);
            }
        }
    }
}

fn offsets(v: Option<&Value>) -> (u64, u64) {
    let get = |i: usize| v.and_then(|o| o.get(i)).and_then(|x| x.as_u64()).unwrap_or(0);
    (get(0), get(1))
}

fn mutate_shape(shape: &mut Vec<Value>, rng: &mut Rng) {
    match rng.below(6) {
        0 if !shape.is_empty() => {
            let i = rng.below(shape.len());
            shape[i] = match rng.below(8) {
                0 => json!(0),
                1 => json!(1),
                2 => json!(1u64 << 32),
                3 => json!(u64::MAX),
                4 => json!(-1),
                5 => json!(0.5),
                6 => json!("4"),
                _ => json!(shape[i].as_u64().unwrap_or(1).saturating_mul(2)),
            };
        }
        1 => shape.push(json!(*rng.pick(&[1u64, 2, 0, 1 << 40]))),
        2 => {
            shape.pop();
        }
        3 => shape.clear(),
        4 if shape.len() >= 2 => shape.swap(0, 1),
        _ => shape.push(json::hostile_value(rng)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_split_roundtrip() {
        let f = build(&[("a".to_owned(), "F32", vec![2], vec![0u8; 8])]);
        assert_eq!(f[..8], ((f.len() - 16) as u64).to_le_bytes());
        let st = split(&f).unwrap();
        assert_eq!(st.data.len(), 8);
        assert_eq!(st.header["a"]["data_offsets"], json!([0, 8]));
        let mut rng = Rng::new(5);
        for _ in 0..300 {
            let mut g = f.clone();
            mutate(&mut g, &mut rng, &[]);
        }
    }
}
