//! The token endpoint (`POST /{tenant}/oauth2/v2.0/token`, client credentials) and the bearer
//! check of Graph requests.
//!
//! Entra ID's behaviour (<https://learn.microsoft.com/entra/identity-platform/v2-oauth2-client-creds-grant-flow>,
//! codes from <https://learn.microsoft.com/entra/identity-platform/reference-error-codes>), checked
//! in this order:
//! - a scripted [`TokenFault`] → that fault;
//! - unknown tenant → `400 invalid_request` AADSTS90002;
//! - `grant_type` not `client_credentials` → `400 unsupported_grant_type` AADSTS70003;
//! - no `client_id` → `400 invalid_request` AADSTS900144;
//! - client unknown in that tenant → `400 unauthorized_client` AADSTS700016;
//! - no secret → `401 invalid_client` AADSTS7000216; wrong secret → `401 invalid_client`
//!   AADSTS7000215;
//! - no `scope` → `400 invalid_request` AADSTS900144; a scope other than
//!   `https://graph.microsoft.com/.default` or `<this server's origin>/.default` → `400
//!   invalid_scope` AADSTS70011;
//! - else `200 {"token_type":"Bearer","expires_in":3599,"ext_expires_in":3599,"access_token":"…"}`.
//!
//! The secret may come in the form (`client_secret`) or as HTTP Basic (`client_secret_basic`,
//! id and secret form-url-encoded, RFC 6749 §2.3.1), which the `oauth2` crate uses by default.
//! Every request naming a client id is counted for [`super::GraphSim::token_requests`].
//! Tokens are valid until `now + token_lifetime_s` on the sim's clock. They are shaped as Entra
//! ID's app-only access tokens are, a JWT whose payload carries `aud`, `tid`, `appid`, `iat`,
//! `exp` and the app's granted application permissions in `roles` (absent when none is
//! granted): <https://learn.microsoft.com/entra/identity-platform/access-token-claims-reference>
//! ("roles": "the set of permissions exposed by your application that the requesting
//! application … has been given permission to call"). The signature part is not a real
//! signature: graph-sim recognises its tokens by the whole string.

use std::collections::HashMap;

use axum::{
    Json,
    body::Bytes,
    extract::Path,
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};
use base64::Engine as _;
use chrono::{DateTime, Utc};
use secrecy::ExposeSecret;
use uuid::Uuid;

use super::{
    call::Call,
    state::{IssuedToken, SimState},
    wire::{EntraError, GraphError, entra_headers},
};
use crate::events;

/// The scope every Graph app-only token asks for.
pub const GRAPH_DEFAULT_SCOPE: &str = "https://graph.microsoft.com/.default";

/// Who a valid bearer token belongs to.
#[derive(Debug, Clone)]
pub(crate) struct TokenOwner {
    pub tenant_id: String,
    pub client_id: String,
    /// The application permissions the token carries (`roles`).
    pub roles: Vec<String>,
}

/// The token endpoint handler.
pub(crate) async fn token(
    Call { state, headers }: Call,
    Path(tenant): Path<String>,
    body: Bytes,
) -> Response {
    let now = state.now();
    let form: HashMap<String, String> = url::form_urlencoded::parse(&body)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .fold(HashMap::new(), |mut m, (k, v)| {
            m.entry(k).or_insert(v);
            m
        });
    let basic = basic_credentials(&headers);
    let client_id = form
        .get("client_id")
        .cloned()
        .or_else(|| basic.as_ref().map(|(id, _)| id.clone()))
        .filter(|c| !c.is_empty());
    let secret = form
        .get("client_secret")
        .cloned()
        .or_else(|| basic.map(|(_, s)| s))
        .filter(|s| !s.is_empty());
    let correlation_id = headers
        .get("client-request-id")
        .and_then(|v| v.to_str().ok())
        .map_or_else(|| Uuid::new_v4().to_string(), str::to_owned);
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);

    let fault = {
        let mut inner = state.lock();
        if let Some(c) = &client_id {
            *inner.token_requests.entry(c.clone()).or_default() += 1;
        }
        inner.token_faults.pop_front()
    };
    let outcome = match fault {
        Some(f) => Err(EntraError::new(
            StatusCode::from_u16(f.status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
            &f.error,
            f.error_code,
            f.description,
        )),
        None => check(
            &state,
            &tenant,
            &form,
            client_id.as_deref(),
            secret.as_deref(),
            host.as_deref(),
        ),
    };
    let client = client_id.as_deref().unwrap_or_default();
    match outcome {
        Ok(()) => {
            let lifetime = state.token_lifetime_s;
            let access_token = {
                let mut inner = state.lock();
                let roles = inner.roles.get(client).cloned().unwrap_or_default();
                let expires_at = now
                    + chrono::Duration::seconds(
                        i64::try_from(lifetime).unwrap_or(i64::MAX / 1_000_000),
                    );
                let access_token = jwt_shaped(&tenant, client, &roles, now, expires_at);
                inner.tokens.retain(|_, t| t.expires_at > now);
                inner.tokens.insert(
                    access_token.clone(),
                    IssuedToken {
                        tenant_id: tenant.clone(),
                        client_id: client.to_owned(),
                        expires_at,
                        roles,
                    },
                );
                access_token
            };
            tracing::info!(
                event = events::SIM_REQUEST,
                sim.route = "token",
                graph.tenant_id = %tenant,
                client_id = %client,
                http.status = 200u16,
                expires_in_s = lifetime,
                "graph-sim issued a token"
            );
            let body = serde_json::json!({
                "token_type": "Bearer",
                "expires_in": lifetime,
                "ext_expires_in": lifetime,
                "access_token": access_token,
            });
            let mut response = (StatusCode::OK, Json(body)).into_response();
            entra_headers(
                response.headers_mut(),
                &Uuid::new_v4().to_string(),
                &correlation_id,
            );
            response
        }
        Err(e) => {
            tracing::info!(
                event = events::SIM_REQUEST,
                sim.route = "token",
                graph.tenant_id = %tenant,
                client_id = %client,
                http.status = e.status.as_u16(),
                error = %e.error,
                aadsts = e.code,
                "graph-sim refused a token request"
            );
            e.into_response(&correlation_id, now)
        }
    }
}

fn check(
    state: &SimState,
    tenant: &str,
    form: &HashMap<String, String>,
    client_id: Option<&str>,
    secret: Option<&str>,
    host: Option<&str>,
) -> Result<(), EntraError> {
    let tenant_known = state
        .apps
        .iter()
        .map(|a| a.tenant_id.as_str())
        .chain(state.mailboxes.iter().map(|m| m.tenant_id.as_str()))
        .any(|t| t.eq_ignore_ascii_case(tenant));
    if !tenant_known {
        return Err(EntraError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            90002,
            format!(
                "Tenant '{tenant}' not found. Check to make sure you have the correct tenant ID and are signing into the correct cloud. Check with your subscription administrator, this may happen if there are no active subscriptions for the tenant."
            ),
        ));
    }
    match form.get("grant_type").map(String::as_str) {
        Some("client_credentials") => {}
        None => return Err(missing_parameter("grant_type")),
        Some(other) => {
            return Err(EntraError::new(
                StatusCode::BAD_REQUEST,
                "unsupported_grant_type",
                70003,
                format!("The app requested an unsupported grant type '{other}'."),
            ));
        }
    }
    let Some(client_id) = client_id else {
        return Err(missing_parameter("client_id"));
    };
    let Some(app) = state
        .apps
        .iter()
        .find(|a| a.client_id == client_id && a.tenant_id.eq_ignore_ascii_case(tenant))
    else {
        return Err(EntraError::new(
            StatusCode::BAD_REQUEST,
            "unauthorized_client",
            700016,
            format!(
                "Application with identifier '{client_id}' was not found in the directory '{tenant}'. This can happen if the application has not been installed by the administrator of the tenant or consented to by any user in the tenant. You may have sent your authentication request to the wrong tenant."
            ),
        ));
    };
    if let Some(assertion) = form.get("client_assertion") {
        verify_assertion(state, tenant, app, form, assertion)?;
    } else {
        check_secret(app, client_id, secret)?;
    }
    let Some(scope) = form.get("scope").filter(|s| !s.trim().is_empty()) else {
        return Err(missing_parameter("scope"));
    };
    if !scope_accepted(scope.trim(), &state.origin, host) {
        return Err(EntraError::new(
            StatusCode::BAD_REQUEST,
            "invalid_scope",
            70011,
            format!(
                "The provided value for the input parameter 'scope' is not valid. The scope {scope} is not valid."
            ),
        ));
    }
    Ok(())
}

fn invalid_client(code: u32, description: impl Into<String>) -> EntraError {
    EntraError::new(
        StatusCode::UNAUTHORIZED,
        "invalid_client",
        code,
        description,
    )
}

/// Verifies a certificate credential's `client_assertion` as Entra ID does
/// (<https://learn.microsoft.com/entra/identity-platform/certificate-credentials>): RS256 signed
/// by the key of the app's registered certificate, `x5t#S256` naming that certificate, `aud` the
/// token endpoint, `iss` = `sub` = the client id, not expired, at most 10 minutes of validity, a
/// `jti` not seen before. Codes: AADSTS700027 (bad signature or unknown certificate),
/// AADSTS700024 (expired), AADSTS700023 (bad audience), AADSTS700021 (bad assertion type),
/// AADSTS7000215-like mix-ups are left to the secret path.
fn verify_assertion(
    state: &SimState,
    tenant: &str,
    app: &super::config::SimApp,
    form: &HashMap<String, String>,
    assertion: &str,
) -> Result<(), EntraError> {
    use jsonwebtoken::{Algorithm, DecodingKey, Validation};
    if form.get("client_assertion_type").map(String::as_str)
        != Some("urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
    {
        return Err(invalid_client(
            700021,
            "Client assertion type is invalid. The client assertion type must be 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer'.",
        ));
    }
    let Some(certificate) = app.client_certificate.as_deref() else {
        return Err(invalid_client(
            700027,
            format!(
                "Client assertion failed signature validation: no certificate is registered on application '{}'.",
                app.client_id
            ),
        ));
    };
    let header = jsonwebtoken::decode_header(assertion)
        .map_err(|_| invalid_client(700027, "Client assertion is not a valid JWT."))?;
    let thumbprint = certificate_thumbprint(certificate).map_err(|e| invalid_client(700027, e))?;
    if header.alg != Algorithm::RS256 || header.x5t_s256.as_deref() != Some(thumbprint.as_str()) {
        return Err(invalid_client(
            700027,
            format!(
                "Client assertion failed signature validation: the certificate with identifier used to sign the client assertion is not registered on application '{}'.",
                app.client_id
            ),
        ));
    }
    let key = DecodingKey::from_rsa_pem(certificate.as_bytes()).map_err(|e| {
        invalid_client(
            700027,
            format!("graph-sim cannot read the registered certificate: {e}"),
        )
    })?;
    let audience = format!("{}/{tenant}/oauth2/v2.0/token", state.origin);
    let mut validation = Validation::new(Algorithm::RS256);
    validation.set_audience(&[audience.as_str()]);
    validation.set_issuer(&[app.client_id.as_str()]);
    validation.set_required_spec_claims(&["exp", "aud", "iss", "sub"]);
    validation.leeway = 0;
    let claims = jsonwebtoken::decode::<serde_json::Value>(assertion, &key, &validation)
        .map_err(|e| match e.kind() {
            jsonwebtoken::errors::ErrorKind::ExpiredSignature => {
                invalid_client(700024, "Client assertion is not within its valid time range.")
            }
            jsonwebtoken::errors::ErrorKind::InvalidAudience => invalid_client(
                700023,
                format!("Client assertion audience claim does not match Realm issuer. Expected {audience}."),
            ),
            _ => invalid_client(
                700027,
                format!("Client assertion failed signature validation ({e})."),
            ),
        })?
        .claims;
    if claims["sub"].as_str() != Some(app.client_id.as_str()) {
        return Err(invalid_client(
            700027,
            "Client assertion sub must be the client id.",
        ));
    }
    let (iat, exp) = (claims["iat"].as_i64(), claims["exp"].as_i64());
    let nbf = claims["nbf"].as_i64().or(iat).unwrap_or_default();
    if exp.is_none_or(|exp| exp - nbf > 600) {
        return Err(invalid_client(
            700024,
            "Client assertion is valid for more than 10 minutes.",
        ));
    }
    let Some(jti) = claims["jti"].as_str().filter(|j| !j.is_empty()) else {
        return Err(invalid_client(700027, "Client assertion has no jti."));
    };
    if !state.lock().assertion_ids.insert(jti.to_owned()) {
        return Err(invalid_client(
            700025,
            "Client assertion has been used before (jti replayed).",
        ));
    }
    Ok(())
}

fn check_secret(
    app: &super::config::SimApp,
    client_id: &str,
    secret: Option<&str>,
) -> Result<(), EntraError> {
    let Some(secret) = secret else {
        return Err(EntraError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            7000216,
            "'client_assertion', 'client_secret' or 'request' is required for the 'client_credentials' grant type.",
        ));
    };
    if secret != app.client_secret.expose_secret() {
        return Err(EntraError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            7000215,
            format!(
                "Invalid client secret provided. Ensure the secret being sent in the request is the client secret value, not the client secret ID, for a secret added to app '{client_id}'."
            ),
        ));
    }
    Ok(())
}

fn missing_parameter(name: &str) -> EntraError {
    EntraError::new(
        StatusCode::BAD_REQUEST,
        "invalid_request",
        900144,
        format!("The request body must contain the following parameter: '{name}'."),
    )
}

/// `https://graph.microsoft.com/.default`, `<origin>/.default`, or `http://<Host header>/.default`
/// (the origin the client reached us by, e.g. a container name).
fn scope_accepted(scope: &str, origin: &str, host: Option<&str>) -> bool {
    let mut accepted = vec![GRAPH_DEFAULT_SCOPE.to_owned(), format!("{origin}/.default")];
    if let Some(h) = host {
        accepted.push(format!("http://{h}/.default"));
    }
    accepted.iter().any(|a| a.eq_ignore_ascii_case(scope))
}

/// `Authorization: Basic base64(urlencode(id):urlencode(secret))`.
fn basic_credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (id, secret) = decoded.split_once(':')?;
    Some((form_decode(id), form_decode(secret)))
}

fn form_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("v={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

/// Checks `Authorization: Bearer …` of a Graph request at `now`.
///
/// # Errors
/// `401 InvalidAuthenticationToken`, with Graph's messages: "Access token is empty." (missing),
/// "CompactToken parsing failed with error code: 80049217" (unknown), "Lifetime validation
/// failed, the token is expired." (expired).
pub(crate) fn authenticate(
    state: &SimState,
    headers: &HeaderMap,
    now: DateTime<Utc>,
) -> Result<TokenOwner, GraphError> {
    let unauthorized = |message: &str| {
        GraphError::new(
            StatusCode::UNAUTHORIZED,
            "InvalidAuthenticationToken",
            message,
        )
    };
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| unauthorized("Access token is empty."))?;
    let issued = state
        .lock()
        .tokens
        .get(token)
        .cloned()
        .ok_or_else(|| unauthorized("CompactToken parsing failed with error code: 80049217"))?;
    if now >= issued.expires_at {
        return Err(unauthorized(
            "Lifetime validation failed, the token is expired.",
        ));
    }
    Ok(TokenOwner {
        tenant_id: issued.tenant_id,
        client_id: issued.client_id,
        roles: issued.roles,
    })
}

/// An access token shaped as Entra ID's: `base64url(header).base64url(claims).base64url(sig)`,
/// the claims of the module doc (`roles` left out when empty, as Entra ID does), and a random
/// part so that no two tokens are alike.
fn jwt_shaped(
    tenant: &str,
    client_id: &str,
    roles: &[String],
    now: DateTime<Utc>,
    expires_at: DateTime<Utc>,
) -> String {
    let b64 = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
    let header = serde_json::json!({"typ": "JWT", "alg": "RS256", "kid": "graph-sim"});
    let mut claims = serde_json::json!({
        "aud": "https://graph.microsoft.com",
        "iss": format!("https://sts.windows.net/{tenant}/"),
        "tid": tenant,
        "appid": client_id,
        "idtyp": "app",
        "iat": now.timestamp(),
        "nbf": now.timestamp(),
        "exp": expires_at.timestamp(),
        "uti": Uuid::new_v4().simple().to_string(),
    });
    if !roles.is_empty() {
        claims["roles"] = serde_json::json!(roles);
    }
    format!(
        "{}.{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes()),
        b64(Uuid::new_v4().as_bytes()),
    )
}

/// The certificate's `x5t#S256` as Entra ID compares it: base64url (no padding) of the SHA-256
/// of its DER, the first `CERTIFICATE` PEM block's base64 decoded
/// (<https://learn.microsoft.com/entra/identity-platform/certificate-credentials>, "x5t#S256";
/// RFC 7515 §4.1.8). graph-sim's own, not the product's: a bug there must not hide here.
fn certificate_thumbprint(pem: &str) -> Result<String, String> {
    use sha2::{Digest, Sha256};
    let begin = "-----BEGIN CERTIFICATE-----";
    let start = pem
        .find(begin)
        .ok_or("the registered certificate has no CERTIFICATE block")?
        + begin.len();
    let end = pem[start..]
        .find("-----END CERTIFICATE-----")
        .ok_or("the registered certificate's CERTIFICATE block has no end")?;
    let body: String = pem[start..start + end]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(|e| format!("the registered certificate is not base64: {e}"))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(der)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_and_local_default_scopes_are_accepted_and_others_not() {
        let origin = "http://127.0.0.1:4000";
        assert!(scope_accepted(
            "https://graph.microsoft.com/.default",
            origin,
            None
        ));
        assert!(scope_accepted(
            "http://127.0.0.1:4000/.default",
            origin,
            None
        ));
        assert!(scope_accepted(
            "http://graph-sim:8025/.default",
            origin,
            Some("graph-sim:8025")
        ));
        assert!(!scope_accepted(
            "https://graph.microsoft.com/Mail.Send",
            origin,
            None
        ));
        assert!(!scope_accepted(
            "http://127.0.0.1:4001/.default",
            origin,
            None
        ));
        assert!(!scope_accepted(
            "https://graph.microsoft.com/.default openid",
            origin,
            None
        ));
    }

    #[test]
    fn basic_credentials_are_url_decoded_like_the_oauth2_crate_encodes_them() {
        let id: String = url::form_urlencoded::byte_serialize(b"my app").collect();
        let secret: String = url::form_urlencoded::byte_serialize(b"s3:cr&t+~").collect();
        let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{id}:{secret}"));
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            format!("Basic {encoded}").parse().unwrap(),
        );
        assert_eq!(
            basic_credentials(&headers),
            Some(("my app".to_owned(), "s3:cr&t+~".to_owned()))
        );
    }
}
