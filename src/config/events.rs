//! The outbox's webhooks (`EVENTS_*`, docs/events.md): where events go, how they are signed,
//! batched and retried.

use std::{num::NonZeroU32, time::Duration};

use url::Url;

use crate::{domain::SecretRef, store::events::Outbox};

/// The outbox's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventsConfig {
    /// `EVENTS_WEBHOOK_URL`: one or more comma-separated receivers; empty = `off` (the default:
    /// no event is written).
    pub webhook_urls: Vec<Url>,
    /// `EVENTS_WEBHOOK_SECRET`: the HMAC-SHA256 key(s) of the signature headers (a value or an
    /// `env:NAME` / `file:/path` reference; one secret, or two during a rotation separated by a
    /// space or a comma, each `whsec_<base64>` or raw); required when a URL is set.
    pub secret: Option<SecretRef>,
    /// `EVENTS_BATCH_SIZE`, default 100: the most events one POST carries.
    pub batch_size: NonZeroU32,
    /// `EVENTS_RETRY_FOR`, default `1d`: how long after it happened an event is retried at a
    /// receiver that fails, before it is dead there.
    pub retry_for: Duration,
    /// `EVENTS_SIGNATURE`, default `both`: which signature headers each POST carries.
    pub signature: SignatureScheme,
}

/// `EVENTS_SIGNATURE` (docs/events.md, ADR 0037): the Standard Webhooks headers
/// (`webhook-id`, `webhook-timestamp`, `webhook-signature`), the legacy `X-Mail-Worker-*`
/// ones, or both (the default, for the legacy headers' deprecation window).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SignatureScheme {
    /// Only the Standard Webhooks headers.
    Standard,
    /// Only `X-Mail-Worker-Timestamp` and `X-Mail-Worker-Signature`.
    Legacy,
    /// Both sets.
    #[default]
    Both,
}

impl SignatureScheme {
    /// How `check-config` and the docs write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Standard => "standard",
            Self::Legacy => "legacy",
            Self::Both => "both",
        }
    }

    pub(crate) fn parse(text: &str) -> Result<Self, &'static str> {
        [Self::Standard, Self::Legacy, Self::Both]
            .into_iter()
            .find(|s| s.as_str().eq_ignore_ascii_case(text))
            .ok_or("must be `standard`, `legacy` or `both`")
    }
}

impl EventsConfig {
    /// Whether status changes write events.
    pub fn outbox(&self) -> Outbox {
        if self.webhook_urls.is_empty() {
            Outbox::Off
        } else {
            Outbox::On
        }
    }
}

/// `url` as logs, `check-config` and `events stats` show it: password and query hidden (a
/// receiver's token may sit in either).
pub(crate) fn shown(url: &Url) -> String {
    let mut url = url.clone();
    if url.query().is_some() {
        url.set_query(Some("***"));
    }
    super::redact_url(&url)
}
