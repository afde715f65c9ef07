-- Run by every `nmem team init` before the migrations (idempotent): the schema and its two version
-- tables. `schema_version` is what v1 clients read (they refuse a server whose `max(version)` is
-- newer than theirs), so since v2 it holds the oldest client schema that can still use this server
-- (the newest migration's `compatible_since`). `migrations` is the ledger: one row per applied
-- migration; its newest row is the schema's version.
CREATE SCHEMA IF NOT EXISTS nmem;
CREATE TABLE IF NOT EXISTS nmem.schema_version (version int NOT NULL);
CREATE TABLE IF NOT EXISTS nmem.migrations (
  version int PRIMARY KEY,
  name text NOT NULL,
  compatible_since int NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now(),
  applied_by name NOT NULL DEFAULT session_user
);
