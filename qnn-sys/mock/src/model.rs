//! The mock's own graph model: tensors, nodes and params copied out of the
//! caller's raw structs, plus the serialised context-binary format.

use crate::ffi::*;
use std::ffi::CStr;

/// A graph tensor as the mock stores it.
#[derive(Debug, Clone, PartialEq)]
pub struct MTensor {
    pub id: u32,
    pub name: String,
    pub ttype: u32,
    pub dtype: u32,
    /// Per-tensor scale/offset (1.0/0 when not quantized).
    pub scale: f32,
    pub offset: i32,
    pub dims: Vec<u32>,
    /// Per-channel (AXIS_SCALE_OFFSET) quantization: axis and one (scale, offset) per channel;
    /// empty for per-tensor.
    pub axis: i32,
    pub channels: Vec<(f32, i32)>,
    /// Significant bits (BW_AXIS_SCALE_OFFSET, e.g. 4 in an 8-bit container); 0 = the container's.
    pub bitwidth: u32,
    /// STATIC data (little-endian, dense).
    pub data: Option<Vec<u8>>,
}

impl MTensor {
    pub fn numel(&self) -> usize {
        self.dims.iter().map(|&d| d as usize).product()
    }

    pub fn nbytes(&self) -> usize {
        self.numel() * dtype_size(self.dtype).unwrap_or(0)
    }

    /// (scale, offset) for flat element `i`.
    pub fn quant_for(&self, i: usize) -> (f32, i32) {
        if self.channels.is_empty() {
            return (self.scale, self.offset);
        }
        let axis = self.axis as usize;
        let inner: usize = self.dims[axis + 1..].iter().map(|&d| d as usize).product();
        self.channels[(i / inner) % self.dims[axis] as usize]
    }
}

/// A node parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum MParam {
    Scalar { dtype: u32, bits: u64 },
    Tensor { dtype: u32, dims: Vec<u32>, data: Vec<u8> },
}

impl MParam {
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            MParam::Scalar { dtype: QNN_DATATYPE_FLOAT_32, bits } => Some(f32::from_bits(bits as u32)),
            MParam::Scalar { dtype: QNN_DATATYPE_FLOAT_64, bits } => Some(f64::from_bits(bits) as f32),
            _ => None,
        }
    }

    pub fn as_u32(&self) -> Option<u32> {
        match *self {
            MParam::Scalar { dtype: QNN_DATATYPE_UINT_32 | QNN_DATATYPE_INT_32, bits } => Some(bits as u32),
            MParam::Scalar { dtype: QNN_DATATYPE_UINT_8 | QNN_DATATYPE_BOOL_8 | QNN_DATATYPE_INT_8, bits } => {
                Some(bits as u8 as u32)
            }
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        self.as_u32().map(|v| v != 0)
    }

    pub fn as_u32_vec(&self) -> Option<Vec<u32>> {
        match self {
            MParam::Tensor { dtype: QNN_DATATYPE_UINT_32 | QNN_DATATYPE_INT_32, data, .. } => {
                Some(data.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
            }
            _ => None,
        }
    }
}

/// A graph node.
#[derive(Debug, Clone, PartialEq)]
pub struct MNode {
    pub name: String,
    pub op: String,
    pub inputs: Vec<u32>,
    pub outputs: Vec<u32>,
    pub params: Vec<(String, MParam)>,
}

impl MNode {
    pub fn param(&self, name: &str) -> Option<&MParam> {
        self.params.iter().find(|(n, _)| n == name).map(|(_, p)| p)
    }
}

/// Bytes per element for the dtypes the mock supports; `None` = unsupported.
pub fn dtype_size(dtype: u32) -> Option<usize> {
    Some(match dtype {
        QNN_DATATYPE_INT_8
        | QNN_DATATYPE_UINT_8
        | QNN_DATATYPE_SFIXED_POINT_8
        | QNN_DATATYPE_UFIXED_POINT_8
        | QNN_DATATYPE_BOOL_8 => 1,
        QNN_DATATYPE_INT_16
        | QNN_DATATYPE_UINT_16
        | QNN_DATATYPE_FLOAT_16
        | QNN_DATATYPE_SFIXED_POINT_16
        | QNN_DATATYPE_UFIXED_POINT_16 => 2,
        QNN_DATATYPE_INT_32
        | QNN_DATATYPE_UINT_32
        | QNN_DATATYPE_FLOAT_32
        | QNN_DATATYPE_SFIXED_POINT_32
        | QNN_DATATYPE_UFIXED_POINT_32 => 4,
        QNN_DATATYPE_INT_64 | QNN_DATATYPE_UINT_64 | QNN_DATATYPE_FLOAT_64 => 8,
        _ => return None,
    })
}

/// Fixed-point types that need scale/offset.
pub fn is_fixed_point(dtype: u32) -> bool {
    matches!(dtype >> 8, 0x03 | 0x04)
}

/// Reads a C string; `None` for null.
///
/// # Safety
/// `p` is null or a valid NUL-terminated string.
pub unsafe fn cstr(p: *const std::ffi::c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: per the contract.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Copies a caller's raw tensor into an `MTensor` (id as given, data only if present).
///
/// # Safety
/// `t` points at a valid `Qnn_Tensor_t` whose pointers are valid for their declared sizes.
pub unsafe fn read_tensor(t: *const Qnn_Tensor_t) -> Result<(MTensor, u32, Qnn_TensorMemUnion_t), String> {
    if t.is_null() {
        return Err("null tensor".into());
    }
    // SAFETY: non-null, valid per the contract; v1 and v2 share the v1 prefix.
    let t = unsafe { &*t };
    if t.version != QNN_TENSOR_VERSION_1 && t.version != QNN_TENSOR_VERSION_2 {
        return Err(format!("unknown tensor version {}", t.version));
    }
    // SAFETY: both versions start with the v1 fields.
    let v = unsafe { &t.u.v1 };
    // SAFETY: name is null or a C string.
    let name = unsafe { cstr(v.name) }.unwrap_or_default();
    if v.rank > 0 && v.dimensions.is_null() {
        return Err(format!("tensor {name:?}: rank {} with null dimensions", v.rank));
    }
    let dims = if v.rank == 0 {
        Vec::new()
    } else {
        // SAFETY: dimensions holds `rank` entries.
        unsafe { std::slice::from_raw_parts(v.dimensions, v.rank as usize) }.to_vec()
    };
    let qp = &v.quantizeParams;
    let defined = qp.encodingDefinition == QNN_DEFINITION_DEFINED;
    let mut channels = Vec::new();
    let mut axis = 0;
    let mut bitwidth = 0;
    let (scale, offset) = if defined && qp.quantizationEncoding == QNN_QUANTIZATION_ENCODING_SCALE_OFFSET {
        // SAFETY: the encoding says the scale/offset member is active.
        let so = unsafe { qp.u.scaleOffsetEncoding };
        (so.scale, so.offset)
    } else if defined && qp.quantizationEncoding == QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET {
        // SAFETY: the encoding says the axis member is active.
        let a = unsafe { qp.u.axisScaleOffsetEncoding };
        if a.axis < 0
            || a.axis as usize >= dims.len()
            || a.numScaleOffsets != dims[a.axis as usize]
            || a.scaleOffset.is_null()
        {
            return Err(format!(
                "tensor {name:?}: axis quantization (axis {}, {} entries) does not fit dims {dims:?}",
                a.axis, a.numScaleOffsets
            ));
        }
        // SAFETY: scaleOffset holds numScaleOffsets entries.
        let so = unsafe { std::slice::from_raw_parts(a.scaleOffset, a.numScaleOffsets as usize) };
        channels = so.iter().map(|x| (x.scale, x.offset)).collect();
        axis = a.axis;
        (1.0, 0)
    } else if defined && qp.quantizationEncoding == QNN_QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET {
        // SAFETY: the encoding says the bw-axis member is active.
        let a = unsafe { qp.u.bwAxisScaleOffsetEncoding };
        let container = dtype_size(v.dataType).unwrap_or(0) as u32 * 8;
        if !is_fixed_point(v.dataType) || a.bitwidth == 0 || a.bitwidth > container {
            return Err(format!("tensor {name:?}: bit width {} invalid for dtype 0x{:04x}", a.bitwidth, v.dataType));
        }
        if a.axis < 0 || a.axis as usize >= dims.len() || a.numElements != dims[a.axis as usize] || a.scales.is_null() {
            return Err(format!(
                "tensor {name:?}: bw-axis quantization (axis {}, {} entries) does not fit dims {dims:?}",
                a.axis, a.numElements
            ));
        }
        let n = a.numElements as usize;
        // SAFETY: scales holds numElements entries; offsets is null or holds as many.
        let scales = unsafe { std::slice::from_raw_parts(a.scales, n) };
        let offsets: Vec<i32> =
            if a.offsets.is_null() { vec![0; n] } else { unsafe { std::slice::from_raw_parts(a.offsets, n) }.to_vec() };
        channels = scales.iter().copied().zip(offsets).collect();
        axis = a.axis;
        bitwidth = a.bitwidth;
        (1.0, 0)
    } else if is_fixed_point(v.dataType) {
        return Err(format!("quantized tensor {name:?} lacks a DEFINED SCALE_OFFSET/AXIS_SCALE_OFFSET encoding"));
    } else {
        (1.0, 0)
    };
    Ok((
        MTensor {
            id: v.id,
            name,
            ttype: v.type_,
            dtype: v.dataType,
            scale,
            offset,
            dims,
            axis,
            channels,
            bitwidth,
            data: None,
        },
        v.memType,
        v.mem,
    ))
}

// ------------------------------------------------------------------ binary format
// "QMCKCTX1", u32 format (2: tensors carry a bit width), u32 graph count, then per graph: name, tensors, nodes.
// Integers little-endian; strings/blobs as u32/u64 length + bytes.

pub const MAGIC: &[u8; 8] = b"QMCKCTX1";
pub const FORMAT_VERSION: u32 = 2;

pub struct SerialGraph<'a> {
    pub name: &'a str,
    pub tensors: &'a [MTensor],
    pub nodes: &'a [MNode],
}

#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
    fn u32s(&mut self, v: &[u32]) {
        self.u32(v.len() as u32);
        for &x in v {
            self.u32(x);
        }
    }
}

pub fn serialize(graphs: &[SerialGraph<'_>]) -> Vec<u8> {
    let mut w = Writer::default();
    w.0.extend_from_slice(MAGIC);
    w.u32(FORMAT_VERSION);
    w.u32(graphs.len() as u32);
    for g in graphs {
        w.str(g.name);
        w.u32(g.tensors.len() as u32);
        for t in g.tensors {
            w.u32(t.id);
            w.str(&t.name);
            w.u32(t.ttype);
            w.u32(t.dtype);
            w.u32(t.scale.to_bits());
            w.u32(t.offset as u32);
            w.u32s(&t.dims);
            w.u32(t.axis as u32);
            w.u32(t.bitwidth);
            w.u32(t.channels.len() as u32);
            for &(sc, off) in &t.channels {
                w.u32(sc.to_bits());
                w.u32(off as u32);
            }
            match &t.data {
                Some(d) => {
                    w.u32(1);
                    w.bytes(d);
                }
                None => w.u32(0),
            }
        }
        w.u32(g.nodes.len() as u32);
        for n in g.nodes {
            w.str(&n.name);
            w.str(&n.op);
            w.u32s(&n.inputs);
            w.u32s(&n.outputs);
            w.u32(n.params.len() as u32);
            for (name, p) in &n.params {
                w.str(name);
                match p {
                    MParam::Scalar { dtype, bits } => {
                        w.u32(0);
                        w.u32(*dtype);
                        w.u64(*bits);
                    }
                    MParam::Tensor { dtype, dims, data } => {
                        w.u32(1);
                        w.u32(*dtype);
                        w.u32s(dims);
                        w.bytes(data);
                    }
                }
            }
        }
    }
    w.0
}

/// Parse errors: `Version` maps to CONTEXT_ERROR_BINARY_VERSION, the rest to CREATE_FROM_BINARY.
#[derive(Debug)]
pub enum ParseError {
    Version(u32),
    Corrupt(&'static str),
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ParseError> {
        let end = self.pos.checked_add(n).ok_or(ParseError::Corrupt("overflow"))?;
        let s = self.b.get(self.pos..end).ok_or(ParseError::Corrupt("truncated"))?;
        self.pos = end;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32, ParseError> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self) -> Result<u64, ParseError> {
        let s = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }
    fn bytes(&mut self) -> Result<Vec<u8>, ParseError> {
        let n = usize::try_from(self.u64()?).map_err(|_| ParseError::Corrupt("length"))?;
        Ok(self.take(n)?.to_vec())
    }
    fn str(&mut self) -> Result<String, ParseError> {
        String::from_utf8(self.bytes()?).map_err(|_| ParseError::Corrupt("utf8"))
    }
    fn u32s(&mut self) -> Result<Vec<u32>, ParseError> {
        let n = self.u32()? as usize;
        if n > self.b.len() {
            return Err(ParseError::Corrupt("count"));
        }
        (0..n).map(|_| self.u32()).collect()
    }
}

pub type ParsedGraph = (String, Vec<MTensor>, Vec<MNode>);

pub fn deserialize(b: &[u8]) -> Result<Vec<ParsedGraph>, ParseError> {
    let mut r = Reader { b, pos: 0 };
    if r.take(8)? != MAGIC {
        return Err(ParseError::Corrupt("magic"));
    }
    let ver = r.u32()?;
    if ver != FORMAT_VERSION {
        return Err(ParseError::Version(ver));
    }
    let ng = r.u32()?;
    let mut graphs = Vec::new();
    for _ in 0..ng {
        let name = r.str()?;
        let nt = r.u32()?;
        let mut tensors = Vec::new();
        for _ in 0..nt {
            let id = r.u32()?;
            let tname = r.str()?;
            let ttype = r.u32()?;
            let dtype = r.u32()?;
            let scale = f32::from_bits(r.u32()?);
            let offset = r.u32()? as i32;
            let dims = r.u32s()?;
            let axis = r.u32()? as i32;
            let bitwidth = r.u32()?;
            let nch = r.u32()? as usize;
            if nch > b.len() {
                return Err(ParseError::Corrupt("channel count"));
            }
            let mut channels = Vec::with_capacity(nch);
            for _ in 0..nch {
                channels.push((f32::from_bits(r.u32()?), r.u32()? as i32));
            }
            let data = if r.u32()? == 1 { Some(r.bytes()?) } else { None };
            tensors.push(MTensor {
                id,
                name: tname,
                ttype,
                dtype,
                scale,
                offset,
                dims,
                axis,
                channels,
                bitwidth,
                data,
            });
        }
        let nn = r.u32()?;
        let mut nodes = Vec::new();
        for _ in 0..nn {
            let nname = r.str()?;
            let op = r.str()?;
            let inputs = r.u32s()?;
            let outputs = r.u32s()?;
            let np = r.u32()?;
            let mut params = Vec::new();
            for _ in 0..np {
                let pname = r.str()?;
                let p = match r.u32()? {
                    0 => MParam::Scalar { dtype: r.u32()?, bits: r.u64()? },
                    1 => MParam::Tensor { dtype: r.u32()?, dims: r.u32s()?, data: r.bytes()? },
                    _ => return Err(ParseError::Corrupt("param kind")),
                };
                params.push((pname, p));
            }
            nodes.push(MNode { name: nname, op, inputs, outputs, params });
        }
        graphs.push((name, tensors, nodes));
    }
    if r.pos != b.len() {
        return Err(ParseError::Corrupt("trailing bytes"));
    }
    Ok(graphs)
}
