#!/usr/bin/env bash
# A producer of the HTTP ingest with plain curl (docs/ingest.md): posts a campaign JSONL file to
# POST /v1/messages in requests of 500 lines, each with its own Idempotency-Key, and repeats a
# request that got no answer, a 5xx or a 503 (after its Retry-After) with the SAME key, so a
# request PostgreSQL did commit is answered again instead of stored twice.
#
#   INGEST_URL=http://127.0.0.1:9186 INGEST_TOKEN=… examples/ingest/curl.sh campaign.jsonl
#
# Prints each request's status line (`stored`, `partial`: some lines refused, each with its line
# number and reason in the answer; `refused`: none stored). Exit 1 when a line was refused.
set -euo pipefail

file="${1:?usage: INGEST_URL=… INGEST_TOKEN=… $0 campaign.jsonl [lines per request]}"
per_request="${2:-500}"
url="${INGEST_URL:-http://127.0.0.1:9186}/v1/messages"
: "${INGEST_TOKEN:?set INGEST_TOKEN to the secret of the producer token}"
run="$(date -u +%Y%m%dT%H%M%SZ)-$$"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

split -l "$per_request" -d -a 6 "$file" "$work/batch-"
refused=0
for batch in "$work"/batch-*; do
  # A bare key takes no space, quote, backslash or comma (docs/ingest.md): the file's name with
  # anything else made `_`, so "spring campaign.jsonl" gives a key the daemon accepts.
  key="$(printf '%s' "$(basename "$file")" | tr -c 'A-Za-z0-9._~:/+=@-' '_')-$run-$(basename "$batch")"
  for attempt in 1 2 3 4 5 6; do
    # The token goes in a header file, not the command line (ps shows arguments).
    printf 'Authorization: Bearer %s\n' "$INGEST_TOKEN" > "$work/auth"
    status="$(curl --silent --show-error --output "$work/answer" --write-out '%{http_code}' \
      --dump-header "$work/headers" \
      --header @"$work/auth" \
      --header "Idempotency-Key: $key" \
      --header 'Content-Type: application/x-ndjson' \
      --data-binary @"$batch" "$url" || echo 000)"
    case "$status" in
      200|207|422) break ;;
      503|5*|000)
        wait_s="$(sed -n 's/^[Rr]etry-[Aa]fter: *\([0-9]*\).*/\1/p' "$work/headers" 2>/dev/null | head -1)"
        sleep "${wait_s:-$attempt}" ;;
      *) echo "$(basename "$batch"): HTTP $status: $(cat "$work/answer")" >&2; exit 2 ;;
    esac
  done
  summary="$(python3 -c 'import json,sys; a=json.load(open(sys.argv[1])); print(a.get("status"), "stored", a.get("stored"), "duplicate", a.get("duplicate"), "refused", a.get("refused")); [print("  line", r["line"], r.get("id"), r["reason"]) for r in a.get("results", []) if r.get("reason")]' "$work/answer" 2>/dev/null || cat "$work/answer")"
  echo "$(basename "$batch") (key $key): HTTP $status $summary"
  case "$status" in 207|422) refused=1 ;; 200) ;; *) exit 2 ;; esac
done
exit "$refused"
