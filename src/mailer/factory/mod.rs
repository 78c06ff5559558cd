//! `MailerFactory`: the mailer for a tenant or system mailbox, cached under a stable digest of
//! its whole configuration, so a changed limit or a rotated secret yields a new mailer on the
//! next message without a restart. Every Graph mailer is wrapped by the rate limiter; SendGrid
//! is not. One HTTP client, one token cache and one limiter are shared by all mailers.

mod spec;

use std::{fmt, sync::Arc, time::Duration};

use url::Url;

use spec::{ConfigDigest, MailerSpec, hex, unbuildable};

use crate::{
    clock::Clock,
    domain::{MailboxAddress, SECRET_FILE_TTL, SecretFiles, Sender, SystemMailbox, Tenant},
    mailer::{
        GraphConfig, MailError, Mailer, MailerSettings, MailerSource,
        graph::{GraphTokenCache, MicrosoftGraphMailer},
        http::build_http_client,
        metered::Metered,
        rate_limited::RateLimitedGraphMailer,
        sendgrid::SendGridMailer,
    },
    ops::metrics::{Metrics, PROVIDER_GRAPH, PROVIDER_SENDGRID},
    rate_limit::{RateLimiter, RateLimits},
};

/// The most mailers kept at once; one per distinct sender configuration.
pub(crate) const MAX_CACHED_MAILERS: u64 = 10_000;

/// A mailer not used for this long is dropped from the cache (a changed configuration leaves
/// its old mailer behind until then): 1 hour.
pub(crate) const MAILER_IDLE: Duration = Duration::from_secs(3600);

/// A Graph mailbox to read ([`MailerFactory::graph_mailbox`]).
#[derive(Debug)]
pub(crate) struct GraphMailbox {
    /// Its Graph mailer (the Inbox requests are its methods).
    pub mailer: MicrosoftGraphMailer,
    /// Its Graph tenant, lower case (the limiter's keys).
    pub tenant: String,
    /// Its tenant's external-recipient budget, if configured.
    pub budget: Option<crate::rate_limit::TenantBudget>,
    /// Its own budget (a limit pause fills its day window up to it).
    pub limits: RateLimits,
}

/// Builds and caches mailers. Cheap to share behind an `Arc`; all methods take `&self`.
pub struct MailerFactory<L: RateLimiter> {
    http: reqwest::Client,
    graph: GraphConfig,
    /// `GRAPH_READ_BOUNCES=on`: Graph tokens must carry bounce reading's permissions too.
    read_bounces: bool,
    sendgrid_api_base_url: Url,
    defaults: RateLimits,
    limiter: Arc<L>,
    clock: Arc<dyn Clock>,
    tokens: Arc<GraphTokenCache>,
    mailers: moka::future::Cache<ConfigDigest, Arc<dyn Mailer>>,
    metrics: Arc<Metrics>,
    /// `HTTP_TIMEOUT`, the shared client's whole-request deadline.
    request_timeout: Duration,
    secret_env: SecretEnv,
    secret_files: SecretFiles,
}

/// How `env:` secret references are looked up: the process environment in production; tests
/// pass their own map (the process environment cannot be changed safely while threads run).
pub(crate) type SecretEnv = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

impl<L: RateLimiter> fmt::Debug for MailerFactory<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MailerFactory")
            .field("graph", &self.graph)
            .field(
                "sendgrid_api_base_url",
                &crate::domain::redact_url(&self.sendgrid_api_base_url),
            )
            .field("defaults", &self.defaults)
            .field("cached_mailers", &self.mailers.entry_count())
            .finish_non_exhaustive()
    }
}

impl<L: RateLimiter> MailerFactory<L> {
    /// A factory for `config`'s endpoints (`GRAPH_API_BASE_URL`, `GRAPH_LOGIN_BASE_URL`,
    /// `GRAPH_SAVE_TO_SENT_ITEMS`, `SENDGRID_API_BASE_URL`), default limits
    /// (`MAIL_RATE_LIMIT_PER_MINUTE`, `MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY`) and one shared HTTP
    /// client with `HTTP_TIMEOUT` that never follows redirects (as `oauth2` requires).
    /// The cache holds at most [`MAX_CACHED_MAILERS`] mailers, each dropped after
    /// [`MAILER_IDLE`] unused.
    ///
    /// # Errors
    /// [`MailErrorKind::Misconfigured`](crate::mailer::MailErrorKind::Misconfigured) when the HTTP client cannot be built.
    pub fn new(
        settings: impl Into<MailerSettings>,
        limiter: Arc<L>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, MailError> {
        let settings = settings.into();
        let http = build_http_client(settings.http_timeout)?;
        Ok(Self {
            request_timeout: settings.http_timeout,
            tokens: Arc::new(GraphTokenCache::new(http.clone(), Arc::clone(&clock))),
            http,
            graph: settings.graph,
            read_bounces: settings.read_bounces,
            sendgrid_api_base_url: settings.sendgrid_api_base_url,
            defaults: settings.defaults,
            limiter,
            clock,
            mailers: moka::future::Cache::builder()
                .max_capacity(MAX_CACHED_MAILERS)
                .time_to_idle(MAILER_IDLE)
                .build(),
            metrics: Arc::new(Metrics::new()),
            secret_env: Arc::new(|name| std::env::var(name).ok()),
            secret_files: SecretFiles::new(SECRET_FILE_TTL),
        })
    }

    /// Keeps each `file:` secret's content for `ttl` instead of [`SECRET_FILE_TTL`] (tests).
    #[must_use]
    pub fn with_secret_file_ttl(mut self, ttl: Duration) -> Self {
        self.secret_files = SecretFiles::new(ttl);
        self
    }

    /// Counts provider requests in `metrics`.
    #[must_use]
    pub(crate) fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Resolves `env:` references through `env` instead of the process environment.
    #[must_use]
    pub(crate) fn with_secret_env(mut self, env: SecretEnv) -> Self {
        self.secret_env = env;
        self
    }

    /// The limiter, clock and metrics its mailers share (for readers on the same budgets).
    pub(crate) fn shared(&self) -> (Arc<L>, Arc<dyn Clock>, Arc<Metrics>) {
        (
            Arc::clone(&self.limiter),
            Arc::clone(&self.clock),
            Arc::clone(&self.metrics),
        )
    }

    /// The sender's configuration fingerprint: the hex config digest of its mailer, or, when
    /// it cannot be built, the reason (so a fixed reference changes it).
    pub(crate) async fn fingerprint_of(&self, sender: &Sender) -> String {
        match self.spec_for(sender).await {
            Ok(spec) => hex(&self.digest(&spec)),
            Err(e) => unbuildable(&e),
        }
    }

    /// The tenant's mailer: Graph (wrapped by the limiter, default limits) or SendGrid
    /// (unwrapped). The same configuration returns the same `Arc`.
    ///
    /// # Errors
    /// [`MailErrorKind::Misconfigured`](crate::mailer::MailErrorKind::Misconfigured) naming the secret reference when it cannot be resolved.
    pub async fn mailer_for_tenant(&self, tenant: &Tenant) -> Result<Arc<dyn Mailer>, MailError> {
        let spec = self.tenant_spec(tenant).await?;
        self.mailer(spec).await
    }

    /// The system mailbox's Graph mailer, wrapped by the limiter with [`Self::limits_for`].
    /// The same configuration returns the same `Arc`.
    ///
    /// # Errors
    /// [`MailErrorKind::Misconfigured`](crate::mailer::MailErrorKind::Misconfigured) naming the secret reference when it cannot be resolved.
    pub async fn mailer_for_system_mailbox(
        &self,
        mailbox: &SystemMailbox,
    ) -> Result<Arc<dyn Mailer>, MailError> {
        let spec = self.system_mailbox_spec(mailbox).await?;
        self.mailer(spec).await
    }

    /// A system mailbox's budget: its `rate_limit_per_minute` / `rate_limit_recipients_per_day`
    /// / `rate_limit_reserved_percent` where set, else the defaults.
    pub fn limits_for(&self, mailbox: &SystemMailbox) -> RateLimits {
        self.defaults.for_system_mailbox(mailbox)
    }

    /// A Graph sender's mailbox for reading its Inbox (bounce reading): its own Graph mailer,
    /// not cached and not rate-limited (each request takes its lease itself), its Graph tenant
    /// (lower case) and the tenant's external budget. `None` for a SendGrid tenant.
    ///
    /// # Errors
    /// [`MailErrorKind::Misconfigured`](crate::mailer::MailErrorKind::Misconfigured) naming the secret reference when it cannot be resolved.
    pub(crate) async fn graph_mailbox(
        &self,
        sender: &Sender,
    ) -> Result<Option<GraphMailbox>, MailError> {
        let MailerSpec::Graph(spec) = self.spec_for(sender).await? else {
            return Ok(None);
        };
        let tenant = spec.app.graph_tenant_id.to_lowercase();
        let mailer = MicrosoftGraphMailer::new(
            self.http.clone(),
            &self.graph.api_base_url,
            spec.mailbox,
            false,
            self.tokens.source(spec.app)?,
            Arc::clone(&self.clock),
        )?
        .with_bounce_reading(true);
        Ok(Some(GraphMailbox {
            mailer,
            tenant,
            budget: spec.tenant_budget,
            limits: spec.limits,
        }))
    }

    /// The budget of tenant Graph mailers (and of system mailboxes without overrides).
    pub fn default_limits(&self) -> RateLimits {
        self.defaults
    }

    async fn mailer(&self, spec: MailerSpec) -> Result<Arc<dyn Mailer>, MailError> {
        let key = self.digest(&spec);
        self.mailer_under(key, spec).await
    }

    async fn mailer_under(
        &self,
        key: ConfigDigest,
        spec: MailerSpec,
    ) -> Result<Arc<dyn Mailer>, MailError> {
        self.mailers
            .try_get_with(key, self.build(spec))
            .await
            .map_err(|e| (*e).clone())
    }

    async fn build(&self, spec: MailerSpec) -> Result<Arc<dyn Mailer>, MailError> {
        match spec {
            MailerSpec::Graph(spec) => {
                let tenant = spec.app.graph_tenant_id.clone();
                let tokens = self.tokens.source(spec.app)?;
                let graph = MicrosoftGraphMailer::new(
                    self.http.clone(),
                    &self.graph.api_base_url,
                    spec.mailbox,
                    self.graph.save_to_sent_items,
                    tokens,
                    Arc::clone(&self.clock),
                )?
                .with_mode(self.graph.send_mode, self.graph.send_settle)
                .with_bounce_reading(self.read_bounces);
                Ok(Arc::new(
                    RateLimitedGraphMailer::new(
                        Metered::new(graph, PROVIDER_GRAPH, Arc::clone(&self.metrics)),
                        Arc::clone(&self.limiter),
                        spec.limits,
                        Arc::clone(&self.clock),
                    )
                    .with_tenant(&tenant, spec.tenant_budget)
                    .with_request_timeout(self.request_timeout),
                ))
            }
            MailerSpec::SendGrid { from, api_key } => Ok(Arc::new(Metered::new(
                SendGridMailer::new(
                    self.http.clone(),
                    &self.sendgrid_api_base_url,
                    from,
                    api_key,
                    Arc::clone(&self.clock),
                )?,
                PROVIDER_SENDGRID,
                Arc::clone(&self.metrics),
            ))),
        }
    }
}

/// The service gets its mailers from the factory (the seam tests replace with a scripted one).
#[async_trait::async_trait]
impl<L: RateLimiter> MailerSource for MailerFactory<L> {
    async fn mailer_for_tenant(&self, tenant: &Tenant) -> Result<Arc<dyn Mailer>, MailError> {
        MailerFactory::mailer_for_tenant(self, tenant).await
    }

    async fn mailer_for_system_mailbox(
        &self,
        mailbox: &SystemMailbox,
    ) -> Result<Arc<dyn Mailer>, MailError> {
        MailerFactory::mailer_for_system_mailbox(self, mailbox).await
    }

    async fn fingerprint(&self, sender: &Sender) -> String {
        self.fingerprint_of(sender).await
    }

    async fn campaign_suspended_until(
        &self,
        campaign: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Option<chrono::DateTime<chrono::Utc>> {
        self.limiter.campaign_suspended_until(campaign, now).await
    }

    async fn drop_booking(&self, sender: &Sender, message: uuid::Uuid) {
        let Some(graph) = sender.graph() else {
            return;
        };
        let tenant = graph.graph_tenant_id.to_lowercase();
        self.limiter
            .drop_bookings(&tenant, sender.mailbox(), &[message], self.clock.now())
            .await;
    }

    async fn member_rooms(&self, members: &[Sender]) -> Vec<Option<crate::mailer::MemberRoom>> {
        let keys: Vec<(String, MailboxAddress)> = members
            .iter()
            .map(|m| {
                let tenant = m.graph().map(|g| g.graph_tenant_id.to_lowercase());
                (tenant.unwrap_or_default(), m.mailbox().clone())
            })
            .collect();
        let slots = self.limiter.member_slots(&keys).await;
        members
            .iter()
            .zip(slots)
            .map(|(member, slot)| {
                let slot = slot.filter(|_| member.graph().is_some())?;
                let limits = self.defaults.for_sender(member);
                let day = u64::from(limits.recipients_per_day.get())
                    * u64::from(100 - limits.reserved_percent)
                    / 100;
                Some(crate::mailer::MemberRoom {
                    free_at_ms: slot.free_at_ms,
                    day_left: i64::try_from(day).unwrap_or(i64::MAX)
                        - i64::try_from(slot.recipients_day).unwrap_or(i64::MAX),
                })
            })
            .collect()
    }

    /// One read of the sender's configuration (secrets resolved once) for both.
    async fn mailer_and_fingerprint(
        &self,
        sender: &Sender,
    ) -> (String, Result<Arc<dyn Mailer>, MailError>) {
        match self.spec_for(sender).await {
            Ok(spec) => {
                let key = self.digest(&spec);
                (hex(&key), self.mailer_under(key, spec).await)
            }
            Err(e) => (unbuildable(&e), Err(e)),
        }
    }
}
