//! Typed op emission over `qnn_sys::GraphBuilder`: each helper creates the output tensor with
//! the shape the op implies (in the graph's activation dtype) and adds the node, so lowering code
//! reads like the math.

use qnn_sys::{ops, DType, Graph, GraphBuilder, Op, TensorId, TensorSpec};

use super::quantize::StaticTensor;
use crate::error::{EngineError, Result};

/// Where an op's result goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    /// An intermediate (NATIVE) tensor.
    Native,
    /// A graph output (APP_READ).
    Output,
}

/// Builds one graph; borrows STATIC data for `'w` (QNN copies it at creation).
pub struct Emitter<'w> {
    g: GraphBuilder<'w>,
    act: DType,
}

impl<'w> Emitter<'w> {
    /// Wraps a fresh builder whose activations are `act` (F32 or F16).
    pub fn new(g: GraphBuilder<'w>, act: DType) -> Self {
        Emitter { g, act }
    }

    /// A graph input in the activation dtype.
    pub fn input(&mut self, name: &str, dims: &[u32]) -> Result<TensorId> {
        Ok(self.g.input(TensorSpec::new(name, self.act, dims))?)
    }

    /// A STATIC tensor.
    pub fn constant(&mut self, t: &'w StaticTensor) -> Result<TensorId> {
        Ok(self.g.constant(t.spec.clone(), &t.bytes)?)
    }

    /// Dims of a tensor of this graph.
    pub fn dims(&self, id: TensorId) -> Result<Vec<u32>> {
        self.g.spec(id).map(|s| s.dims.clone()).ok_or_else(|| EngineError::Backend {
            backend: "qnn".into(),
            reason: "lowering referenced a tensor of another graph".into(),
        })
    }

    fn result(&mut self, name: &str, dims: &[u32], dest: Dest) -> Result<TensorId> {
        let spec = TensorSpec::new(name, self.act, dims);
        Ok(match dest {
            Dest::Native => self.g.native(spec)?,
            Dest::Output => self.g.output(spec)?,
        })
    }

    fn node(&mut self, op: Op) -> Result<()> {
        Ok(self.g.add_node(op)?)
    }

    /// `y = x · Wᵀ (+ b)` over the last axis of `x`; `y` is `[rows, n]`.
    pub fn fully_connected(
        &mut self,
        name: &str,
        x: TensorId,
        w: TensorId,
        b: Option<TensorId>,
        dest: Dest,
    ) -> Result<TensorId> {
        let (xd, wd) = (self.dims(x)?, self.dims(w)?);
        let k = xd.last().copied().unwrap_or(1).max(1);
        let rows = xd.iter().product::<u32>() / k;
        let y = self.result(name, &[rows, wd[0]], dest)?;
        self.node(ops::fully_connected(&format!("{name}.op"), x, w, b, y))?;
        Ok(y)
    }

    /// Batched `a · b` (or `a · bᵀ`), batch dims broadcast.
    pub fn mat_mul(&mut self, name: &str, a: TensorId, b: TensorId, transpose_b: bool) -> Result<TensorId> {
        let (ad, bd) = (self.dims(a)?, self.dims(b)?);
        let n = if transpose_b { bd[bd.len() - 2] } else { bd[bd.len() - 1] };
        let mut dims = ad.clone();
        // Batch dims come from `a` here; the lowering only broadcasts a rank-2 `b`.
        if let Some(last) = dims.last_mut() {
            *last = n;
        }
        let y = self.result(name, &dims, Dest::Native)?;
        self.node(ops::mat_mul(&format!("{name}.op"), a, b, false, transpose_b, y))?;
        Ok(y)
    }

    /// RmsNorm over the last axis with weight `gamma`.
    pub fn rms_norm(&mut self, name: &str, x: TensorId, gamma: TensorId, eps: f32) -> Result<TensorId> {
        let dims = self.dims(x)?;
        let y = self.result(name, &dims, Dest::Native)?;
        self.node(ops::rms_norm(&format!("{name}.op"), x, gamma, eps, dims.len() as u32 - 1, y))?;
        Ok(y)
    }

    /// Element-wise binary op with numpy broadcasting (`a`'s shape is the result's).
    pub fn binary(&mut self, name: &str, op_type: &str, a: TensorId, b: TensorId, dest: Dest) -> Result<TensorId> {
        let dims = self.dims(a)?;
        let y = self.result(name, &dims, dest)?;
        self.node(ops::binary(&format!("{name}.op"), op_type, a, b, y))?;
        Ok(y)
    }

    /// Element-wise unary op.
    pub fn unary(&mut self, name: &str, op_type: &str, x: TensorId) -> Result<TensorId> {
        let dims = self.dims(x)?;
        let y = self.result(name, &dims, Dest::Native)?;
        self.node(ops::unary(&format!("{name}.op"), op_type, x, y))?;
        Ok(y)
    }

    /// Softmax along the last axis.
    pub fn softmax(&mut self, name: &str, x: TensorId) -> Result<TensorId> {
        let dims = self.dims(x)?;
        let y = self.result(name, &dims, Dest::Native)?;
        self.node(ops::softmax(&format!("{name}.op"), x, dims.len() as u32 - 1, 1.0, y))?;
        Ok(y)
    }

    /// Reshape to `dims`.
    pub fn reshape(&mut self, name: &str, x: TensorId, dims: &[u32], dest: Dest) -> Result<TensorId> {
        let y = self.result(name, dims, dest)?;
        self.node(ops::reshape(&format!("{name}.op"), x, y))?;
        Ok(y)
    }

    /// Transpose by `perm`.
    pub fn transpose(&mut self, name: &str, x: TensorId, perm: &[u32]) -> Result<TensorId> {
        let xd = self.dims(x)?;
        let dims: Vec<u32> = perm.iter().map(|&p| xd[p as usize]).collect();
        let y = self.result(name, &dims, Dest::Native)?;
        self.node(ops::transpose(&format!("{name}.op"), x, perm, y))?;
        Ok(y)
    }

    /// Concat along `axis`.
    pub fn concat(&mut self, name: &str, xs: &[TensorId], axis: usize) -> Result<TensorId> {
        self.concat_to(name, xs, axis, Dest::Native)
    }

    /// Concat along `axis` into `dest`.
    pub fn concat_to(&mut self, name: &str, xs: &[TensorId], axis: usize, dest: Dest) -> Result<TensorId> {
        let first = xs.first().copied().ok_or_else(|| EngineError::Backend {
            backend: "qnn".into(),
            reason: format!("concat {name:?} of no tensors"),
        })?;
        let mut dims = self.dims(first)?;
        dims[axis] = 0;
        for &x in xs {
            dims[axis] += self.dims(x)?[axis];
        }
        let y = self.result(name, &dims, dest)?;
        self.node(ops::concat(&format!("{name}.op"), xs, axis as u32, y))?;
        Ok(y)
    }

    /// Split along `axis` into pieces of `sizes` rows each (their sum must be the axis length);
    /// piece `i` is named `{name}.{i}`. One piece is `x` itself (QNN has no empty `split_index`).
    pub fn split(&mut self, name: &str, x: TensorId, sizes: &[u32], axis: usize) -> Result<Vec<TensorId>> {
        if sizes.len() == 1 {
            return Ok(vec![x]);
        }
        let dims = self.dims(x)?;
        let mut ys = Vec::with_capacity(sizes.len());
        let mut starts = Vec::with_capacity(sizes.len().saturating_sub(1));
        let mut at = 0u32;
        for (i, &n) in sizes.iter().enumerate() {
            if i > 0 {
                starts.push(at);
            }
            let mut d = dims.clone();
            d[axis] = n;
            ys.push(self.result(&format!("{name}.{i}"), &d, Dest::Native)?);
            at += n;
        }
        self.node(ops::split(&format!("{name}.op"), x, axis as u32, &starts, &ys))?;
        Ok(ys)
    }

    /// `graphFinalize`.
    pub fn finalize(self) -> Result<Graph> {
        Ok(self.g.finalize()?)
    }
}
