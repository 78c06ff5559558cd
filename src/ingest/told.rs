//! The one `ingest.request` log line every `POST /v1/messages` gets, whatever it was answered
//! (200 to 503): who asked (the token's name, never its secret), the status, why a request was
//! refused before its lines were judged (a fixed word, never the body's text, which may hold an
//! address), and the line counts when its lines were judged.

use std::time::Duration;

use super::answer::Answer;
use crate::log_events;

/// Why a request was answered without judging its lines: the log line's `refusal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// 401: no known bearer token.
    Token,
    /// 400: a malformed `Idempotency-Key`.
    IdempotencyKey,
    /// 413: over `INGEST_MAX_BODY_BYTES`.
    BodyTooLarge,
    /// 413: over `INGEST_MAX_LINES`.
    TooManyLines,
    /// 400: not readable, or a `[` body that is no JSON array.
    MalformedBody,
    /// 400: no line.
    EmptyBody,
    /// 422: the key was used for another body.
    KeyReused,
    /// 503: PostgreSQL failed or was slow.
    Unavailable,
}

impl Refusal {
    fn as_str(self) -> &'static str {
        match self {
            Self::Token => "token",
            Self::IdempotencyKey => "idempotency_key",
            Self::BodyTooLarge => "body_too_large",
            Self::TooManyLines => "too_many_lines",
            Self::MalformedBody => "malformed_body",
            Self::EmptyBody => "empty_body",
            Self::KeyReused => "key_reused",
            Self::Unavailable => "unavailable",
        }
    }
}

/// What a request's log line says besides its status.
#[derive(Debug, Clone, Default)]
pub(crate) struct Told {
    /// The token's name, once known.
    pub producer: Option<String>,
    /// Why it was refused before its lines were judged.
    pub refusal: Option<Refusal>,
    /// All, stored, duplicate, refused lines (a judged or replayed answer).
    pub counts: Option<[usize; 4]>,
    /// An `Idempotency-Key` repeat answered from PostgreSQL.
    pub replayed: bool,
}

impl Told {
    /// Refused for `why`, by `producer` when known.
    pub(crate) fn refused(producer: Option<&str>, why: Refusal) -> Self {
        Self {
            producer: producer.map(str::to_owned),
            refusal: Some(why),
            ..Self::default()
        }
    }

    /// `answer` given (`replayed`: again).
    pub(crate) fn answered(answer: &Answer, replayed: bool) -> Self {
        Self {
            producer: Some(answer.producer.clone()),
            counts: Some([
                answer.lines,
                answer.stored,
                answer.duplicate,
                answer.refused,
            ]),
            replayed,
            ..Self::default()
        }
    }

    /// Logs the line of a request answered `status` after `took`.
    pub(crate) fn log(&self, status: u16, took: Duration) {
        let producer = self.producer.as_deref().unwrap_or("");
        let took_ms = took.as_millis() as u64;
        match (self.counts, self.refusal) {
            (Some([lines, stored, duplicate, refused]), _) => tracing::info!(
                event = log_events::INGEST_REQUEST,
                producer,
                status,
                lines,
                stored,
                duplicate,
                refused,
                replayed = self.replayed,
                took_ms,
                "an ingest request was answered"
            ),
            (None, refusal) => tracing::info!(
                event = log_events::INGEST_REQUEST,
                producer,
                status,
                refusal = refusal.map_or("", Refusal::as_str),
                replayed = self.replayed,
                took_ms,
                "an ingest request was refused before its lines were judged"
            ),
        }
    }
}
