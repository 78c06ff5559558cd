//! Standard Webhooks (issue 44 point 1, ADR 0037), end to end: the daemon's outbox POSTs real
//! batches to receivers built on the **reference libraries** — the Python package
//! `standardwebhooks` (`tests/webhooks/receiver.py`, in the venv of scripts/test-deps.sh), the
//! npm package where Node is installed (`tests/webhooks/receiver.js`) and the Rust crate
//! `standardwebhooks` (an axum receiver here) — which verify every batch and
//! refuse a tampered body, a wrong secret and a stale timestamp; a rotation with two secrets
//! loses no batch; a retry resends the same batch under the same `webhook-id`.

use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    process::{Child, Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU32, Ordering},
    },
    time::Duration,
};

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    routing::post,
};
use mail_worker::{
    domain::SecretRef,
    outbox::sign::{self, Scheme, Signing},
};
use serde_json::Value;

use crate::{
    events::{enqueue, start, stop, stored_ids, with_events},
    support::{app::TestApp, node, python, wait_until, wait_until_showing},
};

/// A `whsec_` secret (the key: the bytes 0 to 31).
const OURS: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
/// Another one (the specification's test vector's).
const OTHER: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// A raw secret, as configured before `whsec_` (its bytes are the key).
const RAW: &str = "a-raw-secret-from-before-0123456789";

/// `tests/webhooks/receiver.py` or `receiver.js`: the Python or npm reference library as a
/// receiver.
struct LibReceiver {
    child: Child,
    port: u16,
    /// One JSON object per POST, as it printed them.
    records: Arc<Mutex<Vec<Value>>>,
}

/// The library receivers of `secret`: Python's, and npm's where Node is installed.
fn libs(secret: &str, raw: bool) -> Vec<LibReceiver> {
    std::iter::once(LibReceiver::python(secret, raw))
        .chain(LibReceiver::node(secret, raw))
        .collect()
}

impl LibReceiver {
    /// The Python receiver verifying with `secret` (`raw`: its bytes are the key).
    fn python(secret: &str, raw: bool) -> Self {
        let mut command = Command::new(python::with("standardwebhooks"));
        command.arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/webhooks/receiver.py"
        ));
        Self::spawn(command, secret, raw)
    }

    /// The npm receiver, where Node is installed.
    fn node(secret: &str, raw: bool) -> Option<Self> {
        let modules = node::modules_with("standardwebhooks")?;
        let mut command = Command::new("node");
        command.env("NODE_PATH", modules).arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/webhooks/receiver.js"
        ));
        Some(Self::spawn(command, secret, raw))
    }

    fn spawn(mut command: Command, secret: &str, raw: bool) -> Self {
        command
            .arg(secret)
            .stdout(Stdio::piped())
            .stdin(Stdio::null());
        if raw {
            command.arg("--raw");
        }
        let mut child = command.spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        let port = first.strip_prefix("listening ").unwrap().parse().unwrap();
        let records = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&records);
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                kept.lock()
                    .unwrap()
                    .push(serde_json::from_str(&line).unwrap());
            }
        });
        Self {
            child,
            port,
            records,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    fn records(&self) -> Vec<Value> {
        self.records.lock().unwrap().clone()
    }

    /// The ids of the events of the POSTs it verified, in order.
    fn accepted_ids(&self) -> Vec<String> {
        self.records()
            .iter()
            .filter(|r| r["ok"] == true)
            .flat_map(|r| r["ids"].as_array().unwrap().clone())
            .map(|id| id.as_str().unwrap().to_owned())
            .collect()
    }
}

impl Drop for LibReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One POST the crate's receiver got.
#[derive(Clone)]
struct Posted {
    headers: HeaderMap,
    body: Bytes,
    /// The crate's verdict: `None` verified, else its error.
    refused: Option<String>,
    status: u16,
}

impl Posted {
    fn ids(&self) -> Vec<String> {
        let parsed: Value = serde_json::from_slice(&self.body).unwrap();
        parsed["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_str().unwrap().to_owned())
            .collect()
    }

    fn header(&self, name: &str) -> String {
        self.headers[name].to_str().unwrap().to_owned()
    }
}

struct Shared {
    webhook: standardwebhooks::Webhook,
    posts: Mutex<Vec<Posted>>,
    /// Answer verified POSTs 500 while set.
    failing: AtomicU32,
}

/// The Rust reference crate as a receiver: 204 verified, 401 refused (500 while failing).
struct CrateReceiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

async fn take(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let refused = shared
        .webhook
        .verify(&body, &headers)
        .err()
        .map(|e| e.to_string());
    let status = match (&refused, shared.failing.load(Ordering::SeqCst)) {
        (Some(_), _) => StatusCode::UNAUTHORIZED,
        (None, 0) => StatusCode::NO_CONTENT,
        (None, _) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    shared.posts.lock().unwrap().push(Posted {
        headers,
        body,
        refused,
        status: status.as_u16(),
    });
    status
}

impl CrateReceiver {
    /// A receiver verifying with `secret` (`whsec_…`, else its bytes: `Webhook::from_bytes`).
    async fn start(secret: &str) -> Self {
        let webhook = if secret.starts_with("whsec_") {
            standardwebhooks::Webhook::new(secret).unwrap()
        } else {
            standardwebhooks::Webhook::from_bytes(secret.as_bytes().to_vec()).unwrap()
        };
        let shared = Arc::new(Shared {
            webhook,
            posts: Mutex::default(),
            failing: AtomicU32::new(0),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new()
            .route("/hook", post(take))
            .with_state(Arc::clone(&shared));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            addr,
            shared,
            server,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    fn posts(&self) -> Vec<Posted> {
        self.shared.posts.lock().unwrap().clone()
    }

    fn accepted_ids(&self) -> Vec<String> {
        self.posts()
            .iter()
            .filter(|p| p.status == 204)
            .flat_map(Posted::ids)
            .collect()
    }
}

impl Drop for CrateReceiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// `app`'s daemon config with events on to `urls`, signed with `secret`.
fn config(app: &TestApp, urls: &[String], secret: &str) -> mail_worker::config::Config {
    let mut config = with_events(app, urls, Duration::from_secs(3600));
    config.events.secret = Some(SecretRef::new(secret));
    config
}

async fn stored(app: &TestApp) -> Vec<String> {
    stored_ids(app)
        .await
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// POSTs `body` with `headers` to `url`; the status.
async fn post_to(url: &str, headers: &[(&'static str, String)], body: &[u8]) -> u16 {
    let mut request = reqwest::Client::new().post(url).body(body.to_vec());
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn the_reference_libraries_verify_every_batch_and_refuse_forgeries() {
    let app = TestApp::builder().per_minute(1_000).await;
    let libs = libs(OURS, false);
    let rs = CrateReceiver::start(OURS).await;
    let libs_wrong = self::libs(OTHER, false);
    let rs_wrong = CrateReceiver::start(OTHER).await;
    let urls: Vec<String> = libs
        .iter()
        .chain(&libs_wrong)
        .map(LibReceiver::url)
        .chain([rs.url(), rs_wrong.url()])
        .collect();
    let daemon = start(config(&app, &urls, OURS)).await;
    enqueue(&app, 25).await;
    wait_until(
        Duration::from_secs(180),
        "50 events verified by each",
        async || {
            libs.iter().all(|l| l.accepted_ids().len() >= 50)
                && rs.accepted_ids().len() >= 50
                && libs_wrong.iter().all(|l| !l.records().is_empty())
                && !rs_wrong.posts().is_empty()
        },
    )
    .await;
    stop(daemon).await;
    let stored = stored(&app).await;
    assert_eq!(stored.len(), 50);
    // Every batch verified, once each, in commit order.
    for lib in &libs {
        assert!(
            lib.records().iter().all(|r| r["ok"] == true),
            "{:?}",
            lib.records()
        );
        assert_eq!(lib.accepted_ids(), stored);
    }
    let posts = rs.posts();
    assert!(posts.iter().all(|p| p.refused.is_none()));
    assert_eq!(rs.accepted_ids(), stored);
    // The legacy headers too, by default (EVENTS_SIGNATURE=both).
    assert!(
        posts
            .iter()
            .all(|p| p.headers.contains_key(sign::SIGNATURE_HEADER))
    );
    // A receiver with the wrong secret refuses every batch and takes none.
    for lib in &libs_wrong {
        for r in lib.records() {
            assert_eq!(r["ok"], false);
            assert_eq!(r["error"], "No matching signature found");
        }
        assert!(lib.accepted_ids().is_empty());
    }
    assert!(
        rs_wrong
            .posts()
            .iter()
            .all(|p| p.refused.as_deref() == Some("signature invalid") && p.status == 401)
    );

    // Forgeries of a real batch, sent to each: a tampered body, a stale timestamp.
    let real = &posts[0];
    let id = real.header(sign::ID_HEADER);
    let timestamp: i64 = real
        .header(sign::STANDARD_TIMESTAMP_HEADER)
        .parse()
        .unwrap();
    let headers: Vec<(&'static str, String)> = [
        sign::ID_HEADER,
        sign::STANDARD_TIMESTAMP_HEADER,
        sign::STANDARD_SIGNATURE_HEADER,
    ]
    .into_iter()
    .map(|n| (n, real.header(n)))
    .collect();
    let mut tampered = real.body.to_vec();
    let at = tampered.iter().position(|b| *b == b'1').unwrap();
    tampered[at] = b'2';
    let signing = Signing::new(Scheme::Standard, OURS).unwrap();
    // The same batch as a capture of 10 minutes ago: signed then, correctly.
    let stale = signing.headers(&id, timestamp - 600, &real.body);
    // Control: the same batch signed now is taken.
    let fresh = signing.headers(&id, chrono::Utc::now().timestamp(), &real.body);
    for url in libs.iter().map(LibReceiver::url).chain([rs.url()]) {
        assert_eq!(post_to(&url, &headers, &real.body).await, 204, "{url}");
        assert_eq!(post_to(&url, &headers, &tampered).await, 401, "{url}");
        assert_eq!(post_to(&url, &stale, &real.body).await, 401, "{url}");
        assert_eq!(post_to(&url, &fresh, &real.body).await, 204, "{url}");
    }
    for lib in &libs {
        let records = lib.records();
        let errors: Vec<Value> = records[records.len() - 4..]
            .iter()
            .map(|r| r["error"].clone())
            .collect();
        assert_eq!(
            errors,
            [
                Value::Null,
                "No matching signature found".into(),
                "Message timestamp too old".into(),
                Value::Null
            ]
        );
    }
    let refused: Vec<Option<String>> = rs.posts()[posts.len()..]
        .iter()
        .map(|p| p.refused.clone())
        .collect();
    assert_eq!(
        refused,
        [
            None,
            Some("signature invalid".into()),
            Some("signature timestamp too old".into()),
            None
        ]
    );
}

#[tokio::test]
async fn a_rotation_with_two_secrets_loses_no_batch() {
    let app = TestApp::builder().per_minute(1_000).await;
    // From a raw secret (as before whsec_) to a whsec_ one: both listed, the old one first.
    let libs: Vec<LibReceiver> = libs(RAW, true)
        .into_iter()
        .chain(libs(OURS, false))
        .collect();
    let (rs_old, rs_new) = (
        CrateReceiver::start(RAW).await,
        CrateReceiver::start(OURS).await,
    );
    let urls: Vec<String> = libs
        .iter()
        .map(LibReceiver::url)
        .chain([rs_old.url(), rs_new.url()])
        .collect();
    let daemon = start(config(&app, &urls, &format!("{RAW},{OURS}"))).await;
    enqueue(&app, 25).await;
    // 180 s: beside every other test, a cursor passes events only once every older
    // transaction on the server — other tests' included — has ended (docs/events.md); 60 s ran
    // out once in CI. The counts say which receiver lagged if it runs out again.
    wait_until_showing(
        Duration::from_secs(180),
        "50 events verified by each",
        async || {
            libs.iter().all(|l| l.accepted_ids().len() >= 50)
                && rs_old.accepted_ids().len() >= 50
                && rs_new.accepted_ids().len() >= 50
        },
        || {
            let lib_counts: Vec<String> = libs
                .iter()
                .map(|l| format!("{}/{} posts", l.accepted_ids().len(), l.records().len()))
                .collect();
            format!(
                "libraries verified {lib_counts:?}; crate old {}/{} posts, new {}/{} posts",
                rs_old.accepted_ids().len(),
                rs_old.posts().len(),
                rs_new.accepted_ids().len(),
                rs_new.posts().len()
            )
        },
    )
    .await;
    stop(daemon).await;
    let stored = stored(&app).await;
    for lib in &libs {
        assert!(
            lib.records().iter().all(|r| r["ok"] == true),
            "{:?}",
            lib.records()
        );
        assert_eq!(lib.accepted_ids(), stored);
    }
    for rs in [&rs_old, &rs_new] {
        let posts = rs.posts();
        assert!(posts.iter().all(|p| p.refused.is_none()));
        assert!(
            posts
                .iter()
                .all(|p| p.header(sign::STANDARD_SIGNATURE_HEADER).split(' ').count() == 2)
        );
        assert_eq!(rs.accepted_ids(), stored);
    }
}

#[tokio::test]
async fn a_retry_resends_the_same_batch_under_the_same_webhook_id() {
    let app = TestApp::builder().per_minute(1_000).await;
    let rs = CrateReceiver::start(OURS).await;
    rs.shared.failing.store(1, Ordering::SeqCst);
    let daemon = start(config(&app, &[rs.url()], OURS)).await;
    enqueue(&app, 2).await;
    // Bounds, not timings: the outbox passes an event once every transaction older than it
    // on the whole server ended (docs/events.md), and other tests' transactions hold that back.
    wait_until(Duration::from_secs(180), "a first POST", async || {
        !rs.posts().is_empty()
    })
    .await;
    // More events commit while the batch is refused: the retries must not take them in.
    enqueue(&app, 3).await;
    wait_until(Duration::from_secs(60), "5 SENT", async || {
        app.count("SENT").await == 5
    })
    .await;
    wait_until(Duration::from_secs(180), "a retry", async || {
        rs.posts().len() >= 2
    })
    .await;
    rs.shared.failing.store(0, Ordering::SeqCst);
    wait_until(Duration::from_secs(180), "10 events taken", async || {
        rs.accepted_ids().len() >= 10
    })
    .await;
    stop(daemon).await;
    let posts = rs.posts();
    let first = &posts[0];
    assert_eq!(first.status, 500);
    let retries: Vec<&Posted> = posts
        .iter()
        .skip(1)
        .take_while(|p| p.status == 500)
        .chain(posts.iter().find(|p| p.status == 204))
        .collect();
    assert!(retries.len() >= 2);
    for retry in retries {
        assert_eq!(retry.ids(), first.ids());
        assert_eq!(retry.header(sign::ID_HEADER), first.header(sign::ID_HEADER));
        assert_eq!(retry.body, first.body);
    }
    assert_eq!(rs.accepted_ids(), stored(&app).await);
}
