-- The HTTP ingest's requests (issue 44 point 2, docs/ingest.md, docs/decisions/0039-http-ingest.md):
-- one row per request that stored its lines, written in the same transaction as them. A row
-- with an Idempotency-Key keeps the answer, so the same key and token within 24 h get the
-- first answer again (the same key with another body: 422). The counts feed the admin UI's
-- queue page. Rows older than 24 h are deleted by the listener.
CREATE TABLE ingest_requests (
    id bigserial PRIMARY KEY,
    token_name text NOT NULL,
    idempotency_key text,
    body_sha256 bytea NOT NULL,
    status smallint NOT NULL,
    answer jsonb,
    lines integer NOT NULL,
    stored integer NOT NULL,
    duplicate integer NOT NULL,
    refused integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE UNIQUE INDEX ingest_requests_key ON ingest_requests (token_name, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX ingest_requests_created_at ON ingest_requests (created_at);
