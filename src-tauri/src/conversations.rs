//! Conversation housekeeping beyond chat turns: rename, system prompt, search.

use crate::dto::Conversation;
use crate::error::{AppError, AppResult};
use crate::models::conversation_view;
use crate::runs::MAX_LIST;
use crate::state::AppState;

/// Longest title accepted (characters); the list shows far less, this only stops pasted essays.
pub const MAX_TITLE_CHARS: usize = 200;

/// A title as stored: trimmed, on one line, not empty, not too long.
pub fn clean_title(title: &str) -> AppResult<String> {
    let one_line = title.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.is_empty() {
        return Err(AppError::invalid("a conversation title cannot be empty"));
    }
    if one_line.chars().count() > MAX_TITLE_CHARS {
        return Err(AppError::invalid(format!("a conversation title has at most {MAX_TITLE_CHARS} characters")));
    }
    Ok(one_line)
}

/// A system prompt as stored: blank means none.
pub fn clean_system_prompt(text: Option<&str>) -> Option<String> {
    text.map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned)
}

impl AppState {
    /// Gives a conversation a new title.
    pub async fn rename_conversation(&self, id: i64, title: &str) -> AppResult<Conversation> {
        let title = clean_title(title)?;
        Ok(conversation_view(&self.store.rename_conversation(id, &title).await?))
    }

    /// Sets (or, when blank or `None`, clears) the system prompt of a conversation's later turns.
    pub async fn set_system_prompt(&self, id: i64, system_prompt: Option<&str>) -> AppResult<Conversation> {
        let text = clean_system_prompt(system_prompt);
        Ok(conversation_view(&self.store.set_conversation_system_prompt(id, text.as_deref()).await?))
    }

    /// Conversations whose title or any message contains `query` (ASCII case-insensitive), most
    /// recent first; a blank query lists them all.
    pub async fn search_conversations(&self, query: &str) -> AppResult<Vec<Conversation>> {
        let query = query.trim();
        if query.is_empty() {
            return self.list_conversations().await;
        }
        Ok(self.store.search_conversations(query, MAX_LIST).await?.iter().map(conversation_view).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_one_trimmed_line() {
        assert_eq!(clean_title("  Sums\n of   numbers ").ok().as_deref(), Some("Sums of numbers"));
        assert!(clean_title(" \n ").is_err());
        assert!(clean_title(&"x".repeat(MAX_TITLE_CHARS + 1)).is_err());
        assert!(clean_title(&"é".repeat(MAX_TITLE_CHARS)).is_ok());
    }

    #[test]
    fn blank_system_prompts_are_none() {
        assert_eq!(clean_system_prompt(Some("  Be brief. \n")).as_deref(), Some("Be brief."));
        assert_eq!(clean_system_prompt(Some(" \n")), None);
        assert_eq!(clean_system_prompt(None), None);
    }
}
