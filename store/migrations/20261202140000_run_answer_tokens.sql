-- Answer tokens of a run up to and including the first stop token (the padding after it is not
-- answer): what tokens per second are made of. NULL for runs recorded before it was kept.
ALTER TABLE runs ADD COLUMN answer_tokens INTEGER;
