//! The QNN interface function table: all 71 slots in documented order
//! (62 in API 2.18 / QAIRT 2.25, 69 in 2.30 / QAIRT 2.40, 71 in 2.32 / QAIRT 2.43).
//! Slot `i` sits at byte `8 * i` of the table, which starts at offset 40 of `QnnInterface_t`.
//!
//! Slots whose C signature the reference documents are typed; the rest are
//! `QnnOpaqueFn_t` (a nullable function pointer we never call) so the layout is
//! still exact. Generated once by a script from the slot list; edit by hand now.

use super::types::*;
use std::ffi::{c_char, c_void};

/// Log callback: `(fmt, level, timestamp, va_list)`. The `va_list` is passed as an
/// opaque pointer (on x86-64 and AArch64 Linux/Android it is pointer-sized at the
/// call boundary) and may be forwarded to `vsnprintf`.
pub type QnnLog_Callback_t =
    Option<unsafe extern "C" fn(fmt: *const c_char, level: u32, timestamp: u64, args: *mut c_void)>;

/// A slot whose signature is not modelled; never called.
pub type QnnOpaqueFn_t = Option<unsafe extern "C" fn()>;

/// `QnnInterface_getProviders(const QnnInterface_t*** list, uint32_t* n)`.
pub type QnnInterfaceGetProvidersFn_t =
    unsafe extern "C" fn(list: *mut *mut *const QnnInterface_t, num: *mut u32) -> Qnn_ErrorHandle_t;

/// Symbol name of the provider query.
pub const QNN_INTERFACE_GET_PROVIDERS_SYMBOL: &[u8] = b"QnnInterface_getProviders\0";

/// Number of slots present in the table for a given core API minor (major 2).
pub const fn slot_count_for_core_minor(minor: u32) -> usize {
    if minor >= 32 {
        71
    } else if minor >= 30 {
        69
    } else {
        62
    }
}

/// Total number of slots modelled.
pub const QNN_INTERFACE_SLOT_COUNT: usize = 71;

/// `propertyHasCapability` signature.
pub type PropertyHasCapabilityFn_t = Option<unsafe extern "C" fn(key: u32) -> Qnn_ErrorHandle_t>;

/// `backendCreate` signature.
pub type BackendCreateFn_t = Option<
    unsafe extern "C" fn(
        log: Qnn_LogHandle_t,
        config: *const *const Qnn_Config_t,
        backend: *mut Qnn_BackendHandle_t,
    ) -> Qnn_ErrorHandle_t,
>;

/// `backendGetApiVersion` signature.
pub type BackendGetApiVersionFn_t = Option<unsafe extern "C" fn(version: *mut Qnn_ApiVersion_t) -> Qnn_ErrorHandle_t>;

/// `backendGetBuildId` signature.
pub type BackendGetBuildIdFn_t = Option<unsafe extern "C" fn(id: *mut *const c_char) -> Qnn_ErrorHandle_t>;

/// `backendValidateOpConfig` signature.
pub type BackendValidateOpConfigFn_t =
    Option<unsafe extern "C" fn(backend: Qnn_BackendHandle_t, op: Qnn_OpConfig_t) -> Qnn_ErrorHandle_t>;

/// `backendFree` signature.
pub type BackendFreeFn_t = Option<unsafe extern "C" fn(backend: Qnn_BackendHandle_t) -> Qnn_ErrorHandle_t>;

/// `contextCreate` signature.
pub type ContextCreateFn_t = Option<
    unsafe extern "C" fn(
        backend: Qnn_BackendHandle_t,
        device: Qnn_DeviceHandle_t,
        config: *const *const Qnn_Config_t,
        context: *mut Qnn_ContextHandle_t,
    ) -> Qnn_ErrorHandle_t,
>;

/// `contextGetBinarySize` signature.
pub type ContextGetBinarySizeFn_t =
    Option<unsafe extern "C" fn(context: Qnn_ContextHandle_t, size: *mut u64) -> Qnn_ErrorHandle_t>;

/// `contextGetBinary` signature.
pub type ContextGetBinaryFn_t = Option<
    unsafe extern "C" fn(
        context: Qnn_ContextHandle_t,
        buffer: *mut c_void,
        size: u64,
        written: *mut u64,
    ) -> Qnn_ErrorHandle_t,
>;

/// `contextCreateFromBinary` signature.
pub type ContextCreateFromBinaryFn_t = Option<
    unsafe extern "C" fn(
        backend: Qnn_BackendHandle_t,
        device: Qnn_DeviceHandle_t,
        config: *const *const Qnn_Config_t,
        buffer: *const c_void,
        size: u64,
        context: *mut Qnn_ContextHandle_t,
        profile: Qnn_ProfileHandle_t,
    ) -> Qnn_ErrorHandle_t,
>;

/// `contextFree` signature.
pub type ContextFreeFn_t =
    Option<unsafe extern "C" fn(context: Qnn_ContextHandle_t, profile: Qnn_ProfileHandle_t) -> Qnn_ErrorHandle_t>;

/// `graphCreate` signature.
pub type GraphCreateFn_t = Option<
    unsafe extern "C" fn(
        context: Qnn_ContextHandle_t,
        name: *const c_char,
        config: *const *const Qnn_Config_t,
        graph: *mut Qnn_GraphHandle_t,
    ) -> Qnn_ErrorHandle_t,
>;

/// `graphAddNode` signature.
pub type GraphAddNodeFn_t =
    Option<unsafe extern "C" fn(graph: Qnn_GraphHandle_t, op: Qnn_OpConfig_t) -> Qnn_ErrorHandle_t>;

/// `graphFinalize` signature.
pub type GraphFinalizeFn_t = Option<
    unsafe extern "C" fn(
        graph: Qnn_GraphHandle_t,
        profile: Qnn_ProfileHandle_t,
        signal: Qnn_SignalHandle_t,
    ) -> Qnn_ErrorHandle_t,
>;

/// `graphRetrieve` signature.
pub type GraphRetrieveFn_t = Option<
    unsafe extern "C" fn(
        context: Qnn_ContextHandle_t,
        name: *const c_char,
        graph: *mut Qnn_GraphHandle_t,
    ) -> Qnn_ErrorHandle_t,
>;

/// `graphExecute` signature.
pub type GraphExecuteFn_t = Option<
    unsafe extern "C" fn(
        graph: Qnn_GraphHandle_t,
        inputs: *const Qnn_Tensor_t,
        num_inputs: u32,
        outputs: *mut Qnn_Tensor_t,
        num_outputs: u32,
        profile: Qnn_ProfileHandle_t,
        signal: Qnn_SignalHandle_t,
    ) -> Qnn_ErrorHandle_t,
>;

/// `tensorCreateGraphTensor` signature.
pub type TensorCreateGraphTensorFn_t =
    Option<unsafe extern "C" fn(graph: Qnn_GraphHandle_t, tensor: *mut Qnn_Tensor_t) -> Qnn_ErrorHandle_t>;

/// `logCreate` signature.
pub type LogCreateFn_t = Option<
    unsafe extern "C" fn(callback: QnnLog_Callback_t, level: u32, log: *mut Qnn_LogHandle_t) -> Qnn_ErrorHandle_t,
>;

/// `logSetLogLevel` signature.
pub type LogSetLogLevelFn_t = Option<unsafe extern "C" fn(log: Qnn_LogHandle_t, level: u32) -> Qnn_ErrorHandle_t>;

/// `logFree` signature.
pub type LogFreeFn_t = Option<unsafe extern "C" fn(log: Qnn_LogHandle_t) -> Qnn_ErrorHandle_t>;

/// `memRegister` signature.
pub type MemRegisterFn_t = Option<
    unsafe extern "C" fn(
        context: Qnn_ContextHandle_t,
        descriptors: *const Qnn_MemDescriptor_t,
        count: u32,
        handles: *mut Qnn_MemHandle_t,
    ) -> Qnn_ErrorHandle_t,
>;

/// `memDeRegister` signature.
pub type MemDeRegisterFn_t =
    Option<unsafe extern "C" fn(handles: *const Qnn_MemHandle_t, count: u32) -> Qnn_ErrorHandle_t>;

/// `deviceGetInfrastructure` signature.
pub type DeviceGetInfrastructureFn_t =
    Option<unsafe extern "C" fn(infra: *mut *const QnnHtpDevice_Infrastructure_t) -> Qnn_ErrorHandle_t>;

/// `deviceCreate` signature.
pub type DeviceCreateFn_t = Option<
    unsafe extern "C" fn(
        log: Qnn_LogHandle_t,
        config: *const *const Qnn_Config_t,
        device: *mut Qnn_DeviceHandle_t,
    ) -> Qnn_ErrorHandle_t,
>;

/// `deviceFree` signature.
pub type DeviceFreeFn_t = Option<unsafe extern "C" fn(device: Qnn_DeviceHandle_t) -> Qnn_ErrorHandle_t>;

/// `errorGetMessage` signature.
pub type ErrorGetMessageFn_t =
    Option<unsafe extern "C" fn(error: Qnn_ErrorHandle_t, message: *mut *const c_char) -> Qnn_ErrorHandle_t>;

/// The function table (`QNN_INTERFACE_VER_TYPE`), 71 × 8 B.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct QnnInterface_FunctionTable_t {
    /// Slot 0.
    pub propertyHasCapability: PropertyHasCapabilityFn_t,
    /// Slot 1.
    pub backendCreate: BackendCreateFn_t,
    /// Slot 2.
    pub backendSetConfig: QnnOpaqueFn_t,
    /// Slot 3.
    pub backendGetApiVersion: BackendGetApiVersionFn_t,
    /// Slot 4.
    pub backendGetBuildId: BackendGetBuildIdFn_t,
    /// Slot 5.
    pub backendRegisterOpPackage: QnnOpaqueFn_t,
    /// Slot 6.
    pub backendGetSupportedOperations: QnnOpaqueFn_t,
    /// Slot 7.
    pub backendValidateOpConfig: BackendValidateOpConfigFn_t,
    /// Slot 8.
    pub backendFree: BackendFreeFn_t,
    /// Slot 9.
    pub contextCreate: ContextCreateFn_t,
    /// Slot 10.
    pub contextSetConfig: QnnOpaqueFn_t,
    /// Slot 11.
    pub contextGetBinarySize: ContextGetBinarySizeFn_t,
    /// Slot 12.
    pub contextGetBinary: ContextGetBinaryFn_t,
    /// Slot 13.
    pub contextCreateFromBinary: ContextCreateFromBinaryFn_t,
    /// Slot 14.
    pub contextFree: ContextFreeFn_t,
    /// Slot 15.
    pub graphCreate: GraphCreateFn_t,
    /// Slot 16.
    pub graphCreateSubgraph: QnnOpaqueFn_t,
    /// Slot 17.
    pub graphSetConfig: QnnOpaqueFn_t,
    /// Slot 18.
    pub graphAddNode: GraphAddNodeFn_t,
    /// Slot 19.
    pub graphFinalize: GraphFinalizeFn_t,
    /// Slot 20.
    pub graphRetrieve: GraphRetrieveFn_t,
    /// Slot 21.
    pub graphExecute: GraphExecuteFn_t,
    /// Slot 22.
    pub graphExecuteAsync: QnnOpaqueFn_t,
    /// Slot 23.
    pub tensorCreateContextTensor: QnnOpaqueFn_t,
    /// Slot 24.
    pub tensorCreateGraphTensor: TensorCreateGraphTensorFn_t,
    /// Slot 25.
    pub logCreate: LogCreateFn_t,
    /// Slot 26.
    pub logSetLogLevel: LogSetLogLevelFn_t,
    /// Slot 27.
    pub logFree: LogFreeFn_t,
    /// Slot 28.
    pub profileCreate: QnnOpaqueFn_t,
    /// Slot 29.
    pub profileSetConfig: QnnOpaqueFn_t,
    /// Slot 30.
    pub profileGetEvents: QnnOpaqueFn_t,
    /// Slot 31.
    pub profileGetSubEvents: QnnOpaqueFn_t,
    /// Slot 32.
    pub profileGetEventData: QnnOpaqueFn_t,
    /// Slot 33.
    pub profileGetExtendedEventData: QnnOpaqueFn_t,
    /// Slot 34.
    pub profileFree: QnnOpaqueFn_t,
    /// Slot 35.
    pub memRegister: MemRegisterFn_t,
    /// Slot 36.
    pub memDeRegister: MemDeRegisterFn_t,
    /// Slot 37.
    pub deviceGetPlatformInfo: QnnOpaqueFn_t,
    /// Slot 38.
    pub deviceFreePlatformInfo: QnnOpaqueFn_t,
    /// Slot 39.
    pub deviceGetInfrastructure: DeviceGetInfrastructureFn_t,
    /// Slot 40.
    pub deviceCreate: DeviceCreateFn_t,
    /// Slot 41.
    pub deviceSetConfig: QnnOpaqueFn_t,
    /// Slot 42.
    pub deviceGetInfo: QnnOpaqueFn_t,
    /// Slot 43.
    pub deviceFree: DeviceFreeFn_t,
    /// Slot 44.
    pub signalCreate: QnnOpaqueFn_t,
    /// Slot 45.
    pub signalSetConfig: QnnOpaqueFn_t,
    /// Slot 46.
    pub signalTrigger: QnnOpaqueFn_t,
    /// Slot 47.
    pub signalFree: QnnOpaqueFn_t,
    /// Slot 48.
    pub errorGetMessage: ErrorGetMessageFn_t,
    /// Slot 49.
    pub errorGetVerboseMessage: QnnOpaqueFn_t,
    /// Slot 50.
    pub errorFreeVerboseMessage: QnnOpaqueFn_t,
    /// Slot 51.
    pub graphPrepareExecutionEnvironment: QnnOpaqueFn_t,
    /// Slot 52.
    pub graphReleaseExecutionEnvironment: QnnOpaqueFn_t,
    /// Slot 53.
    pub graphGetProperty: QnnOpaqueFn_t,
    /// Slot 54.
    pub contextValidateBinary: QnnOpaqueFn_t,
    /// Slot 55.
    pub contextCreateFromBinaryWithSignal: QnnOpaqueFn_t,
    /// Slot 56.
    pub contextCreateFromBinaryListAsync: QnnOpaqueFn_t,
    /// Slot 57.
    pub tensorUpdateGraphTensors: QnnOpaqueFn_t,
    /// Slot 58.
    pub tensorUpdateContextTensors: QnnOpaqueFn_t,
    /// Slot 59.
    pub contextGetBinarySectionSize: QnnOpaqueFn_t,
    /// Slot 60.
    pub contextGetBinarySection: QnnOpaqueFn_t,
    /// Slot 61.
    pub contextApplyBinarySection: QnnOpaqueFn_t,
    /// Slot 62.
    pub backendGetProperty: QnnOpaqueFn_t,
    /// Slot 63.
    pub contextGetProperty: QnnOpaqueFn_t,
    /// Slot 64.
    pub contextGetIncrementalBinary: QnnOpaqueFn_t,
    /// Slot 65.
    pub contextReleaseIncrementalBinary: QnnOpaqueFn_t,
    /// Slot 66.
    pub contextFinalize: QnnOpaqueFn_t,
    /// Slot 67.
    pub globalConfigSet: QnnOpaqueFn_t,
    /// Slot 68.
    pub contextCreateFromBinaryWithCallback: QnnOpaqueFn_t,
    /// Slot 69.
    pub contextGetBinarySectionUpdate: QnnOpaqueFn_t,
    /// Slot 70.
    pub contextFreeBinarySectionUpdate: QnnOpaqueFn_t,
}

impl QnnInterface_FunctionTable_t {
    /// A table with every slot NULL.
    pub const EMPTY: Self = Self {
        propertyHasCapability: None,
        backendCreate: None,
        backendSetConfig: None,
        backendGetApiVersion: None,
        backendGetBuildId: None,
        backendRegisterOpPackage: None,
        backendGetSupportedOperations: None,
        backendValidateOpConfig: None,
        backendFree: None,
        contextCreate: None,
        contextSetConfig: None,
        contextGetBinarySize: None,
        contextGetBinary: None,
        contextCreateFromBinary: None,
        contextFree: None,
        graphCreate: None,
        graphCreateSubgraph: None,
        graphSetConfig: None,
        graphAddNode: None,
        graphFinalize: None,
        graphRetrieve: None,
        graphExecute: None,
        graphExecuteAsync: None,
        tensorCreateContextTensor: None,
        tensorCreateGraphTensor: None,
        logCreate: None,
        logSetLogLevel: None,
        logFree: None,
        profileCreate: None,
        profileSetConfig: None,
        profileGetEvents: None,
        profileGetSubEvents: None,
        profileGetEventData: None,
        profileGetExtendedEventData: None,
        profileFree: None,
        memRegister: None,
        memDeRegister: None,
        deviceGetPlatformInfo: None,
        deviceFreePlatformInfo: None,
        deviceGetInfrastructure: None,
        deviceCreate: None,
        deviceSetConfig: None,
        deviceGetInfo: None,
        deviceFree: None,
        signalCreate: None,
        signalSetConfig: None,
        signalTrigger: None,
        signalFree: None,
        errorGetMessage: None,
        errorGetVerboseMessage: None,
        errorFreeVerboseMessage: None,
        graphPrepareExecutionEnvironment: None,
        graphReleaseExecutionEnvironment: None,
        graphGetProperty: None,
        contextValidateBinary: None,
        contextCreateFromBinaryWithSignal: None,
        contextCreateFromBinaryListAsync: None,
        tensorUpdateGraphTensors: None,
        tensorUpdateContextTensors: None,
        contextGetBinarySectionSize: None,
        contextGetBinarySection: None,
        contextApplyBinarySection: None,
        backendGetProperty: None,
        contextGetProperty: None,
        contextGetIncrementalBinary: None,
        contextReleaseIncrementalBinary: None,
        contextFinalize: None,
        globalConfigSet: None,
        contextCreateFromBinaryWithCallback: None,
        contextGetBinarySectionUpdate: None,
        contextFreeBinarySectionUpdate: None,
    };
}

/// Slot names in table order (for diagnostics and tests).
pub const SLOT_NAMES: [&str; QNN_INTERFACE_SLOT_COUNT] = [
    "propertyHasCapability",
    "backendCreate",
    "backendSetConfig",
    "backendGetApiVersion",
    "backendGetBuildId",
    "backendRegisterOpPackage",
    "backendGetSupportedOperations",
    "backendValidateOpConfig",
    "backendFree",
    "contextCreate",
    "contextSetConfig",
    "contextGetBinarySize",
    "contextGetBinary",
    "contextCreateFromBinary",
    "contextFree",
    "graphCreate",
    "graphCreateSubgraph",
    "graphSetConfig",
    "graphAddNode",
    "graphFinalize",
    "graphRetrieve",
    "graphExecute",
    "graphExecuteAsync",
    "tensorCreateContextTensor",
    "tensorCreateGraphTensor",
    "logCreate",
    "logSetLogLevel",
    "logFree",
    "profileCreate",
    "profileSetConfig",
    "profileGetEvents",
    "profileGetSubEvents",
    "profileGetEventData",
    "profileGetExtendedEventData",
    "profileFree",
    "memRegister",
    "memDeRegister",
    "deviceGetPlatformInfo",
    "deviceFreePlatformInfo",
    "deviceGetInfrastructure",
    "deviceCreate",
    "deviceSetConfig",
    "deviceGetInfo",
    "deviceFree",
    "signalCreate",
    "signalSetConfig",
    "signalTrigger",
    "signalFree",
    "errorGetMessage",
    "errorGetVerboseMessage",
    "errorFreeVerboseMessage",
    "graphPrepareExecutionEnvironment",
    "graphReleaseExecutionEnvironment",
    "graphGetProperty",
    "contextValidateBinary",
    "contextCreateFromBinaryWithSignal",
    "contextCreateFromBinaryListAsync",
    "tensorUpdateGraphTensors",
    "tensorUpdateContextTensors",
    "contextGetBinarySectionSize",
    "contextGetBinarySection",
    "contextApplyBinarySection",
    "backendGetProperty",
    "contextGetProperty",
    "contextGetIncrementalBinary",
    "contextReleaseIncrementalBinary",
    "contextFinalize",
    "globalConfigSet",
    "contextCreateFromBinaryWithCallback",
    "contextGetBinarySectionUpdate",
    "contextFreeBinarySectionUpdate",
];

/// `QnnInterface_t`: one provider returned by `QnnInterface_getProviders`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct QnnInterface_t {
    /// `QNN_BACKEND_ID_*`.
    pub backendId: u32,
    /// Provider name, e.g. `"HTP_QTI_AISW"`.
    pub providerName: *const c_char,
    /// API versions.
    pub apiVersion: Qnn_ApiVersion_t,
    /// Function table (C member `v2_<minor>`); only a prefix exists in older providers.
    pub functions: QnnInterface_FunctionTable_t,
}

#[cfg(target_pointer_width = "64")]
mod layout_checks {
    use super::*;
    use std::mem::{offset_of, size_of};
    const _: () = assert!(size_of::<QnnInterface_FunctionTable_t>() == 8 * QNN_INTERFACE_SLOT_COUNT);
    const _: () = assert!(offset_of!(QnnInterface_t, backendId) == 0);
    const _: () = assert!(offset_of!(QnnInterface_t, providerName) == 8);
    const _: () = assert!(offset_of!(QnnInterface_t, apiVersion) == 16);
    const _: () =
        assert!(offset_of!(QnnInterface_t, apiVersion) + offset_of!(Qnn_ApiVersion_t, backendApiVersion) == 28);
    const _: () = assert!(offset_of!(QnnInterface_t, functions) == 40);
    const _: () = assert!(size_of::<QnnInterface_t>() == 40 + 8 * QNN_INTERFACE_SLOT_COUNT);

    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, propertyHasCapability) == 0);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, backendCreate) == 8);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, backendSetConfig) == 16);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, backendGetApiVersion) == 24);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, backendGetBuildId) == 32);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, backendRegisterOpPackage) == 40);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, backendGetSupportedOperations) == 48);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, backendValidateOpConfig) == 56);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, backendFree) == 64);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, contextCreate) == 72);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, contextSetConfig) == 80);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, contextGetBinarySize) == 88);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, contextGetBinary) == 96);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, contextCreateFromBinary) == 104);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, contextFree) == 112);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, graphCreate) == 120);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, graphCreateSubgraph) == 128);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, graphSetConfig) == 136);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, graphAddNode) == 144);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, graphFinalize) == 152);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, graphRetrieve) == 160);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, graphExecute) == 168);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, graphExecuteAsync) == 176);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, tensorCreateContextTensor) == 184);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, tensorCreateGraphTensor) == 192);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, logCreate) == 200);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, logSetLogLevel) == 208);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, logFree) == 216);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, profileCreate) == 224);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, profileSetConfig) == 232);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, profileGetEvents) == 240);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, profileGetSubEvents) == 248);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, profileGetEventData) == 256);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, profileGetExtendedEventData) == 264);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, profileFree) == 272);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, memRegister) == 280);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, memDeRegister) == 288);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, deviceGetPlatformInfo) == 296);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, deviceFreePlatformInfo) == 304);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, deviceGetInfrastructure) == 312);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, deviceCreate) == 320);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, deviceSetConfig) == 328);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, deviceGetInfo) == 336);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, deviceFree) == 344);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, signalCreate) == 352);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, signalSetConfig) == 360);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, signalTrigger) == 368);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, signalFree) == 376);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, errorGetMessage) == 384);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, errorGetVerboseMessage) == 392);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, errorFreeVerboseMessage) == 400);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, graphPrepareExecutionEnvironment) == 408);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, graphReleaseExecutionEnvironment) == 416);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, graphGetProperty) == 424);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, contextValidateBinary) == 432);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, contextCreateFromBinaryWithSignal) == 440);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, contextCreateFromBinaryListAsync) == 448);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, tensorUpdateGraphTensors) == 456);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, tensorUpdateContextTensors) == 464);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, contextGetBinarySectionSize) == 472);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, contextGetBinarySection) == 480);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, contextApplyBinarySection) == 488);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, backendGetProperty) == 496);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, contextGetProperty) == 504);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, contextGetIncrementalBinary) == 512);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, contextReleaseIncrementalBinary) == 520);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, contextFinalize) == 528);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, globalConfigSet) == 536);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, contextCreateFromBinaryWithCallback) == 544);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, contextGetBinarySectionUpdate) == 552);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, contextFreeBinarySectionUpdate) == 560);
    // Spot checks measured from the headers (offsets inside QnnInterface_t).
    const _: () = assert!(40 + offset_of!(QnnInterface_FunctionTable_t, graphExecute) == 40 + 168);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, memRegister) == 280);
    const _: () = assert!(offset_of!(QnnInterface_FunctionTable_t, deviceCreate) == 320);
}
