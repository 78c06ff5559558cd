//! The admin UI's form bodies: [`Fields`], and [`Posted`], a POST with a session whose CSRF
//! token it carries (every POST but the login form's).

use axum::{
    extract::{FromRequest, FromRequestParts, Request},
    response::{IntoResponse, Response},
};

use super::{AdminError, AdminState, Authed, Session};

/// A urlencoded form body, repeated fields kept (`id=…&id=…`).
pub(super) struct Fields(Vec<(String, String)>);

impl Fields {
    pub(super) fn parse(body: &str) -> Self {
        Self(
            url::form_urlencoded::parse(body.as_bytes())
                .into_owned()
                .collect(),
        )
    }

    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub(super) fn all(&self, name: &str) -> impl Iterator<Item = &str> {
        self.0
            .iter()
            .filter(move |(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The session's CSRF token must be in field `csrf`, else [`AdminError::Csrf`] (403).
    fn check_csrf(&self, session: &Session) -> Result<(), AdminError> {
        if session.csrf_ok(self.get("csrf")) {
            Ok(())
        } else {
            Err(AdminError::Csrf)
        }
    }
}

/// A POST from a logged-in session carrying that session's CSRF token, and its fields. Refused
/// as [`Authed`] refuses, or 403 ([`AdminError::Csrf`]) without the token.
pub(super) struct Posted {
    pub session: Session,
    pub fields: Fields,
}

impl FromRequest<AdminState> for Posted {
    type Rejection = Response;

    async fn from_request(request: Request, state: &AdminState) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = request.into_parts();
        let Authed(session) = Authed::from_request_parts(&mut parts, state).await?;
        let body = String::from_request(Request::from_parts(parts, body), state)
            .await
            .map_err(IntoResponse::into_response)?;
        let fields = Fields::parse(&body);
        fields
            .check_csrf(&session)
            .map_err(IntoResponse::into_response)?;
        Ok(Self { session, fields })
    }
}
