//! A TCP gate in front of the real Redis, to play a Redis that is down, frozen, silently dead
//! or cut mid-run ([`Gate`]).

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpSocket, TcpStream},
    task::JoinHandle,
};
use url::Url;

use super::redis_url;

/// A loopback port in front of the real Redis that a test can keep closed, open as a listener
/// that accepts and never answers (frozen), open as a relay to Redis, or use to blackhole the
/// connections it already relays (a peer that vanished without a FIN or RST), or cut (a Redis
/// that went away: every connection closed, new ones refused).
pub struct Gate {
    addr: SocketAddr,
    upstream: String,
    shared: Arc<GateShared>,
    accept: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Default)]
struct GateShared {
    relay: AtomicBool,
    epoch: AtomicU64,
    accepted: AtomicUsize,
    held: Mutex<Vec<TcpStream>>,
    relays: Mutex<Vec<JoinHandle<()>>>,
}

impl Gate {
    /// A port nothing listens on (yet): connections are refused.
    pub async fn closed() -> Self {
        Self::closed_to(redis_addr()).await
    }

    /// [`Gate::closed`] in front of `upstream` (`host:port`) instead of Redis.
    pub async fn closed_to(upstream: String) -> Self {
        let probe = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = probe.local_addr().unwrap();
        drop(probe);
        Self {
            addr,
            upstream,
            shared: Arc::default(),
            accept: Mutex::new(None),
        }
    }

    /// A listener that accepts and never answers.
    pub async fn frozen() -> Self {
        let gate = Self::closed().await;
        gate.open(false);
        gate
    }

    /// Starts listening; `relay` says whether new connections reach Redis or are held mute.
    pub fn open(&self, relay: bool) {
        self.shared.relay.store(relay, Ordering::SeqCst);
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_reuseaddr(true).unwrap();
        socket.bind(self.addr).unwrap();
        let listener = socket.listen(1024).unwrap();
        let shared = self.shared.clone();
        let upstream = self.upstream.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                shared.accepted.fetch_add(1, Ordering::SeqCst);
                if shared.relay.load(Ordering::SeqCst) {
                    let relay = tokio::spawn(relay_to(client, upstream.clone(), shared.clone()));
                    shared.relays.lock().unwrap().push(relay);
                } else {
                    shared.held.lock().unwrap().push(client);
                }
            }
        });
        *self.accept.lock().unwrap() = Some(task);
    }

    /// New connections reach Redis (or are held mute).
    pub fn set_relay(&self, relay: bool) {
        self.shared.relay.store(relay, Ordering::SeqCst);
    }

    /// Connections relayed so far stop carrying bytes in either direction but stay open.
    pub fn blackhole_existing(&self) {
        self.shared.epoch.fetch_add(1, Ordering::SeqCst);
    }

    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// A gate that relays to Redis from the start.
    pub async fn relaying() -> Self {
        let gate = Self::closed().await;
        gate.open(true);
        gate
    }

    /// Closes the listener and every relayed connection (Redis went away).
    pub fn cut(&self) {
        if let Some(task) = self.accept.lock().unwrap().take() {
            task.abort();
        }
        for relay in self.shared.relays.lock().unwrap().drain(..) {
            relay.abort();
        }
    }

    /// The gate's `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A `redis://` URL through the gate.
    pub fn url(&self) -> Url {
        Url::parse(&format!("redis://{}", self.addr)).unwrap()
    }

    /// An open gate in front of the PostgreSQL of `db` (a database URL) and a pool of
    /// `max_connections` on that database through it, giving up an acquire after
    /// `acquire_timeout`: cut the gate to play a PostgreSQL that went away.
    pub async fn postgres(
        db: &Url,
        max_connections: u32,
        acquire_timeout: std::time::Duration,
    ) -> (Self, sqlx::PgPool) {
        let gate = Self::closed_to(format!(
            "{}:{}",
            db.host_str().unwrap_or("127.0.0.1"),
            db.port().unwrap_or(5432)
        ))
        .await;
        gate.open(true);
        let mut through_gate = db.clone();
        through_gate.set_host(Some("127.0.0.1")).unwrap();
        through_gate.set_port(Some(gate.addr().port())).unwrap();
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(acquire_timeout)
            .connect(through_gate.as_str())
            .await
            .unwrap();
        (gate, pool)
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.cut();
    }
}

fn redis_addr() -> String {
    let url = redis_url();
    format!(
        "{}:{}",
        url.host_str().unwrap_or("127.0.0.1"),
        url.port().unwrap_or(6379)
    )
}

async fn relay_to(client: TcpStream, upstream: String, shared: Arc<GateShared>) {
    let epoch = shared.epoch.load(Ordering::SeqCst);
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::join!(
        pump(client_read, server_write, shared.clone(), epoch),
        pump(server_read, client_write, shared, epoch),
    );
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    shared: Arc<GateShared>,
    epoch: u64,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if shared.epoch.load(Ordering::SeqCst) != epoch {
            // Blackholed: swallow everything from now on, keep both sockets open.
            std::future::pending::<()>().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
