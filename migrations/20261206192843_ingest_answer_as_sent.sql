-- An Idempotency-Key repeat gets the first answer byte for byte (issue 44's fresh-user
-- findings): `jsonb` stores a value with its keys reordered, so a replay's JSON differed from
-- the first answer's; `json` keeps the text exactly as the daemon wrote it.
-- expand-contract: ingest_requests came with this unreleased version (no released binary reads
-- or writes it), and sqlx decodes a serde_json::Value from `json` as from `jsonb`.
ALTER TABLE ingest_requests ALTER COLUMN answer TYPE json USING answer::json;
