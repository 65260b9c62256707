//! Chat history: conversations and their messages; an assistant message can point at the run
//! that produced it (its settings, metrics and trace).

use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};
use crate::{now_ms, ConversationId, MessageId, ModelId, PresetId, RunId, Store, UnixMillis};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MessageRole {
    System,
    User,
    Assistant,
}

impl MessageRole {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageRole::System => "system",
            MessageRole::User => "user",
            MessageRole::Assistant => "assistant",
        }
    }
    fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "system" => MessageRole::System,
            "user" => MessageRole::User,
            "assistant" => MessageRole::Assistant,
            other => return Err(StoreError::corrupt("messages.role", format!("unknown role `{other}`"))),
        })
    }
}

/// A conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    pub id: ConversationId,
    pub title: String,
    pub model_id: Option<ModelId>,
    pub preset_id: Option<PresetId>,
    pub system_prompt: Option<String>,
    pub created_at: UnixMillis,
    /// Last change (new message, rename).
    pub updated_at: UnixMillis,
}

/// Fields of a new conversation (or of an update).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NewConversation {
    pub title: String,
    pub model_id: Option<ModelId>,
    pub preset_id: Option<PresetId>,
    pub system_prompt: Option<String>,
}

/// A message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub id: MessageId,
    pub conversation_id: ConversationId,
    pub role: MessageRole,
    pub content: String,
    /// The run that generated it (assistant messages).
    pub run_id: Option<RunId>,
    pub created_at: UnixMillis,
}

struct MessageRow {
    id: i64,
    conversation_id: i64,
    role: String,
    content: String,
    run_id: Option<i64>,
    created_at: i64,
}

impl TryFrom<MessageRow> for Message {
    type Error = StoreError;
    fn try_from(r: MessageRow) -> Result<Self> {
        Ok(Message {
            id: r.id,
            conversation_id: r.conversation_id,
            role: MessageRole::parse(&r.role)?,
            content: r.content,
            run_id: r.run_id,
            created_at: r.created_at,
        })
    }
}

impl Store {
    /// Creates a conversation.
    pub async fn create_conversation(&self, c: &NewConversation) -> Result<Conversation> {
        let now = now_ms();
        let id = sqlx::query_scalar!(
            r#"INSERT INTO conversations (title, model_id, preset_id, system_prompt, created_at, updated_at)
               VALUES (?, ?, ?, ?, ?, ?) RETURNING id AS "id!""#,
            c.title,
            c.model_id,
            c.preset_id,
            c.system_prompt,
            now,
            now
        )
        .fetch_one(&self.pool)
        .await?;
        self.get_conversation(id).await
    }

    /// One conversation.
    pub async fn get_conversation(&self, id: ConversationId) -> Result<Conversation> {
        sqlx::query_as!(
            Conversation,
            r#"SELECT id AS "id!", title, model_id, preset_id, system_prompt, created_at, updated_at
               FROM conversations WHERE id = ?"#,
            id
        )
        .fetch_optional(&self.pool)
        .await?
        .ok_or_else(|| StoreError::not_found("conversation", id))
    }

    /// Conversations, most recently updated first.
    pub async fn list_conversations(&self, limit: u32, offset: u32) -> Result<Vec<Conversation>> {
        let (limit, offset) = (i64::from(limit), i64::from(offset));
        Ok(sqlx::query_as!(
            Conversation,
            r#"SELECT id AS "id!", title, model_id, preset_id, system_prompt, created_at, updated_at
               FROM conversations ORDER BY updated_at DESC, id DESC LIMIT ? OFFSET ?"#,
            limit,
            offset
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Conversations whose title or any message contains `text` (case-insensitive for ASCII),
    /// most recently updated first.
    pub async fn search_conversations(&self, text: &str, limit: u32) -> Result<Vec<Conversation>> {
        let escaped = text.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_");
        let pattern = format!("%{escaped}%");
        let limit = i64::from(limit);
        Ok(sqlx::query_as!(
            Conversation,
            r#"SELECT id AS "id!", title, model_id, preset_id, system_prompt, created_at, updated_at
               FROM conversations c
               WHERE c.title LIKE ?1 ESCAPE '\'
                  OR EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id = c.id AND m.content LIKE ?1 ESCAPE '\')
               ORDER BY updated_at DESC, id DESC LIMIT ?2"#,
            pattern,
            limit
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Replaces a conversation's title, model, preset and system prompt.
    pub async fn update_conversation(&self, id: ConversationId, c: &NewConversation) -> Result<Conversation> {
        let now = now_ms();
        let r = sqlx::query!(
            r#"UPDATE conversations SET title = ?, model_id = ?, preset_id = ?, system_prompt = ?, updated_at = ?
               WHERE id = ?"#,
            c.title,
            c.model_id,
            c.preset_id,
            c.system_prompt,
            now,
            id
        )
        .execute(&self.pool)
        .await?;
        if r.rows_affected() == 0 {
            return Err(StoreError::not_found("conversation", id));
        }
        self.get_conversation(id).await
    }

    /// Gives a conversation a new title (bumps `updated_at`).
    pub async fn rename_conversation(&self, id: ConversationId, title: &str) -> Result<Conversation> {
        let now = now_ms();
        let r = sqlx::query!("UPDATE conversations SET title = ?, updated_at = ? WHERE id = ?", title, now, id)
            .execute(&self.pool)
            .await?;
        if r.rows_affected() == 0 {
            return Err(StoreError::not_found("conversation", id));
        }
        self.get_conversation(id).await
    }

    /// Sets or clears (`None`) the system prompt later turns of a conversation are generated with.
    pub async fn set_conversation_system_prompt(
        &self,
        id: ConversationId,
        system_prompt: Option<&str>,
    ) -> Result<Conversation> {
        let now = now_ms();
        let r = sqlx::query!(
            "UPDATE conversations SET system_prompt = ?, updated_at = ? WHERE id = ?",
            system_prompt,
            now,
            id
        )
        .execute(&self.pool)
        .await?;
        if r.rows_affected() == 0 {
            return Err(StoreError::not_found("conversation", id));
        }
        self.get_conversation(id).await
    }

    /// Deletes conversations with their messages (runs stay); returns how many existed.
    pub async fn delete_conversations(&self, ids: &[ConversationId]) -> Result<u64> {
        let mut tx = self.write_tx().await?;
        let mut n = 0;
        for id in ids {
            n += sqlx::query!("DELETE FROM conversations WHERE id = ?", id).execute(&mut *tx).await?.rows_affected();
        }
        tx.commit().await?;
        Ok(n)
    }

    /// Appends a message and bumps the conversation's `updated_at`.
    pub async fn add_message(
        &self,
        conversation: ConversationId,
        role: MessageRole,
        content: &str,
        run_id: Option<RunId>,
    ) -> Result<Message> {
        let now = now_ms();
        let role_s = role.as_str();
        let mut tx = self.write_tx().await?;
        let r = sqlx::query!("UPDATE conversations SET updated_at = ? WHERE id = ?", now, conversation)
            .execute(&mut *tx)
            .await?;
        if r.rows_affected() == 0 {
            return Err(StoreError::not_found("conversation", conversation));
        }
        if let Some(run) = run_id {
            if sqlx::query_scalar!("SELECT id FROM runs WHERE id = ?", run).fetch_optional(&mut *tx).await?.is_none() {
                return Err(StoreError::not_found("run", run));
            }
        }
        let id = sqlx::query_scalar!(
            r#"INSERT INTO messages (conversation_id, role, content, run_id, created_at) VALUES (?, ?, ?, ?, ?)
               RETURNING id AS "id!""#,
            conversation,
            role_s,
            content,
            run_id,
            now
        )
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Message { id, conversation_id: conversation, role, content: content.to_owned(), run_id, created_at: now })
    }

    /// The messages of a conversation, oldest first.
    pub async fn messages(&self, conversation: ConversationId) -> Result<Vec<Message>> {
        self.get_conversation(conversation).await?;
        sqlx::query_as!(
            MessageRow,
            r#"SELECT id AS "id!", conversation_id, role, content, run_id, created_at
               FROM messages WHERE conversation_id = ? ORDER BY id"#,
            conversation
        )
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .map(Message::try_from)
        .collect()
    }

    /// Replaces a message's text (editing a prompt).
    pub async fn update_message(&self, id: MessageId, content: &str) -> Result<()> {
        let r = sqlx::query!("UPDATE messages SET content = ? WHERE id = ?", content, id).execute(&self.pool).await?;
        if r.rows_affected() == 0 {
            return Err(StoreError::not_found("message", id));
        }
        Ok(())
    }

    /// Deletes a message and every later one of its conversation (edit-and-retry, regenerate);
    /// returns how many were deleted.
    pub async fn truncate_conversation_at(&self, id: MessageId) -> Result<u64> {
        let conv = sqlx::query_scalar!(r#"SELECT conversation_id AS "c!" FROM messages WHERE id = ?"#, id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::not_found("message", id))?;
        let r = sqlx::query!("DELETE FROM messages WHERE conversation_id = ? AND id >= ?", conv, id)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected())
    }
}
