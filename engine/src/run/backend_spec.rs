//! Which backend a run executes on, as one typed value with one spelling (`cpu`, `vnpu:sm8750`,
//! `qnn`, `qnn:/path/libQnnHtp.so`) shared by flags, the app, recorded runs and the database.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::error::EngineError;

/// Device profile of the virtual NPU when none is named.
pub const DEFAULT_DEVICE: &str = "sm8750";
/// QNN backend library when none is named (the HTP library of the QAIRT SDK on a phone).
pub const DEFAULT_QNN_LIBRARY: &str = "libQnnHtp.so";

/// Where a run's forward passes execute.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum BackendSpec {
    /// This machine's CPU cores.
    #[default]
    Cpu,
    /// The virtual NPU: real math on the CPU, time, memory and energy charged from `device`'s profile.
    Vnpu { device: String },
    /// Qualcomm's NPU through the QNN library `library`; `cache_dir` keeps built graphs across
    /// processes. The cache folder is a local setting, not part of the backend's identity, so it
    /// is not part of the spelling.
    Qnn { library: PathBuf, cache_dir: Option<PathBuf> },
}

impl BackendSpec {
    /// The virtual NPU with a device profile.
    pub fn vnpu(device: &str) -> Self {
        BackendSpec::Vnpu { device: device.to_lowercase() }
    }
    /// The backend's family: `cpu`, `vnpu` or `qnn`.
    pub fn kind(&self) -> &'static str {
        match self {
            BackendSpec::Cpu => "cpu",
            BackendSpec::Vnpu { .. } => "vnpu",
            BackendSpec::Qnn { .. } => "qnn",
        }
    }
    /// Reads a recorded spelling, also the backend display names older recordings wrote
    /// (`cpu:2t`, `qnn:mock:w8a16`): the family decides; an unknown family reads as the CPU.
    pub fn from_recorded(s: &str) -> Self {
        if let Ok(b) = s.parse() {
            return b;
        }
        match s.split(':').next().unwrap_or("") {
            "vnpu" => BackendSpec::vnpu(s.split(':').nth(1).unwrap_or(DEFAULT_DEVICE)),
            "qnn" => BackendSpec::Qnn { library: PathBuf::from(DEFAULT_QNN_LIBRARY), cache_dir: None },
            _ => BackendSpec::Cpu,
        }
    }
    /// Whether its times are simulated (device profile) rather than measured here.
    pub fn is_simulated(&self) -> bool {
        matches!(self, BackendSpec::Vnpu { .. })
    }
}

impl fmt::Display for BackendSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendSpec::Cpu => f.write_str("cpu"),
            BackendSpec::Vnpu { device } => write!(f, "vnpu:{device}"),
            BackendSpec::Qnn { library, .. } if library.as_os_str() == DEFAULT_QNN_LIBRARY => f.write_str("qnn"),
            BackendSpec::Qnn { library, .. } => write!(f, "qnn:{}", library.display()),
        }
    }
}

impl FromStr for BackendSpec {
    type Err = EngineError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (kind, arg) = match s.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (s, None),
        };
        let arg = arg.map(str::trim).filter(|a| !a.is_empty());
        match (kind.trim().to_lowercase().as_str(), arg) {
            ("cpu", None) => Ok(BackendSpec::Cpu),
            ("vnpu", d) => Ok(BackendSpec::vnpu(d.unwrap_or(DEFAULT_DEVICE))),
            ("qnn", l) => {
                Ok(BackendSpec::Qnn { library: PathBuf::from(l.unwrap_or(DEFAULT_QNN_LIBRARY)), cache_dir: None })
            }
            _ => Err(EngineError::InvalidRequest(format!(
                "unknown backend `{s}` (one of: cpu, vnpu[:DEVICE], qnn[:LIBRARY])"
            ))),
        }
    }
}

impl serde::Serialize for BackendSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for BackendSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_round_trip() {
        for s in ["cpu", "vnpu:sm8750", "vnpu:sm8650", "qnn", "qnn:/opt/qnn/libQnnHtp.so"] {
            let b: BackendSpec = s.parse().unwrap();
            assert_eq!(b.to_string(), s);
        }
        assert_eq!("vnpu".parse::<BackendSpec>().unwrap(), BackendSpec::vnpu(DEFAULT_DEVICE));
        assert_eq!("VNPU:SM8650".parse::<BackendSpec>().unwrap().to_string(), "vnpu:sm8650");
        assert!("gpu".parse::<BackendSpec>().is_err());
        assert!("cpu:x".parse::<BackendSpec>().is_err());
        assert_eq!(BackendSpec::from_recorded("cpu:2t"), BackendSpec::Cpu);
        assert_eq!(BackendSpec::from_recorded("qnn:mock:w8a16").kind(), "qnn");
        let json = serde_json::to_string(&BackendSpec::vnpu("sm8850")).unwrap();
        assert_eq!(json, "\"vnpu:sm8850\"");
        assert_eq!(serde_json::from_str::<BackendSpec>(&json).unwrap(), BackendSpec::vnpu("sm8850"));
    }
}
