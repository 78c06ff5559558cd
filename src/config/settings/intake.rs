//! The intake queue of campaign sends (docs/queue.md).

use std::time::Duration;

use super::Fallback::{Unset, Value};
use super::Setting;
use super::kinds::{Custom, Off, Optional, Span, Text};

/// `INTAKE_QUEUE` (besides `off`): an apalis-redis namespace, without white space.
const QUEUE_NAME: Custom<String> = Custom {
    parse: |raw| {
        if raw.contains(char::is_whitespace) {
            Err("must be a name without white space")
        } else {
            Ok(raw.to_owned())
        }
    },
    show: String::clone,
};

settings! {
    /// The intake queue of campaign sends (docs/queue.md).
    pub struct IntakeSettings = "The intake queue of campaign sends (docs/queue.md)" {
        queue: Option<String> = Off(QUEUE_NAME), Setting {
            name: "INTAKE_QUEUE",
            flag: "intake-queue",
            // In braces, a Redis Cluster hash tag: every key of the queue (`…:active`,
            // `…:data`, `…:meta:<id>`, …) hashes to one slot, so apalis-redis's multi-key Lua
            // scripts may run on a cluster node, and a queue started on a standalone Redis
            // keeps its key names when moved to a cluster.
            default: Value("{mail-worker:campaign-sends}"),
            help: "the intake queue of campaign sends on REDIS_URL (apalis-redis namespace; braces = one Redis Cluster hash tag, required when REDIS_URL lists cluster seeds); every replica consumes it into PostgreSQL; `off` (any case) disables it (docs/queue.md)",
            doc: "The intake queue of campaign sends (docs/queue.md): an apalis-redis queue on REDIS_URL whose\n\
                  jobs are campaign JSONL lines; every replica consumes it into PostgreSQL, in batches, and\n\
                  acks a job only after its row is committed. The braces are a Redis Cluster hash tag (all the\n\
                  queue's keys in one slot): with REDIS_URL a list of cluster seeds, a name without one is\n\
                  refused at start-up. `off` disables the intake.",
            ..Setting::NEW
        };
        worker_name: Option<String> = Optional(Text, "(unset)"), Setting {
            name: "INTAKE_WORKER_NAME",
            flag: "intake-worker-name",
            default: Unset,
            help: "the start of this process's intake worker name (pid and a random suffix are added); unset: the host name; Kubernetes: the pod's name",
            doc: "The start of this process's intake worker name (the pid and a random suffix are added, so\n\
                  two processes never share one). Unset: the host name. The Kubernetes manifests set the pod's.",
            example: Some("mail-worker-0"),
            ..Setting::NEW
        };
        heartbeat: Duration = Span, Setting {
            name: "INTAKE_HEARTBEAT",
            flag: "intake-heartbeat",
            default: Value("10s"),
            help: "the intake worker's heartbeat (apalis-redis): a replica silent for 3 heartbeats is dead and another consumes its in-flight jobs; lower only in tests",
            doc: "The intake worker's heartbeat: a replica silent for 3 of them (30 s) is dead, and another\n\
                  replica consumes the jobs it held. Lower only in tests.",
            alias_ms: Some("INTAKE_HEARTBEAT_MS"),
            ..Setting::NEW
        };
    }
}
