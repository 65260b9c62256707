//! Graph construction (tensors + nodes → finalize) and execution.
//!
//! The builder borrows static weight data for `'w` instead of copying it: QNN
//! copies STATIC data at creation, but the reference asks every buffer to stay
//! alive until `graphFinalize` returns, and borrowing makes that free.

use crate::error::{check, QnnError, Result};
use crate::ffi::*;
use crate::handles::{config_arg, null_terminated, Context, ContextInner};
use crate::loader::qnn_fn;
use crate::mem::RegisteredBuffer;
use crate::tensor::{DType, OwnedTensor, TensorKind, TensorMeta, TensorSpec};
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::marker::PhantomData;
use std::ptr::null_mut;
use std::sync::Arc;

/// Index of a tensor inside a [`GraphBuilder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TensorId(usize);

/// A node parameter value.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    /// BOOL_8 scalar.
    Bool(bool),
    /// UINT_32 scalar.
    U32(u32),
    /// INT_32 scalar.
    I32(i32),
    /// FLOAT_32 scalar.
    F32(f32),
    /// UINT_32 tensor (e.g. `perm`, `axes`), created as a STATIC graph tensor.
    U32Tensor(Vec<u32>),
}

/// A node to add: op type, inputs, outputs, params.
#[derive(Debug, Clone)]
pub struct Op {
    /// Node name (unique in the graph).
    pub name: String,
    /// Op package (`"qti.aisw"` for built-ins).
    pub package: String,
    /// Op type, e.g. `"FullyConnected"`.
    pub type_name: String,
    /// Inputs in op order.
    pub inputs: Vec<TensorId>,
    /// Outputs in op order.
    pub outputs: Vec<TensorId>,
    /// Named params.
    pub params: Vec<(String, ParamValue)>,
}

impl Op {
    /// A built-in (`qti.aisw`) op.
    pub fn new(name: impl Into<String>, type_name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            package: QNN_OP_PACKAGE_NAME_QTI_AISW.to_string(),
            type_name: type_name.into(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            params: Vec::new(),
        }
    }

    /// Sets inputs.
    pub fn inputs(mut self, ids: &[TensorId]) -> Self {
        self.inputs = ids.to_vec();
        self
    }

    /// Sets outputs.
    pub fn outputs(mut self, ids: &[TensorId]) -> Self {
        self.outputs = ids.to_vec();
        self
    }

    /// Adds a param.
    pub fn param(mut self, name: impl Into<String>, value: ParamValue) -> Self {
        self.params.push((name.into(), value));
        self
    }
}

/// Graph-level HTP options (ignored by backends that do not know them).
#[derive(Debug, Clone, Default)]
pub struct GraphOptions {
    /// Run fp32-I/O graphs in fp16 (PRECISION FLOAT16).
    pub fp16_precision: bool,
    /// VTCM size in MB (0 = max).
    pub vtcm_mb: Option<u32>,
    /// FINALIZE_OPTIMIZATION_FLAG value 1–3.
    pub finalize_optimization: Option<f32>,
}

/// Everything a node's raw op config points at, kept alive until finalize.
struct NodeStorage {
    _name: CString,
    _package: CString,
    _type_name: CString,
    _param_names: Vec<CString>,
    _params: Vec<Qnn_Param_t>,
    _inputs: Vec<Qnn_Tensor_t>,
    _outputs: Vec<Qnn_Tensor_t>,
}

/// Builds one graph in a context. Finalize to get an executable [`Graph`].
pub struct GraphBuilder<'w> {
    ctx: Arc<ContextInner>,
    handle: Qnn_GraphHandle_t,
    name: String,
    tensors: Vec<OwnedTensor>,
    param_tensors: Vec<(OwnedTensor, Vec<u8>)>,
    nodes: Vec<NodeStorage>,
    _weights: PhantomData<&'w [u8]>,
}

impl Context {
    /// `graphCreate` with the given options.
    pub fn graph_builder<'w>(&self, name: &str, opts: &GraphOptions) -> Result<GraphBuilder<'w>> {
        let create = qnn_fn!(self.inner.backend.lib, graphCreate)?;
        let cname =
            CString::new(name).map_err(|_| QnnError::InvalidArgument(format!("graph name {name:?} contains NUL")))?;
        let mut customs: Vec<QnnHtpGraph_CustomConfig_t> = Vec::new();
        let zero = QnnHtpGraph_CustomConfigUnion_t { _raw: [0; 7] };
        if opts.fp16_precision {
            let mut u = zero;
            u.precision = QNN_PRECISION_FLOAT16;
            customs.push(QnnHtpGraph_CustomConfig_t { option: QNN_HTP_GRAPH_CONFIG_OPTION_PRECISION, u });
        }
        if let Some(mb) = opts.vtcm_mb {
            let mut u = zero;
            u.vtcmSizeInMB = mb;
            customs.push(QnnHtpGraph_CustomConfig_t { option: QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE_IN_MB, u });
        }
        if let Some(v) = opts.finalize_optimization {
            let mut u = zero;
            u.optimizationOption = QnnHtpGraph_OptimizationOption_t {
                type_: QNN_HTP_GRAPH_OPTIMIZATION_TYPE_FINALIZE_OPTIMIZATION_FLAG,
                floatValue: v,
            };
            customs.push(QnnHtpGraph_CustomConfig_t { option: QNN_HTP_GRAPH_CONFIG_OPTION_OPTIMIZATION, u });
        }
        let configs: Vec<Qnn_Config_t> = customs
            .iter_mut()
            .map(|c| Qnn_Config_t {
                option: QNN_GRAPH_CONFIG_OPTION_CUSTOM,
                value: Qnn_ConfigValue_t { customConfig: (c as *mut QnnHtpGraph_CustomConfig_t).cast() },
            })
            .collect();
        let ptrs = null_terminated(&configs);
        let mut handle: Qnn_GraphHandle_t = null_mut();
        // SAFETY: context handle is live; name and configs outlive the call; out-pointer valid.
        let ret = unsafe { create(self.inner.handle, cname.as_ptr(), config_arg(&ptrs), &mut handle) };
        check("graphCreate", ret)?;
        Ok(GraphBuilder {
            ctx: self.inner.clone(),
            handle,
            name: name.to_string(),
            tensors: Vec::new(),
            param_tensors: Vec::new(),
            nodes: Vec::new(),
            _weights: PhantomData,
        })
    }

    /// `graphRetrieve`: a graph from a context loaded with [`Context::from_binary`],
    /// with tensor ids/specs from our sidecar metadata.
    pub fn retrieve_graph(&self, meta: &GraphMeta) -> Result<Graph> {
        let retrieve = qnn_fn!(self.inner.backend.lib, graphRetrieve)?;
        let cname = CString::new(meta.name.as_str())
            .map_err(|_| QnnError::InvalidArgument(format!("graph name {:?} contains NUL", meta.name)))?;
        let mut handle: Qnn_GraphHandle_t = null_mut();
        // SAFETY: context live; name valid C string; out-pointer valid.
        check("graphRetrieve", unsafe { retrieve(self.inner.handle, cname.as_ptr(), &mut handle) })?;
        let inputs = meta
            .inputs
            .iter()
            .map(|t| OwnedTensor::with_id(t.spec.clone(), TensorKind::Input, t.id))
            .collect::<Result<Vec<_>>>()?;
        let outputs = meta
            .outputs
            .iter()
            .map(|t| OwnedTensor::with_id(t.spec.clone(), TensorKind::Output, t.id))
            .collect::<Result<Vec<_>>>()?;
        Ok(Graph { ctx: self.inner.clone(), handle, name: meta.name.clone(), inputs, outputs })
    }
}

impl<'w> GraphBuilder<'w> {
    fn create_tensor(&mut self, spec: TensorSpec, kind: TensorKind, data: Option<&'w [u8]>) -> Result<TensorId> {
        if self.tensors.iter().any(|t| t.spec.name == spec.name) {
            return Err(QnnError::InvalidArgument(format!("duplicate tensor name {:?}", spec.name)));
        }
        let mut owned = OwnedTensor::new(spec, kind)?;
        if let Some(d) = data {
            if d.len() != owned.spec.num_bytes() {
                return Err(QnnError::InvalidArgument(format!(
                    "static tensor {:?}: {} bytes given, shape needs {}",
                    owned.spec.name,
                    d.len(),
                    owned.spec.num_bytes()
                )));
            }
        }
        self.register_tensor(&mut owned, data.unwrap_or(&[]))?;
        self.tensors.push(owned);
        Ok(TensorId(self.tensors.len() - 1))
    }

    /// `tensorCreateGraphTensor`; stores the backend-assigned id in `owned`.
    fn register_tensor(&self, owned: &mut OwnedTensor, data: &[u8]) -> Result<()> {
        let create = qnn_fn!(self.ctx.backend.lib, tensorCreateGraphTensor)?;
        let ptr = if data.is_empty() { std::ptr::null() } else { data.as_ptr() };
        let mut raw = owned.raw(ptr, data.len());
        // SAFETY: raw points into `owned` and `data`, both alive for the call; graph handle live.
        check("tensorCreateGraphTensor", unsafe { create(self.handle, &mut raw) })?;
        // SAFETY: we built a v1 tensor; the backend only writes the id.
        owned.id = unsafe { raw.u.v1.id };
        Ok(())
    }

    /// A graph input (APP_WRITE).
    pub fn input(&mut self, spec: TensorSpec) -> Result<TensorId> {
        self.create_tensor(spec, TensorKind::Input, None)
    }

    /// A graph output (APP_READ).
    pub fn output(&mut self, spec: TensorSpec) -> Result<TensorId> {
        self.create_tensor(spec, TensorKind::Output, None)
    }

    /// An intermediate tensor (NATIVE).
    pub fn native(&mut self, spec: TensorSpec) -> Result<TensorId> {
        self.create_tensor(spec, TensorKind::Native, None)
    }

    /// A weight tensor (STATIC); `data` is little-endian, dense, `spec.num_bytes()` long.
    pub fn constant(&mut self, spec: TensorSpec, data: &'w [u8]) -> Result<TensorId> {
        self.create_tensor(spec, TensorKind::Static, Some(data))
    }

    /// The spec of a tensor created by this builder.
    pub fn spec(&self, id: TensorId) -> Option<&TensorSpec> {
        self.tensors.get(id.0).map(|t| &t.spec)
    }

    fn raw_tensor(&self, id: TensorId) -> Result<Qnn_Tensor_t> {
        let t = self
            .tensors
            .get(id.0)
            .ok_or_else(|| QnnError::InvalidArgument(format!("tensor id {} not from this graph", id.0)))?;
        Ok(t.raw(std::ptr::null(), 0))
    }

    /// `graphAddNode`.
    pub fn add_node(&mut self, op: Op) -> Result<()> {
        let add = qnn_fn!(self.ctx.backend.lib, graphAddNode)?;
        let cstr = |s: &str| CString::new(s).map_err(|_| QnnError::InvalidArgument(format!("{s:?} contains NUL")));
        let name = cstr(&op.name)?;
        let package = cstr(&op.package)?;
        let type_name = cstr(&op.type_name)?;
        let inputs = op.inputs.iter().map(|&i| self.raw_tensor(i)).collect::<Result<Vec<_>>>()?;
        let outputs = op.outputs.iter().map(|&i| self.raw_tensor(i)).collect::<Result<Vec<_>>>()?;
        let mut param_names = Vec::with_capacity(op.params.len());
        let mut params = Vec::with_capacity(op.params.len());
        for (pname, value) in &op.params {
            let cname = cstr(pname)?;
            let u = match value {
                ParamValue::U32Tensor(values) => {
                    let tensor = self.param_tensor(&op.name, pname, values)?;
                    Qnn_ParamUnion_t { tensorParam: tensor }
                }
                scalar => Qnn_ParamUnion_t { scalarParam: scalar_param(scalar) },
            };
            let param_type =
                if matches!(value, ParamValue::U32Tensor(_)) { QNN_PARAMTYPE_TENSOR } else { QNN_PARAMTYPE_SCALAR };
            params.push(Qnn_Param_t { paramType: param_type, name: cname.as_ptr(), u });
            param_names.push(cname);
        }
        let v1 = Qnn_OpConfigV1_t {
            name: name.as_ptr(),
            packageName: package.as_ptr(),
            typeName: type_name.as_ptr(),
            numOfParams: params.len() as u32,
            params: params.as_mut_ptr(),
            numOfInputs: inputs.len() as u32,
            inputTensors: inputs.as_ptr().cast_mut(),
            numOfOutputs: outputs.len() as u32,
            outputTensors: outputs.as_ptr().cast_mut(),
        };
        let config = Qnn_OpConfig_t { version: QNN_OPCONFIG_VERSION_1, u: Qnn_OpConfigUnion_t { v1 } };
        // SAFETY: every pointer in `config` refers to storage moved into `self.nodes` below (heap
        // buffers do not move), which lives until finalize; graph handle live.
        let ret = unsafe { add(self.handle, config) };
        self.nodes.push(NodeStorage {
            _name: name,
            _package: package,
            _type_name: type_name,
            _param_names: param_names,
            _params: params,
            _inputs: inputs,
            _outputs: outputs,
        });
        check("graphAddNode", ret)
    }

    /// Creates a STATIC u32 tensor for a tensor-valued param and returns its raw form.
    fn param_tensor(&mut self, node: &str, param: &str, values: &[u32]) -> Result<Qnn_Tensor_t> {
        let spec = TensorSpec::new(format!("{node}__{param}"), DType::U32, &[values.len() as u32]);
        let mut owned = OwnedTensor::new(spec, TensorKind::Static)?;
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.register_tensor(&mut owned, &bytes)?;
        let raw = owned.raw(bytes.as_ptr(), bytes.len());
        self.param_tensors.push((owned, bytes));
        Ok(raw)
    }

    /// `graphFinalize`; on success the graph is executable and the builder's buffers are released.
    pub fn finalize(self) -> Result<Graph> {
        let finalize = qnn_fn!(self.ctx.backend.lib, graphFinalize)?;
        // SAFETY: graph handle live; no profile/signal.
        check("graphFinalize", unsafe { finalize(self.handle, null_mut(), null_mut()) })?;
        let mut inputs = Vec::new();
        let mut outputs = Vec::new();
        for t in self.tensors {
            match t.kind {
                TensorKind::Input => inputs.push(t),
                TensorKind::Output => outputs.push(t),
                _ => {}
            }
        }
        Ok(Graph { ctx: self.ctx, handle: self.handle, name: self.name, inputs, outputs })
    }
}

fn scalar_param(value: &ParamValue) -> Qnn_Scalar_t {
    match *value {
        ParamValue::Bool(b) => {
            Qnn_Scalar_t { dataType: QNN_DATATYPE_BOOL_8, value: Qnn_ScalarValue_t { bool8Value: b as u8 } }
        }
        ParamValue::U32(v) => {
            Qnn_Scalar_t { dataType: QNN_DATATYPE_UINT_32, value: Qnn_ScalarValue_t { uint32Value: v } }
        }
        ParamValue::I32(v) => {
            Qnn_Scalar_t { dataType: QNN_DATATYPE_INT_32, value: Qnn_ScalarValue_t { int32Value: v } }
        }
        ParamValue::F32(v) => {
            Qnn_Scalar_t { dataType: QNN_DATATYPE_FLOAT_32, value: Qnn_ScalarValue_t { floatValue: v } }
        }
        // Tensor params never reach here (handled by the caller).
        ParamValue::U32Tensor(_) => {
            Qnn_Scalar_t { dataType: QNN_DATATYPE_UNDEFINED, value: Qnn_ScalarValue_t { uint64Value: 0 } }
        }
    }
}

/// Graph name plus I/O tensor ids/specs: what a cache sidecar stores per graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GraphMeta {
    /// Graph name.
    pub name: String,
    /// Inputs in execute order.
    pub inputs: Vec<TensorMeta>,
    /// Outputs in execute order.
    pub outputs: Vec<TensorMeta>,
}

/// A finalized (or retrieved) graph, ready to execute.
pub struct Graph {
    ctx: Arc<ContextInner>,
    handle: Qnn_GraphHandle_t,
    name: String,
    inputs: Vec<OwnedTensor>,
    outputs: Vec<OwnedTensor>,
}

// SAFETY: the handle is a token; execute takes `&mut self`, so one thread at a time uses it.
unsafe impl Send for Graph {}

/// Buffer bound to one graph input or output at execute time.
pub enum Binding<'a> {
    /// Host memory (RAW client buffer; the backend may copy).
    Host(&'a [u8]),
    /// Registered shared memory (MEMHANDLE; zero-copy on HTP).
    Shared(&'a RegisteredBuffer),
}

/// Mutable output binding at execute time.
pub enum BindingMut<'a> {
    /// Host memory.
    Host(&'a mut [u8]),
    /// Registered shared memory.
    Shared(&'a RegisteredBuffer),
}

impl Graph {
    /// Graph name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Input specs in execute order.
    pub fn input_specs(&self) -> Vec<&TensorSpec> {
        self.inputs.iter().map(|t| &t.spec).collect()
    }

    /// Output specs in execute order.
    pub fn output_specs(&self) -> Vec<&TensorSpec> {
        self.outputs.iter().map(|t| &t.spec).collect()
    }

    /// Sidecar metadata for this graph.
    pub fn meta(&self) -> GraphMeta {
        let m = |ts: &[OwnedTensor]| ts.iter().map(|t| TensorMeta { id: t.id, spec: t.spec.clone() }).collect();
        GraphMeta { name: self.name.clone(), inputs: m(&self.inputs), outputs: m(&self.outputs) }
    }

    /// Executes with host buffers, inputs/outputs in declaration order.
    pub fn execute(&mut self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<()> {
        let ins: Vec<Binding<'_>> = inputs.iter().map(|b| Binding::Host(b)).collect();
        let mut outs: Vec<BindingMut<'_>> = outputs.iter_mut().map(|b| BindingMut::Host(b)).collect();
        self.execute_bound(&ins, &mut outs)
    }

    /// Executes with any mix of host and registered shared buffers.
    pub fn execute_bound(&mut self, inputs: &[Binding<'_>], outputs: &mut [BindingMut<'_>]) -> Result<()> {
        let exec = qnn_fn!(self.ctx.backend.lib, graphExecute)?;
        if inputs.len() != self.inputs.len() || outputs.len() != self.outputs.len() {
            return Err(QnnError::InvalidArgument(format!(
                "graph {:?} takes {} inputs / {} outputs, got {} / {}",
                self.name,
                self.inputs.len(),
                self.outputs.len(),
                inputs.len(),
                outputs.len()
            )));
        }
        let mut raw_in = Vec::with_capacity(inputs.len());
        for (t, b) in self.inputs.iter().zip(inputs) {
            raw_in.push(match b {
                Binding::Host(d) => {
                    check_len(&t.spec, d.len())?;
                    t.raw(d.as_ptr(), d.len())
                }
                Binding::Shared(r) => {
                    r.check_compatible(&self.ctx, &t.spec)?;
                    t.raw_memhandle(r.handle())
                }
            });
        }
        let mut raw_out = Vec::with_capacity(outputs.len());
        for (t, b) in self.outputs.iter().zip(outputs.iter_mut()) {
            raw_out.push(match b {
                BindingMut::Host(d) => {
                    check_len(&t.spec, d.len())?;
                    t.raw(d.as_mut_ptr(), d.len())
                }
                BindingMut::Shared(r) => {
                    r.check_compatible(&self.ctx, &t.spec)?;
                    t.raw_memhandle(r.handle())
                }
            });
        }
        // SAFETY: every raw tensor points at buffers borrowed for this call with the sizes checked
        // above; outputs are exclusively borrowed; graph handle live.
        let ret = unsafe {
            exec(
                self.handle,
                raw_in.as_ptr(),
                raw_in.len() as u32,
                raw_out.as_mut_ptr(),
                raw_out.len() as u32,
                null_mut(),
                null_mut(),
            )
        };
        check("graphExecute", ret)
    }

    /// The owning context.
    pub fn context(&self) -> Context {
        Context { inner: self.ctx.clone() }
    }
}

fn check_len(spec: &TensorSpec, len: usize) -> Result<()> {
    if len != spec.num_bytes() {
        return Err(QnnError::InvalidArgument(format!(
            "tensor {:?} needs {} bytes, buffer has {len}",
            spec.name,
            spec.num_bytes()
        )));
    }
    Ok(())
}
