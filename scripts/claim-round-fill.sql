-- The scale bench's fill (crates/bench/benches/scale.rs), for EXPLAIN (ANALYZE, BUFFERS) of the
-- claim round's and the gauges' statements (BENCHMARKS.md section 18): 2,000 system mailboxes
-- in 200 Graph tenants, :history finished SENT rows of the last 29 days, 200 due SCHEDULED rows
-- per mailbox, then VACUUM ANALYZE. psql -v history=1000000 -d <migrated database> -f this.
INSERT INTO system_mailboxes (address, graph_tenant_id, graph_client_id, graph_client_secret)
SELECT 'mb' || g || '@t' || (g % 200) || '.example', 't' || (g % 200) || '.example',
       'client-' || lpad((g % 200)::text, 12, '0'), 'secret'
FROM generate_series(0, 1999) AS g ORDER BY g;

CREATE TEMP TABLE mb AS SELECT array_agg(id ORDER BY address) AS ids FROM system_mailboxes;

INSERT INTO messages (id, system_mailbox_id, to_recipients, subject, body, status,
                      scheduled_on, sent_at, created_at, updated_at, attempts)
SELECT gen_random_uuid(), mb.ids[(g % 2000) + 1],
       jsonb_build_array(jsonb_build_object('address', 'old' || g || '@example.org')),
       'Earlier ' || g, repeat('x', 1000), 'SENT', t, t, t, t, 1
FROM mb, generate_series(0, :history - 1) AS g,
     LATERAL (SELECT now() - interval '25 hours' - (g % 40000) * interval '1 minute' AS t) AS at;

INSERT INTO messages (id, system_mailbox_id, to_recipients, subject, body, scheduled_on)
SELECT gen_random_uuid(), mb.ids[(g % 2000) + 1],
       jsonb_build_array(jsonb_build_object('address', 'guest' || g || '@example.org',
                                            'name', 'Guest ' || g)),
       'Invitation ' || g, repeat('x', 1000),
       now() - interval '1 minute' + g * interval '1 microsecond'
FROM mb, generate_series(0, 400000 - 1) AS g;

VACUUM ANALYZE messages;
