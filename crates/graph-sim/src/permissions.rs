//! Application permissions: every Graph route of a mailbox requires the permission Microsoft's
//! page for it lists, and a token whose `roles` claim ([`super::auth`]) holds none of the
//! accepted ones gets Graph's `403 ErrorAccessDenied` "Access is denied. Check credentials and
//! try again." (<https://learn.microsoft.com/graph/resolve-auth-errors>, "403 Forbidden error:
//! Have you chosen the right set of permissions?").
//!
//! One middleware ([`enforce`]) in front of every route, checked right after the token and
//! before the mailbox (the permission is a property of the token, the mailbox is looked up by
//! the workload after it). A request without a valid token passes on: its handler answers the
//! `401`. The rules ([`required`]), each from the endpoint's "Permissions" table, Application
//! row (least privileged, then the higher privileged ones also accepted):
//!
//! | request | accepted roles | Microsoft page |
//! |---|---|---|
//! | `POST /users/{id}/sendMail` | Mail.Send | <https://learn.microsoft.com/graph/api/user-sendmail> |
//! | `POST /users/{id}/messages/{id}/send` | Mail.Send | <https://learn.microsoft.com/graph/api/message-send> |
//! | `POST /users/{id}/messages` (create a draft) | Mail.ReadWrite | <https://learn.microsoft.com/graph/api/user-post-messages> |
//! | `POST …/messages/{id}/attachments` | Mail.ReadWrite | <https://learn.microsoft.com/graph/api/message-post-attachments> |
//! | `POST …/attachments/createUploadSession` | Mail.ReadWrite | <https://learn.microsoft.com/graph/api/attachment-createuploadsession> |
//! | `PATCH …/messages/{id}` | Mail.ReadWrite | <https://learn.microsoft.com/graph/api/message-update> |
//! | `POST …/messages/{id}/move` (and any other action) | Mail.ReadWrite | <https://learn.microsoft.com/graph/api/message-move> |
//! | `DELETE …/messages/{id}` | Mail.ReadWrite | <https://learn.microsoft.com/graph/api/message-delete> |
//! | `GET /admin/exchange/tracing/messageTraces[/{id}/getDetailsByRecipient(…)]` | ExchangeMessageTrace.Read.All | <https://learn.microsoft.com/graph/api/messagetracingroot-list-messagetraces>, <https://learn.microsoft.com/graph/api/exchangemessagetrace-getdetailsbyrecipient> |
//! | `GET …/messages`, `GET …/messages/{id}[/$value]`, `GET …/mailFolders/{id}/messages` | Mail.ReadBasic.All, Mail.Read, Mail.ReadWrite | <https://learn.microsoft.com/graph/api/user-list-messages>, <https://learn.microsoft.com/graph/api/message-get>, <https://learn.microsoft.com/graph/api/mailfolder-list-messages> |
//!
//! Where a page is unclear the harsher reading is taken: an unknown action on a message needs
//! Mail.ReadWrite; Mail.ReadBasic.All is accepted for reads although it leaves out the body
//! (Graph then answers without it; graph-sim does not model that).
//! The upload URL (`PUT /_upload/…`) carries no token (it is pre-authenticated,
//! <https://learn.microsoft.com/graph/outlook-large-attachments>) and needs none.

use std::sync::Arc;

use axum::{
    extract::{Request, State},
    http::{Method, StatusCode},
    middleware::Next,
    response::Response,
};

use super::{
    auth::authenticate,
    state::SimState,
    wire::{GraphError, RequestIds},
};
use crate::events;

const SEND: &[&str] = &["Mail.Send"];
const READ_WRITE: &[&str] = &["Mail.ReadWrite"];
const READ: &[&str] = &["Mail.ReadBasic.All", "Mail.Read", "Mail.ReadWrite"];
const TRACE: &[&str] = &["ExchangeMessageTrace.Read.All"];

/// The roles of which a token needs one for `method` on `path` (`/v1.0/users/{id}/…`), or
/// `None` for a path outside a mailbox (the token endpoint, uploads, the admin API).
pub(crate) fn required(method: &Method, path: &str) -> Option<&'static [&'static str]> {
    if path.starts_with("/v1.0/admin/exchange/tracing/") {
        return Some(TRACE);
    }
    let rest = path.strip_prefix("/v1.0/users/")?;
    let parts: Vec<&str> = rest.split('/').skip(1).collect();
    let post = method == Method::POST;
    Some(match parts.as_slice() {
        ["sendMail"] => SEND,
        ["messages", _, "send"] if post => SEND,
        ["messages"] if post => READ_WRITE,
        ["messages", _] if method == Method::PATCH || method == Method::DELETE => READ_WRITE,
        [..] if method == Method::GET => READ,
        _ => READ_WRITE,
    })
}

/// The middleware: `403 ErrorAccessDenied` when the request's valid token lacks every role
/// [`required`] accepts; anything else goes on to its handler.
pub(crate) async fn enforce(
    State(state): State<Arc<SimState>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(accepted) = required(request.method(), request.uri().path()) else {
        return next.run(request).await;
    };
    let Ok(owner) = authenticate(&state, request.headers(), state.now()) else {
        return next.run(request).await;
    };
    if owner.roles.iter().any(|r| accepted.contains(&r.as_str())) {
        return next.run(request).await;
    }
    let user = request
        .uri()
        .path()
        .trim_start_matches("/v1.0/users/")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    if let Some(idx) = state.resolve_mailbox(&user) {
        state.lock().boxes[idx].refused.auth += 1;
    }
    tracing::info!(
        event = events::SIM_REQUEST,
        sim.route = "permissions",
        client_id = %owner.client_id,
        http.status = 403u16,
        needs = accepted.join(" or "),
        "graph-sim refused a request: the token lacks the application permission"
    );
    GraphError::new(
        StatusCode::FORBIDDEN,
        "ErrorAccessDenied",
        "Access is denied. Check credentials and try again.",
    )
    .into_response(&RequestIds::new(request.headers()), state.now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_route_needs_microsofts_permission() {
        let u = "/v1.0/users/mb@contoso.example";
        let cases = [
            (Method::POST, format!("{u}/sendMail"), Some(SEND)),
            (Method::POST, format!("{u}/messages/AAk=/send"), Some(SEND)),
            (Method::POST, format!("{u}/messages"), Some(READ_WRITE)),
            (
                Method::POST,
                format!("{u}/messages/AAk=/attachments"),
                Some(READ_WRITE),
            ),
            (
                Method::POST,
                format!("{u}/messages/AAk=/attachments/createUploadSession"),
                Some(READ_WRITE),
            ),
            (
                Method::PATCH,
                format!("{u}/messages/AAk="),
                Some(READ_WRITE),
            ),
            (
                Method::DELETE,
                format!("{u}/messages/AAk="),
                Some(READ_WRITE),
            ),
            (
                Method::POST,
                format!("{u}/messages/AAk=/move"),
                Some(READ_WRITE),
            ),
            (Method::GET, format!("{u}/messages"), Some(READ)),
            (Method::GET, format!("{u}/messages/AAk="), Some(READ)),
            (Method::GET, format!("{u}/messages/AAk=/$value"), Some(READ)),
            (
                Method::GET,
                format!("{u}/mailFolders/inbox/messages"),
                Some(READ),
            ),
            (
                Method::GET,
                "/v1.0/admin/exchange/tracing/messageTraces".to_owned(),
                Some(TRACE),
            ),
            (Method::POST, "/t/oauth2/v2.0/token".to_owned(), None),
            (Method::PUT, "/_upload/abc".to_owned(), None),
        ];
        for (method, path, expected) in cases {
            assert_eq!(required(&method, &path), expected, "{method} {path}");
        }
    }
}
