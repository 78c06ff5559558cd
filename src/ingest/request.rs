//! One `POST /v1/messages`: the token, the body within its limits, then in ONE transaction
//! (within [`STORE_DEADLINE`]): the key's earlier answer, or the lines judged by the file
//! import's code ([`campaign::parse_numbered`]), narrowed to the token's senders, stored by the
//! import's and the queue's insert ([`campaign::insert_chunk`]) and the request's row
//! ([`store::ingest::record`]). PostgreSQL failing or slow: 503 with `Retry-After`, nothing
//! stored (the transaction is rolled back).

use std::{collections::HashSet, time::Instant};

use axum::{
    Json,
    body::Body,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::json;
use sha2::{Digest, Sha256};
use sqlx::Connection;

use super::{
    IngestState, STORE_DEADLINE,
    answer::{Answer, LineResult},
    body::{self, BodyError},
    key,
    tokens::Producer,
    told::{Refusal, Told},
};
use crate::{
    import::{self, BadEntry, campaign},
    log_events,
    ops::{ingest::IngestOutcome, metrics::STAGE_INTAKE},
    store::{self, SenderRef, StoreError, messages::NewMessage},
};

/// The header a replayed answer carries.
pub const REPLAYED: &str = "idempotent-replayed";

fn error(status: StatusCode, text: impl Into<String>) -> Response {
    (status, Json(json!({ "error": text.into() }))).into_response()
}

/// An answer's exact bytes as JSON: what the first answer sent and a replay sends again.
fn json_bytes(status: u16, bytes: Vec<u8>) -> Response {
    (
        status_of(status),
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        bytes,
    )
        .into_response()
}

/// `POST /v1/messages`: answered, counted and logged (one `ingest.request` line each).
pub(super) async fn post_messages(
    state: axum::extract::State<IngestState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let (response, told) = answer(&state, &headers, body).await;
    let status = response.status().as_u16();
    state.metrics.ingest_request(status, started.elapsed());
    told.log(status, started.elapsed());
    response
}

async fn answer(state: &IngestState, headers: &HeaderMap, body: Body) -> (Response, Told) {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        });
    let Some(producer) = bearer.and_then(|b| state.settings.producers.find(b)) else {
        tracing::warn!(
            event = log_events::INGEST_UNAUTHORIZED,
            "an ingest request without a known bearer token: 401"
        );
        let mut r = error(
            StatusCode::UNAUTHORIZED,
            "a bearer token of INGEST_TOKENS or INGEST_TOKENS_FILE is required: Authorization: Bearer <secret>",
        );
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return (r, Told::refused(None, Refusal::Token));
    };
    let refused = |why| Told::refused(Some(&producer.name), why);
    let key = match key::from_headers(headers) {
        Ok(key) => key,
        Err(text) => {
            return (
                error(StatusCode::BAD_REQUEST, text),
                refused(Refusal::IdempotencyKey),
            );
        }
    };
    let key = key.as_deref();
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let max_lines = state.settings.max_lines;
    let bytes = match body::read(body, length, state.settings.max_body_bytes).await {
        Ok(b) => b,
        Err(e) => return body_error(e, refused),
    };
    let lines = match body::lines(&bytes, max_lines) {
        Ok(l) if l.is_empty() => {
            return (
                error(
                    StatusCode::BAD_REQUEST,
                    "the body holds no line: send a JSON array or JSONL of campaign lines",
                ),
                refused(Refusal::EmptyBody),
            );
        }
        Ok(l) => l,
        Err(e) => return body_error(e, refused),
    };
    let digest: [u8; 32] = Sha256::digest(&bytes).into();
    let stored = tokio::time::timeout(
        STORE_DEADLINE,
        store_lines(state, producer, key, &digest, &lines),
    )
    .await;
    match stored {
        Ok(Ok(Outcome::Answered(answer, bytes))) => {
            log_refused_lines(producer, &answer);
            count_lines(state, &answer);
            let told = Told::answered(&answer, false);
            (json_bytes(answer.http_status(), bytes), told)
        }
        Ok(Ok(Outcome::Replayed(first))) => {
            let [lines, stored, duplicate, refused] = first.counts;
            let told = Told {
                producer: Some(producer.name.clone()),
                counts: Some([lines, stored, duplicate, refused].map(|n| n as usize)),
                replayed: true,
                refusal: None,
            };
            let mut r = json_bytes(first.status, first.answer.into_bytes());
            r.headers_mut()
                .insert(REPLAYED, HeaderValue::from_static("true"));
            (r, told)
        }
        Ok(Ok(Outcome::KeyReused)) => (
            error(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!(
                    "Idempotency-Key {:?} was used within 24 h for a different body: use a new key for a new request",
                    key.unwrap_or_default()
                ),
            ),
            refused(Refusal::KeyReused),
        ),
        Ok(Err(e)) => (
            unavailable(state, producer, &e.to_string()),
            refused(Refusal::Unavailable),
        ),
        Err(_) => (
            unavailable(
                state,
                producer,
                &format!(
                    "PostgreSQL did not answer within {} s",
                    STORE_DEADLINE.as_secs()
                ),
            ),
            refused(Refusal::Unavailable),
        ),
    }
}

fn status_of(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

fn body_error(e: BodyError, refused: impl Fn(Refusal) -> Told) -> (Response, Told) {
    let why = match &e {
        BodyError::TooLarge(_) => Refusal::BodyTooLarge,
        BodyError::TooManyLines { .. } => Refusal::TooManyLines,
        BodyError::Malformed(_) => Refusal::MalformedBody,
    };
    let response = match e {
        BodyError::TooLarge(max) => error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the body is over INGEST_MAX_BODY_BYTES ({max} bytes): send fewer lines per request"
            ),
        ),
        BodyError::TooManyLines { lines, max } => error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the body holds {lines} lines, over INGEST_MAX_LINES ({max}): split it into requests of at most {max}"
            ),
        ),
        BodyError::Malformed(text) => error(StatusCode::BAD_REQUEST, text),
    };
    (response, refused(why))
}

fn unavailable(state: &IngestState, producer: &Producer, why: &str) -> Response {
    tracing::warn!(event = log_events::INGEST_STORE_FAILED, producer = %producer.name, error = %why, "an ingest request could not be stored: 503, nothing stored");
    let retry = state.settings.retry_after.as_secs().max(1);
    let mut r = error(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "PostgreSQL is unavailable ({why}); nothing was stored: send the same request again after Retry-After"
        ),
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(retry));
    r
}

fn log_refused_lines(producer: &Producer, answer: &Answer) {
    for r in answer.results.iter().filter(|r| r.reason.is_some()) {
        tracing::warn!(event = log_events::INGEST_LINE_REFUSED, producer = %producer.name, line = r.line, reason = r.reason.as_deref().unwrap_or_default(), "an ingest line was refused");
    }
}

fn count_lines(state: &IngestState, answer: &Answer) {
    let m = &state.metrics;
    m.ingest_lines(IngestOutcome::Stored, answer.stored as u64);
    m.ingest_lines(IngestOutcome::Duplicate, answer.duplicate as u64);
    m.ingest_lines(IngestOutcome::Refused, answer.refused as u64);
}

enum Outcome {
    /// The lines were judged: the answer and its JSON bytes as sent (and kept with a key).
    Answered(Answer, Vec<u8>),
    /// The key's first answer, kept byte for byte.
    Replayed(store::ingest::Remembered),
    KeyReused,
}

fn replay(first: store::ingest::Remembered, digest: &[u8]) -> Outcome {
    if first.body_sha256 == digest {
        Outcome::Replayed(first)
    } else {
        Outcome::KeyReused
    }
}

/// The transaction of one request (see the module doc).
async fn store_lines(
    state: &IngestState,
    producer: &Producer,
    key: Option<&str>,
    digest: &[u8],
    lines: &[(usize, &[u8])],
) -> Result<Outcome, StoreError> {
    let pool = &state.pool;
    // Read before this request holds its connection: one connection per request at a time, so
    // as many requests as the pool has connections never wait on each other.
    let directory = import::sender_directory(pool).await?;
    let mut conn = pool.acquire().await?;
    if let Some(key) = key
        && let Some(first) = store::ingest::remembered(&mut conn, &producer.name, key).await?
    {
        return Ok(replay(first, digest));
    }
    let (good, mut bad) = campaign::parse_numbered(lines.iter().copied(), &directory);
    let good = narrowed(producer, &directory, good, &mut bad);
    let mut tx = conn.begin().await?;
    let mut results = Vec::with_capacity(lines.len());
    let mut suppressed = 0;
    for chunk in good.chunks(campaign::INSERT_CHUNK) {
        let stored = campaign::insert_chunk(&mut tx, chunk, state.settings.outbox).await?;
        suppressed += stored.suppressed;
        let refused: HashSet<usize> = stored.refused.iter().map(|(n, _)| *n).collect();
        bad.extend(stored.refused.into_iter().map(|(number, reason)| BadEntry {
            location: format!("line {number}"),
            reason,
        }));
        for (number, m) in chunk.iter().filter(|(n, _)| !refused.contains(n)) {
            let outcome = if stored.new.contains(&m.id) {
                IngestOutcome::Stored
            } else {
                IngestOutcome::Duplicate
            };
            results.push(LineResult {
                line: *number,
                id: Some(m.id.to_string()),
                outcome: outcome.as_str(),
                reason: None,
            });
        }
    }
    let texts: std::collections::HashMap<usize, &[u8]> = lines.iter().copied().collect();
    results.extend(bad.into_iter().map(|b| {
        let line = campaign::line_number(&b.location);
        LineResult {
            line,
            id: texts.get(&line).and_then(|t| body::written_id(t)),
            outcome: IngestOutcome::Refused.as_str(),
            reason: Some(b.reason),
        }
    }));
    let answer = Answer::new(&producer.name, results);
    let bytes = serde_json::to_vec(&answer)
        .map_err(|e| StoreError::Invalid(format!("the answer as JSON: {e}")))?;
    let recorded = store::ingest::record(
        &mut tx,
        &store::ingest::RequestRow {
            token: &producer.name,
            key,
            body_sha256: digest,
            status: answer.http_status(),
            answer: key.and(std::str::from_utf8(&bytes).ok()),
            counts: [
                answer.lines,
                answer.stored,
                answer.duplicate,
                answer.refused,
            ]
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
        },
    )
    .await?;
    if !recorded {
        // A concurrent request with this key committed first: its answer is the answer.
        tx.rollback().await?;
        let first =
            store::ingest::remembered(&mut conn, &producer.name, key.unwrap_or_default()).await?;
        return Ok(first.map_or(Outcome::KeyReused, |f| replay(f, digest)));
    }
    tx.commit().await?;
    if suppressed > 0 {
        state
            .metrics
            .recipients_suppressed(STAGE_INTAKE, suppressed);
    }
    Ok(Outcome::Answered(answer, bytes))
}

/// `good` without the lines whose sender `producer` may not post for (moved to `bad`, naming
/// the token and its senders).
fn narrowed(
    producer: &Producer,
    directory: &campaign::SenderDirectory,
    good: Vec<(usize, NewMessage)>,
    bad: &mut Vec<BadEntry>,
) -> Vec<(usize, NewMessage)> {
    let Some(names) = &producer.senders else {
        return good;
    };
    let allowed: HashSet<SenderRef> = names.iter().filter_map(|n| directory.scope(n)).collect();
    let (kept, refused): (Vec<_>, Vec<_>) = good
        .into_iter()
        .partition(|(_, m)| allowed.contains(&m.sender));
    bad.extend(refused.into_iter().map(|(number, m)| BadEntry {
        location: format!("line {number}"),
        reason: format!(
            "its sender is not one token {} may post for (INGEST_TOKENS_FILE lists {}); the line was skipped (id {})",
            producer.name,
            names.join(", "),
            m.id
        ),
    }));
    kept
}
