//! `#[repr(C)]` mirrors of the QNN data structures, written from the documented
//! ABI facts (names, values, sizes and offsets) in `shared/reference/npu-qnn.md`.
//!
//! C enums are `u32` constants, never Rust enums: a provider may hand back a value
//! we do not know, and an unknown discriminant in a Rust enum is UB.
//! This file has no dependencies so the mock provider can include it by path.

use std::ffi::{c_char, c_void};

/// `Qnn_ErrorHandle_t`: every API call returns one; only the low 16 bits are the code.
pub type Qnn_ErrorHandle_t = u64;
/// Opaque handle (`Qnn_*Handle_t` are all `void*`).
pub type Qnn_Handle_t = *mut c_void;
/// Log handle.
pub type Qnn_LogHandle_t = Qnn_Handle_t;
/// Backend handle.
pub type Qnn_BackendHandle_t = Qnn_Handle_t;
/// Device handle.
pub type Qnn_DeviceHandle_t = Qnn_Handle_t;
/// Context handle.
pub type Qnn_ContextHandle_t = Qnn_Handle_t;
/// Graph handle.
pub type Qnn_GraphHandle_t = Qnn_Handle_t;
/// Profile handle.
pub type Qnn_ProfileHandle_t = Qnn_Handle_t;
/// Signal handle.
pub type Qnn_SignalHandle_t = Qnn_Handle_t;
/// Registered-memory handle.
pub type Qnn_MemHandle_t = Qnn_Handle_t;

/// Success return value.
pub const QNN_SUCCESS: u64 = 0;
/// Mask selecting the error code from a `Qnn_ErrorHandle_t`.
pub const QNN_ERROR_CODE_MASK: u64 = 0xFFFF;

// ---------------------------------------------------------------- versions

/// `Qnn_Version_t` (12 B).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Qnn_Version_t {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch version.
    pub patch: u32,
}

/// `Qnn_ApiVersion_t` (24 B, align 4).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Qnn_ApiVersion_t {
    /// Core API version (the one the version gate checks).
    pub coreApiVersion: Qnn_Version_t,
    /// Backend-specific API version.
    pub backendApiVersion: Qnn_Version_t,
}

// ---------------------------------------------------------------- backend ids

/// Backend id: NULL.
pub const QNN_BACKEND_ID_NULL: u32 = 0;
/// Backend id: SAVER.
pub const QNN_BACKEND_ID_SAVER: u32 = 2;
/// Backend id: CPU.
pub const QNN_BACKEND_ID_CPU: u32 = 3;
/// Backend id: GPU.
pub const QNN_BACKEND_ID_GPU: u32 = 4;
/// Backend id: DSP.
pub const QNN_BACKEND_ID_DSP: u32 = 5;
/// Backend id: HTP (the Hexagon NPU).
pub const QNN_BACKEND_ID_HTP: u32 = 6;
/// Backend id: HTA.
pub const QNN_BACKEND_ID_HTA: u32 = 7;
/// Backend id: IR.
pub const QNN_BACKEND_ID_IR: u32 = 9;
/// Backend id: LPAI.
pub const QNN_BACKEND_ID_LPAI: u32 = 12;
/// Backend id: HTP emulator.
pub const QNN_BACKEND_ID_HTP_QEMU: u32 = 13;

// ---------------------------------------------------------------- log levels

/// Log level ERROR.
pub const QNN_LOG_LEVEL_ERROR: u32 = 1;
/// Log level WARN.
pub const QNN_LOG_LEVEL_WARN: u32 = 2;
/// Log level INFO.
pub const QNN_LOG_LEVEL_INFO: u32 = 3;
/// Log level VERBOSE.
pub const QNN_LOG_LEVEL_VERBOSE: u32 = 4;
/// Log level DEBUG.
pub const QNN_LOG_LEVEL_DEBUG: u32 = 5;

// ---------------------------------------------------------------- data types

/// `Qnn_DataType_t` INT_8.
pub const QNN_DATATYPE_INT_8: u32 = 0x0008;
/// INT_16.
pub const QNN_DATATYPE_INT_16: u32 = 0x0016;
/// INT_32.
pub const QNN_DATATYPE_INT_32: u32 = 0x0032;
/// INT_64.
pub const QNN_DATATYPE_INT_64: u32 = 0x0064;
/// UINT_8.
pub const QNN_DATATYPE_UINT_8: u32 = 0x0108;
/// UINT_16.
pub const QNN_DATATYPE_UINT_16: u32 = 0x0116;
/// UINT_32.
pub const QNN_DATATYPE_UINT_32: u32 = 0x0132;
/// UINT_64.
pub const QNN_DATATYPE_UINT_64: u32 = 0x0164;
/// FLOAT_16.
pub const QNN_DATATYPE_FLOAT_16: u32 = 0x0216;
/// FLOAT_32.
pub const QNN_DATATYPE_FLOAT_32: u32 = 0x0232;
/// FLOAT_64.
pub const QNN_DATATYPE_FLOAT_64: u32 = 0x0264;
/// SFIXED_POINT_4 (two per byte, first element in the low nibble).
pub const QNN_DATATYPE_SFIXED_POINT_4: u32 = 0x0304;
/// SFIXED_POINT_8 (int8 + scale/offset).
pub const QNN_DATATYPE_SFIXED_POINT_8: u32 = 0x0308;
/// SFIXED_POINT_16.
pub const QNN_DATATYPE_SFIXED_POINT_16: u32 = 0x0316;
/// SFIXED_POINT_32.
pub const QNN_DATATYPE_SFIXED_POINT_32: u32 = 0x0332;
/// UFIXED_POINT_4.
pub const QNN_DATATYPE_UFIXED_POINT_4: u32 = 0x0404;
/// UFIXED_POINT_8 (uint8 + scale/offset).
pub const QNN_DATATYPE_UFIXED_POINT_8: u32 = 0x0408;
/// UFIXED_POINT_16.
pub const QNN_DATATYPE_UFIXED_POINT_16: u32 = 0x0416;
/// UFIXED_POINT_32.
pub const QNN_DATATYPE_UFIXED_POINT_32: u32 = 0x0432;
/// BOOL_8.
pub const QNN_DATATYPE_BOOL_8: u32 = 0x0508;
/// STRING.
pub const QNN_DATATYPE_STRING: u32 = 0x0608;
/// UNDEFINED (enum sentinel).
pub const QNN_DATATYPE_UNDEFINED: u32 = 0x7FFF_FFFF;

// ---------------------------------------------------------------- tensor enums

/// Tensor type APP_WRITE (graph input).
pub const QNN_TENSOR_TYPE_APP_WRITE: u32 = 0;
/// Tensor type APP_READ (graph output).
pub const QNN_TENSOR_TYPE_APP_READ: u32 = 1;
/// Tensor type APP_READWRITE.
pub const QNN_TENSOR_TYPE_APP_READWRITE: u32 = 2;
/// Tensor type NATIVE (intermediate).
pub const QNN_TENSOR_TYPE_NATIVE: u32 = 3;
/// Tensor type STATIC (weights; data copied at creation).
pub const QNN_TENSOR_TYPE_STATIC: u32 = 4;
/// Tensor type NULL (absent optional input).
pub const QNN_TENSOR_TYPE_NULL: u32 = 5;
/// UPDATEABLE_STATIC.
pub const QNN_TENSOR_TYPE_UPDATEABLE_STATIC: u32 = 6;
/// UPDATEABLE_NATIVE.
pub const QNN_TENSOR_TYPE_UPDATEABLE_NATIVE: u32 = 7;
/// UPDATEABLE_APP_WRITE.
pub const QNN_TENSOR_TYPE_UPDATEABLE_APP_WRITE: u32 = 8;
/// UPDATEABLE_APP_READ.
pub const QNN_TENSOR_TYPE_UPDATEABLE_APP_READ: u32 = 9;
/// UPDATEABLE_APP_READWRITE.
pub const QNN_TENSOR_TYPE_UPDATEABLE_APP_READWRITE: u32 = 10;
/// OPTIONAL_APP_WRITE.
pub const QNN_TENSOR_TYPE_OPTIONAL_APP_WRITE: u32 = 11;
/// OPTIONAL_APP_READ.
pub const QNN_TENSOR_TYPE_OPTIONAL_APP_READ: u32 = 12;
/// OPTIONAL_APP_READWRITE.
pub const QNN_TENSOR_TYPE_OPTIONAL_APP_READWRITE: u32 = 13;

/// Data format DENSE.
pub const QNN_TENSOR_DATA_FORMAT_DENSE: u32 = 0;
/// Data format SPARSE.
pub const QNN_TENSOR_DATA_FORMAT_SPARSE: u32 = 1;
/// Data format CODEBOOK.
pub const QNN_TENSOR_DATA_FORMAT_CODEBOOK: u32 = 2;
/// Data format MX.
pub const QNN_TENSOR_DATA_FORMAT_MX: u32 = 3;
/// Data format HMX_WEIGHT_LAYOUT.
pub const QNN_TENSOR_DATA_FORMAT_HMX_WEIGHT_LAYOUT: u32 = 8;

/// Tensor memory type RAW (client buffer).
pub const QNN_TENSORMEMTYPE_RAW: u32 = 0;
/// Tensor memory type MEMHANDLE (registered shared memory).
pub const QNN_TENSORMEMTYPE_MEMHANDLE: u32 = 1;
/// Tensor memory type RETRIEVE_RAW.
pub const QNN_TENSORMEMTYPE_RETRIEVE_RAW: u32 = 2;

/// Tensor struct version 1.
pub const QNN_TENSOR_VERSION_1: u32 = 1;
/// Tensor struct version 2.
pub const QNN_TENSOR_VERSION_2: u32 = 2;
/// Op config struct version 1.
pub const QNN_OPCONFIG_VERSION_1: u32 = 1;

/// Param type SCALAR.
pub const QNN_PARAMTYPE_SCALAR: u32 = 0;
/// Param type TENSOR.
pub const QNN_PARAMTYPE_TENSOR: u32 = 1;

/// Definition IMPL_GENERATED.
pub const QNN_DEFINITION_IMPL_GENERATED: u32 = 0;
/// Definition DEFINED (quant params are valid).
pub const QNN_DEFINITION_DEFINED: u32 = 1;
/// Definition UNDEFINED (float tensors).
pub const QNN_DEFINITION_UNDEFINED: u32 = 0x7FFF_FFFF;

/// Precision FLOAT32.
pub const QNN_PRECISION_FLOAT32: u32 = 0;
/// Precision FLOAT16.
pub const QNN_PRECISION_FLOAT16: u32 = 1;

/// Quant encoding SCALE_OFFSET.
pub const QNN_QUANTIZATION_ENCODING_SCALE_OFFSET: u32 = 0;
/// Quant encoding AXIS_SCALE_OFFSET.
pub const QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET: u32 = 1;
/// Quant encoding BW_SCALE_OFFSET.
pub const QNN_QUANTIZATION_ENCODING_BW_SCALE_OFFSET: u32 = 2;
/// Quant encoding BW_AXIS_SCALE_OFFSET.
pub const QNN_QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET: u32 = 3;
/// Quant encoding BLOCK.
pub const QNN_QUANTIZATION_ENCODING_BLOCK: u32 = 4;
/// Quant encoding BLOCKWISE_EXPANSION ("LPBQ").
pub const QNN_QUANTIZATION_ENCODING_BLOCKWISE_EXPANSION: u32 = 5;
/// Quant encoding VECTOR.
pub const QNN_QUANTIZATION_ENCODING_VECTOR: u32 = 6;
/// Quant encoding UNDEFINED.
pub const QNN_QUANTIZATION_ENCODING_UNDEFINED: u32 = 0x7FFF_FFFF;

/// Mem type ION (descriptor carries an fd).
pub const QNN_MEM_TYPE_ION: u32 = 1;
/// Mem type CUSTOM (descriptor carries a backend struct pointer).
pub const QNN_MEM_TYPE_CUSTOM: u32 = 2;
/// Mem type DMA_BUF.
pub const QNN_MEM_TYPE_DMA_BUF: u32 = 3;

/// HTP mem descriptor type QURT.
pub const QNN_HTP_MEM_QURT: u32 = 0;
/// HTP mem descriptor type SHARED_BUFFER (many tensors in one rpcmem allocation).
pub const QNN_HTP_MEM_SHARED_BUFFER: u32 = 1;
/// HTP mem descriptor type WEIGHTS_BUFFER.
pub const QNN_HTP_MEM_WEIGHTS_BUFFER: u32 = 2;
/// HTP mem descriptor type SHARED_SPILLFILL_BUFFER.
pub const QNN_HTP_MEM_SHARED_SPILLFILL_BUFFER: u32 = 3;

// ---------------------------------------------------------------- quantization

/// `Qnn_ScaleOffset_t` (8 B). Dequant: `float = (q + offset) * scale`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Qnn_ScaleOffset_t {
    /// Scale.
    pub scale: f32,
    /// Offset (= -zero point).
    pub offset: i32,
}

/// `Qnn_AxisScaleOffset_t` (16 B).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Qnn_AxisScaleOffset_t {
    /// Quantized axis.
    pub axis: i32,
    /// Number of entries in `scaleOffset`.
    pub numScaleOffsets: u32,
    /// Per-channel scale/offset array.
    pub scaleOffset: *mut Qnn_ScaleOffset_t,
}

/// `Qnn_BwScaleOffset_t` (12 B).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Qnn_BwScaleOffset_t {
    /// Bit width.
    pub bitwidth: u32,
    /// Scale.
    pub scale: f32,
    /// Offset.
    pub offset: i32,
}

/// `Qnn_BwAxisScaleOffset_t` (32 B).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Qnn_BwAxisScaleOffset_t {
    /// Bit width.
    pub bitwidth: u32,
    /// Quantized axis.
    pub axis: i32,
    /// Number of scales/offsets.
    pub numElements: u32,
    /// Scales.
    pub scales: *mut f32,
    /// Offsets (may be null).
    pub offsets: *mut i32,
}

/// `Qnn_BlockwiseExpansion_t` (40 B), the "LPBQ" encoding.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Qnn_BlockwiseExpansion_t {
    /// Channel axis.
    pub axis: i32,
    /// Per-channel scale/offset.
    pub scaleOffsets: *mut Qnn_ScaleOffset_t,
    /// Blocks per axis entry.
    pub numBlocksPerAxis: u32,
    /// Bit width of the block scales.
    pub blockScaleBitwidth: u32,
    /// Storage of block scales: 8-bit 0, 16-bit 1.
    pub blockScaleStorageType: u32,
    /// Block scales `[axis_i * numBlocksPerAxis + block_i]` (u8 or u16).
    pub blocksScale: *mut c_void,
}

/// Union inside `Qnn_QuantizeParams_t` (32 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub union Qnn_QuantizeParamsUnion_t {
    /// SCALE_OFFSET.
    pub scaleOffsetEncoding: Qnn_ScaleOffset_t,
    /// AXIS_SCALE_OFFSET.
    pub axisScaleOffsetEncoding: Qnn_AxisScaleOffset_t,
    /// BW_SCALE_OFFSET.
    pub bwScaleOffsetEncoding: Qnn_BwScaleOffset_t,
    /// BW_AXIS_SCALE_OFFSET.
    pub bwAxisScaleOffsetEncoding: Qnn_BwAxisScaleOffset_t,
    /// BLOCKWISE_EXPANSION (pointer).
    pub blockwiseExpansion: *mut Qnn_BlockwiseExpansion_t,
    /// BLOCK / VECTOR encodings are pointers to structs not modelled here.
    pub opaque: *mut c_void,
    /// Size anchor: the C union is 32 bytes.
    pub _raw: [u64; 4],
}

/// `Qnn_QuantizeParams_t` (40 B, align 8).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Qnn_QuantizeParams_t {
    /// `QNN_DEFINITION_*`.
    pub encodingDefinition: u32,
    /// `QNN_QUANTIZATION_ENCODING_*`.
    pub quantizationEncoding: u32,
    /// Encoding payload.
    pub u: Qnn_QuantizeParamsUnion_t,
}

impl Qnn_QuantizeParams_t {
    /// Undefined quantization (float tensors), like `QNN_QUANTIZE_PARAMS_INIT`.
    pub const UNDEFINED: Self = Self {
        encodingDefinition: QNN_DEFINITION_UNDEFINED,
        quantizationEncoding: QNN_QUANTIZATION_ENCODING_UNDEFINED,
        u: Qnn_QuantizeParamsUnion_t { _raw: [0; 4] },
    };
}

// ---------------------------------------------------------------- tensors

/// `Qnn_ClientBuffer_t` (16 B).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Qnn_ClientBuffer_t {
    /// Data pointer.
    pub data: *mut c_void,
    /// Size in bytes.
    pub dataSize: u32,
}

/// Memory union of a tensor (16 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub union Qnn_TensorMemUnion_t {
    /// RAW.
    pub clientBuf: Qnn_ClientBuffer_t,
    /// MEMHANDLE.
    pub memHandle: Qnn_MemHandle_t,
    /// RETRIEVE_RAW (pointer to a callback struct, not modelled).
    pub retrieveRaw: *mut c_void,
}

/// `Qnn_TensorV1_t` (112 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Qnn_TensorV1_t {
    /// Backend-assigned id.
    pub id: u32,
    /// Unique name.
    pub name: *const c_char,
    /// `QNN_TENSOR_TYPE_*`.
    pub type_: u32,
    /// `QNN_TENSOR_DATA_FORMAT_*`.
    pub dataFormat: u32,
    /// `QNN_DATATYPE_*`.
    pub dataType: u32,
    /// Quantization.
    pub quantizeParams: Qnn_QuantizeParams_t,
    /// Number of dims.
    pub rank: u32,
    /// Max dims.
    pub dimensions: *mut u32,
    /// `QNN_TENSORMEMTYPE_*`.
    pub memType: u32,
    /// Data.
    pub mem: Qnn_TensorMemUnion_t,
}

/// `Qnn_SparseParams_t` (12 B).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Qnn_SparseParams_t {
    /// Layout type.
    pub type_: u32,
    /// Hybrid COO: number of specified elements.
    pub numSpecifiedElements: u32,
    /// Hybrid COO: number of sparse dimensions.
    pub numSparseDimensions: u32,
}

/// `Qnn_TensorV2_t` (136 B): V1 plus dynamic dims, sparsity and isProduced.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Qnn_TensorV2_t {
    /// Backend-assigned id.
    pub id: u32,
    /// Unique name.
    pub name: *const c_char,
    /// `QNN_TENSOR_TYPE_*`.
    pub type_: u32,
    /// `QNN_TENSOR_DATA_FORMAT_*`.
    pub dataFormat: u32,
    /// `QNN_DATATYPE_*`.
    pub dataType: u32,
    /// Quantization.
    pub quantizeParams: Qnn_QuantizeParams_t,
    /// Number of dims.
    pub rank: u32,
    /// Max dims.
    pub dimensions: *mut u32,
    /// `QNN_TENSORMEMTYPE_*`.
    pub memType: u32,
    /// Data.
    pub mem: Qnn_TensorMemUnion_t,
    /// Per-dim dynamic flags (may be null).
    pub isDynamicDimensions: *mut u8,
    /// Sparse parameters.
    pub sparseParams: Qnn_SparseParams_t,
    /// Output was produced in the last execute.
    pub isProduced: u8,
}

/// Versioned tensor union (136 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub union Qnn_TensorUnion_t {
    /// Version 1.
    pub v1: Qnn_TensorV1_t,
    /// Version 2 (v1 fields coincide).
    pub v2: Qnn_TensorV2_t,
}

/// `Qnn_Tensor_t` (144 B, align 8); the stride of graphExecute arrays.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Qnn_Tensor_t {
    /// `QNN_TENSOR_VERSION_*`.
    pub version: u32,
    /// Payload.
    pub u: Qnn_TensorUnion_t,
}

// ---------------------------------------------------------------- ops

/// Scalar value union (8 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub union Qnn_ScalarValue_t {
    /// FLOAT_32.
    pub floatValue: f32,
    /// FLOAT_64.
    pub doubleValue: f64,
    /// UINT_64.
    pub uint64Value: u64,
    /// INT_64.
    pub int64Value: i64,
    /// UINT_32.
    pub uint32Value: u32,
    /// INT_32.
    pub int32Value: i32,
    /// UINT_16.
    pub uint16Value: u16,
    /// INT_16.
    pub int16Value: i16,
    /// UINT_8.
    pub uint8Value: u8,
    /// INT_8.
    pub int8Value: i8,
    /// BOOL_8.
    pub bool8Value: u8,
    /// STRING.
    pub stringValue: *const c_char,
}

/// `Qnn_Scalar_t` (16 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Qnn_Scalar_t {
    /// `QNN_DATATYPE_*` of the value.
    pub dataType: u32,
    /// Value at offset 8.
    pub value: Qnn_ScalarValue_t,
}

/// Param payload (144 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub union Qnn_ParamUnion_t {
    /// SCALAR.
    pub scalarParam: Qnn_Scalar_t,
    /// TENSOR.
    pub tensorParam: Qnn_Tensor_t,
}

/// `Qnn_Param_t` (160 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Qnn_Param_t {
    /// `QNN_PARAMTYPE_*`.
    pub paramType: u32,
    /// Param name.
    pub name: *const c_char,
    /// Payload.
    pub u: Qnn_ParamUnion_t,
}

/// `Qnn_OpConfigV1_t` (72 B).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Qnn_OpConfigV1_t {
    /// Node name.
    pub name: *const c_char,
    /// Op package (`"qti.aisw"` for built-ins).
    pub packageName: *const c_char,
    /// Op type name.
    pub typeName: *const c_char,
    /// Number of params.
    pub numOfParams: u32,
    /// Params.
    pub params: *mut Qnn_Param_t,
    /// Number of inputs.
    pub numOfInputs: u32,
    /// Inputs.
    pub inputTensors: *mut Qnn_Tensor_t,
    /// Number of outputs.
    pub numOfOutputs: u32,
    /// Outputs.
    pub outputTensors: *mut Qnn_Tensor_t,
}

/// Versioned op config union (72 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub union Qnn_OpConfigUnion_t {
    /// Version 1.
    pub v1: Qnn_OpConfigV1_t,
}

/// `Qnn_OpConfig_t` (80 B), passed **by value** to graphAddNode.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Qnn_OpConfig_t {
    /// `QNN_OPCONFIG_VERSION_1`.
    pub version: u32,
    /// Payload.
    pub u: Qnn_OpConfigUnion_t,
}

/// Built-in op package name.
pub const QNN_OP_PACKAGE_NAME_QTI_AISW: &str = "qti.aisw";

// ---------------------------------------------------------------- memory

/// `Qnn_MemShape_t` (24 B).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Qnn_MemShape_t {
    /// Number of dims.
    pub numDim: u32,
    /// Dims.
    pub dimSize: *mut u32,
    /// Shape config (null).
    pub shapeConfig: *const c_char,
}

/// ION payload.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Qnn_MemIonInfo_t {
    /// File descriptor (`rpcmem_to_fd`).
    pub fd: i32,
}

/// DMA_BUF payload.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Qnn_MemDmaBufInfo_t {
    /// File descriptor.
    pub fd: i32,
    /// CPU address.
    pub data: *mut c_void,
}

/// Memory descriptor payload (16 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub union Qnn_MemDescriptorUnion_t {
    /// ION.
    pub ionInfo: Qnn_MemIonInfo_t,
    /// CUSTOM (points at e.g. `QnnMemHtp_Descriptor_t`).
    pub customInfo: *mut c_void,
    /// DMA_BUF.
    pub dmaBufInfo: Qnn_MemDmaBufInfo_t,
}

/// `Qnn_MemDescriptor_t` (48 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Qnn_MemDescriptor_t {
    /// Shape of the tensor the memory backs.
    pub memShape: Qnn_MemShape_t,
    /// `QNN_DATATYPE_*`.
    pub dataType: u32,
    /// `QNN_MEM_TYPE_*`.
    pub memType: u32,
    /// Payload.
    pub u: Qnn_MemDescriptorUnion_t,
}

/// Shared-buffer payload of `QnnMemHtp_Descriptor_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct QnnHtpMem_SharedBufferConfig_t {
    /// rpcmem fd of the whole allocation.
    pub fd: i32,
    /// Offset of this tensor inside it.
    pub offset: u64,
}

/// Payload of `QnnMemHtp_Descriptor_t` (16 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub union QnnMemHtp_DescriptorUnion_t {
    /// QURT address.
    pub qurtAddress: u32,
    /// SHARED_BUFFER.
    pub sharedBufferConfig: QnnHtpMem_SharedBufferConfig_t,
}

/// `QnnMemHtp_Descriptor_t` (32 B): CUSTOM payload for many tensors in one allocation.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct QnnMemHtp_Descriptor_t {
    /// `QNN_HTP_MEM_*`.
    pub type_: u32,
    /// Total allocation size.
    pub size: u64,
    /// Payload.
    pub u: QnnMemHtp_DescriptorUnion_t,
}

// ---------------------------------------------------------------- configs

/// Value of a generic `Qnn*_Config_t` (8 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub union Qnn_ConfigValue_t {
    /// CUSTOM: pointer to a backend-specific struct.
    pub customConfig: *mut c_void,
    /// Integer-valued options (e.g. priority).
    pub uint32Value: u32,
    /// Pointer-valued options.
    pub pointer: *const c_void,
}

/// Generic `QnnBackend_Config_t` / `QnnContext_Config_t` / `QnnGraph_Config_t` /
/// `QnnDevice_Config_t` (16 B). Arrays of these are passed NULL-terminated.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Qnn_Config_t {
    /// Option id.
    pub option: u32,
    /// Value.
    pub value: Qnn_ConfigValue_t,
}

/// Backend config option CUSTOM.
pub const QNN_BACKEND_CONFIG_OPTION_CUSTOM: u32 = 0;
/// Context config option CUSTOM.
pub const QNN_CONTEXT_CONFIG_OPTION_CUSTOM: u32 = 0;
/// Context config option PRIORITY.
pub const QNN_CONTEXT_CONFIG_OPTION_PRIORITY: u32 = 1;
/// Device config option CUSTOM.
pub const QNN_DEVICE_CONFIG_OPTION_CUSTOM: u32 = 0;
/// Device config option PLATFORM_INFO.
pub const QNN_DEVICE_CONFIG_OPTION_PLATFORM_INFO: u32 = 1;
/// Graph config option CUSTOM.
pub const QNN_GRAPH_CONFIG_OPTION_CUSTOM: u32 = 0;
/// Graph config option PRIORITY.
pub const QNN_GRAPH_CONFIG_OPTION_PRIORITY: u32 = 3;

/// HTP device custom option SOC.
pub const QNN_HTP_DEVICE_CONFIG_OPTION_SOC: u32 = 0;
/// HTP device custom option ARCH.
pub const QNN_HTP_DEVICE_CONFIG_OPTION_ARCH: u32 = 1;

/// Arch payload of the HTP device custom config.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct QnnHtpDevice_DeviceArch_t {
    /// Device id.
    pub deviceId: u32,
    /// `QnnHtpDevice_Arch_t` (75, 79, 81 ...).
    pub arch: u32,
}

/// Payload of `QnnHtpDevice_CustomConfig_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union QnnHtpDevice_CustomConfigUnion_t {
    /// SOC model (57 SM8650, 69 SM8750, 87 SM8850).
    pub socModel: u32,
    /// ARCH.
    pub arch: QnnHtpDevice_DeviceArch_t,
}

/// `QnnHtpDevice_CustomConfig_t` (12 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct QnnHtpDevice_CustomConfig_t {
    /// `QNN_HTP_DEVICE_CONFIG_OPTION_*`.
    pub option: u32,
    /// Payload.
    pub u: QnnHtpDevice_CustomConfigUnion_t,
}

/// HTP graph option OPTIMIZATION.
pub const QNN_HTP_GRAPH_CONFIG_OPTION_OPTIMIZATION: u32 = 1;
/// HTP graph option PRECISION.
pub const QNN_HTP_GRAPH_CONFIG_OPTION_PRECISION: u32 = 2;
/// HTP graph option VTCM_SIZE_IN_MB.
pub const QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE_IN_MB: u32 = 3;
/// HTP graph option NUM_HVX_THREADS.
pub const QNN_HTP_GRAPH_CONFIG_OPTION_NUM_HVX_THREADS: u32 = 6;
/// HTP optimization type FINALIZE_OPTIMIZATION_FLAG.
pub const QNN_HTP_GRAPH_OPTIMIZATION_TYPE_FINALIZE_OPTIMIZATION_FLAG: u32 = 3;

/// OPTIMIZATION payload.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct QnnHtpGraph_OptimizationOption_t {
    /// Optimization type.
    pub type_: u32,
    /// Value (finalize flag 1–3).
    pub floatValue: f32,
}

/// Payload of `QnnHtpGraph_CustomConfig_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union QnnHtpGraph_CustomConfigUnion_t {
    /// OPTIMIZATION.
    pub optimizationOption: QnnHtpGraph_OptimizationOption_t,
    /// PRECISION (`QNN_PRECISION_*`).
    pub precision: u32,
    /// VTCM_SIZE_IN_MB (0 = max).
    pub vtcmSizeInMB: u32,
    /// NUM_HVX_THREADS.
    pub numHvxThreads: u64,
    /// The union is 48 B in 2.40+ (16 B in 2.25); we allocate 56 so the whole
    /// struct is 64 B, the size the reference recommends to allocate.
    pub _raw: [u64; 7],
}

/// `QnnHtpGraph_CustomConfig_t` (56 B in 2.40+, allocated as 64 B here).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct QnnHtpGraph_CustomConfig_t {
    /// `QNN_HTP_GRAPH_CONFIG_OPTION_*`.
    pub option: u32,
    /// Payload at offset 8.
    pub u: QnnHtpGraph_CustomConfigUnion_t,
}

/// `QnnHtpPerfInfrastructure_DcvsV3_t` (16 × u32).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct QnnHtpPerfInfrastructure_DcvsV3_t {
    /// Power config id.
    pub contextId: u32,
    /// Apply dcvsEnable.
    pub setDcvsEnable: u32,
    /// DCVS on/off.
    pub dcvsEnable: u32,
    /// Power mode (PERFORMANCE 0x10 ...).
    pub powerMode: u32,
    /// Apply sleepLatency.
    pub setSleepLatency: u32,
    /// Sleep latency in µs.
    pub sleepLatency: u32,
    /// Apply sleepDisable.
    pub setSleepDisable: u32,
    /// Sleep disable.
    pub sleepDisable: u32,
    /// Apply bus params.
    pub setBusParams: u32,
    /// Bus corner min.
    pub busVoltageCornerMin: u32,
    /// Bus corner target.
    pub busVoltageCornerTarget: u32,
    /// Bus corner max.
    pub busVoltageCornerMax: u32,
    /// Apply core params.
    pub setCoreParams: u32,
    /// Core corner min.
    pub coreVoltageCornerMin: u32,
    /// Core corner target.
    pub coreVoltageCornerTarget: u32,
    /// Core corner max.
    pub coreVoltageCornerMax: u32,
}

/// Payload of the power config (64 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub union QnnHtpPerfInfrastructure_PowerConfigUnion_t {
    /// DCVS_V3.
    pub dcvsV3Config: QnnHtpPerfInfrastructure_DcvsV3_t,
    /// RPC_CONTROL_LATENCY / RPC_POLLING_TIME in µs.
    pub rpcValue: u32,
}

/// `QnnHtpPerfInfrastructure_PowerConfig_t` (68 B, align 4).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct QnnHtpPerfInfrastructure_PowerConfig_t {
    /// Option (DCVS_V3 1, RPC_CONTROL_LATENCY 2, RPC_POLLING_TIME 3 ...).
    pub option: u32,
    /// Payload at offset 4.
    pub u: QnnHtpPerfInfrastructure_PowerConfigUnion_t,
}

/// Power option DCVS_V3.
pub const QNN_HTP_PERF_POWER_CONFIG_OPTION_DCVS_V3: u32 = 1;
/// Power option RPC_CONTROL_LATENCY.
pub const QNN_HTP_PERF_POWER_CONFIG_OPTION_RPC_CONTROL_LATENCY: u32 = 2;
/// Power option RPC_POLLING_TIME.
pub const QNN_HTP_PERF_POWER_CONFIG_OPTION_RPC_POLLING_TIME: u32 = 3;
/// Power mode PERFORMANCE.
pub const QNN_HTP_PERF_POWER_MODE_PERFORMANCE: u32 = 0x10;
/// Voltage corner MAX.
pub const QNN_HTP_PERF_VCORNER_MAX: u32 = 0xA0;

/// Perf infrastructure function pointers (32 B), in the order the reference lists them.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct QnnHtpDevice_PerfInfrastructure_t {
    /// `createPowerConfigId(u32 deviceId, u32 coreId, u32* id)`.
    pub createPowerConfigId: Option<unsafe extern "C" fn(u32, u32, *mut u32) -> Qnn_ErrorHandle_t>,
    /// `destroyPowerConfigId(u32 id)`.
    pub destroyPowerConfigId: Option<unsafe extern "C" fn(u32) -> Qnn_ErrorHandle_t>,
    /// `setPowerConfig(u32 id, const PowerConfig** cfgs)`.
    pub setPowerConfig:
        Option<unsafe extern "C" fn(u32, *const *const QnnHtpPerfInfrastructure_PowerConfig_t) -> Qnn_ErrorHandle_t>,
    /// `setMemoryConfig(u32 deviceId, u32 coreId, configs)`; config type not modelled.
    pub setMemoryConfig: Option<unsafe extern "C" fn(u32, u32, *const *const c_void) -> Qnn_ErrorHandle_t>,
}

/// `QnnHtpDevice_Infrastructure_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct QnnHtpDevice_Infrastructure_t {
    /// PERF 0.
    pub infraType: u32,
    /// Perf functions at offset 8.
    pub perfInfra: QnnHtpDevice_PerfInfrastructure_t,
}

// ---------------------------------------------------------------- layout checks
// Sizes/offsets measured from the QAIRT 2.25/2.40/2.43 headers (LP64).

macro_rules! assert_layout {
    ($t:ty, size $size:expr $(, $field:ident @ $off:expr)* $(,)?) => {
        const _: () = assert!(std::mem::size_of::<$t>() == $size);
        $(const _: () = assert!(std::mem::offset_of!($t, $field) == $off);)*
    };
}

#[cfg(target_pointer_width = "64")]
mod layout_checks {
    use super::*;
    assert_layout!(Qnn_Version_t, size 12, major @ 0, minor @ 4, patch @ 8);
    assert_layout!(Qnn_ApiVersion_t, size 24, coreApiVersion @ 0, backendApiVersion @ 12);
    const _: () = assert!(std::mem::align_of::<Qnn_ApiVersion_t>() == 4);
    assert_layout!(Qnn_ScaleOffset_t, size 8, scale @ 0, offset @ 4);
    assert_layout!(Qnn_AxisScaleOffset_t, size 16, axis @ 0, numScaleOffsets @ 4, scaleOffset @ 8);
    assert_layout!(Qnn_BwScaleOffset_t, size 12, bitwidth @ 0, scale @ 4, offset @ 8);
    assert_layout!(Qnn_BwAxisScaleOffset_t, size 32, bitwidth @ 0, axis @ 4, numElements @ 8, scales @ 16, offsets @ 24);
    assert_layout!(Qnn_BlockwiseExpansion_t, size 40, axis @ 0, scaleOffsets @ 8, numBlocksPerAxis @ 16,
        blockScaleBitwidth @ 20, blockScaleStorageType @ 24, blocksScale @ 32);
    assert_layout!(Qnn_QuantizeParamsUnion_t, size 32);
    assert_layout!(Qnn_QuantizeParams_t, size 40, encodingDefinition @ 0, quantizationEncoding @ 4, u @ 8);
    const _: () = assert!(std::mem::align_of::<Qnn_QuantizeParams_t>() == 8);
    assert_layout!(Qnn_ClientBuffer_t, size 16, data @ 0, dataSize @ 8);
    assert_layout!(Qnn_TensorV1_t, size 112, id @ 0, name @ 8, type_ @ 16, dataFormat @ 20, dataType @ 24,
        quantizeParams @ 32, rank @ 72, dimensions @ 80, memType @ 88, mem @ 96);
    assert_layout!(Qnn_SparseParams_t, size 12);
    assert_layout!(Qnn_TensorV2_t, size 136, id @ 0, name @ 8, type_ @ 16, dataFormat @ 20, dataType @ 24,
        quantizeParams @ 32, rank @ 72, dimensions @ 80, memType @ 88, mem @ 96, isDynamicDimensions @ 112,
        sparseParams @ 120, isProduced @ 132);
    assert_layout!(Qnn_Tensor_t, size 144, version @ 0, u @ 8);
    const _: () = assert!(std::mem::align_of::<Qnn_Tensor_t>() == 8);
    assert_layout!(Qnn_Scalar_t, size 16, dataType @ 0, value @ 8);
    assert_layout!(Qnn_Param_t, size 160, paramType @ 0, name @ 8, u @ 16);
    assert_layout!(Qnn_OpConfigV1_t, size 72, name @ 0, packageName @ 8, typeName @ 16, numOfParams @ 24,
        params @ 32, numOfInputs @ 40, inputTensors @ 48, numOfOutputs @ 56, outputTensors @ 64);
    assert_layout!(Qnn_OpConfig_t, size 80, version @ 0, u @ 8);
    assert_layout!(Qnn_MemShape_t, size 24, numDim @ 0, dimSize @ 8, shapeConfig @ 16);
    assert_layout!(Qnn_MemDmaBufInfo_t, size 16, fd @ 0, data @ 8);
    assert_layout!(Qnn_MemDescriptor_t, size 48, memShape @ 0, dataType @ 24, memType @ 28, u @ 32);
    assert_layout!(QnnMemHtp_Descriptor_t, size 32, type_ @ 0, size @ 8, u @ 16);
    assert_layout!(QnnHtpMem_SharedBufferConfig_t, size 16, fd @ 0, offset @ 8);
    assert_layout!(Qnn_Config_t, size 16, option @ 0, value @ 8);
    assert_layout!(QnnHtpDevice_CustomConfig_t, size 12, option @ 0, u @ 4);
    assert_layout!(QnnHtpGraph_CustomConfig_t, size 64, option @ 0, u @ 8);
    assert_layout!(QnnHtpPerfInfrastructure_PowerConfig_t, size 68, option @ 0, u @ 4);
    const _: () = assert!(std::mem::align_of::<QnnHtpPerfInfrastructure_PowerConfig_t>() == 4);
    assert_layout!(QnnHtpDevice_PerfInfrastructure_t, size 32);
    assert_layout!(QnnHtpDevice_Infrastructure_t, size 40, infraType @ 0, perfInfra @ 8);
}
