//! The real campaign, reduced for CI: the first 360 lines of `examples/campaign.jsonl` (the
//! first 400 lines of a real export) with `examples/senders.json` through TWO daemons at once (`worker::run`, as `mail-worker
//! run` does) against graph-sim and the SendGrid stand-in, in process. Every mailbox's limits are
//! raised except `monitor@contoso.example`, which keeps the real ones (ours 25 a minute; graph-sim
//! 30 in any rolling 60 s and 4 concurrent requests). `scripts/real-campaign.sh` runs the whole
//! file with separate processes; this test asserts the same invariants on the slice.
//!
//! 360 lines, not 300, so the slice holds one of each fault the real export has: a non-`x-`
//! header (line 46), two addresses in one field (312; `first;last@…` on 120 and 353 is refused the
//! same way) and a malformed address (359).

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    num::NonZeroU32,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use chrono::{DateTime, Timelike, Utc};
use graph_sim::sendgrid::SendGridSim;
use graph_sim::{GraphSim, Latency, MailboxLimits, MinuteOverflow, SimConfig, SimMailbox, Target};
use mail_worker::{
    clock::SystemClock,
    config::Config,
    daemon,
    domain::MailboxAddress,
    import::{self, senders::SendersFile},
    store::{self, report, senders},
    worker,
};
use uuid::Uuid;

use crate::{
    import::{CAMPAIGN, SENDERS},
    support::{
        TestDb, TestKeys,
        logs::{capture_logs, logs_containing},
        wait_until,
    },
};

/// Lines of the shared campaign in the slice.
const SLICE_LINES: usize = 360;
/// The mailbox that keeps Exchange's real limits.
const REAL_MAILBOX: &str = "monitor@contoso.example";
/// Our limit for it: the default, 25 messages per UTC minute.
const REAL_PER_MINUTE: u32 = 25;
/// Our raised limit for every other Graph mailbox (messages per UTC minute). Below the slice's
/// 137 due events@ messages, so the limiter defers some when they straddle no minute edge.
const FAST_PER_MINUTE: u32 = 100;
/// graph-sim's raised limits for the other mailboxes: messages in any rolling 60 s, and
/// concurrent requests per app and mailbox.
const SIM_FAST_PER_MINUTE: u32 = 1_000;
const SIM_FAST_CONCURRENCY: u32 = 64;
/// The slice's faulty lines (1-based) and their `last_error`, every address masked.
const FAULTS: [(usize, &str); 5] = [
    (
        46,
        "InvalidInternetMessageHeader: custom header \"Campaign-Id\" is refused: Graph accepts only internet message headers whose names start with x-",
    ),
    (
        120,
        "InvalidRecipient: to[0] (***; l***@example.org) is not one valid email address; put each recipient in its own entry",
    ),
    (
        312,
        "InvalidRecipient: to[0] (y***@EXAMPLE.COM; o***@sub.dept.example.net) is not one valid email address; put each recipient in its own entry",
    ),
    (
        353,
        "InvalidRecipient: to[0] (***; l***@example.org) is not one valid email address; put each recipient in its own entry",
    ),
    (
        359,
        "InvalidRecipient: to[0] (***@example.org) is not one valid email address",
    ),
];

/// One line of the slice, as the test reads it independently of the importer.
struct Line {
    id: Uuid,
    mailbox: String,
    scheduled_on: Option<DateTime<Utc>>,
}

fn slice() -> (String, Vec<Line>, SendersFile) {
    let senders = import::senders::parse(&std::fs::read_to_string(SENDERS).expect(SENDERS))
        .expect("the shared senders file parses");
    let tenant_mailbox: HashMap<String, String> = senders
        .tenants
        .iter()
        .map(|t| (t.name.clone(), t.sender.to_lowercase()))
        .collect();
    let text: String = std::fs::read_to_string(CAMPAIGN)
        .expect(CAMPAIGN)
        .lines()
        .take(SLICE_LINES)
        .map(|l| format!("{l}\n"))
        .collect();
    let lines = text
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let mailbox = match v["systemMailbox"].as_str() {
                Some(m) => m.to_lowercase(),
                None => tenant_mailbox[v["tenant"].as_str().unwrap()].clone(),
            };
            Line {
                id: Uuid::parse_str(v["id"].as_str().unwrap()).unwrap(),
                mailbox,
                scheduled_on: v["scheduledOn"].as_str().map(|s| s.parse().unwrap()),
            }
        })
        .collect();
    (text, lines, senders)
}

/// The senders with literal secrets (what the stand-ins and the workers must agree on); returns
/// the SendGrid keys.
fn with_test_secrets(senders: &mut SendersFile) -> Vec<String> {
    for m in &mut senders.system_mailboxes {
        m.client_secret = format!("secret-{}", m.client_id);
    }
    let mut keys = Vec::new();
    for t in &mut senders.tenants {
        if let Some(client) = &t.client_id {
            t.client_secret = Some(format!("secret-{client}"));
        }
        if t.sendgrid_api_key.is_some() {
            let key = format!("sg-key-{}", t.name);
            t.sendgrid_api_key = Some(key.clone());
            keys.push(key);
        }
    }
    keys
}

fn sim_config(senders: &SendersFile) -> SimConfig {
    let fast = MailboxLimits {
        messages_per_minute: SIM_FAST_PER_MINUTE,
        concurrent_requests: SIM_FAST_CONCURRENCY,
        minute_overflow: MinuteOverflow::Refuse,
        ..MailboxLimits::default()
    };
    let mut config = SimConfig::new();
    let mut apps = BTreeSet::new();
    let graph = senders
        .system_mailboxes
        .iter()
        .map(|m| {
            (
                m.address.to_lowercase(),
                m.graph_tenant_id.clone(),
                m.client_id.clone(),
                m.client_secret.clone(),
            )
        })
        .chain(senders.tenants.iter().filter_map(|t| {
            Some((
                t.sender.to_lowercase(),
                t.graph_tenant_id.clone()?,
                t.client_id.clone()?,
                t.client_secret.clone()?,
            ))
        }));
    for (address, tenant, client, secret) in graph {
        if apps.insert(client.clone()) {
            config = config.with_app(&tenant, &client, &secret);
        }
        let mailbox = SimMailbox::new(&address, &tenant);
        config = config.with_mailbox(if address == REAL_MAILBOX {
            // Microsoft's defaults: 30 / rolling 60 s, 4 concurrent; refused past them.
            mailbox.with_limits(MailboxLimits {
                minute_overflow: MinuteOverflow::Refuse,
                ..MailboxLimits::default()
            })
        } else {
            mailbox.with_limits(fast.clone())
        });
    }
    config
}

fn limit_of(mailbox: &str) -> u32 {
    if mailbox == REAL_MAILBOX {
        REAL_PER_MINUTE
    } else {
        FAST_PER_MINUTE
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_real_campaign_slice_through_two_daemons_is_sent_once_within_limits_or_fails_with_its_fault()
 {
    capture_logs();
    let db = TestDb::new().await;
    let keys = TestKeys::new();
    let prefix = keys.prefix.clone();
    let (text, lines, mut senders_file) = slice();
    let sendgrid_keys = with_test_secrets(&mut senders_file);

    // The stand-ins: graph-sim with latency, so requests overlap as real ones do.
    let sim = GraphSim::start(sim_config(&senders_file)).await.unwrap();
    sim.set_latency(Target::Global, Latency::Uniform(50, 150))
        .unwrap();
    let sendgrid = SendGridSim::start(sendgrid_keys).await.unwrap();

    // Senders, our limits, the slice.
    import::senders::import(&db.pool, &senders_file)
        .await
        .unwrap();
    for m in &senders_file.system_mailboxes {
        let address = MailboxAddress::parse(&m.address).unwrap();
        let per_minute = NonZeroU32::new(limit_of(address.as_str()));
        let per_day = m.rate_limit_recipients_per_day.and_then(NonZeroU32::new);
        let change = senders::LimitsChange::Set {
            per_minute,
            recipients_per_day: per_day,
            reserved_percent: None,
        };
        senders::set_limits(&db.pool, &address, change)
            .await
            .unwrap();
    }
    let enqueued = mail_worker::import::enqueue(&db.pool, &text, Default::default())
        .await
        .unwrap();
    assert_eq!(
        (enqueued.inserted, enqueued.good, enqueued.bad.len()),
        (SLICE_LINES as u64, SLICE_LINES, 0),
        "{:?}",
        enqueued.bad
    );

    // Two daemons, each with its own pool and service stack (limiter, factory), one database.
    let vars: HashMap<&str, String> = HashMap::from([
        ("DATABASE_URL", db.url.to_string()),
        ("MAIL_RATE_LIMIT_KEY_PREFIX", format!("{prefix}:rl")),
        ("MAIL_RATE_LIMIT_PER_MINUTE", FAST_PER_MINUTE.to_string()),
        ("MAIL_DEFER_SPREAD_MAX", "5s".into()),
        ("WORKER_CONCURRENCY", "8".into()),
        ("SCHEDULER_INTERVAL", "250ms".into()),
        ("GRAPH_API_BASE_URL", sim.graph_base_url().to_string()),
        ("GRAPH_LOGIN_BASE_URL", sim.login_base_url().to_string()),
        ("SENDGRID_API_BASE_URL", sendgrid.base_url().to_string()),
        ("SHUTDOWN_GRACE", "10s".into()),
    ]);
    let config = Config::from_lookup(|k| vars.get(k).cloned()).unwrap();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = AtomicUsize::new(0);
    let (pool_1, pool_2) = (
        store::connect(&config.database_url, 12).await.unwrap(),
        store::connect(&config.database_url, 12).await.unwrap(),
    );
    let run = |pool: sqlx::PgPool| {
        let service = daemon::build_service(&config, pool.clone(), Arc::new(SystemClock)).unwrap();
        let mut stop = stop_rx.clone();
        let settings = daemon::daemon_settings(&config);
        let stopped = &stopped;
        async move {
            let shutdown = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            worker::run(pool, service, settings, shutdown).await;
            stopped.fetch_add(1, Ordering::SeqCst);
        }
    };

    // Until nothing is in flight, due, or deferred (what stays SCHEDULED is the file's own
    // future scheduledOn). Polling: these are real daemons, not a tick helper.
    let started = Instant::now();
    let watch = async {
        wait_until(
            Duration::from_secs(150),
            "every message of the slice finished",
            async || {
                assert_eq!(
                    stopped.load(Ordering::SeqCst),
                    0,
                    "a daemon stopped on its own"
                );
                report::unfinished(&db.pool, Utc::now()).await.unwrap() == 0
            },
        )
        .await;
        let drained_s = started.elapsed().as_secs_f64();
        stop_tx.send(true).unwrap();
        drained_s
    };
    let ((), (), drained_s) = tokio::join!(run(pool_1), run(pool_2), watch);

    // What the slice implies, by mailbox: (SENT, ERROR, SCHEDULED for later).
    let now = Utc::now();
    let fault_ids: BTreeMap<Uuid, (usize, &str)> = FAULTS
        .iter()
        .map(|(n, reason)| (lines[n - 1].id, (*n, *reason)))
        .collect();
    let mut expected: BTreeMap<String, (i64, i64, i64)> = BTreeMap::new();
    for l in &lines {
        let e = expected.entry(l.mailbox.clone()).or_default();
        if l.scheduled_on.is_some_and(|t| t > now) {
            e.2 += 1;
        } else if fault_ids.contains_key(&l.id) {
            e.1 += 1;
        } else {
            e.0 += 1;
        }
    }
    let actual: BTreeMap<String, (i64, i64, i64)> = report::by_sender(&db.pool)
        .await
        .unwrap()
        .into_iter()
        .map(|r| {
            assert_eq!(r.sending, 0, "{}", r.mailbox);
            assert_eq!(
                r.oldest_due, None,
                "{}: a SCHEDULED row past its time",
                r.mailbox
            );
            (r.mailbox, (r.sent, r.error, r.scheduled))
        })
        .collect();
    assert_eq!(actual, expected, "(SENT, ERROR, SCHEDULED) per mailbox");
    let total = |f: fn(&(i64, i64, i64)) -> i64| expected.values().map(f).sum::<i64>();
    assert_eq!(
        total(|e| e.0) + total(|e| e.1) + total(|e| e.2),
        SLICE_LINES as i64
    );
    assert_eq!(total(|e| e.1), 5, "the five faulty lines are all due");

    // Every row's final state.
    let rows: Vec<(Uuid, String, Option<String>, i32, i32)> = sqlx::query_as(
        "SELECT id, status, last_error, attempts, deferrals FROM messages ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let status: HashMap<Uuid, &str> = rows.iter().map(|r| (r.0, r.1.as_str())).collect();
    for (id, st, last_error, attempts, deferrals) in &rows {
        match st.as_str() {
            "ERROR" => {
                let (line, reason) = fault_ids.get(id).unwrap_or_else(|| {
                    panic!("{id} ended ERROR but is no known fault: {last_error:?}")
                });
                assert_eq!(last_error.as_deref(), Some(*reason), "line {line}");
            }
            "SCHEDULED" => assert_eq!(
                (*attempts, *deferrals),
                (0, 0),
                "{id} stays SCHEDULED for its scheduledOn and was never tried"
            ),
            "SENT" => {}
            other => panic!("{id} ended {other}"),
        }
    }

    // Each message sent exactly once: the providers' records against the SENT rows.
    let graph_messages = sim.messages();
    let sendgrid_messages = sendgrid.messages();
    let mut received: BTreeMap<Uuid, u32> = BTreeMap::new();
    for id in graph_messages
        .iter()
        .map(|m| m.client_request_id.clone())
        .chain(sendgrid_messages.iter().map(|m| m.message_id.clone()))
    {
        let id = Uuid::parse_str(&id.expect("every provider record names its message")).unwrap();
        *received.entry(id).or_default() += 1;
    }
    let duplicates: Vec<_> = received.iter().filter(|(_, n)| **n > 1).collect();
    assert_eq!(
        duplicates,
        Vec::<(&Uuid, &u32)>::new(),
        "sent more than once"
    );
    let sent: BTreeSet<Uuid> = rows.iter().filter(|r| r.1 == "SENT").map(|r| r.0).collect();
    assert_eq!(
        received.keys().copied().collect::<BTreeSet<_>>(),
        sent,
        "the providers received exactly the SENT messages"
    );

    // The most sends in one UTC minute, per Graph mailbox, against our limit: by the minute each
    // request reached graph-sim (when we sent it). By the minute graph-sim accepted it, after its
    // 50–150 ms processing time, a send from a minute's last moments can count in the next one:
    // reported, not asserted.
    let max_in_minute = |at: fn(&graph_sim::RecordedMessage) -> i64| {
        let mut per_minute: BTreeMap<(String, i64), u32> = BTreeMap::new();
        for m in &graph_messages {
            *per_minute
                .entry((m.mailbox.clone(), at(m).div_euclid(60_000)))
                .or_default() += 1;
        }
        let mut max: BTreeMap<String, u32> = BTreeMap::new();
        for ((mailbox, _), n) in per_minute {
            let e = max.entry(mailbox).or_default();
            *e = (*e).max(n);
        }
        max
    };
    let max_per_minute = max_in_minute(|m| m.arrived_at_ms);
    let max_accepted_per_minute = max_in_minute(|m| m.received_at_ms);
    assert_eq!(max_per_minute.len(), 5, "five Graph mailboxes sent");
    for (mailbox, max) in &max_per_minute {
        assert!(
            *max <= limit_of(mailbox),
            "{mailbox}: {max} sends in one UTC minute, limit {}",
            limit_of(mailbox)
        );
    }
    let stats = sim.stats();
    let real = stats.mailbox(REAL_MAILBOX).unwrap();
    assert!(real.max_in_rolling_60s <= 30 && real.max_concurrent <= 4);
    // Both daemons sent: each has its own token cache, so the app of the contoso mailboxes
    // was asked for exactly one token per daemon.
    let contoso_app = &senders_file.system_mailboxes[0].client_id;
    assert_eq!(sim.token_requests(contoso_app), 2, "one token per daemon");

    // Every graph-sim refusal was a deferral: the message ended SENT, was deferred at least as
    // often as it was refused, and each refusal has its mail.graph.throttled line.
    let refusals = sim.refusals();
    let mut refused: BTreeMap<Uuid, i32> = BTreeMap::new();
    for r in &refusals {
        let id = Uuid::parse_str(r.client_request_id.as_deref().unwrap()).unwrap();
        *refused.entry(id).or_default() += 1;
    }
    for (id, n) in &refused {
        let row = rows.iter().find(|r| r.0 == *id).unwrap();
        assert_eq!(status[id], "SENT", "{id} was refused {n} times");
        assert!(row.4 >= *n, "{id}: {n} refusals but {} deferrals", row.4);
    }
    let throttled = logs_containing("\"event\":\"mail.graph.throttled\"")
        .into_iter()
        .filter(|l| {
            l["message.id"]
                .as_str()
                .and_then(|id| Uuid::parse_str(id).ok())
                .is_some_and(|id| status.contains_key(&id))
        })
        .count();
    assert_eq!(
        throttled,
        refusals.len(),
        "one throttling deferral per refusal"
    );

    // The figures, for the record.
    let mut by_cause: BTreeMap<(String, &str), (u32, BTreeSet<u32>)> = BTreeMap::new();
    for r in &refusals {
        let e = by_cause
            .entry((r.mailbox.clone(), r.cause.as_str()))
            .or_default();
        e.0 += 1;
        e.1.insert(r.at.second());
    }
    let deferrals: i32 = rows.iter().map(|r| r.4).sum();
    eprintln!(
        "real campaign slice: {SLICE_LINES} lines drained in {drained_s:.1} s; (SENT, ERROR, later) {expected:?}; \
         deferrals {deferrals}; max sent per UTC minute {max_per_minute:?}; \
         max accepted per UTC minute {max_accepted_per_minute:?}; \
         graph-sim refusals (count, seconds of the minute) {by_cause:?}; duplicates 0"
    );
    sim.shutdown().await.unwrap();
}
