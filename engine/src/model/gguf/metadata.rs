//! GGUF metadata values and typed look-ups.

use std::collections::HashMap;

/// GGUF metadata value type ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    String,
    Array,
    U64,
    I64,
    F64,
}

impl ValueType {
    /// Parses a type id as stored in the file.
    pub fn from_id(id: u32) -> Option<Self> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }
    /// The id written to files.
    pub fn id(self) -> u32 {
        use ValueType::*;
        match self {
            U8 => 0,
            I8 => 1,
            U16 => 2,
            I16 => 3,
            U32 => 4,
            I32 => 5,
            F32 => 6,
            Bool => 7,
            String => 8,
            Array => 9,
            U64 => 10,
            I64 => 11,
            F64 => 12,
        }
    }
    /// Fewest bytes one value of this type occupies (bounds array lengths by the file size).
    pub fn min_encoded_size(self) -> usize {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    /// Element type and items (items may themselves be arrays).
    Array(ValueType, Vec<GgufValue>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl GgufValue {
    /// The value's type id.
    pub fn value_type(&self) -> ValueType {
        match self {
            GgufValue::U8(_) => ValueType::U8,
            GgufValue::I8(_) => ValueType::I8,
            GgufValue::U16(_) => ValueType::U16,
            GgufValue::I16(_) => ValueType::I16,
            GgufValue::U32(_) => ValueType::U32,
            GgufValue::I32(_) => ValueType::I32,
            GgufValue::F32(_) => ValueType::F32,
            GgufValue::Bool(_) => ValueType::Bool,
            GgufValue::String(_) => ValueType::String,
            GgufValue::Array(..) => ValueType::Array,
            GgufValue::U64(_) => ValueType::U64,
            GgufValue::I64(_) => ValueType::I64,
            GgufValue::F64(_) => ValueType::F64,
        }
    }
    /// Any non-negative integer value (writers differ in which integer width they use).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U8(v) => Some(v as u64),
            GgufValue::U16(v) => Some(v as u64),
            GgufValue::U32(v) => Some(v as u64),
            GgufValue::U64(v) => Some(v),
            GgufValue::I8(v) => u64::try_from(v).ok(),
            GgufValue::I16(v) => u64::try_from(v).ok(),
            GgufValue::I32(v) => u64::try_from(v).ok(),
            GgufValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }
    /// Any integer value as i64.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            GgufValue::U64(v) => i64::try_from(v).ok(),
            GgufValue::I8(v) => Some(v as i64),
            GgufValue::I16(v) => Some(v as i64),
            GgufValue::I32(v) => Some(v as i64),
            GgufValue::I64(v) => Some(v),
            _ => self.as_u64().map(|v| v as i64),
        }
    }
    /// A float or integer value as f64.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v as f64),
            GgufValue::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }
    /// A boolean value.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            GgufValue::Bool(b) => Some(b),
            _ => None,
        }
    }
    /// A string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }
    /// The value in words, for error messages ("the negative integer -3", "a string").
    pub fn describe(&self) -> String {
        match self {
            GgufValue::Bool(b) => format!("the boolean {b}"),
            GgufValue::F32(v) => format!("the float {v}"),
            GgufValue::F64(v) => format!("the float {v}"),
            GgufValue::String(t) => {
                let short: String = t.chars().take(40).collect();
                format!("the string \"{}\"", short.escape_default())
            }
            GgufValue::Array(et, items) => {
                let kind = match et {
                    ValueType::F32 | ValueType::F64 => "numbers",
                    ValueType::Bool => "booleans",
                    ValueType::String => "strings",
                    ValueType::Array => "lists",
                    _ => "integers",
                };
                format!("a list of {} {kind}", items.len())
            }
            v => match (v.as_u64(), v.as_i64()) {
                (Some(u), _) => format!("the integer {u}"),
                (None, Some(i)) => format!("the negative integer {i}"),
                (None, None) => "an integer".into(),
            },
        }
    }
    /// The items of an array value.
    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array(_, v) => Some(v),
            _ => None,
        }
    }
}

/// The metadata key/value table, in file order.
#[derive(Debug, Clone, Default)]
pub struct Metadata {
    entries: Vec<(String, GgufValue)>,
    index: HashMap<String, usize>,
}

impl Metadata {
    /// Adds a key; false if it already exists (the table is left unchanged).
    pub fn insert(&mut self, key: String, value: GgufValue) -> bool {
        if self.index.contains_key(&key) {
            return false;
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value));
        true
    }
    /// Looks up a key.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }
    /// All entries in file order.
    pub fn entries(&self) -> &[(String, GgufValue)] {
        &self.entries
    }
    /// Number of keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// True when there are no keys.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// A string value, if present and a string.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(|v| v.as_str())
    }
    /// An array of strings (None if absent or not all strings).
    pub fn str_array(&self, key: &str) -> Option<Vec<&str>> {
        self.get(key)?.as_array()?.iter().map(|v| v.as_str()).collect()
    }
}
