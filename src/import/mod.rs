//! Reading producer files: the senders file (`mail-worker senders import`) and a campaign
//! JSONL file (`mail-worker enqueue`).

pub mod campaign;
pub mod senders;

/// One unusable input line or entry, by position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{location}: {reason}")]
pub struct BadEntry {
    /// `line 12` or `tenants[2]`.
    pub location: String,
    /// What is wrong, naming the field.
    pub reason: String,
}
