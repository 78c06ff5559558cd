//! Exchange Online's message trace in Graph v1.0, app-only with `ExchangeMessageTrace.Read.All`
//! (what `crate::delivery` reconciles):
//! - `GET /admin/exchange/tracing/messageTraces?$filter=senderAddress eq '…' and
//!   receivedDateTime ge … and receivedDateTime le …&$top=…`, then each `@odata.nextLink`
//!   (<https://learn.microsoft.com/graph/api/messagetracingroot-list-messagetraces>: `$top` 1–5000,
//!   default 1000; the fields: <https://learn.microsoft.com/graph/api/resources/exchangemessagetrace>);
//! - `GET /admin/exchange/tracing/messageTraces/{id}/getDetailsByRecipient(recipientAddress='…')`
//!   for a failed recipient's reason
//!   (<https://learn.microsoft.com/graph/api/exchangemessagetrace-getdetailsbyrecipient>, the
//!   events: <https://learn.microsoft.com/graph/api/resources/exchangemessagetracedetail>).
//!
//! Both share the tenant's 100 requests per rolling 5 minutes; a `401` after a fresh token means
//! the tenant has not created the service principal of Microsoft's message-trace app yet
//! (<https://learn.microsoft.com/exchange/monitoring/trace-an-email-message/graph-api-message-trace>).

use chrono::{DateTime, SecondsFormat, Utc};
use reqwest::Method;
use serde::Deserialize;
use url::Url;
use uuid::Uuid;

use super::{MicrosoftGraphMailer, answer::HttpAnswer, lookup::parse};
use crate::mailer::MailError;

/// The message-trace app whose service principal a tenant creates first.
pub const MESSAGE_TRACE_APP_ID: &str = "8bd644d1-64a1-4d4b-ae52-2e0cbf64e373";

/// The permission the trace needs.
pub const TRACE_PERMISSION: &str = "ExchangeMessageTrace.Read.All";

/// Records one listing page asks for (Graph's most).
pub const TRACE_PAGE: u32 = 5000;

/// One `exchangeMessageTrace`: one recipient of one message.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TraceRow {
    pub id: String,
    #[serde(default)]
    pub message_id: Option<String>,
    pub received_date_time: DateTime<Utc>,
    #[serde(default)]
    pub recipient_address: Option<String>,
    #[serde(default)]
    pub status: Option<String>,
}

/// One page of a listing.
#[derive(Debug, Deserialize)]
pub(crate) struct TracePage {
    #[serde(default)]
    pub value: Vec<TraceRow>,
    #[serde(rename = "@odata.nextLink")]
    pub next_link: Option<String>,
}

/// One `exchangeMessageTraceDetail` event.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct TraceDetail {
    #[serde(default)]
    pub event: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
}

#[derive(Debug, Deserialize)]
struct DetailPage {
    #[serde(default)]
    value: Vec<TraceDetail>,
}

/// Why a trace request failed.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum TraceError {
    /// `401` with a fresh token: the tenant has no service principal of the message-trace app
    /// yet (or it has not propagated).
    #[error(
        "the message trace answered 401: create the service principal of Microsoft's message trace app in the tenant (POST /servicePrincipals {{\"appId\": \"{MESSAGE_TRACE_APP_ID}\"}}); it can take hours to propagate"
    )]
    Unprovisioned,
    /// `403`: the app lacks the permission.
    #[error(
        "the message trace answered 403: grant the app the {TRACE_PERMISSION} application permission (admin consent)"
    )]
    Forbidden,
    /// `429`: the tenant's trace budget is used up for this long.
    #[error("the message trace answered 429 (Retry-After {0:?})")]
    Throttled(Option<std::time::Duration>),
    /// Anything else (transport, token, an unexpected answer).
    #[error("{0}")]
    Other(String),
}

impl From<MailError> for TraceError {
    fn from(e: MailError) -> Self {
        Self::Other(e.to_string())
    }
}

impl MicrosoftGraphMailer {
    fn traces_url(&self) -> Url {
        let mut url = self.user_url.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop()
                .pop()
                .extend(["admin", "exchange", "tracing", "messageTraces"]);
        }
        url
    }

    /// The first page's URL: the messages received in `[from, to]`, `sender`'s only when
    /// given.
    pub(crate) fn traces_first_url(
        &self,
        sender: Option<&str>,
        (from, to): (DateTime<Utc>, DateTime<Utc>),
    ) -> Url {
        let mut url = self.traces_url();
        let at = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Secs, true);
        let mut filter = format!(
            "receivedDateTime ge {} and receivedDateTime le {}",
            at(from),
            // Whole seconds: the end rounded up, so a record of this very second is in.
            at(to + chrono::Duration::seconds(1))
        );
        if let Some(sender) = sender {
            filter = format!(
                "senderAddress eq '{}' and {filter}",
                sender.replace('\'', "''")
            );
        }
        url.query_pairs_mut()
            .append_pair("$filter", &filter)
            .append_pair("$top", &TRACE_PAGE.to_string());
        url
    }

    /// One page at `url` (the first, or an `@odata.nextLink` on Graph's origin).
    ///
    /// # Errors
    /// [`TraceError`] by the answer's status.
    pub(crate) async fn trace_page(&self, url: &Url) -> Result<TracePage, TraceError> {
        if url.origin() != self.user_url.origin() {
            return Err(TraceError::Other(
                "message trace: @odata.nextLink leaves GRAPH_API_BASE_URL's origin; not followed"
                    .to_owned(),
            ));
        }
        let answer = self.trace_call(url).await?;
        Ok(parse(&answer, "list message traces")?)
    }

    /// The detail events of `recipient` in trace `id`.
    ///
    /// # Errors
    /// [`TraceError`] by the answer's status.
    pub(crate) async fn trace_details(
        &self,
        id: &str,
        recipient: &str,
    ) -> Result<Vec<TraceDetail>, TraceError> {
        let mut url = self.traces_url();
        if let Ok(mut path) = url.path_segments_mut() {
            path.push(id).push(&format!(
                "getDetailsByRecipient(recipientAddress='{}')",
                recipient.replace('\'', "''")
            ));
        }
        let answer = self.trace_call(&url).await?;
        let page: DetailPage = parse(&answer, "message trace details")?;
        Ok(page.value)
    }

    async fn trace_call(&self, url: &Url) -> Result<HttpAnswer, TraceError> {
        let answer = self
            .call(Method::GET, url, None, Uuid::new_v4())
            .await?
            .map_err(|e| TraceError::Other(format!("message trace: {e}")))?;
        match answer.status {
            200..=299 => Ok(answer),
            401 => Err(TraceError::Unprovisioned),
            403 => Err(TraceError::Forbidden),
            429 => Err(TraceError::Throttled(
                super::retry_after::parse_retry_after(
                    answer.retry_after.as_deref(),
                    self.clock.now(),
                ),
            )),
            status => Err(TraceError::Other(format!(
                "message trace: Graph answered HTTP {status} ({})",
                super::answer::graph_code(&answer.body).unwrap_or_default()
            ))),
        }
    }
}

/// The enhanced status code and the text of a `Fail` event's description
/// (`Reason: [{LED=550 5.1.10 RESOLVER.ADR.RecipientNotFound; …};{MSG=};…]`).
pub(crate) fn failure_of(details: &[TraceDetail]) -> Option<(String, String)> {
    let description = details
        .iter()
        .filter(|d| {
            d.event
                .as_deref()
                .is_some_and(|e| e.eq_ignore_ascii_case("Fail"))
        })
        .find_map(|d| d.description.as_deref())?;
    let led = description
        .split("{LED=")
        .nth(1)
        .and_then(|rest| rest.split('}').next())
        .unwrap_or(description);
    let mut words = led.split_whitespace();
    let first = words.next().unwrap_or_default();
    let (code, rest) = if first.len() == 3 && first.bytes().all(|b| b.is_ascii_digit()) {
        (words.next().unwrap_or_default(), words.collect::<Vec<_>>())
    } else {
        (first, words.collect::<Vec<_>>())
    };
    Some((code.to_owned(), rest.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fail_events_led_gives_the_code_and_text() {
        let details = vec![
            TraceDetail {
                event: Some("Receive".into()),
                description: Some("Message received by: a@contoso.example".into()),
            },
            TraceDetail {
                event: Some("Fail".into()),
                description: Some("Reason: [{LED=550 5.1.10 RESOLVER.ADR.RecipientNotFound; Recipient not found by SMTP address lookup};{MSG=};{FQDN=};{IP=};{LRT=}]. OutboundProxyTargetIP: ".into()),
            },
        ];
        assert_eq!(
            failure_of(&details),
            Some((
                "5.1.10".to_owned(),
                "RESOLVER.ADR.RecipientNotFound; Recipient not found by SMTP address lookup"
                    .to_owned()
            ))
        );
        assert_eq!(failure_of(&details[..1]), None);
    }
}
