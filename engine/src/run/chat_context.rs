//! A conversation fitted into the model's context: when the rendered history and the tokens to
//! generate no longer fit, the oldest exchanges (a user message and the replies after it) are
//! left out until they do. Leading system messages and the last message always stay, so a long
//! chat keeps going instead of failing on every turn (an answer that still does not fit is
//! refused by the request check as before).

use crate::error::Result;
use crate::model::{ChatMessage, ChatTemplate, Role, TextTokenizer};

/// The prompt ids of a fitted conversation and how many of its messages were left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FittedChat {
    pub ids: Vec<u32>,
    /// Messages left out from the start of the history (system messages never are).
    pub left_out: usize,
}

/// Renders `messages` with `template` (generation prompt appended) and leaves out the oldest
/// exchanges until the prompt and `answer_len` generated tokens fit a context of `context` tokens.
pub fn fit_chat(
    template: &ChatTemplate,
    tokenizer: &TextTokenizer,
    messages: &[ChatMessage],
    context: usize,
    answer_len: usize,
) -> Result<FittedChat> {
    let room = context.saturating_sub(answer_len);
    let system = messages.iter().take_while(|m| m.role == Role::System).count();
    let (head, body) = messages.split_at(system);
    let mut start = 0;
    loop {
        let kept: Vec<ChatMessage> = head.iter().chain(&body[start..]).cloned().collect();
        let ids = tokenizer.encode(&template.render(&kept, true))?;
        if ids.len() <= room || body.len() - start <= 1 {
            return Ok(FittedChat { ids, left_out: start });
        }
        // One whole exchange: the first message and everything up to the next user message,
        // never the last message.
        start += 1;
        while start + 1 < body.len() && body[start].role != Role::User {
            start += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokenizer() -> TextTokenizer {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/tiny-llada/tokenizer.json");
        TextTokenizer::from_file(&path).expect("the embedded model's tokenizer")
    }

    fn conversation(turns: usize) -> Vec<ChatMessage> {
        let mut m = vec![ChatMessage::system("Answer with a number.")];
        for i in 0..turns {
            m.push(ChatMessage::user(format!("What is {i}+{i}? Please answer quickly and briefly.")));
            m.push(ChatMessage::assistant(format!("{}", 2 * i)));
        }
        m.push(ChatMessage::user("And 3+3?"));
        m
    }

    #[test]
    fn a_conversation_that_fits_is_rendered_whole() {
        let tok = tokenizer();
        let msgs = conversation(3);
        let whole = tok.encode(&ChatTemplate::Llada.render(&msgs, true)).unwrap();
        let fitted = fit_chat(&ChatTemplate::Llada, &tok, &msgs, whole.len(), 0).unwrap();
        assert_eq!(fitted, FittedChat { ids: whole, left_out: 0 });
    }

    #[test]
    fn the_oldest_exchanges_are_left_out_until_it_fits_keeping_the_system_and_last_message() {
        let tok = tokenizer();
        let msgs = conversation(10);
        let whole = tok.encode(&ChatTemplate::Llada.render(&msgs, true)).unwrap().len();
        let room = whole / 2;
        let fitted = fit_chat(&ChatTemplate::Llada, &tok, &msgs, room + 16, 16).unwrap();
        assert!(fitted.ids.len() <= room, "{} > {room}", fitted.ids.len());
        assert!(fitted.left_out > 0 && fitted.left_out % 2 == 0, "whole exchanges: {}", fitted.left_out);
        // Exactly the system message and the newest messages, in order.
        let mut kept = vec![msgs[0].clone()];
        kept.extend_from_slice(&msgs[1 + fitted.left_out..]);
        assert_eq!(fitted.ids, tok.encode(&ChatTemplate::Llada.render(&kept, true)).unwrap());
        // Leaving out one exchange fewer would not fit: no more is dropped than needed.
        let mut one_more = vec![msgs[0].clone()];
        one_more.extend_from_slice(&msgs[1 + fitted.left_out - 2..]);
        assert!(tok.encode(&ChatTemplate::Llada.render(&one_more, true)).unwrap().len() > room);
    }

    #[test]
    fn a_last_message_too_long_on_its_own_is_returned_for_the_request_check_to_refuse() {
        let tok = tokenizer();
        let msgs = conversation(2);
        let fitted = fit_chat(&ChatTemplate::Llada, &tok, &msgs, 3, 0).unwrap();
        assert_eq!(fitted.left_out, 4);
        let last = vec![msgs[0].clone(), msgs[5].clone()];
        assert_eq!(fitted.ids, tok.encode(&ChatTemplate::Llada.render(&last, true)).unwrap());
    }
}
