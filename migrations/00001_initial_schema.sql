-- The durable data of presenced (CONTRACT §3, §5): last-seen times,
-- last-seen privacy, contact lists and conversation membership.
--
-- Portable on purpose: this one file runs on PostgreSQL 15 and on SQLite.
-- Times are Unix milliseconds (UTC) in a bigint on both, so both stores
-- share one representation and one precision; in psql, read them with
-- to_timestamp(seen_at / 1000.0).
-- IF NOT EXISTS keeps a racing second migrator (SQLite has no goose lock)
-- from failing on objects the first one created.

-- +goose Up
CREATE TABLE IF NOT EXISTS last_seen (
    user_id text   NOT NULL PRIMARY KEY,
    seen_at bigint NOT NULL
);

CREATE TABLE IF NOT EXISTS privacy (
    user_id   text NOT NULL PRIMARY KEY,
    last_seen text NOT NULL CHECK (last_seen IN ('everyone', 'contacts', 'nobody'))
);

-- contacts: contact_id is in owner_id's contact list.
CREATE TABLE IF NOT EXISTS contacts (
    owner_id   text NOT NULL,
    contact_id text NOT NULL,
    PRIMARY KEY (owner_id, contact_id)
);

CREATE TABLE IF NOT EXISTS conversation_members (
    conversation_id text NOT NULL,
    user_id         text NOT NULL,
    PRIMARY KEY (conversation_id, user_id)
);

CREATE INDEX IF NOT EXISTS conversation_members_user_id_idx
    ON conversation_members (user_id);

-- +goose Down
DROP INDEX IF EXISTS conversation_members_user_id_idx;
DROP TABLE IF EXISTS conversation_members;
DROP TABLE IF EXISTS contacts;
DROP TABLE IF EXISTS privacy;
DROP TABLE IF EXISTS last_seen;
