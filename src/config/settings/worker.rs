//! The worker's slots, the claim loop and the send lease.

use std::{num::NonZeroU32, time::Duration};

use super::Fallback::Value;
use super::Setting;
use super::kinds::{Positive, Span};

settings! {
    /// Worker slots, the claim loop and the send lease.
    pub struct WorkerSettings = "Worker slots, the claim loop and the send lease" {
        concurrency: NonZeroU32 = Positive, Setting {
            name: "WORKER_CONCURRENCY",
            flag: "worker-concurrency",
            default: Value("128"),
            help: "sends in flight per replica; a replica claims for its own free slots plus a prefetch of a quarter of them",
            doc: "Sends in flight per process. Each replica claims due messages for its own free slots (plus a\n\
                  prefetch of a quarter of them) and claims again at once while work is due.",
            ..Setting::NEW
        };
        scheduler_interval: Duration = Span, Setting {
            name: "SCHEDULER_INTERVAL",
            flag: "scheduler-interval",
            default: Value("250ms"),
            help: "the wait before claiming again when the last claim found less than there was room for (with work due and slots free a replica claims again at once)",
            doc: "How long a replica waits before looking again when its last claim found less than it\n\
                  had room for.",
            alias_ms: Some("SCHEDULER_INTERVAL_MS"),
            ..Setting::NEW
        };
        scheduler_batch_size: NonZeroU32 = Positive, Setting {
            name: "SCHEDULER_BATCH_SIZE",
            flag: "scheduler-batch-size",
            default: Value("100"),
            help: "most rows one claim takes",
            doc: "At most how many messages one claim takes.",
            ..Setting::NEW
        };
        send_lease: Duration = Span, Setting {
            name: "SEND_LEASE",
            flag: "send-lease",
            default: Value("10m"),
            help: "a SENDING row whose lease was not renewed for this long is rescheduled; a live attempt renews it every quarter of it (at least 2 × HTTP_TIMEOUT)",
            doc: "A message SENDING whose lease was not renewed for this long (a replica died mid-send) is\n\
                  rescheduled; a live attempt renews it every quarter of it and stops when it cannot. At\n\
                  least twice HTTP_TIMEOUT. Its next attempt checks Graph before it resends\n\
                  (docs/delivery.md).",
            alias_ms: Some("SEND_LEASE_MS"),
            ..Setting::NEW
        };
    }
}
