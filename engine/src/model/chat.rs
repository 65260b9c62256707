//! Chat templates of each family, rendered by our code (no Jinja).

use super::config::Architecture;

/// Speaker of a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
}

impl ChatMessage {
    /// A user turn.
    pub fn user(s: impl Into<String>) -> Self {
        ChatMessage { role: Role::User, content: s.into() }
    }
    /// An assistant turn.
    pub fn assistant(s: impl Into<String>) -> Self {
        ChatMessage { role: Role::Assistant, content: s.into() }
    }
    /// A system turn.
    pub fn system(s: impl Into<String>) -> Self {
        ChatMessage { role: Role::System, content: s.into() }
    }
}

/// The prompt formats Unmask renders.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ChatTemplate {
    /// LLaDA's Llama-3 style headers with `<|startoftext|>` and `<|eot_id|>`.
    Llada,
    /// ChatML (`<|im_start|>role\n…<|im_end|>\n`), used by Dream, Qwen and SmolLM2; optional
    /// default system prompt inserted when the conversation has none.
    ChatMl { default_system: Option<String> },
    /// LLaDA-MoE / LLaDA2 role tags (`<role>HUMAN</role>…<|role_end|>`).
    LladaMoe,
}

impl ChatTemplate {
    /// The template a family's instruct checkpoints use.
    pub fn for_arch(arch: Architecture) -> Self {
        arch.family().chat_template()
    }

    /// Token strings that end an assistant turn (beyond the model's EOS).
    pub fn stop_strings(&self) -> &'static [&'static str] {
        match self {
            ChatTemplate::Llada => &["<|eot_id|>", "<|endoftext|>"],
            ChatTemplate::ChatMl { .. } => &["<|im_end|>", "<|endoftext|>"],
            ChatTemplate::LladaMoe => &["<|role_end|>"],
        }
    }

    /// Renders a conversation; with `add_generation_prompt` it ends where the assistant speaks.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> String {
        let mut s = String::new();
        match self {
            ChatTemplate::Llada => {
                s.push_str("<|startoftext|>");
                for m in messages {
                    s.push_str(&format!(
                        "<|start_header_id|>{}<|end_header_id|>\n\n{}<|eot_id|>",
                        role_lower(m.role),
                        m.content
                    ));
                }
                if add_generation_prompt {
                    s.push_str("<|start_header_id|>assistant<|end_header_id|>\n\n");
                }
            }
            ChatTemplate::ChatMl { default_system } => {
                if let Some(sys) = default_system {
                    if messages.first().map(|m| m.role) != Some(Role::System) {
                        s.push_str(&format!("<|im_start|>system\n{sys}<|im_end|>\n"));
                    }
                }
                for m in messages {
                    s.push_str(&format!("<|im_start|>{}\n{}<|im_end|>\n", role_lower(m.role), m.content));
                }
                if add_generation_prompt {
                    s.push_str("<|im_start|>assistant\n");
                }
            }
            ChatTemplate::LladaMoe => {
                if messages.first().map(|m| m.role) != Some(Role::System) {
                    s.push_str("<role>SYSTEM</role>detailed thinking off<|role_end|>");
                }
                for m in messages {
                    let tag = match m.role {
                        Role::System => "SYSTEM",
                        Role::User => "HUMAN",
                        Role::Assistant => "ASSISTANT",
                    };
                    s.push_str(&format!("<role>{tag}</role>{}<|role_end|>", m.content));
                }
                if add_generation_prompt {
                    s.push_str("<role>ASSISTANT</role>");
                }
            }
        }
        s
    }
}

fn role_lower(r: Role) -> &'static str {
    match r {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convo() -> Vec<ChatMessage> {
        vec![ChatMessage::user("Hi"), ChatMessage::assistant("Hello!"), ChatMessage::user("What is 2+2?")]
    }

    #[test]
    fn llada_multi_turn() {
        let s = ChatTemplate::Llada.render(&convo(), true);
        assert_eq!(
            s,
            "<|startoftext|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>\
<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>\
<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>\
<|start_header_id|>assistant<|end_header_id|>\n\n"
        );
    }

    #[test]
    fn chatml_multi_turn_with_default_system() {
        let t = ChatTemplate::for_arch(Architecture::Dream);
        let s = t.render(&convo(), true);
        assert_eq!(
            s,
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
        );
        let mut with_sys = vec![ChatMessage::system("Be brief.")];
        with_sys.extend(convo());
        assert!(t.render(&with_sys, false).starts_with("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user"));
    }

    #[test]
    fn qwen3_moe_speaks_chatml_like_qwen3() {
        let t = ChatTemplate::for_arch(Architecture::Qwen3Moe);
        assert_eq!(t, ChatTemplate::for_arch(Architecture::Qwen3));
        assert_eq!(t.stop_strings(), &["<|im_end|>", "<|endoftext|>"]);
    }

    #[test]
    fn llada_moe_multi_turn() {
        let s = ChatTemplate::LladaMoe.render(&convo(), true);
        assert_eq!(
            s,
            "<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>Hi<|role_end|>\
<role>ASSISTANT</role>Hello!<|role_end|><role>HUMAN</role>What is 2+2?<|role_end|><role>ASSISTANT</role>"
        );
    }
}
