//! Streaming a diffusion model's answer as text. Tokens are committed out of order, so what is
//! sent is the stable left-to-right prefix: text goes out once every token before it is final.
//! Stop strings cut the text; a tail that could still become a stop string is held back. The
//! deltas concatenate to exactly the final text.

use std::sync::Arc;

use unmask_engine::decode::{StepFrame, TokenState};
use unmask_engine::run::ModelParts;

/// Text of `text` before the first of `stops` (and whether one was found).
pub fn cut_at_stop_strings<'a>(text: &'a str, stops: &[String]) -> (&'a str, bool) {
    match stops.iter().filter_map(|s| text.find(s.as_str())).min() {
        Some(i) => (&text[..i], true),
        None => (text, false),
    }
}

/// Bytes at the end of `text` that begin some stop string (they may become one).
fn stop_prefix_len(text: &str, stops: &[String]) -> usize {
    let mut longest = 0;
    for s in stops {
        for (i, _) in s.char_indices().skip(1) {
            if i > longest && text.ends_with(&s[..i]) {
                longest = i;
            }
        }
    }
    longest
}

/// The text sent so far and the final tokens it comes from.
pub struct TextStream {
    model: Arc<ModelParts>,
    prompt_len: usize,
    /// Final (stable) tokens of the generated region.
    stable: Vec<Option<u32>>,
    stop_ids: Vec<u32>,
    stop_strings: Vec<String>,
    /// Length of the stable prefix last decoded.
    prefix_len: usize,
    sent: String,
    /// A stop string or stop token has ended the text.
    ended: bool,
}

impl TextStream {
    pub fn new(
        model: Arc<ModelParts>,
        prompt_len: usize,
        gen_length: usize,
        stop_ids: Vec<u32>,
        stop_strings: Vec<String>,
    ) -> Self {
        TextStream {
            model,
            prompt_len,
            stable: vec![None; gen_length],
            stop_ids,
            stop_strings,
            prefix_len: 0,
            sent: String::new(),
            ended: false,
        }
    }

    /// Takes a step's changes; returns text that became final, if any.
    pub fn apply(&mut self, frame: &StepFrame) -> Option<String> {
        for c in &frame.changes {
            if let Some(slot) = c.pos.checked_sub(self.prompt_len).and_then(|i| self.stable.get_mut(i)) {
                // Visible tokens may still be revised: only stable ones are text.
                *slot = (c.state == TokenState::Stable).then_some(c.token);
            }
        }
        if self.ended {
            return None;
        }
        let mut prefix: Vec<u32> = Vec::new();
        let mut complete = false;
        for t in &self.stable {
            match t {
                Some(t) if self.stop_ids.contains(t) => {
                    complete = true;
                    break;
                }
                Some(t) => prefix.push(*t),
                None => break,
            }
        }
        if prefix.len() == self.prefix_len && !complete {
            return None;
        }
        self.prefix_len = prefix.len();
        let text = self.model.tokenizer.decode(&prefix, true);
        let (cut, stopped) = cut_at_stop_strings(&text, &self.stop_strings);
        let mut ready = cut;
        if stopped || complete {
            self.ended = true;
        } else {
            ready = &ready[..ready.len() - stop_prefix_len(ready, &self.stop_strings)];
            // A character still being assembled from byte tokens decodes as U+FFFD.
            ready = ready.trim_end_matches('\u{FFFD}');
        }
        self.advance(ready)
    }

    /// The rest of `final_text` not sent yet (the answer as the run produced it, cut at stop
    /// strings).
    pub fn finish(&mut self, final_text: &str) -> Option<String> {
        self.ended = true;
        if !final_text.starts_with(&self.sent) {
            // Only possible if a tokenizer decodes a prefix differently from the whole; what was
            // sent cannot be taken back.
            tracing::warn!(sent = %self.sent, final_text, "streamed text is not a prefix of the final answer");
            return None;
        }
        self.advance(final_text)
    }

    fn advance(&mut self, text: &str) -> Option<String> {
        if text.len() > self.sent.len() && text.starts_with(&self.sent) {
            let delta = text[self.sent.len()..].to_owned();
            self.sent = text.to_owned();
            Some(delta)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_strings_cut_and_their_beginnings_wait() {
        let stops = vec!["\n\n".to_owned(), "END".to_owned()];
        assert_eq!(cut_at_stop_strings("a\n\nb END", &stops), ("a", true));
        assert_eq!(cut_at_stop_strings("abc", &stops), ("abc", false));
        assert_eq!(stop_prefix_len("abc E", &stops), 1);
        assert_eq!(stop_prefix_len("abc EN", &stops), 2);
        assert_eq!(stop_prefix_len("abc\n", &stops), 1);
        assert_eq!(stop_prefix_len("abc", &stops), 0);
    }
}
