//! Built-in (`qti.aisw`) op type and param names, plus small constructors so a
//! backend lowering a transformer does not spell strings by hand.

use crate::graph::{Op, ParamValue, TensorId};

/// `FullyConnected`: in[0] `[.., K]`, in[1] weights `[N, K]`, optional in[2] bias `[N]`.
pub const FULLY_CONNECTED: &str = "FullyConnected";
/// `MatMul`: params `transpose_in0`, `transpose_in1`.
pub const MAT_MUL: &str = "MatMul";
/// `ElementWiseAdd`.
pub const ELEMENT_WISE_ADD: &str = "ElementWiseAdd";
/// `ElementWiseMultiply`.
pub const ELEMENT_WISE_MULTIPLY: &str = "ElementWiseMultiply";
/// `ElementWiseSubtract`.
pub const ELEMENT_WISE_SUBTRACT: &str = "ElementWiseSubtract";
/// `ElementWiseDivide`.
pub const ELEMENT_WISE_DIVIDE: &str = "ElementWiseDivide";
/// `Sigmoid` (`1 / (1 + e^-x)`; SwiGLU's gate is `x · Sigmoid(x)`).
pub const SIGMOID: &str = "Sigmoid";
/// `ElementWiseSin`.
pub const ELEMENT_WISE_SIN: &str = "ElementWiseSin";
/// `ElementWiseCos`.
pub const ELEMENT_WISE_COS: &str = "ElementWiseCos";
/// `ElementWiseNeg`.
pub const ELEMENT_WISE_NEG: &str = "ElementWiseNeg";
/// `ElementWiseExp`.
pub const ELEMENT_WISE_EXP: &str = "ElementWiseExp";
/// `ElementWiseRsqrt`.
pub const ELEMENT_WISE_RSQRT: &str = "ElementWiseRsqrt";
/// `RmsNorm`: inputs x, gamma, optional beta; params `epsilon`, `axes`.
pub const RMS_NORM: &str = "RmsNorm";
/// `Softmax`: params `axis`, `beta`.
pub const SOFTMAX: &str = "Softmax";
/// `Reshape`.
pub const RESHAPE: &str = "Reshape";
/// `Transpose`: param `perm`.
pub const TRANSPOSE: &str = "Transpose";
/// `Concat`: param `axis`.
pub const CONCAT: &str = "Concat";
/// `Split`: params `axis`, `split_index` (the start of every output but the first, ascending);
/// one output per piece.
pub const SPLIT: &str = "Split";

/// Every op type the constructors here emit (what a provider must support to run our lowering).
pub const ALL: &[&str] = &[
    FULLY_CONNECTED,
    MAT_MUL,
    ELEMENT_WISE_ADD,
    ELEMENT_WISE_MULTIPLY,
    ELEMENT_WISE_SUBTRACT,
    ELEMENT_WISE_DIVIDE,
    SIGMOID,
    ELEMENT_WISE_SIN,
    ELEMENT_WISE_COS,
    ELEMENT_WISE_NEG,
    ELEMENT_WISE_EXP,
    ELEMENT_WISE_RSQRT,
    RMS_NORM,
    SOFTMAX,
    RESHAPE,
    TRANSPOSE,
    CONCAT,
    SPLIT,
];

/// FullyConnected `y = x · Wᵀ (+ b)`.
pub fn fully_connected(name: &str, x: TensorId, w: TensorId, bias: Option<TensorId>, y: TensorId) -> Op {
    let mut ins = vec![x, w];
    ins.extend(bias);
    Op::new(name, FULLY_CONNECTED).inputs(&ins).outputs(&[y])
}

/// MatMul with optional transposes.
pub fn mat_mul(name: &str, a: TensorId, b: TensorId, transpose_a: bool, transpose_b: bool, y: TensorId) -> Op {
    Op::new(name, MAT_MUL)
        .inputs(&[a, b])
        .outputs(&[y])
        .param("transpose_in0", ParamValue::Bool(transpose_a))
        .param("transpose_in1", ParamValue::Bool(transpose_b))
}

/// Binary element-wise op (`ELEMENT_WISE_ADD`, ...), numpy broadcasting.
pub fn binary(name: &str, op_type: &str, a: TensorId, b: TensorId, y: TensorId) -> Op {
    Op::new(name, op_type).inputs(&[a, b]).outputs(&[y])
}

/// Unary element-wise op (`ELEMENT_WISE_SIN`, ...).
pub fn unary(name: &str, op_type: &str, x: TensorId, y: TensorId) -> Op {
    Op::new(name, op_type).inputs(&[x]).outputs(&[y])
}

/// RmsNorm over the last axis `axis`: `y = x / sqrt(mean(x²) + eps) · gamma`.
pub fn rms_norm(name: &str, x: TensorId, gamma: TensorId, epsilon: f32, axis: u32, y: TensorId) -> Op {
    Op::new(name, RMS_NORM)
        .inputs(&[x, gamma])
        .outputs(&[y])
        .param("epsilon", ParamValue::F32(epsilon))
        .param("axes", ParamValue::U32Tensor(vec![axis]))
}

/// Softmax along `axis` with temperature `beta`.
pub fn softmax(name: &str, x: TensorId, axis: u32, beta: f32, y: TensorId) -> Op {
    Op::new(name, SOFTMAX)
        .inputs(&[x])
        .outputs(&[y])
        .param("axis", ParamValue::U32(axis))
        .param("beta", ParamValue::F32(beta))
}

/// Reshape (the output spec carries the new shape).
pub fn reshape(name: &str, x: TensorId, y: TensorId) -> Op {
    Op::new(name, RESHAPE).inputs(&[x]).outputs(&[y])
}

/// Transpose with permutation `perm`.
pub fn transpose(name: &str, x: TensorId, perm: &[u32], y: TensorId) -> Op {
    Op::new(name, TRANSPOSE).inputs(&[x]).outputs(&[y]).param("perm", ParamValue::U32Tensor(perm.to_vec()))
}

/// Concat along `axis`.
pub fn concat(name: &str, xs: &[TensorId], axis: u32, y: TensorId) -> Op {
    Op::new(name, CONCAT).inputs(xs).outputs(&[y]).param("axis", ParamValue::U32(axis))
}

/// Split `x` along `axis` into `ys.len()` pieces; `split_index` holds the start of every piece but
/// the first (ascending, each inside the axis), so `ys.len() == split_index.len() + 1`.
pub fn split(name: &str, x: TensorId, axis: u32, split_index: &[u32], ys: &[TensorId]) -> Op {
    Op::new(name, SPLIT)
        .inputs(&[x])
        .outputs(ys)
        .param("axis", ParamValue::U32(axis))
        .param("split_index", ParamValue::U32Tensor(split_index.to_vec()))
}
