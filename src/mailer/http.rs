//! The one HTTP client every provider call (Graph tokens, Graph `sendMail`, SendGrid) shares,
//! and how a transport failure is described without leaking URLs or bodies.

use std::{error::Error as _, time::Duration};

use url::Url;

use super::MailError;

/// Builds the shared client: `timeout` (`HTTP_TIMEOUT`) is the whole-request deadline, and
/// redirects are never followed — the `oauth2` crate requires that of its HTTP client (a
/// redirected token request could carry the client secret elsewhere), and neither Graph's
/// `sendMail` nor SendGrid's `mail/send` redirects.
///
/// # Errors
/// [`MailError::Misconfigured`] when the TLS backend cannot be initialised.
pub(crate) fn build_http_client(timeout: Duration) -> Result<reqwest::Client, MailError> {
    reqwest::Client::builder()
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("mail-worker/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| MailError::Misconfigured(format!("cannot build the HTTP client: {e}")))
}

/// `base` with its trailing empty segment dropped and `more` appended (`https://h/v1.0/` +
/// `users`, `a@b` → `https://h/v1.0/users/a@b`, each segment path-encoded); `variable` names
/// the setting `base` came from in the error.
///
/// # Errors
/// [`MailError::Misconfigured`] when `base` cannot carry a path (`mailto:`, `data:`, …).
pub(crate) fn endpoint_url(base: &Url, variable: &str, more: &[&str]) -> Result<Url, MailError> {
    let mut url = base.clone();
    url.path_segments_mut()
        .map_err(|()| {
            MailError::Misconfigured(format!(
                "{variable} {} cannot be used as a base URL",
                crate::domain::redact_url(base)
            ))
        })?
        .pop_if_empty()
        .extend(more);
    Ok(url)
}

/// `what` plus the kind of transport failure (`timed out`, `connection failed`, …) and its
/// cause chain, with the request URL removed (it names the sending mailbox and tenant).
pub(crate) fn describe_transport_error(what: &str, error: &reqwest::Error) -> String {
    let kind = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "could not connect"
    } else if error.is_body() || error.is_decode() {
        "failed while reading the answer"
    } else {
        "failed"
    };
    let mut text = format!("{what} {kind}");
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The value of header `name` of `response`, if present and ASCII.
pub(crate) fn header(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// The body of a non-2xx `response` (for the provider's error code and message); empty for a
/// success or a body that cannot be read (the status then speaks for itself).
pub(crate) async fn error_body(response: reqwest::Response) -> Vec<u8> {
    if response.status().is_success() {
        return Vec::new();
    }
    response
        .bytes()
        .await
        .map(|b| b.to_vec())
        .unwrap_or_default()
}
