//! The message trace's handlers: `GET /v1.0/admin/exchange/tracing/messageTraces` (counted as
//! `listMessageTraces`) and `GET …/messageTraces/{id}/getDetailsByRecipient(recipientAddress='…')`
//! (`getMessageTraceDetails`). The permission is checked by [`crate::permissions::enforce`];
//! here: the token, the tenant's service principal (`401`), its budget (`429` with
//! `Retry-After`), then the query.

use axum::{
    extract::{Path, RawQuery},
    http::{HeaderMap, StatusCode},
    response::Response,
};

use super::{MESSAGE_TRACE_APP_ID, filter::TraceFilter};
use crate::{
    auth::authenticate,
    send::{Reply, Seen, routed},
    state::SimState,
    wire::{Call, GraphError, RequestIds},
};

const PATH: &str = "/v1.0/admin/exchange/tracing/messageTraces";
const DEFAULT_TOP: usize = 1000;
const MAX_TOP: usize = 5000;

/// `GET …/messageTraces`.
pub(crate) async fn list(Call { state, headers }: Call, RawQuery(query): RawQuery) -> Response {
    let handle = async |_: &RequestIds, _, seen: &mut Seen| {
        admit(&state, &headers, seen)?;
        list_reply(&state, query.as_deref().unwrap_or_default())
    };
    routed(&state, "listMessageTraces", &headers, handle).await
}

/// `GET …/messageTraces/{id}/getDetailsByRecipient(recipientAddress='…')`.
pub(crate) async fn details(
    Call { state, headers }: Call,
    Path((id, action)): Path<(String, String)>,
) -> Response {
    let handle = async |_: &RequestIds, _, seen: &mut Seen| {
        let recipient = action
            .strip_prefix("getDetailsByRecipient(recipientAddress='")
            .and_then(|r| r.strip_suffix("')"))
            .ok_or_else(|| {
                GraphError::new(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    format!("Resource not found for the segment '{action}'."),
                )
            })?
            .replace("''", "'");
        let tenant = admit(&state, &headers, seen)?;
        let value: Vec<_> = state
            .lock()
            .trace
            .records
            .iter()
            .filter(|r| {
                r.tenant == tenant
                    && r.id.to_string().eq_ignore_ascii_case(&id)
                    && r.recipient.eq_ignore_ascii_case(&recipient)
                    && r.visible_at_ms <= state.now().timestamp_millis()
            })
            .flat_map(super::TraceRecord::details)
            .collect();
        Ok(Reply::Json {
            status: StatusCode::OK,
            body: serde_json::json!({
                "@odata.context": "https://graph.microsoft.com/v1.0/$metadata#Collection(microsoft.graph.exchangeMessageTraceDetail)",
                "value": value,
            }),
        })
    };
    routed(&state, "getMessageTraceDetails", &headers, handle).await
}

/// The token, the tenant's provisioning and its budget; the tenant (lower case) when admitted.
fn admit(state: &SimState, headers: &HeaderMap, seen: &mut Seen) -> Result<String, GraphError> {
    let now = state.now();
    let owner = authenticate(state, headers, now)?;
    seen.client_id = Some(owner.client_id.clone());
    let tenant = owner.tenant_id.to_lowercase();
    let mut inner = state.lock();
    inner.trace.stats.requests += 1;
    if inner.trace.unprovisioned.contains(&tenant) {
        inner.trace.stats.unprovisioned += 1;
        return Err(GraphError::new(
            StatusCode::UNAUTHORIZED,
            "UnknownError",
            format!(
                "The tenant has no service principal of the message trace application {MESSAGE_TRACE_APP_ID}, or it has not propagated yet."
            ),
        ));
    }
    let limit = state.trace.requests_per_5_minutes;
    if let Err(secs) = inner.trace.admit(&tenant, now.timestamp_millis(), limit) {
        return Err(GraphError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "TooManyRequests",
            format!(
                "Too many requests: at most {limit} message trace requests per tenant in a 5-minute running window."
            ),
        )
        .with_retry_after_secs(secs));
    }
    Ok(tenant)
}

fn bad_request(message: impl Into<String>) -> GraphError {
    GraphError::new(StatusCode::BAD_REQUEST, "BadRequest", message)
}

/// One page of the records the query selects, newest first.
fn list_reply(state: &SimState, query: &str) -> Result<Reply, GraphError> {
    let mut filter_raw = String::new();
    let mut top = DEFAULT_TOP;
    let mut skip = 0usize;
    for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
        match key.as_ref() {
            "$filter" => filter_raw = value.into_owned(),
            "$top" => {
                top = value
                    .parse()
                    .ok()
                    .filter(|t| (1..=MAX_TOP).contains(t))
                    .ok_or_else(|| bad_request(format!("$top must be between 1 and {MAX_TOP}.")))?;
            }
            "$skiptoken" => {
                skip = value
                    .parse()
                    .map_err(|_| bad_request("The $skiptoken is not valid."))?;
            }
            other => {
                return Err(bad_request(format!(
                    "The query parameter '{other}' is not supported."
                )));
            }
        }
    }
    let filter = TraceFilter::parse(&filter_raw).map_err(bad_request)?;
    let now = state.now();
    let (start, end) = filter.window(now).map_err(bad_request)?;
    let now_ms = now.timestamp_millis();
    let inner = state.lock();
    let mut selected: Vec<_> = inner
        .trace
        .records
        .iter()
        .filter(|r| {
            r.visible_at_ms <= now_ms
                && r.received >= start
                && r.received <= end
                && filter.matches(r)
        })
        .collect();
    selected.sort_by(|a, b| {
        b.received
            .cmp(&a.received)
            .then_with(|| a.id.cmp(&b.id))
            .then_with(|| a.recipient.cmp(&b.recipient))
    });
    let value: Vec<_> = selected
        .iter()
        .skip(skip)
        .take(top)
        .map(|r| r.json())
        .collect();
    let mut body = serde_json::json!({
        "@odata.context": "https://graph.microsoft.com/v1.0/$metadata#admin/exchange/tracing/messageTraces",
        "value": value,
    });
    if selected.len() > skip + top {
        let mut next = url::Url::parse(&format!("{}{PATH}", state.origin))
            .map_err(|e| bad_request(e.to_string()))?;
        {
            let mut pairs = next.query_pairs_mut();
            if !filter_raw.is_empty() {
                pairs.append_pair("$filter", &filter_raw);
            }
            pairs.append_pair("$top", &top.to_string());
            pairs.append_pair("$skiptoken", &(skip + top).to_string());
        }
        body["@odata.nextLink"] = serde_json::Value::String(next.to_string());
    }
    Ok(Reply::Json {
        status: StatusCode::OK,
        body,
    })
}
