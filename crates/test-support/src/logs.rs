//! Log capture in the product's format (JSON lines, one `event` field): [`capture_logs`] and
//! [`logs_containing`] record the whole test binary's logs (tests filter by their own message
//! ids or mailboxes); [`Capture::install`] records one test's events only, on its thread.

use std::sync::{Arc, Mutex};

use tracing_subscriber::{EnvFilter, Layer, fmt, layer::SubscriberExt};

/// A log buffer the JSON layer writes into.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Buffer {
    /// Every line recorded so far, parsed.
    fn lines(&self) -> Vec<serde_json::Value> {
        let bytes = self.0.lock().unwrap().clone();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

/// The product's JSON line format (`telemetry`), at `info`, into `buffer`.
fn json_layer<S>(buffer: Buffer) -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fmt::layer()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_writer(move || buffer.clone())
        .with_filter(EnvFilter::new("info"))
}

static GLOBAL: std::sync::LazyLock<Buffer> = std::sync::LazyLock::new(Buffer::default);

/// Installs (once) a global subscriber that records every log line of this test binary.
pub fn capture_logs() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        use tracing_subscriber::util::SubscriberInitExt;
        let _ = tracing_subscriber::registry()
            .with(json_layer(GLOBAL.clone()))
            .try_init();
    });
}

/// Every line captured by [`capture_logs`] whose text contains `needle`, parsed.
pub fn logs_containing(needle: &str) -> Vec<serde_json::Value> {
    GLOBAL
        .lines()
        .into_iter()
        .filter(|l| l.to_string().contains(needle))
        .collect()
}

/// The first line captured by [`capture_logs`] of `event` whose text contains `needle`;
/// panics naming both (and the lines with `needle`) when there is none.
pub fn first_logged(event: &str, needle: &str) -> serde_json::Value {
    let lines = logs_containing(needle);
    lines
        .iter()
        .find(|l| l["event"] == event)
        .cloned()
        .unwrap_or_else(|| panic!("no {event} line with {needle}: {lines:?}"))
}

/// One captured event: its level and fields as text.
#[derive(Debug, Clone)]
pub struct Captured {
    /// Its level.
    pub level: tracing::Level,
    fields: std::collections::BTreeMap<String, String>,
}

impl Captured {
    fn from_json(json: &serde_json::Value) -> Self {
        let fields = json
            .as_object()
            .into_iter()
            .flatten()
            .map(|(name, value)| {
                let text = match value {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (name.clone(), text)
            })
            .collect();
        Self {
            level: json["level"]
                .as_str()
                .unwrap_or("")
                .parse()
                .unwrap_or(tracing::Level::TRACE),
            fields,
        }
    }

    /// A field as text (`""` when absent).
    pub fn field(&self, name: &str) -> &str {
        self.fields.get(name).map_or("", String::as_str)
    }
}

/// The events of one test.
#[derive(Clone, Default)]
pub struct Capture(Buffer);

impl Capture {
    /// Captures every event logged on this thread until the guard drops (tests using it run on
    /// the current-thread runtime, so the code under test runs on this thread).
    pub fn install() -> (Self, tracing::subscriber::DefaultGuard) {
        let capture = Self::default();
        let guard = tracing::subscriber::set_default(
            tracing_subscriber::registry().with(json_layer(capture.0.clone())),
        );
        (capture, guard)
    }

    /// The events whose `event` field is `event`.
    pub fn with_event(&self, event: &str) -> Vec<Captured> {
        self.0
            .lines()
            .into_iter()
            .filter(|l| l["event"] == event)
            .map(|json| Captured::from_json(&json))
            .collect()
    }

    /// Every line captured, parsed (to check what no line may hold: a secret, an address).
    pub fn lines(&self) -> Vec<serde_json::Value> {
        self.0.lines()
    }

    /// Whether nothing at all was logged.
    pub fn is_empty(&self) -> bool {
        self.0.lines().is_empty()
    }
}
