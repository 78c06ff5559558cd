//! The demo (`cargo demo`, the `mail-worker-demo` binary): a campaign end to end on this machine. Against the local PostgreSQL and
//! Redis (a database `mail_worker_demo_<run>` and a key prefix `mail-worker-demo:<run>:` of its
//! own, both removed at the end, so two demos on one server never meet), it starts graph-sim (and a SendGrid stand-in) in process with Exchange Online's
//! limits, registers the senders, pushes the campaign through the intake queue (a queue of its
//! own on `REDIS_URL`, consumed by the daemon's intake into PostgreSQL: [`intake`]), runs the
//! real worker until every due message is `SENT` or `ERROR`, shows live progress, and ends with
//! a per-mailbox report.

mod campaign;
pub mod forecast;
pub mod intake;

use std::{
    collections::BTreeMap,
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context;
use secrecy::ExposeSecret;
use serde::Serialize;
use sqlx::PgPool;

use graph_sim::{GraphSim, SimConfig, SimMailbox, sendgrid::SendGridSim};
use mail_worker::{
    clock::SystemClock,
    config::Config,
    daemon,
    domain::SecretRef,
    import::{self, senders::SendersFile},
    store::{self, report},
    worker,
};

/// Options of the demo (`cargo demo --help`; the alias already ends in `--`).
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Optional: a campaign JSONL file instead of the generated one (format in
    /// docs/file-formats.md; example: examples/campaign.jsonl). Without it the demo generates
    /// --messages-per-mailbox messages per sender. Needs --senders.
    #[arg(long, requires = "senders")]
    pub campaign: Option<PathBuf>,
    /// Optional: a senders JSON file (format in docs/file-formats.md; example:
    /// examples/senders.json). Without it the demo uses built-in senders. `env:NAME` secrets
    /// that are not set are replaced by generated demo secrets.
    #[arg(long)]
    pub senders: Option<PathBuf>,
    /// Messages per mailbox of the generated campaign (at least 1).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u32).range(1..))]
    pub messages_per_mailbox: u32,
    /// Print the final report as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Stop waiting after this many seconds (the report then shows what is left).
    #[arg(long, default_value_t = 900)]
    pub timeout_s: u64,
}

/// One mailbox's line of the final report.
#[derive(Debug, Clone, Serialize)]
pub struct MailboxReport {
    /// The sending mailbox.
    pub mailbox: String,
    /// `tenant <name>` or `system mailbox`.
    pub sender: String,
    /// Provider: `microsoft-graph` or `sendgrid`.
    pub provider: String,
    /// Messages `SENT`.
    pub sent: i64,
    /// Messages the provider stand-in accepted (graph-sim or the SendGrid stand-in): equal to
    /// `sent` when nothing was sent twice.
    pub provider_accepted: u64,
    /// Messages `ERROR`.
    pub error: i64,
    /// `ERROR` rows by reason.
    pub errors_by_reason: BTreeMap<String, i64>,
    /// Messages due but not done when the demo stopped (`SCHEDULED` and due,
    /// `SENDING`): 0 when it finished.
    pub due: i64,
    /// Messages still `SCHEDULED` for later (future `scheduledOn`).
    pub scheduled_later: i64,
    /// Deferrals (rate limit + throttling) over all its messages.
    pub deferrals: i64,
    /// The most messages graph-sim accepted in one UTC minute.
    pub max_sent_in_utc_minute: Option<u32>,
    /// Our limit (messages per UTC minute); `None` for SendGrid.
    pub limit_per_minute: Option<u32>,
    /// The most messages graph-sim accepted in any rolling 60 s (Exchange's window; limit 30).
    pub max_sent_in_rolling_60s: Option<u32>,
    /// Graph 429s by cause (concurrency, minute, day, request quota, retry_after_ignored), and
    /// the messages graph-sim accepted but bounced over the tenant's external budget
    /// (tenant_external_limit).
    pub graph_429: Option<BTreeMap<String, u64>>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct DemoReport {
    /// Messages enqueued (rows the intake committed).
    pub messages: usize,
    /// How the campaign came through the intake queue.
    pub intake: intake::IntakeReport,
    /// Campaign lines that could not become messages.
    pub bad_lines: Vec<String>,
    /// Wall time of the send phase, in seconds.
    pub elapsed_s: f64,
    /// Whether every due message ended `SENT` or `ERROR` before the timeout.
    pub finished: bool,
    /// Per mailbox.
    pub mailboxes: Vec<MailboxReport>,
    /// The forecast made before enqueueing against each mailbox's actual finish.
    pub forecast: Vec<forecast::ForecastLine>,
}

/// Runs the demo.
///
/// # Errors
/// Setup failures (database, Redis, files).
pub async fn run(mut config: Config, args: DemoArgs) -> anyhow::Result<DemoReport> {
    let run_id = &uuid::Uuid::new_v4().simple().to_string()[..8];
    // A database and Redis keys of its own, removed at the end (never anyone else's).
    config
        .database_url
        .set_path(&format!("/mail_worker_demo_{run_id}"));
    config.rate_limit.key_prefix = format!("mail-worker-demo:{run_id}:rl");
    // The campaign goes through an intake queue of the demo's own (one hash tag, as the default).
    let queue = format!("{{mail-worker-demo:{run_id}:campaign-sends}}");
    config.intake.queue = Some(queue.clone());

    // Senders and campaign.
    let (senders_file, campaign_text) = match (&args.senders, &args.campaign) {
        (Some(s), c) => {
            let text = std::fs::read_to_string(s)
                .with_context(|| format!("cannot read {}", s.display()))?;
            let file = import::senders::parse(&text).with_context(|| s.display().to_string())?;
            let campaign = match c {
                Some(c) => std::fs::read_to_string(c)
                    .with_context(|| format!("cannot read {}", c.display()))?,
                None => campaign::generate(&file, args.messages_per_mailbox as usize),
            };
            (file, campaign)
        }
        (None, _) => {
            let file = campaign::demo_senders();
            let campaign = campaign::generate(&file, args.messages_per_mailbox as usize);
            (file, campaign)
        }
    };
    let senders_file = with_literal_secrets(senders_file)?;

    // The stand-ins.
    let sim = GraphSim::start(sim_config(&senders_file)).await?;
    let sendgrid = SendGridSim::start(
        senders_file
            .tenants
            .iter()
            .filter_map(|t| t.sendgrid_api_key.clone()),
    )
    .await?;
    config.graph.api_base_url = sim.graph_base_url();
    config.graph.login_base_url = sim.login_base_url();
    config.sendgrid_api_base_url = sendgrid.base_url();

    let pool = store::prepare(&config.database_url, config.database_max_connections.get()).await?;
    import::senders::import(&pool, &senders_file).await?;
    // Before enqueueing, as an operator would: `mail-worker campaign forecast`'s report.
    let before = mail_worker::reports::campaign::forecast_file(
        &config,
        &pool,
        campaign_text.as_bytes(),
        None,
    )
    .await?;
    eprintln!("{}", forecast::summary(&before));
    let conn = mail_worker::intake::connect(&config.redis_url).await?;
    let (intake, consumer) = intake::push_and_consume(
        conn,
        &queue,
        &pool,
        campaign_text.as_bytes(),
        Duration::from_secs(60),
    )
    .await?;
    let inserted = intake.committed as u64;
    let bad_lines = intake.dead.clone();

    // The real worker, until every due message is done.
    let service = daemon::build_service(&config, pool.clone(), Arc::new(SystemClock))?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.timeout_s);
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<bool>();
    let watcher = tokio::spawn(watch_progress(pool.clone(), inserted, deadline, done_tx));
    let shutdown = async move {
        tokio::select! {
            _ = done_rx => {}
            _ = daemon::shutdown_signal() => {}
        }
    };
    let mut settings = daemon::daemon_settings(&config);
    settings.shutdown_grace = Duration::from_secs(5);
    worker::run(pool.clone(), service, settings, shutdown).await;
    consumer.stop().await;
    let finished = watcher.await.unwrap_or(false);
    let elapsed_s = started.elapsed().as_secs_f64();

    let compared = forecast::compare(&pool, &before).await?;
    let mut report = build_report(
        &pool,
        &config,
        &senders_file,
        (&sim, &sendgrid.accepted()),
        intake,
        bad_lines,
        elapsed_s,
        finished,
    )
    .await?;
    report.forecast = compared;
    drop(sendgrid);
    sim.shutdown().await?;
    pool.close().await;
    if let Err(e) = store::drop_database_if_exists(&config.database_url).await {
        eprintln!("mail-worker-demo: could not drop its database: {e}");
    }
    for prefix in [format!("mail-worker-demo:{run_id}:"), format!("{queue}:")] {
        if let Err(e) = delete_keys(&config, &prefix).await {
            eprintln!("mail-worker-demo: could not delete its Redis keys: {e}");
        }
    }
    if let Err(e) = forget_queue(&config, &queue).await {
        eprintln!("mail-worker-demo: could not remove its queue from apalis's list: {e}");
    }
    Ok(report)
}

/// Removes the demo's queue from the list apalis-redis keeps of every queue
/// (`core:apalis:queues:list`, members `<queue>:workers`), the one key outside its prefix.
async fn forget_queue(config: &Config, queue: &str) -> redis::RedisResult<()> {
    let mut conn = redis::Client::open(config.redis_url.first().as_str())?
        .get_multiplexed_async_connection()
        .await?;
    redis::cmd("ZREM")
        .arg("core:apalis:queues:list")
        .arg(format!("{queue}:workers"))
        .query_async::<()>(&mut conn)
        .await
}

/// Deletes every Redis key under `prefix` (SCAN + UNLINK of that prefix only, never `FLUSHDB`;
/// a prefix with `[` would need escaping: ours have none).
async fn delete_keys(config: &Config, prefix: &str) -> redis::RedisResult<()> {
    let mut conn = redis::Client::open(config.redis_url.first().as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(500)
            .query_async(&mut conn)
            .await?;
        if !keys.is_empty() {
            redis::cmd("UNLINK")
                .arg(&keys)
                .query_async::<()>(&mut conn)
                .await?;
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    Ok(())
}

/// Replaces `env:NAME` secrets that are not set (and `file:` ones) with literal values, so
/// the stand-ins and the worker agree on them without touching the process environment.
fn with_literal_secrets(mut file: SendersFile) -> anyhow::Result<SendersFile> {
    // One generated value per variable name, so mailboxes sharing an app share its secret.
    let mut generated: BTreeMap<String, String> = BTreeMap::new();
    let mut resolve = |raw: &str| -> anyhow::Result<String> {
        let secret = SecretRef::new(raw);
        match secret.resolve() {
            Ok(value) => Ok(value.expose_secret().to_owned()),
            Err(mail_worker::domain::SecretError::MissingEnv(name)) => Ok(generated
                .entry(name.clone())
                .or_insert_with(|| {
                    let random = uuid::Uuid::new_v4().simple().to_string();
                    format!("demo-{}-{}", name.to_lowercase(), &random[..12])
                })
                .clone()),
            Err(e) => Err(e.into()),
        }
    };
    for m in &mut file.system_mailboxes {
        m.client_secret = resolve(&m.client_secret)?;
    }
    for t in &mut file.tenants {
        if let Some(s) = &t.client_secret {
            t.client_secret = Some(resolve(s)?);
        }
        if let Some(k) = &t.sendgrid_api_key {
            t.sendgrid_api_key = Some(resolve(k)?);
        }
    }
    Ok(file)
}

/// graph-sim's apps and mailboxes from the senders, with Microsoft's default limits.
fn sim_config(file: &SendersFile) -> SimConfig {
    let mut config = SimConfig::new();
    let mut apps = std::collections::BTreeSet::new();
    let mut add = |config: SimConfig, tenant: &str, client: &str, secret: &str, address: &str| {
        let config = if apps.insert((tenant.to_owned(), client.to_owned())) {
            config.with_app(tenant, client, secret)
        } else {
            config
        };
        // Refused, not delayed, past 30 a minute: the report's "Graph 429" shows any overshoot.
        config.with_mailbox(SimMailbox::new(address.to_lowercase(), tenant).with_limits(
            graph_sim::MailboxLimits {
                minute_overflow: graph_sim::MinuteOverflow::Refuse,
                ..graph_sim::MailboxLimits::default()
            },
        ))
    };
    for m in &file.system_mailboxes {
        config = add(
            config,
            &m.graph_tenant_id,
            &m.client_id,
            &m.client_secret,
            &m.address,
        );
    }
    for t in &file.tenants {
        if let (Some(tenant), Some(client), Some(secret)) =
            (&t.graph_tenant_id, &t.client_id, &t.client_secret)
        {
            config = add(config, tenant, client, secret, &t.sender);
        }
    }
    config
}

async fn watch_progress(
    pool: PgPool,
    total: u64,
    deadline: Instant,
    done: tokio::sync::oneshot::Sender<bool>,
) -> bool {
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} done  {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    // Off a terminal the bar draws nothing: a plain line every 5 s instead.
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let started = Instant::now();
    let mut ticks = 0u32;
    let finished = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        ticks += 1;
        let Ok(rows) = report::by_sender(&pool).await else {
            continue;
        };
        let sent: i64 = rows.iter().map(|r| r.sent).sum();
        let error: i64 = rows.iter().map(|r| r.error).sum();
        let deferrals: i64 = rows.iter().map(|r| r.deferrals).sum();
        let in_flight: i64 = rows.iter().map(|r| r.sending).sum();
        bar.set_position((sent + error) as u64);
        bar.set_message(format!(
            "sent {sent}, error {error}, in flight {in_flight}, deferrals {deferrals}"
        ));
        if !terminal && ticks.is_multiple_of(10) {
            eprintln!(
                "{:>4} s: {}/{total} done (sent {sent}, error {error}), in flight {in_flight}, deferrals {deferrals}",
                started.elapsed().as_secs(),
                sent + error
            );
        }
        match report::unfinished(&pool, chrono::Utc::now()).await {
            Ok(0) => break true,
            _ if Instant::now() >= deadline => break false,
            _ => {}
        }
    };
    bar.finish();
    let _ = done.send(finished);
    finished
}

#[allow(clippy::too_many_arguments)]
async fn build_report(
    pool: &PgPool,
    config: &Config,
    senders: &SendersFile,
    (sim, sendgrid_accepted): (&GraphSim, &BTreeMap<String, u64>),
    intake: intake::IntakeReport,
    bad_lines: Vec<String>,
    elapsed_s: f64,
    finished: bool,
) -> anyhow::Result<DemoReport> {
    let messages = intake.committed as usize;
    let stats = sim.stats();
    let errors = report::errors_by_reason(pool).await?;
    let mut mailboxes = Vec::new();
    for row in report::by_sender(pool).await? {
        let system = senders
            .system_mailboxes
            .iter()
            .find(|m| m.address.eq_ignore_ascii_case(&row.mailbox));
        let tenant = senders
            .tenants
            .iter()
            .find(|t| t.sender.eq_ignore_ascii_case(&row.mailbox));
        let graph = system.is_some() || tenant.is_some_and(|t| t.provider == "microsoft-graph");
        let limit = graph.then(|| {
            system
                .and_then(|m| m.rate_limit_per_minute)
                .unwrap_or(config.rate_limit.defaults.per_minute.get())
        });
        let sim_stats = stats.mailbox(&row.mailbox);
        mailboxes.push(MailboxReport {
            mailbox: row.mailbox.clone(),
            sender: row.kind.clone(),
            provider: if graph { "microsoft-graph" } else { "sendgrid" }.into(),
            sent: row.sent,
            error: row.error,
            provider_accepted: sim_stats
                .map(|s| s.accepted)
                .or_else(|| sendgrid_accepted.get(&row.mailbox).copied())
                .unwrap_or(0),
            scheduled_later: row.scheduled_later,
            due: row.scheduled - row.scheduled_later + row.sending,
            deferrals: row.deferrals,
            limit_per_minute: limit,
            max_sent_in_utc_minute: sim_stats.map(|s| s.max_in_utc_minute),
            max_sent_in_rolling_60s: sim_stats.map(|s| s.max_in_rolling_60s),
            graph_429: sim_stats.map(|s| {
                BTreeMap::from([
                    ("concurrency".to_owned(), s.refused.concurrency),
                    ("minute".to_owned(), s.refused.minute),
                    ("day".to_owned(), s.refused.day),
                    ("request_quota".to_owned(), s.refused.request_quota),
                    (
                        "retry_after_ignored".to_owned(),
                        s.refused.retry_after_ignored,
                    ),
                    (
                        "tenant_external_limit".to_owned(),
                        s.refused.tenant_external_limit,
                    ),
                ])
            }),
            errors_by_reason: errors
                .iter()
                .filter(|(m, _, _)| *m == row.mailbox)
                .map(|(_, reason, n)| (reason.clone(), *n))
                .collect(),
        });
    }
    Ok(DemoReport {
        messages,
        intake,
        bad_lines,
        elapsed_s,
        finished,
        mailboxes,
        forecast: Vec::new(),
    })
}

/// The report as a table for humans.
pub fn render(report: &DemoReport) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "\n{} messages in {:.0} s{}\n\n",
        report.messages,
        report.elapsed_s,
        if report.finished {
            ""
        } else {
            " (timed out: some messages are not done)"
        }
    ));
    out.push_str(&format!(
        "{} lines pushed to {}, {} rows committed by the intake, {} dead-lettered\n\n",
        report.intake.pushed,
        report.intake.queue,
        report.intake.committed,
        report.intake.dead.len()
    ));
    out.push_str(&format!(
        "{:<30} {:<16} {:>5} {:>8} {:>6} {:>5} {:>6} {:>9} {:>13} {:>10} {:>22}\n",
        "mailbox",
        "provider",
        "sent",
        "accepted",
        "error",
        "due",
        "later",
        "deferrals",
        "max/UTC min",
        "max/60 s",
        "Graph 429 (conc/min/day)"
    ));
    for m in &report.mailboxes {
        let per_min = match (m.max_sent_in_utc_minute, m.limit_per_minute) {
            (Some(max), Some(limit)) => format!("{max} / {limit}"),
            _ => "-".into(),
        };
        let rolling = m
            .max_sent_in_rolling_60s
            .map_or("-".into(), |v| format!("{v} / 30"));
        let throttled = m.graph_429.as_ref().map_or("-".into(), |c| {
            format!("{}/{}/{}", c["concurrency"], c["minute"], c["day"])
        });
        out.push_str(&format!(
            "{:<30} {:<16} {:>5} {:>8} {:>6} {:>5} {:>6} {:>9} {:>13} {:>10} {:>22}\n",
            m.mailbox,
            m.provider,
            m.sent,
            m.provider_accepted,
            m.error,
            m.due,
            m.scheduled_later,
            m.deferrals,
            per_min,
            rolling,
            throttled
        ));
    }
    out.push_str(
        "\nsent: rows SENT; accepted: what the stand-in received (equal to sent when nothing went twice); \
         error: rows ERROR; due: not done when the demo stopped; later: scheduledOn still ahead; \
         deferrals: waits our limiter or Graph asked for (never failures); max/UTC min: most sends in one UTC minute / our limit; \
         max/60 s: most in any rolling 60 s / Exchange's 30; Graph 429: the stand-in's refusals by cause, each deferred and retried, not failed.\n",
    );
    out.push_str(&forecast::render(&report.forecast));
    let errors: Vec<_> = report
        .mailboxes
        .iter()
        .flat_map(|m| {
            m.errors_by_reason
                .iter()
                .map(move |(r, n)| (m.mailbox.as_str(), r, n))
        })
        .collect();
    if !errors.is_empty() {
        out.push_str("\nerrors by reason:\n");
        for (mailbox, reason, n) in errors {
            out.push_str(&format!("  {n:>4}  {mailbox}: {reason}\n"));
        }
    }
    if !report.bad_lines.is_empty() {
        out.push_str(&format!(
            "\n{} campaign lines were refused (dead-lettered by the intake):\n",
            report.bad_lines.len()
        ));
        for line in &report.bad_lines {
            out.push_str(&format!("  {line}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use clap::Args as _;

    #[test]
    fn help_names_no_path_a_clone_lacks_and_says_what_is_used_without_the_files() {
        let mut command = super::DemoArgs::augment_args(clap::Command::new("demo"));
        let help = command.render_long_help().to_string();
        assert!(!help.contains("shared/data"), "{help}");
        for said in [
            "examples/campaign.jsonl",
            "examples/senders.json",
            "built-in senders",
            "generates",
        ] {
            assert!(help.contains(said), "{said} missing: {help}");
        }
    }
}
