//! One intake job: the bytes of one campaign JSONL line (docs/file-formats.md), stored by
//! apalis-redis as they were pushed. The codec is the identity, so a job that is not JSON, not
//! UTF-8 or holds a NUL reaches [`crate::import::campaign::parse_line_bytes`], which judges it
//! exactly as the file import judges a line (apalis's JSON codec would fail such a job while
//! fetching it, before any handler, and leave it in flight).

use std::convert::Infallible;

use apalis::prelude::Codec;

/// The job codec: a job's arguments are its stored bytes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LineBytes;

impl Codec<Vec<u8>> for LineBytes {
    type Error = Infallible;
    type Compact = Vec<u8>;

    fn encode(&self, val: &Vec<u8>) -> Result<Vec<u8>, Infallible> {
        Ok(val.clone())
    }

    fn decode(&self, val: &Vec<u8>) -> Result<Vec<u8>, Infallible> {
        Ok(val.clone())
    }
}

/// The task id a line is pushed under: its `id` when it has a readable one (so a second push
/// of the same message while the first is still in Redis is refused by apalis-redis's
/// `HSETNX`), else a fresh random UUID.
pub(crate) fn task_id(line: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Id {
        id: String,
    }
    serde_json::from_slice::<Id>(line)
        .ok()
        .and_then(|i| uuid::Uuid::parse_str(i.id.trim()).ok())
        .unwrap_or_else(uuid::Uuid::new_v4)
        .to_string()
}

/// The meta hash's field where `lua/intake/push.lua` records a job's push time (Redis's
/// clock, Unix seconds).
pub(crate) const PUSHED_AT: &str = "pushed_at";
