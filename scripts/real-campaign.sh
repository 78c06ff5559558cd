#!/usr/bin/env bash
# Runs the real campaign end to end with separate processes and verifies the outcome.
#
# What it does (issue 6, "Real input"):
#   1. builds `mail-worker` and `graph-sim`;
#   2. recreates its own database `mail_worker_real` and deletes its own Redis keys
#      (`mail-worker-real:*`: limiter prefix `mail-worker-real:rl`, queue
#      `mail-worker-real:send-message`), so every run starts from the same state (idempotent);
#   3. starts ONE `graph-sim` process with Exchange's limits (and its SendGrid stand-in, for the
#      `adatum` tenant), raised for every mailbox but one: $REAL_MAILBOX keeps Exchange's real
#      limits (30 messages in any rolling 60 s, 4 concurrent requests);
#   4. imports ../shared/data/senders.json, raises OUR limits the same way
#      (MAIL_RATE_LIMIT_PER_MINUTE=$FAST_PER_MINUTE for tenants and mailboxes without an override,
#      `mailbox set-limits` for the system mailboxes) but keeps $REAL_MAILBOX at $REAL_PER_MINUTE
#      a minute, and enqueues ../shared/data/campaign-invitations.jsonl;
#   5. starts TWO `mail-worker run` processes at once and waits until nothing is SENDING
#      or SCHEDULED and due (messages with a future `scheduledOn` correctly stay SCHEDULED);
#   6. stops both workers with SIGTERM (each must exit 0), then graph-sim;
#   7. verifies and prints: counts by status; every message SENT or ERROR with a reason (or
#      SCHEDULED for later); each message sent exactly once (graph-sim's and the SendGrid
#      stand-in's records, by message id, against the SENT rows); the most sends in any UTC
#      minute per mailbox against its limit (by the minute a request reached the provider, i.e.
#      was sent; also shown by the minute it was accepted after graph-sim's simulated processing
#      time, which moves requests sent in a minute's last moments into the next minute);
#      graph-sim's refusals by cause and by second of the
#      UTC minute, each handled as a deferral (a `mail.graph.throttled` log line, no ERROR);
#      ERROR rows by reason, and that exactly the file's faulty lines ended ERROR.
#
# Exit status: 0 when every check passed, 1 when one failed, 2 on a setup problem.
# Needs: cargo, psql, redis-cli, curl, jq; PostgreSQL and Redis on 127.0.0.1
# (scripts/services.sh). Everything it writes goes to $OUT (default target/real-campaign).
#
# Settings (environment, defaults in brackets):
#   CAMPAIGN [../shared/data/campaign-invitations.jsonl]  SENDERS [../shared/data/senders.json]
#   PG_URL [postgres://postgres@127.0.0.1:5432]  REDIS_URL [redis://127.0.0.1:6379]
#   REAL_MAILBOX [monitor@contoso.example]  REAL_PER_MINUTE [25]
#   FAST_PER_MINUTE [300] (ours)  SIM_FAST_PER_MINUTE [1000] (graph-sim's rolling 60 s)
#   SIM_FAST_CONCURRENCY [64]  WORKER_CONCURRENCY [8] (per worker)  TIMEOUT_S [900]
#   SIM_LATENCY_MS [150,400] (graph-sim's answer time per sendMail, uniform min,max in ms, so
#   requests overlap as real ones do and the concurrency limit is exercised; 0 = none)
#   PROFILE [dev] (cargo profile: dev or release)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
# The whole shared export when it is beside the clone; the repo's 400-line slice otherwise.
if [ -r "$ROOT/../shared/data/campaign-invitations.jsonl" ]; then
  CAMPAIGN=${CAMPAIGN:-$ROOT/../shared/data/campaign-invitations.jsonl}
  SENDERS=${SENDERS:-$ROOT/../shared/data/senders.json}
else
  CAMPAIGN=${CAMPAIGN:-$ROOT/examples/campaign.jsonl}
  SENDERS=${SENDERS:-$ROOT/examples/senders.json}
fi
OUT=${OUT:-$ROOT/target/real-campaign}
PG_URL=${PG_URL:-postgres://postgres@127.0.0.1:5432}
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379}
DB_NAME=mail_worker_real
PREFIX=mail-worker-real
REAL_MAILBOX=${REAL_MAILBOX:-monitor@contoso.example}
REAL_PER_MINUTE=${REAL_PER_MINUTE:-25}
FAST_PER_MINUTE=${FAST_PER_MINUTE:-300}
SIM_FAST_PER_MINUTE=${SIM_FAST_PER_MINUTE:-1000}
SIM_FAST_CONCURRENCY=${SIM_FAST_CONCURRENCY:-64}
WORKER_CONCURRENCY=${WORKER_CONCURRENCY:-8}
TIMEOUT_S=${TIMEOUT_S:-900}
SIM_LATENCY_MS=${SIM_LATENCY_MS:-150,400}
PROFILE=${PROFILE:-dev}

say() { printf '\n== %s\n' "$*"; }
die() { printf 'real-campaign: %s\n' "$*" >&2; exit 2; }
for tool in cargo psql redis-cli curl jq; do
  command -v "$tool" >/dev/null || die "needs $tool"
done
[ -r "$CAMPAIGN" ] || die "cannot read $CAMPAIGN"
[ -r "$SENDERS" ] || die "cannot read $SENDERS"

# Only the processes this script started are ever stopped, by their pid.
SIM_PID='' W1_PID='' W2_PID=''
cleanup() {
  for pid in $W1_PID $W2_PID $SIM_PID; do
    kill -0 "$pid" 2>/dev/null && kill -TERM "$pid" 2>/dev/null || true
  done
}
trap cleanup EXIT

say "building (profile $PROFILE)"
cargo build --profile "$PROFILE" --bins -q
BIN=$ROOT/target/$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")
MW=$BIN/mail-worker
SIM=$BIN/graph-sim

rm -rf "$OUT" && mkdir -p "$OUT" && chmod 700 "$OUT"
DATABASE_URL=$PG_URL/$DB_NAME
export DATABASE_URL REDIS_URL
export MAIL_RATE_LIMIT_KEY_PREFIX=$PREFIX:rl
export MAIL_RATE_LIMIT_PER_MINUTE=$FAST_PER_MINUTE WORKER_CONCURRENCY
export LOG_FORMAT=json RUST_LOG=${RUST_LOG:-info} SHUTDOWN_GRACE=${SHUTDOWN_GRACE:-15s}
# psql (-c or -f, never stdin); a refused connection (exit 2, e.g. "too many
# clients" on a shared server) is retried for up to a minute.
psql_at() { # URL, psql arguments
  local url=$1 rc
  shift
  for _ in $(seq 1 30); do
    rc=0
    psql "$url" -X -q -v ON_ERROR_STOP=1 "$@" </dev/null || rc=$?
    [ "$rc" -ne 2 ] && return "$rc"
    echo "psql could not connect; retrying in 2 s" >&2
    sleep 2
  done
  return "$rc"
}
psql_real() { psql_at "$DATABASE_URL" "$@"; }
# A one-shot `mail-worker` command (all idempotent), retried while PostgreSQL refuses
# connections; its stderr goes to $MW_STDERR (default: this script's stderr).
mw() {
  local rc err
  err=$(mktemp)
  for _ in $(seq 1 30); do
    rc=0
    "$MW" "$@" 2>"$err" || rc=$?
    grep -q 'too many clients\|Connection refused\|pool timed out' "$err" || break
    echo "mail-worker $1: database unavailable; retrying in 2 s" >&2
    sleep 2
  done
  cat "$err" >>"${MW_STDERR:-/dev/stderr}"
  rm -f "$err"
  return "$rc"
}

say "fresh state: database $DB_NAME, Redis keys $PREFIX:*"
psql_at "$PG_URL/postgres" -c "DROP DATABASE IF EXISTS $DB_NAME WITH (FORCE)"
redis-cli -u "$REDIS_URL" --scan --pattern "$PREFIX:*" | while read -r key; do
  redis-cli -u "$REDIS_URL" DEL "$key" >/dev/null
done

# One random secret per `env:NAME` in the senders file: the workers resolve them from their
# environment, graph-sim and the SendGrid stand-in get the same values.
for name in $(jq -r '[.. | strings | select(startswith("env:")) | ltrimstr("env:")] | unique[]' "$SENDERS"); do
  export "$name=real-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
done
secret() { # a senders.json secret value: env:NAME → $NAME, anything else as is
  case "$1" in env:*) printenv "${1#env:}" ;; *) printf '%s' "$1" ;; esac
}

say "graph-sim config: $REAL_MAILBOX at Exchange's limits, the others raised"
apps='[]'
while IFS=$'\t' read -r tenant client raw; do
  apps=$(jq --arg t "$tenant" --arg c "$client" --arg s "$(secret "$raw")" \
    'if any(.[]; .client_id == $c) then . else . + [{tenant_id: $t, client_id: $c, client_secret: $s}] end' <<<"$apps")
done < <(jq -r '(.systemMailboxes[] | [.graphTenantId, .clientId, .clientSecret]),
                (.tenants[] | select(.provider == "microsoft-graph") | [.graphTenantId, .clientId, .clientSecret])
                | @tsv' "$SENDERS")
jq -n --argjson apps "$apps" --slurpfile s "$SENDERS" --arg real "$REAL_MAILBOX" \
  --argjson fast "$SIM_FAST_PER_MINUTE" --argjson conc "$SIM_FAST_CONCURRENCY" '
  def box($address; $tenant):
    {address: ($address | ascii_downcase), tenant_id: $tenant}
    + if ($address | ascii_downcase) == $real then {limits: {minute_overflow: "refuse"}}
      else {limits: {messages_per_minute: $fast, concurrent_requests: $conc, minute_overflow: "refuse"}} end;
  {listen: "127.0.0.1:0", apps: $apps,
   mailboxes: ([$s[0].systemMailboxes[] | box(.address; .graphTenantId)]
             + [$s[0].tenants[] | select(.provider == "microsoft-graph") | box(.sender; .graphTenantId)])}
' >"$OUT/graph-sim.json"
chmod 600 "$OUT/graph-sim.json"
GRAPH_SIM_SENDGRID_KEYS=$(jq -r '[.tenants[] | select(.provider == "sendgrid") | .sendgridApiKey] | join(" ")' "$SENDERS")
keys=''
for raw in $GRAPH_SIM_SENDGRID_KEYS; do keys=${keys:+$keys,}$(secret "$raw"); done
GRAPH_SIM_SENDGRID_KEYS=$keys "$SIM" --config "$OUT/graph-sim.json" --sendgrid-listen 127.0.0.1:0 \
  >"$OUT/graph-sim.out" 2>"$OUT/graph-sim.log" &
SIM_PID=$!
for _ in $(seq 1 100); do
  grep -q '^GRAPH_LOGIN_BASE_URL=' "$OUT/graph-sim.out" 2>/dev/null && break
  kill -0 "$SIM_PID" 2>/dev/null || die "graph-sim exited; see $OUT/graph-sim.log"
  sleep 0.1
done
url_of() { sed -n "s/^$1=//p" "$OUT/graph-sim.out"; }
GRAPH_API_BASE_URL=$(url_of GRAPH_API_BASE_URL)
GRAPH_LOGIN_BASE_URL=$(url_of GRAPH_LOGIN_BASE_URL)
SENDGRID_API_BASE_URL=$(url_of SENDGRID_API_BASE_URL)
[ -n "$GRAPH_API_BASE_URL" ] && [ -n "$SENDGRID_API_BASE_URL" ] || die "graph-sim printed no URLs"
export GRAPH_API_BASE_URL GRAPH_LOGIN_BASE_URL SENDGRID_API_BASE_URL
SIM_ORIGIN=${GRAPH_LOGIN_BASE_URL%/}
echo "graph-sim $SIM_ORIGIN, SendGrid stand-in $SENDGRID_API_BASE_URL (pid $SIM_PID)"
if [ "$SIM_LATENCY_MS" != 0 ]; then
  curl -fsS -XPOST "$SIM_ORIGIN/_sim/latency" -H 'content-type: application/json' \
    -d "{\"latency\":{\"uniform\":[$SIM_LATENCY_MS]}}"
  echo "graph-sim answers sendMail after $SIM_LATENCY_MS ms (uniform)"
fi

say "senders, limits, campaign"
mw migrate >/dev/null
mw senders import "$SENDERS"
while IFS=$'\t' read -r address per_day; do
  if [ "$address" = "$REAL_MAILBOX" ]; then per_minute=$REAL_PER_MINUTE; else per_minute=$FAST_PER_MINUTE; fi
  mw mailbox set-limits "$address" --per-minute "$per_minute" ${per_day:+--recipients-per-day "$per_day"}
done < <(jq -r '.systemMailboxes[] | [(.address | ascii_downcase), (.rateLimitRecipientsPerDay // "" | tostring)] | @tsv' "$SENDERS")
set +e
RUST_LOG=warn MW_STDERR="$OUT/enqueue-bad-lines.txt" mw enqueue "$CAMPAIGN"
ENQUEUE_RC=$?
set -e
[ "$ENQUEUE_RC" -eq 0 ] || echo "enqueue reported bad lines (kept going; see $OUT/enqueue-bad-lines.txt)"

say "two workers"
started=$(date +%s.%N)
"$MW" run >"$OUT/worker-1.log" 2>&1 &
W1_PID=$!
"$MW" run >"$OUT/worker-2.log" 2>&1 &
W2_PID=$!
echo "worker 1 pid $W1_PID, worker 2 pid $W2_PID"

# Unfinished: in flight, due, or SCHEDULED by the worker (a deferral or a retry, possibly still
# in the future). What stays is what the file itself scheduled for later: never attempted.
PENDING_SQL="SELECT count(*) FROM messages WHERE status = 'SENDING'
               OR (status = 'SCHEDULED' AND (scheduled_on <= now() OR deferrals > 0 OR attempts > 0))"
deadline=$(( $(date +%s) + TIMEOUT_S ))
while :; do
  pending=$(psql_real -At -c "$PENDING_SQL")
  line=$(psql_real -At -F ' ' -c "SELECT 'SENT', count(*) FILTER (WHERE status = 'SENT'),
           'ERROR', count(*) FILTER (WHERE status = 'ERROR'), 'deferrals', coalesce(sum(deferrals), 0)
           FROM messages")
  printf '%s  pending %s  %s\n' "$(date -u +%H:%M:%S)" "$pending" "$line"
  [ "$pending" -eq 0 ] && break
  for pid in $W1_PID $W2_PID; do
    kill -0 "$pid" 2>/dev/null || die "worker $pid exited early; see $OUT/worker-*.log"
  done
  [ "$(date +%s)" -lt "$deadline" ] || { echo "timed out after $TIMEOUT_S s"; break; }
  sleep 5
done
drained=$(date +%s.%N)

say "SIGTERM to both workers"
kill -TERM "$W1_PID" "$W2_PID"
set +e
wait "$W1_PID"; W1_RC=$?
wait "$W2_PID"; W2_RC=$?
set -e
W1_PID='' W2_PID=''
echo "worker 1 exited $W1_RC, worker 2 exited $W2_RC"

curl -fsS "$SIM_ORIGIN/_sim/messages" >"$OUT/graph-messages.json"
curl -fsS "$SIM_ORIGIN/_sim/refusals" >"$OUT/graph-refusals.json"
curl -fsS "$SIM_ORIGIN/_sim/stats" >"$OUT/graph-stats.json"
curl -fsS "${SENDGRID_API_BASE_URL%/}/_sim/messages" >"$OUT/sendgrid-messages.json"
kill -TERM "$SIM_PID"
set +e; wait "$SIM_PID"; SIM_RC=$?; set -e
SIM_PID=''

# ---- verification ----------------------------------------------------------------------------
FAILED=0
check() { # label, value, expected
  if [ "$2" = "$3" ]; then printf '  ok    %-58s %s\n' "$1" "$2"
  else printf '  FAIL  %-58s %s (expected %s)\n' "$1" "$2" "$3"; FAILED=1; fi
}

# What the providers recorded, and what the file implies, as tables beside the messages.
# received_at: when the provider accepted it (graph-sim: after its simulated processing time);
# arrived_at: when the request reached it, i.e. when we sent it (the SendGrid stand-in has no
# processing time: both are the same).
jq -r '.[] | ["graph", .mailbox, (.client_request_id // ""), .received_at, .arrived_at_ms] | @csv' \
  "$OUT/graph-messages.json" >"$OUT/records.csv"
jq -r '.[] | ["sendgrid", .from, (.message_id // ""), .received_at, .received_at_ms] | @csv' \
  "$OUT/sendgrid-messages.json" >>"$OUT/records.csv"
jq -r '.[] | [.mailbox, .cause, .at, (.retry_after_s // ""), (.client_request_id // "")] | @csv' \
  "$OUT/graph-refusals.json" >"$OUT/refusals.csv"
now_iso=$(date -u +%Y-%m-%dT%H:%M:%SZ)
jq -r --arg now "$now_iso" '
  def bad_address: (. != (. | gsub("^\\s+|\\s+$"; "")))
    or (test("^[^@\\s,;]+@[^@\\s,;]+\\.[^@\\s,;]+$") | not)
    or test("^\\.|\\.\\.|\\.@|@\\.|@-|-\\.|\\.-|-$");
  [input_line_number, .id,
   (if ((.scheduledOn // "") > $now) then "later"
    elif ([.to[]?, .cc[]?, .bcc[]? | .address | select(test("[,;]"))] | length > 0) then "two addresses in one field"
    elif ([.to[]?, .cc[]?, .bcc[]? | .address | select(bad_address)] | length > 0) then "malformed address"
    elif ([.headers[]? | .name | select(test("^[xX]-.") | not)] | length > 0) then "non-x- header"
    else "good" end)] | @csv' "$CAMPAIGN" >"$OUT/expected.csv"

cat >"$OUT/load.sql" <<SQL
DROP TABLE IF EXISTS real_records, real_refusals, real_expected;
CREATE TABLE real_records (provider text, mailbox text, message_id text, received_at timestamptz,
                           arrived_ms bigint);
CREATE TABLE real_refusals (mailbox text, cause text, at timestamptz, retry_after_s int, message_id text);
CREATE TABLE real_expected (line int, id uuid, kind text);
\copy real_records FROM '$OUT/records.csv' WITH (FORMAT csv)
\copy real_refusals FROM '$OUT/refusals.csv' WITH (FORMAT csv)
\copy real_expected FROM '$OUT/expected.csv' WITH (FORMAT csv)
ALTER TABLE real_records ADD COLUMN arrived_at timestamptz;
UPDATE real_records SET arrived_at = to_timestamp(arrived_ms / 1000.0);
CREATE VIEW real_messages AS
  SELECT m.*, coalesce(s.address, t.sender_address) AS mailbox,
         coalesce(t.mail_provider, 'microsoft-graph') AS provider,
         CASE WHEN s.id IS NOT NULL THEN coalesce(s.rate_limit_per_minute, $FAST_PER_MINUTE)
              WHEN t.mail_provider = 'microsoft-graph' THEN $FAST_PER_MINUTE END AS limit_per_minute
  FROM messages m
  LEFT JOIN system_mailboxes s ON s.id = m.system_mailbox_id
  LEFT JOIN tenants t ON t.id = m.tenant_id;
SQL
psql_real -f "$OUT/load.sql" >/dev/null
q() { psql_real -At -c "$1"; }
table() { psql_real -P footer=off -c "$1"; }

say "run"
awk -v a="$started" -v b="$drained" 'BEGIN { printf "  wall time (workers start → drained): %.0f s\n", b - a }'
printf '  lines in the file: %s, messages stored: %s\n' "$(wc -l <"$CAMPAIGN" | tr -d ' ')" "$(q 'SELECT count(*) FROM messages')"

say "counts by status"
table "SELECT mailbox, provider, count(*) FILTER (WHERE status = 'SENT') AS sent,
              count(*) FILTER (WHERE status = 'ERROR') AS error,
              count(*) FILTER (WHERE status = 'SCHEDULED') AS later,
              count(*) FILTER (WHERE status = 'SENDING') AS in_flight,
              sum(deferrals) AS deferrals, count(*) AS total
       FROM real_messages GROUP BY 1, 2
       UNION ALL
       SELECT 'all', '', count(*) FILTER (WHERE status = 'SENT'), count(*) FILTER (WHERE status = 'ERROR'),
              count(*) FILTER (WHERE status = 'SCHEDULED'), count(*) FILTER (WHERE status = 'SENDING'),
              sum(deferrals), count(*) FROM real_messages ORDER BY 1"

say "checks"
check "worker 1 exit status after SIGTERM" "$W1_RC" 0
check "worker 2 exit status after SIGTERM" "$W2_RC" 0
check "graph-sim exit status after SIGTERM" "$SIM_RC" 0
check "enqueue exit status (non-zero = bad lines)" "$ENQUEUE_RC" 0
check "messages SENDING" "$(q "SELECT count(*) FROM messages WHERE status = 'SENDING'")" 0
check "messages SCHEDULED past their time" "$(q "SELECT count(*) FROM messages WHERE status = 'SCHEDULED' AND scheduled_on <= now()")" 0
check "messages SCHEDULED for later = lines with a future scheduledOn" \
  "$(q "SELECT count(*) FROM messages WHERE status = 'SCHEDULED'")" "$(q "SELECT count(*) FROM real_expected WHERE kind = 'later'")"
check "SCHEDULED rows the worker ever attempted or deferred" \
  "$(q "SELECT count(*) FROM messages WHERE status = 'SCHEDULED' AND (attempts > 0 OR deferrals > 0)")" 0
check "ERROR rows without a reason" "$(q "SELECT count(*) FROM messages WHERE status = 'ERROR' AND coalesce(last_error, '') = ''")" 0
check "provider records without a message id" "$(q "SELECT count(*) FROM real_records WHERE message_id = ''")" 0
check "messages the providers received more than once" \
  "$(q "SELECT count(*) FROM (SELECT message_id FROM real_records GROUP BY 1 HAVING count(*) > 1) d")" 0
check "SENT rows the providers never received" \
  "$(q "SELECT count(*) FROM messages m WHERE status = 'SENT' AND NOT EXISTS (SELECT 1 FROM real_records r WHERE r.message_id = m.id::text)")" 0
check "provider records whose row is not SENT" \
  "$(q "SELECT count(*) FROM real_records r LEFT JOIN messages m ON m.id::text = r.message_id WHERE m.status IS DISTINCT FROM 'SENT'")" 0
check "provider records = SENT rows" "$(q 'SELECT count(*) FROM real_records')" "$(q "SELECT count(*) FROM messages WHERE status = 'SENT'")"
check "mailboxes over their limit in some UTC minute (sent = arrived)" \
  "$(q "SELECT count(*) FROM (SELECT r.mailbox, date_trunc('minute', r.arrived_at), count(*) n
        FROM real_records r WHERE provider = 'graph' GROUP BY 1, 2) x
        JOIN (SELECT DISTINCT mailbox, limit_per_minute FROM real_messages) l USING (mailbox)
        WHERE n > l.limit_per_minute")" 0
check "refused messages that ended ERROR" \
  "$(q "SELECT count(DISTINCT f.message_id) FROM real_refusals f JOIN messages m ON m.id::text = f.message_id WHERE m.status = 'ERROR'")" 0
check "ERROR rows whose reason is throttling (429/503/rate limit)" \
  "$(q "SELECT count(*) FROM messages WHERE status = 'ERROR' AND last_error ~* '429|503|throttl|rate limit'")" 0
check "graph-sim refusals = mail.graph.throttled deferrals logged" \
  "$(cat "$OUT"/worker-*.log | grep -c '"event":"mail.graph.throttled"' || true)" "$(q 'SELECT count(*) FROM real_refusals')"
check "ERROR rows that are not a known fault of the file" \
  "$(q "SELECT count(*) FROM messages m JOIN real_expected e USING (id) WHERE m.status = 'ERROR' AND e.kind IN ('good', 'later')")" 0
check "known faults of the file that did not end ERROR" \
  "$(q "SELECT count(*) FROM messages m JOIN real_expected e USING (id) WHERE m.status <> 'ERROR' AND e.kind NOT IN ('good', 'later')")" 0

say "most sends in one UTC minute per mailbox against our limit"
echo "  by the minute a request reached the provider (when we sent it), and by the minute the"
echo "  provider accepted it (graph-sim: after its $SIM_LATENCY_MS ms processing time):"
table "SELECT l.mailbox, l.provider, a.max AS max_sent_in_utc_minute, r.max AS max_accepted_in_utc_minute,
              l.limit_per_minute AS our_limit, a.minutes AS minutes_used,
              (SELECT count(*) FROM real_records x WHERE x.mailbox = l.mailbox
                 AND date_trunc('minute', x.arrived_at) <> date_trunc('minute', x.received_at)) AS accepted_a_minute_later
       FROM (SELECT DISTINCT mailbox, provider, limit_per_minute FROM real_messages) l
       JOIN (SELECT mailbox, max(n) AS max, count(*) AS minutes FROM (SELECT mailbox, date_trunc('minute', arrived_at), count(*) AS n
             FROM real_records GROUP BY 1, 2) x GROUP BY 1) a USING (mailbox)
       JOIN (SELECT mailbox, max(n) AS max FROM (SELECT mailbox, date_trunc('minute', received_at), count(*) AS n
             FROM real_records GROUP BY 1, 2) x GROUP BY 1) r USING (mailbox)
       ORDER BY 1"
echo "  graph-sim's own view (rolling 60 s against its limit, concurrency):"
jq -r --slurpfile c "$OUT/graph-sim.json" '.mailboxes[] | . as $m
  | ($c[0].mailboxes[] | select(.address == $m.mailbox) | .limits // {}) as $l
  | "  \($m.mailbox): accepted \($m.accepted), max in rolling 60 s \($m.max_in_rolling_60s) / \($l.messages_per_minute // 30), max concurrent \($m.max_concurrent) / \($l.concurrent_requests // 4) per app"' \
  "$OUT/graph-stats.json"

say "deferrals"
printf '  rate-limit deferrals (our limiter, mail.rateLimit.deferred): %s\n' \
  "$(cat "$OUT"/worker-*.log | grep -c '"event":"mail.rateLimit.deferred"' || true)"
printf '  provider throttling deferrals (mail.graph.throttled):          %s\n' \
  "$(cat "$OUT"/worker-*.log | grep -c '"event":"mail.graph.throttled"' || true)"
table "SELECT mailbox, sum(deferrals) AS deferrals, max(deferrals) AS most_for_one_message,
              count(*) FILTER (WHERE deferrals > 0) AS messages_deferred
       FROM real_messages GROUP BY 1 ORDER BY 1"

say "graph-sim refusals (429) by mailbox and cause"
table "SELECT mailbox, cause, count(*) AS refusals, count(DISTINCT message_id) AS messages,
              min(retry_after_s) AS min_retry_after_s, max(retry_after_s) AS max_retry_after_s
       FROM real_refusals GROUP BY 1, 2
       UNION ALL SELECT 'all', '', count(*), count(DISTINCT message_id), min(retry_after_s), max(retry_after_s)
       FROM real_refusals ORDER BY 1, 2"
say "graph-sim refusals by second of the UTC minute (10 s buckets)"
table "SELECT cause, (extract(second FROM at)::int / 10) * 10 AS from_s,
              (extract(second FROM at)::int / 10) * 10 + 9 AS to_s, count(*) AS refusals
       FROM real_refusals GROUP BY 1, 2, 3 ORDER BY 1, 2"
table "SELECT cause, count(*) FILTER (WHERE extract(second FROM at) < 5) AS in_first_5_s,
              count(*) FILTER (WHERE extract(second FROM at) >= 55) AS in_last_5_s,
              min(at) AS first, max(at) AS last
       FROM real_refusals GROUP BY 1 ORDER BY 1"
echo "  $REAL_MAILBOX minute by minute (accepted sends by the minute they were sent, their seconds, refusals by cause):"
table "SELECT to_char(minute, 'HH24:MI') AS utc_minute, coalesce(sends, 0) AS sends,
              first_s, last_s, coalesce(minute_refusals, 0) AS refused_minute,
              coalesce(concurrency_refusals, 0) AS refused_concurrency
       FROM (SELECT date_trunc('minute', arrived_at) AS minute, count(*) AS sends,
                    min(extract(second FROM arrived_at))::int AS first_s,
                    max(extract(second FROM arrived_at))::int AS last_s
             FROM real_records WHERE mailbox = '$REAL_MAILBOX' GROUP BY 1) s
       FULL JOIN (SELECT date_trunc('minute', at) AS minute,
                         count(*) FILTER (WHERE cause = 'minute') AS minute_refusals,
                         count(*) FILTER (WHERE cause = 'concurrency') AS concurrency_refusals
                  FROM real_refusals WHERE mailbox = '$REAL_MAILBOX' GROUP BY 1) f USING (minute)
       ORDER BY minute"
echo "  final status of refused messages:"
table "SELECT m.status, count(DISTINCT m.id) AS messages FROM real_refusals f
       JOIN messages m ON m.id::text = f.message_id GROUP BY 1 ORDER BY 1"

say "ERROR rows by reason"
table "SELECT e.kind AS fault_in_file, regexp_replace(regexp_replace(m.last_error,
                '\\([^()]*\\)', '(…)', 'g'), '\\[[0-9]+\\]', '[n]', 'g') AS reason,
              count(*) AS messages, string_agg(e.line::text, ',' ORDER BY e.line) AS lines
       FROM messages m JOIN real_expected e USING (id) WHERE m.status = 'ERROR'
       GROUP BY 1, 2 ORDER BY 1, 2"

say "verdict"
if [ "$FAILED" -eq 0 ]; then echo "  all checks passed (logs and records in $OUT)"; else echo "  SOME CHECKS FAILED (logs and records in $OUT)"; fi
exit "$FAILED"
