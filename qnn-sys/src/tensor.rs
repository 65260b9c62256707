//! Engine-facing tensor descriptions (dtype, shape, quantization) and the owned
//! storage that backs a raw `Qnn_Tensor_t` while QNN may read it.

use crate::error::{QnnError, Result};
use crate::ffi::*;
use serde::{Deserialize, Serialize};
use std::ffi::{c_void, CString};

/// Element type of a tensor, mapped to `Qnn_DataType_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DType {
    /// FLOAT_32.
    F32,
    /// FLOAT_16.
    F16,
    /// INT_8.
    I8,
    /// UINT_8.
    U8,
    /// INT_16.
    I16,
    /// UINT_16.
    U16,
    /// INT_32.
    I32,
    /// UINT_32.
    U32,
    /// INT_64.
    I64,
    /// BOOL_8.
    Bool,
    /// SFIXED_POINT_8: int8 with scale/offset.
    QI8,
    /// UFIXED_POINT_8: uint8 with scale/offset.
    QU8,
    /// SFIXED_POINT_16.
    QI16,
    /// UFIXED_POINT_16.
    QU16,
}

impl DType {
    /// The QNN data type code.
    pub fn raw(self) -> u32 {
        match self {
            DType::F32 => QNN_DATATYPE_FLOAT_32,
            DType::F16 => QNN_DATATYPE_FLOAT_16,
            DType::I8 => QNN_DATATYPE_INT_8,
            DType::U8 => QNN_DATATYPE_UINT_8,
            DType::I16 => QNN_DATATYPE_INT_16,
            DType::U16 => QNN_DATATYPE_UINT_16,
            DType::I32 => QNN_DATATYPE_INT_32,
            DType::U32 => QNN_DATATYPE_UINT_32,
            DType::I64 => QNN_DATATYPE_INT_64,
            DType::Bool => QNN_DATATYPE_BOOL_8,
            DType::QI8 => QNN_DATATYPE_SFIXED_POINT_8,
            DType::QU8 => QNN_DATATYPE_UFIXED_POINT_8,
            DType::QI16 => QNN_DATATYPE_SFIXED_POINT_16,
            DType::QU16 => QNN_DATATYPE_UFIXED_POINT_16,
        }
    }

    /// Maps a QNN data type code back, if it is one we model.
    pub fn from_raw(raw: u32) -> Option<Self> {
        const ALL: [DType; 14] = [
            DType::F32,
            DType::F16,
            DType::I8,
            DType::U8,
            DType::I16,
            DType::U16,
            DType::I32,
            DType::U32,
            DType::I64,
            DType::Bool,
            DType::QI8,
            DType::QU8,
            DType::QI16,
            DType::QU16,
        ];
        ALL.into_iter().find(|d| d.raw() == raw)
    }

    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::I8 | DType::U8 | DType::Bool | DType::QI8 | DType::QU8 => 1,
            DType::F16 | DType::I16 | DType::U16 | DType::QI16 | DType::QU16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::I64 => 8,
        }
    }

    /// True for fixed-point types that need scale/offset.
    pub fn is_quantized(self) -> bool {
        matches!(self, DType::QI8 | DType::QU8 | DType::QI16 | DType::QU16)
    }
}

/// Quantization of a tensor. Dequant: `float = (q + offset) * scale`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub enum Quant {
    /// Float or plain integer tensor.
    #[default]
    None,
    /// SCALE_OFFSET.
    PerTensor {
        /// Scale.
        scale: f32,
        /// Offset (= -zero point).
        offset: i32,
    },
    /// AXIS_SCALE_OFFSET (per channel).
    PerAxis {
        /// Channel axis.
        axis: i32,
        /// One (scale, offset) per channel.
        scale_offsets: Vec<(f32, i32)>,
    },
    /// BW_AXIS_SCALE_OFFSET: per channel, values confined to `bitwidth` bits inside the
    /// container dtype (e.g. 4-bit weights in an SFIXED_POINT_8 container, as W4A16 uses).
    PerAxisBitwidth {
        /// Significant bits per value (≤ the container's bits).
        bitwidth: u32,
        /// Channel axis.
        axis: i32,
        /// One scale per channel.
        scales: Vec<f32>,
        /// One offset per channel.
        offsets: Vec<i32>,
    },
}

/// Dtype + shape + quantization + name: what the engine says about a tensor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorSpec {
    /// Unique name within the graph.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Static dims.
    pub dims: Vec<u32>,
    /// Quantization.
    pub quant: Quant,
}

impl TensorSpec {
    /// A float/integer tensor without quantization.
    pub fn new(name: impl Into<String>, dtype: DType, dims: &[u32]) -> Self {
        Self { name: name.into(), dtype, dims: dims.to_vec(), quant: Quant::None }
    }

    /// From engine-style `usize` dims; fails if a dim does not fit QNN's `u32`.
    pub fn from_usize_dims(name: impl Into<String>, dtype: DType, dims: &[usize]) -> Result<Self> {
        let name = name.into();
        let dims = dims
            .iter()
            .map(|&d| {
                u32::try_from(d).map_err(|_| QnnError::InvalidArgument(format!("tensor {name:?}: dim {d} exceeds u32")))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { name, dtype, dims, quant: Quant::None })
    }

    /// Adds per-tensor quantization.
    pub fn quantized(mut self, scale: f32, offset: i32) -> Self {
        self.quant = Quant::PerTensor { scale, offset };
        self
    }

    /// Replaces the quantization.
    pub fn with_quant(mut self, quant: Quant) -> Self {
        self.quant = quant;
        self
    }

    /// Element count.
    pub fn num_elements(&self) -> usize {
        self.dims.iter().map(|&d| d as usize).product()
    }

    /// Byte size of a dense buffer.
    pub fn num_bytes(&self) -> usize {
        self.num_elements() * self.dtype.size_bytes()
    }
}

/// Role of a tensor in a graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TensorKind {
    /// Graph input (APP_WRITE).
    Input,
    /// Graph output (APP_READ).
    Output,
    /// Intermediate (NATIVE).
    Native,
    /// Weights (STATIC).
    Static,
}

impl TensorKind {
    /// The QNN tensor type code.
    pub fn raw(self) -> u32 {
        match self {
            TensorKind::Input => QNN_TENSOR_TYPE_APP_WRITE,
            TensorKind::Output => QNN_TENSOR_TYPE_APP_READ,
            TensorKind::Native => QNN_TENSOR_TYPE_NATIVE,
            TensorKind::Static => QNN_TENSOR_TYPE_STATIC,
        }
    }
}

/// Owns every buffer a raw tensor points at (name, dims, scales), so the raw
/// struct stays valid for as long as this value lives. Heap buffers do not move
/// when the owner moves, so storing it in a `Vec` is fine.
#[derive(Debug)]
pub(crate) struct OwnedTensor {
    pub(crate) spec: TensorSpec,
    pub(crate) kind: TensorKind,
    /// Backend-assigned id (0 until created).
    pub(crate) id: u32,
    name: CString,
    dims: Vec<u32>,
    scale_offsets: Vec<Qnn_ScaleOffset_t>,
    bw_scales: Vec<f32>,
    bw_offsets: Vec<i32>,
}

impl OwnedTensor {
    /// Validates the spec and builds owned storage.
    pub(crate) fn new(spec: TensorSpec, kind: TensorKind) -> Result<Self> {
        let name = CString::new(spec.name.clone())
            .map_err(|_| QnnError::InvalidArgument(format!("tensor name {:?} contains NUL", spec.name)))?;
        if spec.dims.is_empty() || spec.dims.contains(&0) {
            return Err(QnnError::InvalidArgument(format!(
                "tensor {:?} has empty or zero dims {:?}",
                spec.name, spec.dims
            )));
        }
        if spec.dtype.is_quantized() && spec.quant == Quant::None {
            return Err(QnnError::InvalidArgument(format!("quantized tensor {:?} needs scale/offset", spec.name)));
        }
        check_quant(&spec)?;
        let scale_offsets = match &spec.quant {
            Quant::PerAxis { scale_offsets, .. } => {
                scale_offsets.iter().map(|&(scale, offset)| Qnn_ScaleOffset_t { scale, offset }).collect()
            }
            _ => Vec::new(),
        };
        let (bw_scales, bw_offsets) = match &spec.quant {
            Quant::PerAxisBitwidth { scales, offsets, .. } => (scales.clone(), offsets.clone()),
            _ => (Vec::new(), Vec::new()),
        };
        let dims = spec.dims.clone();
        Ok(Self { spec, kind, id: 0, name, dims, scale_offsets, bw_scales, bw_offsets })
    }

    /// Rebuilds storage for a tensor whose id is already known (retrieved graphs).
    pub(crate) fn with_id(spec: TensorSpec, kind: TensorKind, id: u32) -> Result<Self> {
        let mut t = Self::new(spec, kind)?;
        t.id = id;
        Ok(t)
    }

    fn quant_params(&self) -> Qnn_QuantizeParams_t {
        match &self.spec.quant {
            Quant::None => Qnn_QuantizeParams_t::UNDEFINED,
            Quant::PerTensor { scale, offset } => Qnn_QuantizeParams_t {
                encodingDefinition: QNN_DEFINITION_DEFINED,
                quantizationEncoding: QNN_QUANTIZATION_ENCODING_SCALE_OFFSET,
                u: Qnn_QuantizeParamsUnion_t {
                    scaleOffsetEncoding: Qnn_ScaleOffset_t { scale: *scale, offset: *offset },
                },
            },
            Quant::PerAxis { axis, .. } => Qnn_QuantizeParams_t {
                encodingDefinition: QNN_DEFINITION_DEFINED,
                quantizationEncoding: QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET,
                u: Qnn_QuantizeParamsUnion_t {
                    axisScaleOffsetEncoding: Qnn_AxisScaleOffset_t {
                        axis: *axis,
                        numScaleOffsets: self.scale_offsets.len() as u32,
                        // QNN takes a mutable pointer but only reads it.
                        scaleOffset: self.scale_offsets.as_ptr().cast_mut(),
                    },
                },
            },
            Quant::PerAxisBitwidth { bitwidth, axis, .. } => Qnn_QuantizeParams_t {
                encodingDefinition: QNN_DEFINITION_DEFINED,
                quantizationEncoding: QNN_QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET,
                u: Qnn_QuantizeParamsUnion_t {
                    bwAxisScaleOffsetEncoding: Qnn_BwAxisScaleOffset_t {
                        bitwidth: *bitwidth,
                        axis: *axis,
                        numElements: self.bw_scales.len() as u32,
                        // QNN takes mutable pointers but only reads them.
                        scales: self.bw_scales.as_ptr().cast_mut(),
                        offsets: self.bw_offsets.as_ptr().cast_mut(),
                    },
                },
            },
        }
    }

    /// A v1 raw tensor pointing into `self`, with a RAW client buffer.
    pub(crate) fn raw(&self, data: *const u8, len: usize) -> Qnn_Tensor_t {
        let v1 = Qnn_TensorV1_t {
            id: self.id,
            name: self.name.as_ptr(),
            type_: self.kind.raw(),
            dataFormat: QNN_TENSOR_DATA_FORMAT_DENSE,
            dataType: self.spec.dtype.raw(),
            quantizeParams: self.quant_params(),
            rank: self.dims.len() as u32,
            dimensions: self.dims.as_ptr().cast_mut(),
            memType: QNN_TENSORMEMTYPE_RAW,
            mem: Qnn_TensorMemUnion_t {
                clientBuf: Qnn_ClientBuffer_t { data: data.cast_mut().cast::<c_void>(), dataSize: len as u32 },
            },
        };
        Qnn_Tensor_t { version: QNN_TENSOR_VERSION_1, u: Qnn_TensorUnion_t { v1 } }
    }

    /// A v1 raw tensor bound to a registered memory handle.
    pub(crate) fn raw_memhandle(&self, handle: Qnn_MemHandle_t) -> Qnn_Tensor_t {
        let mut t = self.raw(std::ptr::null(), 0);
        // Writing union fields is safe; `raw` always builds the v1 variant.
        t.u.v1.memType = QNN_TENSORMEMTYPE_MEMHANDLE;
        t.u.v1.mem = Qnn_TensorMemUnion_t { memHandle: handle };
        t
    }

    /// The dims array pointer (for memory descriptors).
    pub(crate) fn dims_ptr(&self) -> *mut u32 {
        self.dims.as_ptr().cast_mut()
    }
}

/// Rejects per-axis encodings whose axis or entry count does not fit the dims, and bit widths
/// wider than the container, before QNN sees them.
fn check_quant(spec: &TensorSpec) -> Result<()> {
    let bad = |why: String| Err(QnnError::InvalidArgument(format!("tensor {:?}: {why}", spec.name)));
    let (axis, n) = match &spec.quant {
        Quant::None | Quant::PerTensor { .. } => return Ok(()),
        Quant::PerAxis { axis, scale_offsets } => (*axis, scale_offsets.len()),
        Quant::PerAxisBitwidth { bitwidth, axis, scales, offsets } => {
            let container = spec.dtype.size_bytes() as u32 * 8;
            if *bitwidth == 0 || *bitwidth > container {
                return bad(format!("bit width {bitwidth} does not fit a {container}-bit container"));
            }
            if offsets.len() != scales.len() {
                return bad(format!("{} scales but {} offsets", scales.len(), offsets.len()));
            }
            (*axis, scales.len())
        }
    };
    match usize::try_from(axis).ok().and_then(|a| spec.dims.get(a)) {
        Some(&d) if d as usize == n => Ok(()),
        _ => bad(format!("per-axis quantization (axis {axis}, {n} entries) does not fit dims {:?}", spec.dims)),
    }
}

/// A tensor's spec together with the id the backend assigned, as stored in cache sidecars.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorMeta {
    /// Backend-assigned id.
    pub id: u32,
    /// Spec.
    pub spec: TensorSpec,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_codes_roundtrip_and_match_reference() {
        for d in [
            DType::F32,
            DType::F16,
            DType::I8,
            DType::U8,
            DType::I16,
            DType::U16,
            DType::I32,
            DType::U32,
            DType::I64,
            DType::Bool,
            DType::QI8,
            DType::QU8,
            DType::QI16,
            DType::QU16,
        ] {
            assert_eq!(DType::from_raw(d.raw()), Some(d));
        }
        assert_eq!(DType::F16.raw(), 0x0216);
        assert_eq!(DType::QU8.raw(), 0x0408);
        assert_eq!(DType::QU16.raw(), 0x0416);
        assert_eq!(DType::from_raw(QNN_DATATYPE_STRING), None);
    }

    #[test]
    fn owned_tensor_raw_points_into_itself() {
        let spec = TensorSpec::new("t", DType::QU8, &[2, 3]).quantized(0.5, -128);
        let t = OwnedTensor::new(spec, TensorKind::Input).expect("valid");
        let raw = t.raw(std::ptr::null(), 0);
        assert_eq!(raw.version, QNN_TENSOR_VERSION_1);
        // SAFETY: `raw` builds the v1 variant; pointers refer into `t`, alive here.
        unsafe {
            let v = raw.u.v1;
            assert_eq!(std::slice::from_raw_parts(v.dimensions, v.rank as usize), &[2, 3]);
            assert_eq!(std::ffi::CStr::from_ptr(v.name).to_str(), Ok("t"));
            assert_eq!(v.quantizeParams.encodingDefinition, QNN_DEFINITION_DEFINED);
            assert_eq!(v.quantizeParams.u.scaleOffsetEncoding.offset, -128);
            assert_eq!(v.type_, QNN_TENSOR_TYPE_APP_WRITE);
        }
        assert!(TensorSpec::from_usize_dims("big", DType::F32, &[1 << 40]).is_err());
    }
}
