//! A minimal SendGrid stand-in for the demo, tests and `graph-sim --sendgrid-listen`:
//! `POST /v3/mail/send` with a bearer API key answers `202` with an `X-Message-Id`, `401` for an
//! unknown key, and records what it accepted (served by `GET /_sim/messages`).

use std::{
    collections::{BTreeMap, HashSet},
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use axum::{
    Json, Router,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::IntoResponse,
    routing::{get, post},
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One message the stand-in accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendGridRecord {
    /// `custom_args.mail_worker_message_id` (mail-worker's `messages.id`), if given.
    pub message_id: Option<String>,
    /// `from.email`, lower-cased.
    pub from: String,
    /// When it was accepted.
    pub received_at: DateTime<Utc>,
    /// The same in ms since the Unix epoch.
    pub received_at_ms: i64,
    /// To + Cc + Bcc of the first personalization.
    pub recipient_count: u32,
}

#[derive(Default)]
struct Inner {
    keys: HashSet<String>,
    accepted: Mutex<Vec<SendGridRecord>>,
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
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), keys).await
    }

    /// Serves on `listen` (port 0 = any free port), accepting these API keys.
    ///
    /// # Errors
    /// When `listen` cannot be bound.
    pub async fn start_on(
        listen: SocketAddr,
        keys: impl IntoIterator<Item = String>,
    ) -> std::io::Result<Self> {
        let inner = Arc::new(Inner {
            keys: keys.into_iter().collect(),
            accepted: Mutex::default(),
        });
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let app = Router::new()
            .route("/v3/mail/send", post(send))
            .route("/_sim/messages", get(messages))
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
        let mut counts = BTreeMap::new();
        for record in self.messages() {
            *counts.entry(record.from).or_default() += 1;
        }
        counts
    }

    /// Every message accepted so far, oldest first.
    pub fn messages(&self) -> Vec<SendGridRecord> {
        self.inner
            .accepted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Drop for SendGridSim {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn messages(State(inner): State<Arc<Inner>>) -> Json<Vec<SendGridRecord>> {
    Json(
        inner
            .accepted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone(),
    )
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
    let personalization = &body["personalizations"][0];
    let recipient_count = ["to", "cc", "bcc"]
        .iter()
        .map(|k| personalization[k].as_array().map_or(0, Vec::len))
        .sum::<usize>();
    let received_at = Utc::now();
    let record = SendGridRecord {
        message_id: body["custom_args"]["mail_worker_message_id"]
            .as_str()
            .map(str::to_owned),
        from: body["from"]["email"].as_str().unwrap_or("?").to_lowercase(),
        received_at,
        received_at_ms: received_at.timestamp_millis(),
        recipient_count: u32::try_from(recipient_count).unwrap_or(u32::MAX),
    };
    inner
        .accepted
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(record);
    (
        StatusCode::ACCEPTED,
        [("x-message-id", uuid::Uuid::new_v4().simple().to_string())],
        "",
    )
}
