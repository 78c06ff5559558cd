//! The outbox's webhooks (docs/events.md).

use std::{num::NonZeroU32, time::Duration};

use url::Url;

use super::Fallback::{Unset, Value};
use super::Setting;
use super::kinds::{Custom, Optional, Positive, Secret, Span};
use super::urls::WebhookUrls;
use crate::config::events::SignatureScheme;
use crate::domain::SecretRef;

/// `EVENTS_SIGNATURE`: `standard`, `legacy` or `both`.
const SIGNATURES: Custom<SignatureScheme> = Custom {
    parse: SignatureScheme::parse,
    show: |s| s.as_str().to_owned(),
};

settings! {
    /// Events (the outbox, docs/events.md).
    pub struct EventsSettings = "Events (the outbox, docs/events.md)" {
        webhook_urls: Vec<Url> = WebhookUrls, Setting {
            name: "EVENTS_WEBHOOK_URL",
            flag: "events-webhook-url",
            default: Value("off"),
            secret: true,
            help: "where the outbox's events are POSTed, signed, in batches (docs/events.md): one or more comma-separated URLs, `https://` (http:// only to loopback or PROVIDER_CLEARTEXT_HOSTS); `off` writes no events at all",
            doc: "Where each status change (accepted, sent, deferred, failed, bounced, cancelled) is POSTed as\n\
                  signed JSON batches: one or more comma-separated https:// URLs (http:// only to loopback or a\n\
                  host in PROVIDER_CLEARTEXT_HOSTS). `off` (default) writes no events at all.",
            ..Setting::NEW
        };
        secret: Option<SecretRef> = Optional(Secret, "(unset)"), Setting {
            name: "EVENTS_WEBHOOK_SECRET",
            flag: "events-webhook-secret",
            default: Unset,
            secret: true,
            help: "the HMAC-SHA256 key of each POST's signatures (a value, `env:NAME` or `file:/path`): `whsec_<base64>` (24 to 64 bytes) or raw (at least 16 characters); two, separated by a space or a comma, during a rotation (both signatures sent); required with EVENTS_WEBHOOK_URL",
            doc: "The HMAC-SHA256 key of the signatures (value, env:NAME or file:/path): whsec_<base64> (24 to\n\
                  64 bytes: echo whsec_$(openssl rand -base64 32)) or raw (at least 16 characters); during a\n\
                  rotation two, separated by a space or a comma (both signatures sent). Required when\n\
                  EVENTS_WEBHOOK_URL is set.",
            example: Some("file:/run/secrets/events-webhook-secret"),
            ..Setting::NEW
        };
        batch_size: NonZeroU32 = Positive, Setting {
            name: "EVENTS_BATCH_SIZE",
            flag: "events-batch-size",
            default: Value("100"),
            help: "the most events one webhook POST carries",
            doc: "The most events one POST carries.",
            ..Setting::NEW
        };
        retry_for: Duration = Span, Setting {
            name: "EVENTS_RETRY_FOR",
            flag: "events-retry-for",
            default: Value("1d"),
            help: "how long after it happened an event is retried (jittered backoff) at a receiver that fails, then dead there (`mail-worker events dead`, `replay`)",
            doc: "How long after it happened an event is retried at a failing receiver before it is dead there.",
            ..Setting::NEW
        };
        signature: SignatureScheme = SIGNATURES, Setting {
            name: "EVENTS_SIGNATURE",
            flag: "events-signature",
            default: Value("both"),
            help: "which signature headers each webhook POST carries: `standard` (Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature), `legacy` (X-Mail-Worker-Timestamp, X-Mail-Worker-Signature) or `both` (docs/events.md: migrating)",
            doc: "Which signature headers each POST carries: standard (Standard Webhooks: webhook-id,\n\
                  webhook-timestamp, webhook-signature), legacy (X-Mail-Worker-*) or both (docs/events.md).",
            ..Setting::NEW
        };
    }
}
