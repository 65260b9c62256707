//! The generic transformer's weights, and the trait that maps them to a checkpoint's tensor
//! names (like a `load` per module mirroring the checkpoint).

/// Weights outside the layer stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Global {
    Embedding,
    FinalNorm,
    LmHead,
}

/// Weights of one layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    AttnNorm,
    Q,
    K,
    V,
    O,
    QBias,
    KBias,
    VBias,
    QNorm,
    KNorm,
    FfnNorm,
    Gate,
    Up,
    Down,
    Router,
}

/// Where experts live in a checkpoint.
pub enum ExpertLayout {
    /// One 2-D tensor per expert and projection (HF).
    PerExpert,
    /// One 3-D tensor per projection, experts outermost (GGUF `ffn_*_exps`).
    Stacked,
}

/// Maps the generic transformer's weights to checkpoint tensor names.
pub trait NameScheme: Sync {
    /// Name of a global weight.
    fn global(&self, g: Global) -> String;
    /// Name of a layer weight.
    fn layer(&self, layer: usize, p: Part) -> String;
    /// How experts are stored.
    fn expert_layout(&self) -> ExpertLayout {
        ExpertLayout::PerExpert
    }
    /// Name of expert `e`'s projection `p` (Gate/Up/Down) in `layer` (or the stacked tensor).
    fn expert(&self, layer: usize, e: usize, p: Part) -> String;
}
