//! The senders `run` imports at start-up (docs/operations.md, "Senders in Kubernetes").

use std::path::PathBuf;

use super::Fallback::{Unset, Value};
use super::Setting;
use super::kinds::{Custom, FilePath, Optional};

/// A share in percent: a whole number from 0 to 100.
const PERCENT: Custom<u8> = Custom {
    parse: |raw| {
        raw.parse::<u8>()
            .ok()
            .filter(|p| *p <= 100)
            .ok_or("must be a whole number from 0 to 100")
    },
    show: |p| p.to_string(),
};

settings! {
    /// Senders at start-up.
    pub struct SenderSettings = "Senders at start-up (docs/operations.md, \"Senders in Kubernetes\")" {
        file: Option<PathBuf> = Optional(FilePath, "(unset)"), Setting {
            name: "SENDERS_FILE",
            flag: "senders-file",
            default: Unset,
            help: "`run`: a senders file (senders.json) imported at start-up as `senders import` does (idempotent: upserts by address and name); a bad file stops start-up before the database is touched and fails check-config (docs/operations.md, Kubernetes)",
            doc: "`run` imports this senders file (senders.json, docs/file-formats.md) before it claims\n\
                  anything, as `mail-worker senders import` does: upserts by address and name, so every replica\n\
                  and every restart may import the same file. A bad file stops start-up (exit 1, the errors on\n\
                  stderr) before the database is touched; `check-config` checks it the same way (exit 78).\n\
                  Unset: nothing is imported.",
            example: Some("/etc/mail-worker/senders.json"),
            ..Setting::NEW
        };
        warmup_max_hard_bounce_percent: u8 = PERCENT, Setting {
            name: "WARMUP_MAX_HARD_BOUNCE_PERCENT",
            flag: "warmup-max-hard-bounce-percent",
            default: Value("5"),
            help: "warm-up (a sender's `warmUp`): the largest share of a sending day's messages that may hard-bounce for the ramp to step up the next day; over it, the step holds (0 to 100)",
            doc: "Warm-up (a sender's warmUp in the senders file, docs/decisions/0047-warm-up.md): a sending day\n\
                  whose hard-bounced messages are more than this share (percent) of its messages sent holds the\n\
                  ramp's step instead of stepping up. 0 to 100.",
            ..Setting::NEW
        };
        warmup_max_filtered_percent: u8 = PERCENT, Setting {
            name: "WARMUP_MAX_FILTERED_PERCENT",
            flag: "warmup-max-filtered-percent",
            default: Value("10"),
            help: "warm-up: the largest share of a sending day's traced recipients the message trace may find filtered (junk, quarantine) for the ramp to step up; over it, the step holds (0 to 100; only with the delivery trace on)",
            doc: "Warm-up: with the delivery trace on (GRAPH_TRACE_DELIVERY), a sending day whose recipients the\n\
                  trace found filtered (junk or quarantine) are more than this share (percent) of its traced\n\
                  recipients holds the ramp's step. 0 to 100.",
            ..Setting::NEW
        };
    }
}
