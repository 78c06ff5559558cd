//! The senders `run` imports at start-up (docs/operations.md, "Senders in Kubernetes").

use std::path::PathBuf;

use super::Fallback::Unset;
use super::Setting;
use super::kinds::{FilePath, Optional};

settings! {
    /// Senders at start-up.
    pub struct SenderSettings = "Senders at start-up (docs/operations.md, \"Senders in Kubernetes\")" {
        file: Option<PathBuf> = Optional(FilePath, "(unset)"), Setting {
            name: "SENDERS_FILE",
            flag: "senders-file",
            default: Unset,
            help: "`run`: a senders file (senders.json) imported at start-up as `senders import` does (idempotent: upserts by address and name); a bad file stops start-up before the database is touched (docs/operations.md, Kubernetes)",
            doc: "`run` imports this senders file (senders.json, docs/file-formats.md) before it claims\n\
                  anything, as `mail-worker senders import` does: upserts by address and name, so every replica\n\
                  and every restart may import the same file. A bad file stops start-up (exit 1, the errors on\n\
                  stderr) before the database is touched. Unset: nothing is imported.",
            example: Some("/etc/mail-worker/senders.json"),
            ..Setting::NEW
        };
    }
}
