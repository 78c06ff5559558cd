-- The live replicas (issue 46 point 6, docs/decisions/0034-replicas-and-restored-bookings.md):
-- each daemon beats its row every 5 s; a row not beaten for 15 s is a stale replica. Fail-open
-- shares each mailbox's budgets among the live ones. A replica deletes its row when it stops;
-- a killed one's row goes with the next beat of any replica an hour later.
CREATE TABLE replicas (
    id uuid PRIMARY KEY,
    started_at timestamptz NOT NULL DEFAULT now(),
    beat_at timestamptz NOT NULL DEFAULT now()
);
