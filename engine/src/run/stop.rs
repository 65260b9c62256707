//! The tokens that end an answer, decided in one place for every front end.

use crate::decode::DecodeSettings;
use crate::model::{ChatTemplate, ModelConfig, TextTokenizer};

/// Ids after which an answer is over: EOS and EOT (the settings' overrides, else the model's),
/// the padding and BOS ids, and the chat template's turn-end strings. Sorted, no duplicates.
pub fn stop_ids(cfg: &ModelConfig, settings: &DecodeSettings, tokenizer: &TextTokenizer, template: &ChatTemplate) -> Vec<u32> {
    let mut ids: Vec<u32> = [settings.eos_id(cfg), settings.eot_id(cfg), cfg.pad_token_id, cfg.bos_token_id]
        .into_iter()
        .flatten()
        .collect();
    ids.extend(template.stop_strings().iter().filter_map(|s| tokenizer.token_id(s)));
    ids.sort_unstable();
    ids.dedup();
    ids
}
