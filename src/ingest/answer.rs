//! What `POST /v1/messages` answers: each line's outcome (stored, duplicate, or refused with the
//! reason and its line number) and a status saying whether all were stored (docs/ingest.md,
//! the OpenAPI description's `IngestAnswer`).

use serde::Serialize;

use crate::ops::ingest::IngestOutcome;

/// One line's outcome.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LineResult {
    /// Its number: the JSONL line, or the JSON array's element, from 1.
    pub line: usize,
    /// Its `id` as written (`null` when none could be read).
    pub id: Option<String>,
    /// `stored`, `duplicate` or `refused`.
    pub outcome: &'static str,
    /// Why it was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The answer to a request whose lines were judged.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Answer {
    /// `stored` (every line stored now or before: 200), `partial` (some refused: 207) or
    /// `refused` (none stored: 422).
    pub status: &'static str,
    /// The token's name.
    pub producer: String,
    /// Lines in the request.
    pub lines: usize,
    /// Lines stored now.
    pub stored: usize,
    /// Lines whose id was stored before (by an earlier request, the queue or a file).
    pub duplicate: usize,
    /// Lines refused.
    pub refused: usize,
    /// Every line, in order.
    pub results: Vec<LineResult>,
}

impl Answer {
    /// The answer of `results` (sorted here by line).
    pub(crate) fn new(producer: &str, mut results: Vec<LineResult>) -> Self {
        results.sort_by_key(|r| r.line);
        let count = |o: IngestOutcome| results.iter().filter(|r| r.outcome == o.as_str()).count();
        let (stored, duplicate, refused) = (
            count(IngestOutcome::Stored),
            count(IngestOutcome::Duplicate),
            count(IngestOutcome::Refused),
        );
        let status = match (refused, stored + duplicate) {
            (0, _) => "stored",
            (_, 0) => "refused",
            _ => "partial",
        };
        Self {
            status,
            producer: producer.to_owned(),
            lines: results.len(),
            stored,
            duplicate,
            refused,
            results,
        }
    }

    /// The HTTP status: 200 all stored, 207 some refused, 422 none stored.
    pub(crate) fn http_status(&self) -> u16 {
        match self.status {
            "stored" => 200,
            "partial" => 207,
            _ => 422,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(line: usize, outcome: IngestOutcome) -> LineResult {
        LineResult {
            line,
            id: None,
            outcome: outcome.as_str(),
            reason: None,
        }
    }

    #[test]
    fn the_status_says_whether_every_line_was_stored() {
        use IngestOutcome::*;
        let a = Answer::new("crm", vec![line(2, Duplicate), line(1, Stored)]);
        assert_eq!(
            (a.status, a.http_status(), a.results[0].line),
            ("stored", 200, 1)
        );
        let a = Answer::new("crm", vec![line(1, Stored), line(2, Refused)]);
        assert_eq!((a.status, a.http_status(), a.refused), ("partial", 207, 1));
        let a = Answer::new("crm", vec![line(1, Refused)]);
        assert_eq!((a.status, a.http_status()), ("refused", 422));
    }
}
