//! Typed access to an HF `config.json`: every read names its key when the value is missing or
//! of the wrong kind.

use std::path::Path;

use serde_json::Value;

use crate::error::{EngineError, Result};
use crate::model::config::describe;

/// Typed access to an HF `config.json` with errors that name the key.
pub struct HfConfig<'a> {
    pub(crate) json: &'a Value,
    pub(crate) path: &'a Path,
}

impl HfConfig<'_> {
    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        self.json.get(key).filter(|v| !v.is_null())
    }
    pub(crate) fn wrong(&self, key: &str, v: &Value, expected: &str) -> EngineError {
        EngineError::config(self.path, format!("`{key}` is {}, expected {expected}", describe(v)))
    }
    pub(crate) fn usize(&self, key: &str) -> Result<usize> {
        self.opt_usize(key)?.ok_or_else(|| EngineError::config(self.path, format!("missing integer `{key}`")))
    }
    /// A size that later values are derived from: present and at least 1.
    pub(crate) fn positive(&self, key: &str) -> Result<usize> {
        match self.usize(key)? {
            0 => Err(EngineError::config(self.path, format!("`{key}` is 0; it must be at least 1"))),
            v => Ok(v),
        }
    }
    pub(crate) fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|x| usize::try_from(x).ok())
                .map(Some)
                .ok_or_else(|| self.wrong(key, v, "a non-negative integer")),
        }
    }
    pub(crate) fn opt_u32(&self, key: &str) -> Result<Option<u32>> {
        // Some configs carry a list of EOS ids; take the first.
        let v = match self.get(key) {
            None => return Ok(None),
            Some(Value::Array(a)) => match a.first() {
                None => return Ok(None),
                Some(first) => first,
            },
            Some(v) => v,
        };
        v.as_u64().and_then(|x| u32::try_from(x).ok()).map(Some).ok_or_else(|| self.wrong(key, v, "a token id"))
    }
    pub(crate) fn opt_f32(&self, key: &str) -> Result<Option<f32>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_f64().map(|x| Some(x as f32)).ok_or_else(|| self.wrong(key, v, "a number")),
        }
    }
    pub(crate) fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_bool().map(Some).ok_or_else(|| self.wrong(key, v, "true or false")),
        }
    }
}
