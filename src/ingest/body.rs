//! A request's body as numbered campaign lines: a JSON array (element N is line N, its exact
//! text) or JSONL (the file import's own line splitting), read within `INGEST_MAX_BODY_BYTES`.

use axum::body::Body;
use futures::StreamExt;
use serde_json::value::RawValue;

use crate::import::campaign;

/// Why a body was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BodyError {
    /// Over the byte limit (413).
    TooLarge(usize),
    /// Over the line limit (413).
    TooManyLines {
        /// Lines in the body.
        lines: usize,
        /// `INGEST_MAX_LINES`.
        max: usize,
    },
    /// Not readable, or a JSON array that is not JSON (400).
    Malformed(String),
}

/// Reads `body`, refusing it as soon as it passes `max` bytes (a `Content-Length` over it is
/// refused before any byte is read).
pub(crate) async fn read(
    body: Body,
    content_length: Option<u64>,
    max: usize,
) -> Result<Vec<u8>, BodyError> {
    if content_length.is_some_and(|n| n > max as u64) {
        return Err(BodyError::TooLarge(max));
    }
    let mut bytes = Vec::with_capacity(content_length.map_or(0, |n| n as usize));
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| BodyError::Malformed(format!("reading the body: {e}")))?;
        if bytes.len() + chunk.len() > max {
            return Err(BodyError::TooLarge(max));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// The non-blank lines of `bytes`, numbered from 1: the elements of a JSON array (when the
/// body's first non-blank character is `[`), else its JSONL lines. More than `max` is
/// [`BodyError::TooManyLines`].
pub(crate) fn lines(bytes: &[u8], max: usize) -> Result<Vec<(usize, &[u8])>, BodyError> {
    let unmarked = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let numbered: Vec<(usize, &[u8])> =
        if unmarked.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
            let elements: Vec<&RawValue> = serde_json::from_slice(unmarked).map_err(|e| {
                BodyError::Malformed(format!(
                    "the body starts with `[` but is not a JSON array: {e}"
                ))
            })?;
            elements
                .into_iter()
                .enumerate()
                .map(|(i, e)| (i + 1, e.get().as_bytes()))
                .collect()
        } else {
            campaign::lines(unmarked)
                .filter(|(_, l)| !l.iter().all(u8::is_ascii_whitespace))
                .collect()
        };
    if numbered.len() > max {
        return Err(BodyError::TooManyLines {
            lines: numbered.len(),
            max,
        });
    }
    Ok(numbered)
}

/// A line's `id` as written, when it is JSON with a string `id` (for a refused line).
pub(crate) fn written_id(line: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Id {
        id: String,
    }
    serde_json::from_slice::<Id>(line)
        .ok()
        .map(|i| i.id.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_array_is_numbered_by_element_with_its_exact_text() {
        let body = b" [ {\"id\": \"a\",\n \"x\": 1}, 2, {\"id\":\"c\"} ]";
        let lines = lines(body, 10).unwrap();
        let texts: Vec<(usize, &str)> = lines
            .iter()
            .map(|(n, l)| (*n, std::str::from_utf8(l).unwrap()))
            .collect();
        assert_eq!(
            texts,
            [
                (1, "{\"id\": \"a\",\n \"x\": 1}"),
                (2, "2"),
                (3, "{\"id\":\"c\"}")
            ]
        );
    }

    #[test]
    fn jsonl_keeps_the_files_line_numbers_and_skips_blank_lines() {
        let lines = lines(b"{\"id\":\"a\"}\r\n\n  \n{\"id\":\"b\"}", 10).unwrap();
        let numbers: Vec<usize> = lines.iter().map(|(n, _)| *n).collect();
        assert_eq!(numbers, [1, 4]);
    }

    #[test]
    fn limits_and_a_broken_array_are_refused() {
        assert_eq!(
            lines(b"1\n2\n3", 2),
            Err(BodyError::TooManyLines { lines: 3, max: 2 })
        );
        assert!(matches!(
            lines(b"[{\"id\":", 5),
            Err(BodyError::Malformed(_))
        ));
        assert_eq!(
            written_id(b"{\"id\": \" x \", \"to\": 3}").as_deref(),
            Some("x")
        );
        assert_eq!(written_id(b"not json"), None);
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused() {
        let read_of = |text: &'static str, length| read(Body::from(text), length, 4);
        assert_eq!(read_of("abcd", None).await.unwrap(), b"abcd");
        assert_eq!(read_of("abcde", None).await, Err(BodyError::TooLarge(4)));
        assert_eq!(read_of("", Some(5)).await, Err(BodyError::TooLarge(4)));
    }
}
