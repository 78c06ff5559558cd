#!/usr/bin/env python3
"""Buffers per call of the statements a replica runs per claim round and per gauge refresh
(BENCHMARKS.md section 18): EXPLAIN (ANALYZE, BUFFERS) of each, in a transaction rolled back,
on databases filled by scripts/claim-round-fill.sql.

    python3 scripts/claim-round-buffers.py [--churn] DB...

--churn first does what a campaign's first minutes do to the table (autovacuum off on it, so
the state is the same in every database): the 20,000 longest-due rows claimed then SENT, the
next 20,000 booked a minute ahead (wait_reason 'minute', as `paced` does), then measures.
Prints, per statement, shared buffers hit + read (the statement's whole plan) and rows.
"""
import json
import subprocess
import sys

PSQL = ["psql", "-h", "127.0.0.1", "-U", "postgres", "-X", "-At", "-v", "ON_ERROR_STOP=1"]


def psql(db, sql):
    out = subprocess.run(PSQL + ["-d", db, "-c", sql], check=True, capture_output=True, text=True)
    return out.stdout.strip()


def explain(db, sql):
    out = subprocess.run(
        PSQL + ["-d", db],
        input=f"BEGIN;\nEXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql};\nROLLBACK;\n",
        check=True, capture_output=True, text=True,
    ).stdout
    start = out.index("[")
    end = out.rindex("]") + 1
    plan = json.loads(out[start:end])[0]["Plan"]
    return plan["Shared Hit Blocks"] + plan["Shared Read Blocks"], plan["Actual Rows"]


CHURN = """
ALTER TABLE messages SET (autovacuum_enabled = off);
WITH c AS (SELECT id FROM messages WHERE status = 'SCHEDULED' ORDER BY scheduled_on LIMIT 20000)
UPDATE messages m SET status = 'SENDING', sending_at = now(), attempts = attempts + 1,
    claim_token = gen_random_uuid(), updated_at = now() FROM c WHERE m.id = c.id;
UPDATE messages SET status = 'SENT', sent_at = now(), updated_at = now() WHERE status = 'SENDING';
WITH c AS (SELECT id FROM messages WHERE status = 'SCHEDULED' ORDER BY scheduled_on LIMIT 20000)
UPDATE messages m SET scheduled_on = now() + interval '1 minute', deferrals = deferrals + 1,
    wait_reason = 'minute', updated_at = now() FROM c WHERE m.id = c.id;
"""


SQL = [
    ("due_senders (before: aggregate over the due rows)",
     "SELECT coalesce(system_mailbox_id, tenant_id) FROM messages WHERE status = 'SCHEDULED' "
     "AND scheduled_on <= now() GROUP BY 1 ORDER BY min(scheduled_on)"),
    ("due_senders (after: a probe per known sender)",
     "SELECT s.id FROM (SELECT id FROM system_mailboxes UNION ALL SELECT id FROM tenants) s "
     "CROSS JOIN LATERAL (SELECT m.scheduled_on FROM messages m "
     "WHERE coalesce(m.system_mailbox_id, m.tenant_id) = s.id AND m.status = 'SCHEDULED' "
     "AND m.scheduled_on <= now() ORDER BY m.scheduled_on LIMIT 1) d ORDER BY d.scheduled_on"),
    ("claim_due_from (128 senders, share 1)",
     "WITH picked AS (SELECT claimed.id FROM unnest($SENDERS) AS d(sender) "
     "CROSS JOIN LATERAL (SELECT id FROM messages "
     "WHERE coalesce(system_mailbox_id, tenant_id) = d.sender AND status = 'SCHEDULED' "
     "AND scheduled_on <= now() ORDER BY (CASE priority WHEN 'high' THEN 0 WHEN 'normal' THEN 1 "
     "ELSE 2 END), (deferrals = 0), scheduled_on LIMIT 1 FOR UPDATE SKIP LOCKED) claimed "
     "LIMIT 128) UPDATE messages m SET status = 'SENDING', queued_at = now(), sending_at = now(), "
     "attempts = m.attempts + 1, claim_token = gen_random_uuid(), wait_reason = NULL, "
     "first_attempt_at = coalesce(m.first_attempt_at, now()), updated_at = now() "
     "FROM picked WHERE m.id = picked.id RETURNING m.id, m.body, "
     "ARRAY(SELECT a.name FROM message_attachments a WHERE a.message_id = m.id) AS names"),
    ("count_waiting (wait-reason gauge)",
     "SELECT CASE WHEN m.wait_reason IS NOT NULL THEN m.wait_reason "
     "WHEN m.scheduled_on > now() THEN 'scheduled' ELSE 'due' END, count(*) "
     "FROM messages m WHERE m.status = 'SCHEDULED' GROUP BY 1"),
    ("count_unfinished (messages gauge)",
     "SELECT 'SCHEDULED', count(*) FROM messages WHERE status = 'SCHEDULED' "
     "UNION ALL SELECT 'SENDING', count(*) FROM messages WHERE status = 'SENDING'"),
    ("oldest_due_seconds (gauge)",
     "SELECT coalesce(extract(epoch FROM now() - min(scheduled_on)), 0)::float8 "
     "FROM messages WHERE status = 'SCHEDULED' AND scheduled_on <= now()"),
]


def statements(db):
    """(name, SQL) of each statement, as src/ runs it (the claim with the round's first 128)."""
    senders = psql(db, "SELECT coalesce(system_mailbox_id, tenant_id) FROM messages "
                       "WHERE status = 'SCHEDULED' AND scheduled_on <= now() "
                       "GROUP BY 1 ORDER BY min(scheduled_on) LIMIT 128").split()
    arr = "'{" + ",".join(senders) + "}'::uuid[]"
    return [(name, sql.replace("$SENDERS", arr)) for name, sql in SQL]


def main():
    args = sys.argv[1:]
    churn = "--churn" in args
    dbs = [a for a in args if a != "--churn"]
    for db in dbs:
        if churn:
            psql(db, CHURN)
        for name, sql in statements(db):
            explain(db, sql)  # the first call sets hint bits and kills dead index entries
            buffers, rows = explain(db, sql)
            print(f"{db}\t{name}\t{buffers}\t{rows}")


if __name__ == "__main__":
    main()
