//! Deterministic synthetic step frames, so a test can rebuild exactly what a writer recorded.

use unmask_engine::decode::{StepFrame, TokenChange, TokenState};

/// Frame `i` of run `seed`: a few changed positions in a 32-token block.
pub fn frame(seed: u64, i: usize) -> StepFrame {
    let n = 1 + (i + seed as usize) % 4;
    let block_start = 16 + 32 * (i / 32);
    let changes = (0..n)
        .map(|k| TokenChange {
            pos: block_start + (i * 7 + k * 3) % 32,
            token: (seed as u32).wrapping_mul(1000) + (i * 10 + k) as u32,
            confidence: 0.5 + ((i + k) % 50) as f32 / 100.0,
            state: if k % 3 == 0 { TokenState::Stable } else { TokenState::Visible },
            speculative: false,
            revised: k == 2,
            rejected_draft: (k == 1 && i % 5 == 0).then_some(7),
        })
        .collect();
    StepFrame {
        step: i,
        block: (block_start, block_start + 32),
        forward_tokens: 48,
        changes,
        step_wall_s: 0.001 * (1 + i % 5) as f64,
        simulated_s: if seed.is_multiple_of(2) { Some(0.0002 * i as f64) } else { None },
        committed_total: i + 1,
    }
}

/// Frames `0..n` of run `seed`.
pub fn frames(seed: u64, n: usize) -> Vec<StepFrame> {
    (0..n).map(|i| frame(seed, i)).collect()
}
