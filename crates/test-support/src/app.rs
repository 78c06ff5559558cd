//! `spawn_app()` and [`TestApp`] (zero2prod's `tests/api/helpers.rs`): what one test runs
//! against, and the guards that drop what it made — [`TestDb`] (a fresh migrated database) and
//! [`TestKeys`] (a fresh Redis key prefix) — when the test ends, also when it panics.

use std::{collections::BTreeMap, num::NonZeroU32, path::Path, sync::Arc, time::Duration};

use chrono::{DateTime, TimeZone, Utc};
use graph_sim::{
    GraphSim, Latency, MailboxLimits, MinuteOverflow, SentInTransit, SimApp, SimConfig, SimMailbox,
    SimTenant, Target,
};
use mail_worker::{
    clock::{Clock, ManualClock},
    config::Config,
    daemon,
    domain::{GraphCredentials, MailboxAddress, SecretRef, TenantBudget},
    mailer::{MailError, SendReceipt},
    rate_limit::Algorithm,
    service::{MailProviderService, SendOutcome, ServiceSettings},
    store::{self, senders},
    worker::handler::Handler,
};
use sqlx::PgPool;
use url::Url;
use uuid::Uuid;

use super::{
    claim_and_send,
    doubles::{ScriptedMailer, ScriptedSource},
    redis_url, server_url, unique,
};

/// The tenant of the test mailboxes, in graph-sim and in the database.
pub const TENANT: &str = "contoso.example";
/// The app registration's client id.
pub const CLIENT: &str = "11111111-1111-4111-8111-111111111111";
/// Its secret (a literal in `system_mailboxes.graph_client_secret`).
pub const SECRET: &str = "e2e-secret";

/// 2026-11-30 12:00:00 UTC: where the manual clocks start.
pub fn noon() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap()
}

/// Runs `cleanup` to completion on a thread of its own with its own runtime: `Drop` cannot
/// `.await`, and may run while the test's runtime is panicking or shutting down.
fn block_on_own_thread<F>(cleanup: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let done = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for clean-up")
            .block_on(cleanup);
    })
    .join();
    if done.is_err() && !std::thread::panicking() {
        panic!("test clean-up failed");
    }
}

/// A fresh, migrated database `mw_test_<random>`, dropped (`WITH (FORCE)`) on drop.
pub struct TestDb {
    /// Its URL.
    pub url: Url,
    /// A pool on it.
    pub pool: PgPool,
}

impl TestDb {
    /// Creates and migrates `mw_test_<random>`.
    pub async fn new() -> Self {
        let url = Self::reserve();
        let pool = store::migrate(&url)
            .await
            .expect("migrate a fresh test database");
        Self { url, pool }
    }

    /// A URL for a database of this test that does not exist yet (for a command that creates
    /// it); wrap it with [`DropDatabase`] to drop it at the end.
    pub fn reserve() -> Url {
        let mut url = server_url();
        url.set_path(&format!("/{}", unique("mw_test_")));
        url
    }

    /// How many rows `table` (a name written in the test) holds.
    pub async fn rows_in(&self, table: &'static str) -> i64 {
        let sql = format!("SELECT count(*) FROM {table}");
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        drop(DropDatabase(self.url.clone()));
    }
}

/// Drops the database at its URL, if it exists, on drop.
pub struct DropDatabase(pub Url);

impl Drop for DropDatabase {
    fn drop(&mut self) {
        let url = self.0.clone();
        block_on_own_thread(async move {
            if let Err(e) = store::drop_database_if_exists(&url).await {
                eprintln!("cannot drop test database {}: {e}", url.path());
            }
        });
    }
}

/// A fresh Redis key prefix `test:<random>`; every key under it (`<prefix>:…`, deleted with the
/// bench lab's `unlink_prefix`) (and the queue's entry in
/// apalis' queue list) is deleted on drop. Never `FLUSHDB`.
pub struct TestKeys {
    /// The prefix; every key of this test starts with it.
    pub prefix: String,
}

impl Default for TestKeys {
    fn default() -> Self {
        Self::new()
    }
}

impl TestKeys {
    /// A prefix of its own.
    pub fn new() -> Self {
        Self {
            prefix: unique("test:"),
        }
    }

    /// `<prefix>:<name>`: a key prefix or queue name under this test's prefix.
    pub fn sub(&self, name: &str) -> String {
        format!("{}:{name}", self.prefix)
    }
}

impl Drop for TestKeys {
    fn drop(&mut self) {
        let prefix = self.prefix.clone();
        block_on_own_thread(async move {
            if let Err(e) = delete_keys(&prefix).await {
                eprintln!("cannot delete the test keys {prefix}*: {e}");
            }
        });
    }
}

/// apalis-redis lists every queue's workers key in this sorted set.
const APALIS_QUEUES: &str = "core:apalis:queues:list";

async fn delete_keys(prefix: &str) -> redis::RedisResult<()> {
    use redis::AsyncCommands;
    let mut conn = redis::Client::open(redis_url().as_str())?
        .get_multiplexed_async_connection()
        .await?;
    crate::unlink_prefix(&mut conn, prefix).await?;
    let listed: Vec<String> = conn.zrange(APALIS_QUEUES, 0, -1).await?;
    let ours: Vec<&String> = listed.iter().filter(|q| q.starts_with(prefix)).collect();
    if !ours.is_empty() {
        let _: () = conn.zrem(APALIS_QUEUES, ours).await?;
    }
    Ok(())
}

/// What one test runs against: its own database and Redis keys, graph-sim (on port 0, in
/// process) with system mailboxes `mbN@contoso.example` registered in both, a config pointing at
/// all of them, and the daemon's parts in process: [`TestApp::real_handler`] (the real service
/// stack against graph-sim) and [`TestApp::handler`] (the service with [`ScriptedMailer`], no
/// HTTP, on [`TestApp::clock`]). Dropping it drops the database and the keys.
pub struct TestApp {
    /// The database (a guard: dropped with the app).
    pub db: TestDb,
    /// The key prefix (a guard): the limiter's keys are `<prefix>:rl…`, the queue `<prefix>:q`.
    pub keys: TestKeys,
    /// graph-sim.
    pub sim: GraphSim,
    /// The daemon's config: this database, Redis with this prefix, graph-sim.
    pub config: Config,
    /// The system mailboxes, by index: address and id.
    pub mailboxes: Vec<(MailboxAddress, Uuid)>,
    /// The scripted mailer behind [`TestApp::handler`] (answers `Ok` once its script is empty).
    pub mailer: Arc<ScriptedMailer>,
    /// The manual clock of [`TestApp::handler`], at [`noon`].
    pub clock: ManualClock,
    /// The job handler with the scripted mailer (30 s spread, 3 attempts).
    pub handler: Handler,
}

/// How to build a [`TestApp`]: `spawn_app()` is the default (one mailbox, our limit 25 a minute,
/// graph-sim with Exchange's limits but 64 concurrent requests, on the real clock).
pub struct Builder {
    mailboxes: usize,
    per_minute: u32,
    sim_concurrency: u32,
    sim_per_minute: Option<u32>,
    sim_clock: Option<ManualClock>,
    script: Vec<Result<SendReceipt, MailError>>,
    algorithm: Algorithm,
    sim_visibility_delay: Duration,
    sim_sent_in_transit: SentInTransit,
    sim_latency: Latency,
    sim_certificate: Option<String>,
    tenant_budget: Option<TenantBudget>,
    sim_retry_after_holds: bool,
    sim_bounces: graph_sim::SimBounces,
    sim_trace: graph_sim::SimTrace,
    sim_tenant_budget: Option<u64>,
    sim_new_tenant: Option<(u64, &'static str)>,
    sim_max_request_bytes: Option<usize>,
    sim_roles: Option<Vec<String>>,
    sim_mailbox_scope: Option<Vec<String>>,
    sim_recipients_per_day: Option<u64>,
    sim_unlicensed: bool,
}

/// A [`TestApp`] with the defaults of [`Builder`].
pub async fn spawn_app() -> TestApp {
    TestApp::builder().spawn().await
}

/// `fn name(T);` is a setter `name(value: T)` storing `value` in the field of that name, `fn
/// name(T) as Some;` one storing `Some(value)`: the plain setters of [`Builder`].
macro_rules! setters {
    ($($(#[$doc:meta])* fn $name:ident($ty:ty) $(as $wrap:ident)?;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(mut self, value: $ty) -> Self {
                self.$name = $($wrap)?(value);
                self
            }
        )*
    };
}

impl Builder {
    setters! {
        /// `n` system mailboxes `mb0…mb<n-1>@contoso.example`.
        fn mailboxes(usize);
        /// Our limit (messages per UTC minute) of every mailbox.
        fn per_minute(u32);
        /// graph-sim's concurrent requests per mailbox (Exchange: 4).
        fn sim_concurrency(u32);
        /// graph-sim's messages per rolling 60 s per mailbox (Exchange: 30).
        fn sim_per_minute(u32) as Some;
        /// graph-sim on this clock instead of the real one.
        fn sim_clock(ManualClock) as Some;
        /// The limiter's algorithm (default `fixed-window`: the daemon tests pin the design
        /// note's behaviour; `budgets.rs` runs `paced`).
        fn algorithm(Algorithm);
        /// How long graph-sim keeps a sent message looking unsent (eventual consistency).
        fn sim_visibility_delay(Duration);
        /// What graph-sim shows of a sent draft until its copy is visible (default: nothing, `404`).
        fn sim_sent_in_transit(SentInTransit);
        /// The latency graph-sim adds to every sendMail (default: none).
        fn sim_latency(Latency);
        /// The scripted mailer's answers, in order (then `Ok`).
        fn script(Vec<Result<SendReceipt, MailError>>);
        /// When graph-sim returns non-delivery reports (default: never).
        fn sim_bounces(graph_sim::SimBounces);
        /// graph-sim's message trace: lag, unprovisioned tenants, spam rules (default: none).
        fn sim_trace(graph_sim::SimTrace);
        /// graph-sim's tenant external budget when it differs from ours (Exchange counting
        /// more than we do: other senders of the tenant).
        fn sim_tenant_budget(u64) as Some;
        /// graph-sim's tenant as a new one (with [`Builder::tenant_budget`]): past this many
        /// external recipients a rolling day its external mail bounces with this reputation code.
        fn sim_new_tenant((u64, &'static str)) as Some;
        /// graph-sim's cap on one request's body (default Graph's 4 MB).
        fn sim_max_request_bytes(usize) as Some;
        /// The application permissions graph-sim grants the test app (default: all three).
        fn sim_roles(Vec<String>) as Some;
        /// The mailboxes graph-sim's app may use (its RBAC for Applications scope).
        fn sim_mailbox_scope(Vec<String>) as Some;
        /// graph-sim's recipients per rolling 24 h per mailbox (Exchange: 10,000): lower than
        /// ours, as when a person or another app uses the mailbox too.
        fn sim_recipients_per_day(u64) as Some;
    }

    /// graph-sim's mailboxes have no Exchange Online licence (`404 MailboxNotEnabledForRESTAPI`).
    pub fn sim_unlicensed(mut self) -> Self {
        self.sim_unlicensed = true;
        self
    }

    /// Registers this certificate (PEM) for the test app in graph-sim (certificate credentials).
    pub fn sim_certificate(mut self, pem: &str) -> Self {
        self.sim_certificate = Some(pem.to_owned());
        self
    }

    /// graph-sim answers each request on its own even right after a 429 with `Retry-After`
    /// (by default it refuses the mailbox until then, as Exchange does): for tests that probe
    /// scripted answers one after another.
    pub fn sim_ignoring_retry_after(mut self) -> Self {
        self.sim_retry_after_holds = false;
        self
    }

    /// The Graph tenant's external-recipient budget on every mailbox's app (what the senders
    /// file's `externalRecipientsPerDay` and `acceptedDomains` store), its one accepted domain
    /// `contoso.example`, the system mailboxes' own.
    pub fn tenant_budget(mut self, per_day: u32) -> Self {
        self.tenant_budget = Some(TenantBudget {
            external_recipients_per_day: NonZeroU32::new(per_day).expect("a positive budget"),
            accepted_domains: vec!["contoso.example".to_owned()],
        });
        self
    }

    /// Creates the database and the prefix, starts graph-sim, registers the mailboxes.
    pub async fn spawn(self) -> TestApp {
        let db = TestDb::new().await;
        let keys = TestKeys::new();
        let mut app = SimApp::new(TENANT, CLIENT, SECRET);
        if let Some(pem) = self.sim_certificate {
            app = app.with_certificate(pem);
        }
        if let Some(roles) = self.sim_roles {
            app = app.with_roles(roles);
        }
        if let Some(scope) = self.sim_mailbox_scope {
            app = app.with_mailbox_scope(scope);
        }
        let mut sim_config = SimConfig {
            apps: vec![app],
            ..SimConfig::new()
        }
        .with_sent_visibility_delay(self.sim_visibility_delay)
        .with_sent_in_transit(self.sim_sent_in_transit);
        if let Some(clock) = self.sim_clock {
            sim_config = sim_config.with_clock(SimClock(clock));
        }
        if let Some(max) = self.sim_max_request_bytes {
            sim_config.max_request_bytes = max;
        }
        // graph-sim enforces the same tenant budget Exchange would.
        if let Some(budget) = &self.tenant_budget {
            let mut tenant = SimTenant::new(
                TENANT,
                self.sim_tenant_budget
                    .unwrap_or(u64::from(budget.external_recipients_per_day.get())),
                budget.accepted_domains.clone(),
            );
            if let Some((per_day, code)) = self.sim_new_tenant {
                tenant = tenant.with_new_tenant(per_day, code);
            }
            sim_config = sim_config.with_tenant(tenant);
        }
        sim_config.bounces = self.sim_bounces;
        sim_config.trace = self.sim_trace;
        let mut mailboxes = Vec::new();
        for i in 0..self.mailboxes {
            let address = MailboxAddress::parse(&format!("mb{i}@contoso.example")).unwrap();
            let mut sim_mailbox = SimMailbox::new(address.as_str(), TENANT);
            if self.sim_unlicensed {
                sim_mailbox = sim_mailbox.unlicensed();
            }
            sim_config = sim_config.with_mailbox(
                sim_mailbox.with_limits(MailboxLimits {
                    concurrent_requests: self.sim_concurrency,
                    messages_per_minute: self
                        .sim_per_minute
                        .unwrap_or(MailboxLimits::default().messages_per_minute),
                    retry_after_holds: self.sim_retry_after_holds,
                    // A loud 429 for any overshoot of ours (Exchange would delay it).
                    minute_overflow: MinuteOverflow::Refuse,
                    recipients_per_day: self
                        .sim_recipients_per_day
                        .unwrap_or(MailboxLimits::default().recipients_per_day),
                    ..MailboxLimits::default()
                }),
            );
            let id = senders::upsert_system_mailbox(
                &db.pool,
                &address,
                &GraphCredentials {
                    graph_tenant_id: TENANT.into(),
                    client_id: CLIENT.into(),
                    client_secret: SecretRef::new(SECRET),
                    tenant_budget: self.tenant_budget.clone(),
                },
                NonZeroU32::new(self.per_minute),
                None,
            )
            .await
            .unwrap();
            mailboxes.push((address, id));
        }
        let sim = GraphSim::start(sim_config).await.unwrap();
        if self.sim_latency != Latency::None {
            sim.set_latency(Target::Global, self.sim_latency).unwrap();
        }
        let mut config = Config::from_lookup(|_| None).unwrap();
        config.database_url = db.url.clone();
        config.redis_url = redis_url().into();
        config.rate_limit.redis_url = redis_url().into();
        config.rate_limit.key_prefix = keys.sub("rl");
        config.intake.queue = Some(keys.sub("intake"));
        config.rate_limit.algorithm = self.algorithm;
        // The handlers run on manual clocks: the limiter decides by them, not by Redis's.
        config.rate_limit.caller_clock = true;
        // The in-process stacks keep the whole budget for every priority (the tests before
        // issue 24 count on it); `headroom.rs` runs the reserve (and the binary its default).
        config.rate_limit.defaults.reserved_percent = 0;
        config.graph.api_base_url = sim.graph_base_url();
        config.graph.login_base_url = sim.login_base_url();
        config.http_timeout = Duration::from_secs(10);
        let clock = ManualClock::new(noon());
        let mailer = ScriptedMailer::with(self.script);
        let service = MailProviderService::new(
            db.pool.clone(),
            Arc::new(ScriptedSource(mailer.clone())),
            Arc::new(clock.clone()),
            ServiceSettings {
                defer_spread_max: Duration::from_millis(30_000),
                max_attempts: 3,
                retry_for: Duration::from_secs(24 * 3600),
                send_lease: config.worker.send_lease,
            },
        );
        let handler = Handler::new(Arc::new(service));
        TestApp {
            db,
            keys,
            sim,
            config,
            mailboxes,
            mailer,
            clock,
            handler,
        }
    }
}

/// `TestApp::builder().script(…).await`: a builder spawns when awaited.
impl std::future::IntoFuture for Builder {
    type Output = TestApp;
    type IntoFuture = std::pin::Pin<Box<dyn Future<Output = TestApp>>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.spawn())
    }
}

impl TestApp {
    /// A [`Builder`] with the defaults of `spawn_app()`.
    pub fn builder() -> Builder {
        Builder {
            mailboxes: 1,
            per_minute: 25,
            sim_concurrency: 64,
            sim_per_minute: None,
            sim_clock: None,
            script: Vec::new(),
            algorithm: Algorithm::FixedWindow,
            sim_visibility_delay: Duration::ZERO,
            sim_sent_in_transit: SentInTransit::NotFound,
            sim_latency: Latency::None,
            sim_certificate: None,
            tenant_budget: None,
            sim_retry_after_holds: true,
            sim_bounces: graph_sim::SimBounces::default(),
            sim_trace: graph_sim::SimTrace::default(),
            sim_tenant_budget: None,
            sim_new_tenant: None,
            sim_max_request_bytes: None,
            sim_roles: None,
            sim_mailbox_scope: None,
            sim_recipients_per_day: None,
            sim_unlicensed: false,
        }
    }

    /// A [`Builder`] with the defaults of `spawn_app()` but the `paced` limiter.
    pub fn paced() -> Builder {
        Self::builder().algorithm(Algorithm::Paced)
    }

    /// `mail-worker run` (the binary) on this app's database, Redis key prefix, intake queue and
    /// graph-sim, metrics off, with `extra` variables; killed when dropped.
    pub fn daemon_command(&self, extra: &[(&str, &str)]) -> tokio::process::Command {
        self.binary_command(&crate::process::built_binary("mail-worker"), "run", extra)
    }

    /// `binary subcommand` (another build of `mail-worker`: the previous release's, say) with
    /// [`TestApp::daemon_command`]'s environment and `extra`; killed when dropped.
    pub fn binary_command(
        &self,
        binary: &Path,
        subcommand: &str,
        extra: &[(&str, &str)],
    ) -> tokio::process::Command {
        let config = &self.config;
        let mut command = tokio::process::Command::new(binary);
        command
            .arg(subcommand)
            .env("DATABASE_URL", config.database_url.as_str())
            .env("REDIS_URL", config.redis_url.first().as_str())
            .env("MAIL_RATE_LIMIT_KEY_PREFIX", &config.rate_limit.key_prefix)
            .env(
                "MAIL_RATE_LIMIT_ALGORITHM",
                config.rate_limit.algorithm.as_str(),
            )
            .env(
                "INTAKE_QUEUE",
                config.intake.queue.as_deref().unwrap_or("off"),
            )
            .env("GRAPH_API_BASE_URL", config.graph.api_base_url.as_str())
            .env("GRAPH_LOGIN_BASE_URL", config.graph.login_base_url.as_str())
            .env("METRICS_LISTEN", "off")
            .env("WORKER_CONCURRENCY", "8")
            .env("SCHEDULER_INTERVAL", "100ms")
            .env("RUST_LOG", "warn")
            .kill_on_drop(true);
        for (name, value) in extra {
            command.env(name, value);
        }
        command
    }

    /// The job handler over the real service stack (MailerFactory → RateLimitedGraphMailer →
    /// MicrosoftGraphMailer, the real limiter on Redis) against graph-sim, on `clock`.
    pub fn real_handler(&self, clock: Arc<dyn Clock>) -> Handler {
        let service = daemon::build_service(&self.config, self.db.pool.clone(), clock).unwrap();
        Handler::new(service)
    }

    /// Claims `SCHEDULED` message `id` through the production claim and sends it with
    /// [`TestApp::handler`] (the scripted mailer); `None` when it is not `SCHEDULED`.
    pub async fn process(&self, id: Uuid) -> Option<SendOutcome> {
        claim_and_send(&self.db.pool, &self.handler, id)
            .await
            .unwrap()
    }

    /// Inserts `n` due messages for mailbox `mailbox` with status `status`, returning their ids;
    /// the subject is the id.
    pub async fn insert(&self, mailbox: usize, n: usize, status: &str) -> Vec<Uuid> {
        let mut ids = Vec::new();
        for k in 0..n {
            let id = Uuid::new_v4();
            sqlx::query(
                "INSERT INTO messages (id, system_mailbox_id, to_recipients, subject, body, status, queued_at) \
                 VALUES ($1, $2, $3, $4, '<p>hi</p>', $5, now())",
            )
            .bind(id)
            .bind(self.mailboxes[mailbox].1)
            .bind(serde_json::json!([{ "address": format!("guest{k}@example.org"), "name": "Gäst" }]))
            .bind(id.to_string())
            .bind(status)
            .execute(&self.db.pool)
            .await
            .unwrap();
            ids.push(id);
        }
        ids
    }

    /// Runs `sql` (an `UPDATE` of one message, say) with `$1` bound to `id`.
    pub async fn execute(&self, sql: &'static str, id: Uuid) {
        sqlx::query(sql)
            .bind(id)
            .execute(&self.db.pool)
            .await
            .unwrap();
    }

    /// The one row `sql` selects with `$1` bound to `key` (e.g. a message's columns by id).
    pub async fn one_row<T, K>(&self, sql: &'static str, key: K) -> T
    where
        T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
        K: for<'q> sqlx::Encode<'q, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send,
    {
        sqlx::query_as(sql)
            .bind(key)
            .fetch_one(&self.db.pool)
            .await
            .unwrap()
    }

    /// `(status, attempts, deferrals, last_error, scheduled_on)` of a message.
    pub async fn row(&self, id: Uuid) -> (String, i32, i32, Option<String>, DateTime<Utc>) {
        self.one_row(
            "SELECT status, attempts, deferrals, last_error, scheduled_on FROM messages WHERE id = $1",
            id,
        )
        .await
    }

    /// PostgreSQL's `now()`: the clock row times (`scheduled_on`, `first_attempt_at`) are in.
    pub async fn db_now(&self) -> DateTime<Utc> {
        sqlx::query_scalar("SELECT now()")
            .fetch_one(&self.db.pool)
            .await
            .unwrap()
    }

    /// `(status, last_error, scheduled_on)` of a message.
    pub async fn status_of(&self, id: Uuid) -> (String, Option<String>, DateTime<Utc>) {
        let (status, _, _, last_error, scheduled_on) = self.row(id).await;
        (status, last_error, scheduled_on)
    }

    /// How many messages have `status`.
    pub async fn count(&self, status: &str) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM messages WHERE status = $1")
            .bind(status)
            .fetch_one(&self.db.pool)
            .await
            .unwrap()
    }

    /// The `SCHEDULED` rows due by `at` (the test's clock), for [`claim_and_send`].
    pub async fn due_by(&self, at: DateTime<Utc>) -> Vec<Uuid> {
        sqlx::query_scalar(
            "SELECT id FROM messages WHERE status = 'SCHEDULED' AND scheduled_on <= $1 ORDER BY id",
        )
        .bind(at)
        .fetch_all(&self.db.pool)
        .await
        .unwrap()
    }

    /// Requests graph-sim refused, every mailbox together (429s, auth, validation, scripted).
    pub fn sim_refused(&self) -> u64 {
        self.sim
            .stats()
            .mailboxes
            .iter()
            .map(|m| m.refused.total())
            .sum()
    }

    /// Messages graph-sim answered 202 but bounced (over the tenant's external budget).
    pub fn sim_bounced(&self) -> u64 {
        let stats = self.sim.stats();
        stats
            .mailboxes
            .iter()
            .map(|m| m.refused.tenant_external_limit)
            .sum()
    }

    /// Sends per UTC minute (`HH:MM`) as graph-sim recorded them.
    pub fn sends_per_minute(&self) -> BTreeMap<String, usize> {
        let mut per = BTreeMap::new();
        for m in self.sim.messages() {
            *per.entry(m.received_at.format("%H:%M").to_string())
                .or_default() += 1;
        }
        per
    }
}

/// graph-sim on the test's [`ManualClock`]: graph-sim has its own clock trait (it shares no code
/// with the product), so the one virtual time reaches it through this adapter.
struct SimClock(ManualClock);

impl graph_sim::clock::Clock for SimClock {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.0.now()
    }
}
