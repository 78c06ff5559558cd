//! A minimal SendGrid stand-in for the demo: `POST /v3/mail/send` with a bearer API key answers
//! `202` with an `X-Message-Id`, `401` for an unknown key, and counts what it accepted.

use std::{
    collections::{BTreeMap, HashSet},
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use axum::{
    Router,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::IntoResponse,
    routing::post,
};

#[derive(Default)]
struct Inner {
    keys: HashSet<String>,
    accepted: Mutex<BTreeMap<String, u64>>,
}

/// A running SendGrid stand-in.
pub struct SendGridSim {
    addr: SocketAddr,
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl SendGridSim {
    /// Serves on `127.0.0.1:0`, accepting these API keys.
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start(keys: impl IntoIterator<Item = String>) -> std::io::Result<Self> {
        let inner = Arc::new(Inner {
            keys: keys.into_iter().collect(),
            accepted: Mutex::default(),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let app = Router::new()
            .route("/v3/mail/send", post(send))
            .with_state(inner.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, inner, task })
    }

    /// `http://127.0.0.1:<port>`, for `SENDGRID_API_BASE_URL`.
    pub fn base_url(&self) -> url::Url {
        url::Url::parse(&format!("http://{}", self.addr)).expect("a socket address is a URL")
    }

    /// Messages accepted per `from` address.
    pub fn accepted(&self) -> BTreeMap<String, u64> {
        self.inner
            .accepted
            .lock()
            .expect("sendgrid sim lock")
            .clone()
    }
}

impl Drop for SendGridSim {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn send(
    State(inner): State<Arc<Inner>>,
    headers: HeaderMap,
    body: axum::Json<serde_json::Value>,
) -> impl IntoResponse {
    let key = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    if !inner.keys.contains(key) {
        return (
            StatusCode::UNAUTHORIZED,
            [("x-message-id", String::new())],
            r#"{"errors":[{"message":"The provided authorization grant is invalid, expired, or revoked","field":null,"help":null}]}"#,
        );
    }
    let from = body["from"]["email"].as_str().unwrap_or("?").to_lowercase();
    *inner
        .accepted
        .lock()
        .expect("sendgrid sim lock")
        .entry(from)
        .or_default() += 1;
    (
        StatusCode::ACCEPTED,
        [("x-message-id", uuid::Uuid::new_v4().simple().to_string())],
        "",
    )
}
