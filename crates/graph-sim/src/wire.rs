//! The wire shapes graph-sim answers with: Graph's error body and headers, and Entra ID's token
//! error body; and [`prefers`] (its `Prefer` header). What the handlers read of every request
//! is `crate::call::Call`.
//!
//! Graph (<https://learn.microsoft.com/graph/errors>):
//! `{"error":{"code","message","innerError":{"date","request-id","client-request-id"}}}` with a
//! `request-id` (and `client-request-id`) header on every answer.
//!
//! Entra ID (<https://learn.microsoft.com/entra/identity-platform/v2-oauth2-client-creds-grant-flow#error-response>,
//! codes in <https://learn.microsoft.com/entra/identity-platform/reference-error-codes>):
//! `{"error","error_description":"AADSTS<n>: … Trace ID: … Correlation ID: … Timestamp: …",
//! "error_codes":[n],"timestamp","trace_id","correlation_id","error_uri"}`.

use axum::{
    http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// The ids of one Graph request: ours, and the client's (echoed, or ours when it sent none).
#[derive(Debug, Clone)]
pub(crate) struct RequestIds {
    pub request_id: String,
    pub client_request_id: String,
}

impl RequestIds {
    pub(crate) fn new(headers: &HeaderMap) -> Self {
        let request_id = Uuid::new_v4().to_string();
        let client_request_id = headers
            .get("client-request-id")
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
            .map_or_else(|| request_id.clone(), str::to_owned);
        Self {
            request_id,
            client_request_id,
        }
    }
}

/// A Graph error: status, `code`, `message`, and an optional `Retry-After` (raw value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GraphError {
    pub status: StatusCode,
    pub code: String,
    pub message: String,
    pub retry_after: Option<String>,
}

impl GraphError {
    pub(crate) fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            code: code.to_owned(),
            message: message.into(),
            retry_after: None,
        }
    }

    pub(crate) fn with_retry_after_secs(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs.to_string());
        self
    }

    /// `400 RequestBodyRead`: the JSON does not fit the OData model.
    pub(crate) fn body_read(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "RequestBodyRead", message)
    }

    /// The HTTP answer, stamped `date` (Graph's `innerError.date`, UTC, no fraction).
    pub(crate) fn into_response(self, ids: &RequestIds, date: DateTime<Utc>) -> Response {
        let body = serde_json::json!({
            "error": {
                "code": self.code,
                "message": self.message,
                "innerError": {
                    "date": date.format("%Y-%m-%dT%H:%M:%S").to_string(),
                    "request-id": ids.request_id,
                    "client-request-id": ids.client_request_id,
                }
            }
        });
        let mut response = (self.status, axum::Json(body)).into_response();
        graph_headers(response.headers_mut(), ids, self.retry_after.as_deref());
        response
    }
}

/// Adds `request-id`, `client-request-id` and (when given) `Retry-After` to a Graph answer.
pub(crate) fn graph_headers(headers: &mut HeaderMap, ids: &RequestIds, retry_after: Option<&str>) {
    insert(
        headers,
        HeaderName::from_static("request-id"),
        &ids.request_id,
    );
    insert(
        headers,
        HeaderName::from_static("client-request-id"),
        &ids.client_request_id,
    );
    if let Some(v) = retry_after {
        insert(headers, header::RETRY_AFTER, v);
    }
}

/// Whether one of the request's `Prefer` preferences (every header, split at commas, trimmed)
/// is one `wanted` accepts.
pub(crate) fn prefers(headers: &HeaderMap, wanted: impl Fn(&str) -> bool) -> bool {
    headers
        .get_all("prefer")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| wanted(p.trim()))
}

fn insert(headers: &mut HeaderMap, name: HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        headers.insert(name, v);
    }
}

/// A `202 Accepted` with an empty body and Graph's headers.
pub(crate) fn accepted(
    status: StatusCode,
    ids: &RequestIds,
    retry_after: Option<&str>,
) -> Response {
    let mut response = status.into_response();
    graph_headers(response.headers_mut(), ids, retry_after);
    response
}

/// An Entra ID token error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EntraError {
    pub status: StatusCode,
    /// The OAuth `error`, e.g. `invalid_client`.
    pub error: String,
    /// The AADSTS number.
    pub code: u32,
    /// The text after `AADSTS<code>: `.
    pub description: String,
}

impl EntraError {
    pub(crate) fn new(
        status: StatusCode,
        error: &str,
        code: u32,
        description: impl Into<String>,
    ) -> Self {
        Self {
            status,
            error: error.to_owned(),
            code,
            description: description.into(),
        }
    }

    /// The HTTP answer; `correlation_id` is the client's `client-request-id` when it sent one.
    pub(crate) fn into_response(self, correlation_id: &str, now: DateTime<Utc>) -> Response {
        let trace_id = Uuid::new_v4().to_string();
        let timestamp = now.format("%Y-%m-%d %H:%M:%SZ").to_string();
        let body = serde_json::json!({
            "error": self.error,
            "error_description": format!(
                "AADSTS{}: {} Trace ID: {trace_id} Correlation ID: {correlation_id} Timestamp: {timestamp}",
                self.code, self.description
            ),
            "error_codes": [self.code],
            "timestamp": timestamp,
            "trace_id": trace_id,
            "correlation_id": correlation_id,
            "error_uri": format!("https://login.microsoftonline.com/error?code={}", self.code),
        });
        let mut response = (self.status, axum::Json(body)).into_response();
        entra_headers(response.headers_mut(), &trace_id, correlation_id);
        response
    }
}

/// Entra ID's token answer headers: no caching, `x-ms-request-id`, `client-request-id`.
pub(crate) fn entra_headers(headers: &mut HeaderMap, trace_id: &str, correlation_id: &str) {
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-store, no-cache"),
    );
    headers.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    insert(
        headers,
        HeaderName::from_static("x-ms-request-id"),
        trace_id,
    );
    insert(
        headers,
        HeaderName::from_static("client-request-id"),
        correlation_id,
    );
}

/// A fresh Exchange-looking item id.
pub(crate) fn new_item_id() -> String {
    format!("AAMkAGsim{}", Uuid::new_v4().simple())
}
