//! The outbox's dispatchers (docs/events.md): in every replica, one task per webhook receiver
//! (`EVENTS_WEBHOOK_URL`) POSTs the events after that receiver's cursor in commit order,
//! signed ([`sign`]), at most `EVENTS_BATCH_SIZE` a POST ([`deliver`]). A receiver is
//! delivered to by one replica at a time (its row's lease, taken `FOR UPDATE SKIP LOCKED`);
//! each has its own task, cursor and backoff, so a receiver that is down or slow delays only
//! its own events, and no task of the send path waits on any.

mod deliver;
pub mod sign;
#[cfg(test)]
mod test_events;

use std::{sync::Arc, time::Duration};

use sha2::{Digest, Sha256};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use url::Url;

use crate::{
    config::{Config, ConfigError},
    ops::Metrics,
    shutdown, store,
};

/// How often an idle dispatcher looks for new events (and a replica without the lease looks
/// whether it may take it).
pub const POLL: Duration = Duration::from_millis(200);

/// How the dispatchers deliver.
#[derive(Clone)]
pub struct OutboxSettings {
    /// The receivers.
    pub urls: Vec<Url>,
    /// `EVENTS_SIGNATURE` and `EVENTS_WEBHOOK_SECRET`, resolved.
    pub signing: Arc<sign::Signing>,
    /// `EVENTS_BATCH_SIZE`.
    pub batch_size: u32,
    /// `EVENTS_RETRY_FOR`.
    pub retry_for: Duration,
    /// One POST's deadline (`HTTP_TIMEOUT`).
    pub timeout: Duration,
    /// How often the lag gauge is read (`METRICS_REFRESH`).
    pub refresh: Duration,
    /// The first retry's wait; it doubles (jittered) up to [`Self::backoff_cap`].
    pub backoff_base: Duration,
    /// The longest wait between two tries.
    pub backoff_cap: Duration,
}

impl std::fmt::Debug for OutboxSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboxSettings")
            .field(
                "urls",
                &self
                    .urls
                    .iter()
                    .map(crate::config::events::shown)
                    .collect::<Vec<_>>(),
            )
            .field("batch_size", &self.batch_size)
            .field("retry_for", &self.retry_for)
            .finish_non_exhaustive()
    }
}

impl OutboxSettings {
    /// The settings of `config`; `None` with `EVENTS_WEBHOOK_URL=off`.
    ///
    /// # Errors
    /// An `EVENTS_WEBHOOK_SECRET` that cannot be read or that [`sign::Signing::new`] refuses.
    pub fn from_config(config: &Config) -> Result<Option<Self>, ConfigError> {
        let events = &config.events;
        let Some(secret) = events
            .secret
            .as_ref()
            .filter(|_| !events.webhook_urls.is_empty())
        else {
            return Ok(None);
        };
        let bad = |problem: String| ConfigError {
            var: "EVENTS_WEBHOOK_SECRET",
            value: secret.describe(),
            problem,
        };
        let value = secret.resolve().map_err(|e| bad(e.to_string()))?;
        let signing = sign::Signing::new(
            events.signature,
            secrecy::ExposeSecret::expose_secret(&value),
        )
        .map_err(bad)?;
        Ok(Some(Self {
            urls: events.webhook_urls.clone(),
            signing: Arc::new(signing),
            batch_size: events.batch_size.get(),
            retry_for: events.retry_for,
            timeout: config.http_timeout,
            refresh: config.metrics_refresh,
            backoff_base: Duration::from_millis(500),
            backoff_cap: Duration::from_secs(60),
        }))
    }
}

/// One receiver: its URL, its row's key (the URL's SHA-256, hex) and how it is shown.
#[derive(Debug, Clone)]
pub(crate) struct Receiver {
    pub url: Url,
    pub key: String,
    pub shown: String,
}

impl Receiver {
    fn new(url: Url) -> Self {
        let key = Sha256::digest(url.as_str().as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Self {
            shown: crate::config::events::shown(&url),
            key,
            url,
        }
    }
}

/// Runs one dispatcher per receiver and the lag gauge until `done`.
///
/// # Errors
/// An HTTP client that cannot be built.
pub async fn run(
    pool: PgPool,
    settings: OutboxSettings,
    metrics: Arc<Metrics>,
    done: CancellationToken,
) -> Result<(), reqwest::Error> {
    let client = reqwest::Client::builder()
        .timeout(settings.timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let settings = Arc::new(settings);
    let me = uuid::Uuid::new_v4();
    let mut tasks = tokio::task::JoinSet::new();
    for url in &settings.urls {
        let run = deliver::Dispatcher {
            pool: pool.clone(),
            client: client.clone(),
            receiver: Receiver::new(url.clone()),
            settings: Arc::clone(&settings),
            metrics: Arc::clone(&metrics),
            me,
            pin: None,
        };
        tasks.spawn(run.run(done.clone()));
    }
    let keys: Vec<String> = settings
        .urls
        .iter()
        .map(|url| Receiver::new(url.clone()).key)
        .collect();
    tasks.spawn({
        let (pool, metrics, done) = (pool.clone(), Arc::clone(&metrics), done.clone());
        async move {
            let (pool, metrics, keys) = (&pool, &metrics, &keys);
            shutdown::every(settings.refresh, done, None, || async move {
                if let Ok(age) =
                    store::events::delivery::oldest_undelivered_seconds(pool, keys).await
                {
                    metrics.set_events_oldest(age);
                }
            })
            .await;
        }
    });
    // A dispatcher's panic is the outbox's: the daemon's supervisor names it and stops.
    while let Some(ended) = tasks.join_next().await {
        if let Err(e) = ended
            && e.is_panic()
        {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    Ok(())
}
