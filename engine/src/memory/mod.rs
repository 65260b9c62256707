//! Swap-optimized memory runtime for a bounded NPU-visible address space: the layer graph with buffer
//! sizes ([`graph`]), lifetime packing of activations ([`packing`]), residency planning against a
//! budget ([`plan`]), and the weight streaming that puts the plan on the data path of a real forward
//! through a double-buffered staging thread ([`weight_stream`], its wall spans in [`spans`]).

pub(crate) mod graph;
pub(crate) mod host;
pub(crate) mod packing;
pub(crate) mod plan;
pub(crate) mod spans;
pub mod weight_stream;

pub use graph::{BufferClass, BufferId, BufferSpec, LayerGraph, MatrixDType, OpKind, Operator, Precision, StepShape};
pub use packing::{pack_by_lifetime, PackItem, Packing};
pub use plan::{plan_memory, MemoryPlan, PlacementPolicy, PAGE};
pub use spans::WallSpan;
pub use weight_stream::{forward_streamed, StreamPlan, StreamReport};

/// A small LLaDA-shaped config for unit tests of the memory runtime and cost model.
#[cfg(test)]
pub(crate) fn plan_test_config() -> crate::model::ModelConfig {
    use crate::model::config::{Architecture, ModelConfig, RopeStyle};
    ModelConfig {
        arch: Architecture::Llada,
        hidden: 256,
        n_layers: 4,
        n_heads: 4,
        n_kv_heads: 4,
        head_dim: 64,
        ffn: 768,
        vocab: 1024,
        max_seq: 512,
        rope_theta: 10000.0,
        rope_style: RopeStyle::RotateHalf,
        rotary_dim: 64,
        rms_eps: 1e-5,
        qkv_bias: false,
        qk_norm: false,
        moe: None,
        causal: false,
        shift_logits: false,
        tie_embeddings: false,
        mask_token_id: Some(1023),
        bos_token_id: None,
        eos_token_id: None,
        eot_token_id: None,
        pad_token_id: None,
    }
}
