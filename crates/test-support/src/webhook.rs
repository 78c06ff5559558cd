//! A webhook receiver written for the tests (axum on 127.0.0.1): it verifies each POST's
//! signature with docs/events.md's algorithm (HMAC-SHA256 over timestamp + "." + body), keeps
//! every POST, and answers 200, or 500 while told to fail; it can go down (its port closed)
//! and come up again on the same port.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU32, Ordering},
    },
};

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    routing::post,
};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The secret the tests sign with.
pub const SECRET: &str = "test-webhook-secret-0123456789";

/// One POST as received.
#[derive(Debug, Clone)]
pub struct Post {
    /// Whether `X-Mail-Worker-Signature` matched the body and timestamp.
    pub signed: bool,
    /// The events, as JSON objects.
    pub events: Vec<serde_json::Value>,
    /// The status it was answered with.
    pub status: u16,
}

#[derive(Default)]
struct Shared {
    posts: Mutex<Vec<Post>>,
    /// POSTs still to answer 500 (`u32::MAX`: all).
    failing: AtomicU32,
}

/// The receiver.
pub struct Receiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: Option<tokio::task::JoinHandle<()>>,
}

/// `v1=<hex HMAC-SHA256(secret, timestamp + "." + body)>`, as docs/events.md says.
fn expected_signature(timestamp: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("{timestamp}.").as_bytes());
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("v1={hex}")
}

async fn take(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let timestamp = header("x-mail-worker-timestamp");
    let signed = !timestamp.is_empty()
        && header("x-mail-worker-signature") == expected_signature(&timestamp, &body);
    let parsed: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let events = parsed["events"].as_array().cloned().unwrap_or_default();
    let fail = shared
        .failing
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| match n {
            0 => None,
            u32::MAX => Some(u32::MAX),
            n => Some(n - 1),
        })
        .is_ok();
    let status = if fail {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::OK
    };
    shared.posts.lock().unwrap().push(Post {
        signed,
        events,
        status: status.as_u16(),
    });
    status
}

impl Receiver {
    /// A receiver listening on a free port.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut receiver = Self {
            addr,
            shared: Arc::default(),
            server: None,
        };
        receiver.serve(listener);
        receiver
    }

    /// A receiver that is down: its port is reserved, nothing listens until [`Self::up`].
    pub async fn down_from_start() -> Self {
        let mut receiver = Self::start().await;
        receiver.down();
        receiver
    }

    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let app = Router::new()
            .route("/hook", post(take))
            .with_state(Arc::clone(&self.shared));
        self.server = Some(tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        }));
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    /// Closes its port: connections are refused.
    pub fn down(&mut self) {
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }

    /// Listens again on the same port.
    pub async fn up(&mut self) {
        let listener = tokio::net::TcpListener::bind(self.addr).await.unwrap();
        self.serve(listener);
    }

    /// Answers the next `n` POSTs with 500 (`u32::MAX`: every one until [`Self::heal`]).
    pub fn fail_next(&self, n: u32) {
        self.shared.failing.store(n, Ordering::SeqCst);
    }

    /// Answers 200 again.
    pub fn heal(&self) {
        self.fail_next(0);
    }

    /// Every POST so far.
    pub fn posts(&self) -> Vec<Post> {
        self.shared.posts.lock().unwrap().clone()
    }

    /// The events of the POSTs it answered 200, in order.
    pub fn accepted(&self) -> Vec<serde_json::Value> {
        self.posts()
            .into_iter()
            .filter(|p| p.status == 200)
            .flat_map(|p| p.events)
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.down();
    }
}
