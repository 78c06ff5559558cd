//! The login form, logging in (a session cookie and its CSRF token) and logging out.

use super::*;

#[derive(Template)]
#[template(path = "admin/login.html")]
struct LoginPage {
    nav: bool,
    csrf: String,
    error: Option<String>,
}

pub(super) async fn login_form(State(state): State<AdminState>) -> Result<Response, AdminError> {
    login_page(&state, StatusCode::OK, None)
}

fn login_page(
    state: &AdminState,
    code: StatusCode,
    error: Option<String>,
) -> Result<Response, AdminError> {
    let (nonce, csrf) = state.token.new_login();
    let cookie = auth::set_cookie(
        auth::LOGIN_COOKIE,
        &nonce,
        std::time::Duration::from_secs(3600),
        state.config.admin.cookie_secure,
    );
    let page = render(&LoginPage {
        nav: false,
        csrf,
        error,
    })?;
    Ok((code, [(header::SET_COOKIE, cookie)], page).into_response())
}

pub(super) async fn login(
    State(state): State<AdminState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: String,
) -> Result<Response, AdminError> {
    let fields = Fields::parse(&body);
    let client = peer.ip();
    let now = Instant::now();
    if let Some(wait) = state.throttle.blocked(client, now) {
        tracing::warn!(
            event = log_events::MAIL_ADMIN_LOGIN_FAILED,
            client = %client,
            throttled = true,
            "admin login refused: too many failures"
        );
        let mut response = login_page(
            &state,
            StatusCode::TOO_MANY_REQUESTS,
            Some(format!(
                "Too many failed logins from {client}: wait {} s.",
                wait.as_secs().max(1)
            )),
        )?;
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(wait.as_secs().max(1)),
        );
        return Ok(response);
    }
    let nonce = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|h| auth::cookie(h, auth::LOGIN_COOKIE));
    let csrf_ok = match (nonce, fields.get("csrf")) {
        (Some(nonce), Some(csrf)) => state.token.login_csrf_ok(nonce, csrf),
        _ => false,
    };
    if !csrf_ok {
        return login_page(
            &state,
            StatusCode::FORBIDDEN,
            Some("The login form expired (missing or wrong CSRF token): try again.".into()),
        );
    }
    if !state.token.matches(fields.get("token").unwrap_or("")) {
        let failures = state.throttle.failed(client, now);
        tracing::warn!(
            event = log_events::MAIL_ADMIN_LOGIN_FAILED,
            client = %client,
            failures,
            throttled = false,
            "admin login refused: wrong token"
        );
        return login_page(
            &state,
            StatusCode::UNAUTHORIZED,
            Some("Wrong token.".into()),
        );
    }
    tracing::info!(event = log_events::MAIL_ADMIN_LOGIN, client = %client, "admin login");
    let secure = state.config.admin.cookie_secure;
    let session = state.token.new_session(chrono::Utc::now());
    let mut response = Redirect::to("/mailboxes").into_response();
    let headers = response.headers_mut();
    for cookie in [
        auth::set_cookie(auth::SESSION_COOKIE, &session, auth::SESSION_TTL, secure),
        auth::set_cookie(auth::LOGIN_COOKIE, "", std::time::Duration::ZERO, secure),
    ] {
        if let Ok(v) = HeaderValue::from_str(&cookie) {
            headers.append(header::SET_COOKIE, v);
        }
    }
    Ok(response)
}

pub(super) async fn logout(
    State(state): State<AdminState>,
    _checked: Posted,
) -> Result<Response, AdminError> {
    let cookie = auth::set_cookie(
        auth::SESSION_COOKIE,
        "",
        std::time::Duration::ZERO,
        state.config.admin.cookie_secure,
    );
    Ok(([(header::SET_COOKIE, cookie)], Redirect::to("/login")).into_response())
}
