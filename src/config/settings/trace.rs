//! The delivery reconciler: per recipient delivery from Exchange's message trace
//! (docs/delivery.md#message-trace, [`crate::delivery`]).

use std::time::Duration;

use super::Fallback::Value;
use super::Setting;
use super::kinds::{ON_OFF, Span, SpanAtLeast};

settings! {
    /// The delivery reconciler.
    pub struct TraceSettings = "Delivery per recipient from Exchange's message trace (docs/delivery.md#message-trace)" {
        enabled: bool = ON_OFF, Setting {
            name: "GRAPH_TRACE_DELIVERY",
            flag: "graph-trace-delivery",
            default: Value("off"),
            help: "`on`: reconcile each Graph sender's messages with Exchange's message trace (per recipient delivered / failed / filtered; `DELIVERED`, `BOUNCED`; needs ExchangeMessageTrace.Read.All and the tenant's message-trace service principal; per sender `traceDelivery`)",
            doc: "on: reconcile each Graph sender's messages with Exchange's message trace (per recipient\n\
                  delivered / failed / filtered; DELIVERED, BOUNCED). A sender's traceDelivery overrides it.",
            ..Setting::NEW
        };
        interval: Duration = SpanAtLeast(Duration::from_secs(1), "must be at least 1s"), Setting {
            name: "GRAPH_TRACE_INTERVAL",
            flag: "graph-trace-interval",
            default: Value("5m"),
            help: "how often each Graph tenant's message trace is read (a duration; at least 1s)",
            doc: "How often each Graph tenant's message trace is read (at least 1s).",
            ..Setting::NEW
        };
        lag: Duration = Span, Setting {
            name: "GRAPH_TRACE_LAG",
            flag: "graph-trace-lag",
            default: Value("5m"),
            help: "no trace read until a `SENT` message is this old (the trace shows a message minutes after its send)",
            doc: "No trace read until a SENT message is this old (the trace shows a message minutes after\n\
                  its send).",
            ..Setting::NEW
        };
        give_up: Duration = Span, Setting {
            name: "GRAPH_TRACE_GIVE_UP",
            flag: "graph-trace-give-up",
            default: Value("48h"),
            help: "a message sent longer ago is no longer traced (it stays `SENT`)",
            doc: "A message sent longer ago is no longer traced (it stays SENT).",
            ..Setting::NEW
        };
        probe: Duration = SpanAtLeast(Duration::from_secs(1), "must be at least 1s"), Setting {
            name: "GRAPH_TRACE_PROBE",
            flag: "graph-trace-probe",
            default: Value("30m"),
            help: "how long a tenant whose trace answered 401/403 waits before the next try (at least 1s)",
            doc: "How long a tenant whose trace answered 401/403 waits before the next try (at least 1s).",
            ..Setting::NEW
        };
    }
}
