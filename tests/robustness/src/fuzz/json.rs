//! Structure-aware JSON mutations: hostile values at random places or at named keys, removed and
//! added keys, and raw number tokens JSON values cannot hold (`NaN`, `1e999`, `2^64`), spliced in
//! at serialisation.

use serde_json::{json, Map, Value};

use super::rng::Rng;

/// Marks a string that [`to_bytes`] replaces by a raw, unquoted token.
const RAW_MARK: &str = "\u{0}RAW:";
/// Number-like tokens serde_json cannot represent as values.
const RAW_TOKENS: &[&str] = &[
    "NaN",
    "Infinity",
    "-Infinity",
    "1e999",
    "-1e999",
    "18446744073709551616",
    "-9223372036854775809",
    "1e-400",
    "-0",
    "123456789012345678901234567890",
];

/// A value chosen to break size arithmetic and type expectations.
pub fn hostile_value(rng: &mut Rng) -> Value {
    match rng.below(24) {
        0 => json!(0),
        1 => json!(1),
        2 => json!(-1),
        3 => json!(u64::MAX),
        4 => json!(i64::MIN),
        5 => json!(1u64 << 31),
        6 => json!(u32::MAX),
        7 => json!(1u64 << 40),
        8 => json!((1u64 << 53) + 1),
        9 => json!(0.5),
        10 => json!(1e300),
        11 => json!(-2.5),
        12 => json!(""),
        13 => json!("64"),
        14 => Value::String(long_string(rng)),
        15 => Value::Null,
        16 => json!(true),
        17 => json!([]),
        18 => json!({}),
        19 => json!([1, 2, 3]),
        20 | 21 => raw(rng.pick::<&str>(RAW_TOKENS)),
        22 => {
            // Nesting past serde_json's recursion limit.
            let mut v = json!(0);
            for _ in 0..rng.range(20, 200) {
                v = json!([v]);
            }
            v
        }
        _ => json!(rng.next_u64() >> rng.below(64)),
    }
}

fn long_string(rng: &mut Rng) -> String {
    let unit = *rng.pick(&["x", "\u{0}", "é", "\u{FFFD}", "<|eot_id|>", " ", "../"]);
    unit.repeat(rng.range(1000, 70_000) / unit.len())
}

fn raw(token: &str) -> Value {
    Value::String(format!("{RAW_MARK}{token}"))
}

/// Serialises `v` (compact or pretty), splicing raw tokens in place of their markers.
pub fn to_bytes(v: &Value, rng: &mut Rng) -> Vec<u8> {
    let text = if rng.chance(1, 4) { serde_json::to_string_pretty(v) } else { serde_json::to_string(v) };
    let mut text = text.unwrap_or_default();
    if text.contains("RAW:") {
        for t in RAW_TOKENS {
            text = text.replace(&format!("\"\\u0000RAW:{t}\""), t);
        }
    }
    text.into_bytes()
}

/// Applies 1–3 mutations at random nodes; `key_hints` are names worth inserting.
pub fn mutate(v: &mut Value, rng: &mut Rng, key_hints: &[&str]) {
    for _ in 0..rng.range(1, 3) {
        let ptr = random_pointer(v, "", rng);
        if let Some(node) = v.pointer_mut(&ptr) {
            mutate_node(node, rng, key_hints);
        }
    }
}

/// Mutates a random node inside the subtree at JSON pointer `under` (no-op if absent).
pub fn mutate_under(v: &mut Value, under: &str, rng: &mut Rng, key_hints: &[&str]) {
    let ptr = match v.pointer(under) {
        Some(sub) => random_pointer(sub, under, rng),
        None => return,
    };
    if let Some(node) = v.pointer_mut(&ptr) {
        mutate_node(node, rng, key_hints);
    }
}

/// Sets (or, sometimes, removes) `key` of the object at pointer `at` to a hostile value.
pub fn set_key(v: &mut Value, at: &str, key: &str, rng: &mut Rng) {
    if let Some(Value::Object(m)) = v.pointer_mut(at) {
        if rng.chance(1, 8) {
            m.remove(key);
        } else {
            m.insert(key.to_owned(), hostile_value(rng));
        }
    }
}

/// A JSON pointer to a random node of `v` (descending with probability 2/3 per level).
fn random_pointer(v: &Value, prefix: &str, rng: &mut Rng) -> String {
    let mut ptr = prefix.to_owned();
    let mut cur = v;
    loop {
        let next = match cur {
            Value::Object(m) if !m.is_empty() && !rng.chance(1, 3) => {
                m.iter().nth(rng.below(m.len())).map(|(k, c)| (escape(k), c))
            }
            Value::Array(a) if !a.is_empty() && !rng.chance(1, 3) => {
                let i = rng.below(a.len());
                a.get(i).map(|c| (i.to_string(), c))
            }
            _ => None,
        };
        match next {
            Some((seg, child)) => {
                ptr.push('/');
                ptr.push_str(&seg);
                cur = child;
            }
            None => return ptr,
        }
    }
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn mutate_node(node: &mut Value, rng: &mut Rng, key_hints: &[&str]) {
    match rng.below(8) {
        0 => *node = hostile_value(rng),
        1 => match node {
            Value::Object(m) if !m.is_empty() => {
                if let Some(k) = m.keys().nth(rng.below(m.len())).cloned() {
                    m.remove(&k);
                }
            }
            Value::Array(a) if !a.is_empty() => {
                a.remove(rng.below(a.len()));
            }
            _ => *node = hostile_value(rng),
        },
        2 => match node {
            Value::Object(m) => {
                let key = if key_hints.is_empty() || rng.chance(1, 4) {
                    format!("k{}", rng.below(100))
                } else {
                    (*rng.pick(key_hints)).to_owned()
                };
                m.insert(key, hostile_value(rng));
            }
            Value::Array(a) => {
                let item =
                    if !a.is_empty() && rng.chance(1, 2) { a[rng.below(a.len())].clone() } else { hostile_value(rng) };
                let at = rng.below(a.len() + 1);
                a.insert(at, item);
            }
            _ => *node = hostile_value(rng),
        },
        3 => {
            if let Some(n) = node.as_f64() {
                *node = match rng.below(7) {
                    0 => json!(n + 1.0),
                    1 => json!(n - 1.0),
                    2 => json!(-n),
                    3 => json!(n * 1024.0 * 1024.0),
                    4 => json!(n + 0.5),
                    5 => json!(node.as_u64().map_or(0, |u| u.saturating_mul(1 << 20))),
                    _ => json!(n.to_string()),
                };
            } else {
                *node = hostile_value(rng);
            }
        }
        4 => {
            if let Value::String(s) = node {
                match rng.below(6) {
                    0 => s.clear(),
                    1 => s.push_str(rng.pick::<&str>(&["\u{0}", "../", "/", " ", "\u{FFFD}", "<|mdm_mask|>", "%s%n"])),
                    2 => {
                        let keep = s.char_indices().nth(rng.below(s.chars().count() + 1)).map_or(s.len(), |(i, _)| i);
                        s.truncate(keep);
                    }
                    3 if !key_hints.is_empty() => *s = (*rng.pick(key_hints)).to_owned(),
                    4 => *s = s.to_uppercase(),
                    _ => *s = s.repeat(rng.range(2, 50)),
                }
            } else {
                *node = hostile_value(rng);
            }
        }
        5 => {
            *node = match node.take() {
                Value::Number(n) => Value::String(n.to_string()),
                Value::String(s) => s.parse::<f64>().map_or(json!(0), |f| json!(f)),
                Value::Bool(b) => json!(b as u8),
                Value::Null => json!(false),
                other => json!([other]),
            }
        }
        6 => {
            let inner = node.take();
            *node = if rng.chance(1, 2) {
                json!([inner])
            } else {
                Value::Object(Map::from_iter([("v".to_owned(), inner)]))
            };
        }
        _ => match node {
            Value::Object(m) => m.clear(),
            Value::Array(a) => a.clear(),
            _ => *node = hostile_value(rng),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_tokens_are_spliced() {
        let v = json!({"a": raw("NaN"), "b": 1});
        let s = String::from_utf8(to_bytes(&v, &mut Rng::new(1))).unwrap();
        assert!(s.contains("NaN") && !s.contains("RAW"), "{s}");
    }

    #[test]
    fn mutations_keep_producing_bytes() {
        let mut rng = Rng::new(9);
        for _ in 0..500 {
            let mut v = json!({"a": [1, {"b/c": "x"}], "d": {"e": null}});
            mutate(&mut v, &mut rng, &["hidden_size"]);
            set_key(&mut v, "", "n_heads", &mut rng);
            mutate_under(&mut v, "/a", &mut rng, &[]);
            let _ = to_bytes(&v, &mut rng);
        }
    }
}
