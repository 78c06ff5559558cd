//! Through the daemon: two in-process replicas against graph-sim, another mailbox behind a backlog, the send history.

#[allow(unused_imports)]
use super::*;

/// Runs `replicas` daemons (`worker::run`, as `mail-worker run` does) on `app`'s config with
/// `concurrency` workers each until `done` holds (or `within` passes), then stops them.
pub(crate) async fn run_daemons(
    app: &crate::support::TestApp,
    replicas: usize,
    concurrency: u32,
    within: Duration,
    done: impl AsyncFnMut() -> bool,
) {
    use mail_worker::clock::{Clock, SystemClock};
    let clocks = (0..replicas)
        .map(|_| Arc::new(SystemClock) as Arc<dyn Clock>)
        .collect();
    run_daemons_on(app, clocks, concurrency, within, done).await;
}

/// [`run_daemons`], one replica per clock in `clocks` (a replica's wall clock).
pub(crate) async fn run_daemons_on(
    app: &crate::support::TestApp,
    clocks: Vec<Arc<dyn mail_worker::clock::Clock>>,
    concurrency: u32,
    within: Duration,
    done: impl AsyncFnMut() -> bool,
) {
    use mail_worker::{daemon, store, worker};
    let mut config = app.config.clone();
    config.worker.concurrency = NonZeroU32::new(concurrency).unwrap();
    config.worker.scheduler_interval = Duration::from_millis(200);
    config.shutdown_grace = Duration::from_secs(10);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut runs = Vec::new();
    for clock in clocks {
        let pool = store::connect(&config.database_url, config.database_max_connections.get())
            .await
            .unwrap();
        let service = daemon::build_service(&config, pool.clone(), clock).unwrap();
        let settings = daemon::daemon_settings(&config);
        let mut stop = stop_rx.clone();
        runs.push(worker::run(pool, service, settings, async move {
            let _ = stop.wait_for(|s| *s).await;
        }));
    }
    let watch = async {
        crate::support::wait_until(within, "the daemons finished the work", done).await;
        stop_tx.send(true).unwrap();
    };
    tokio::join!(futures::future::join_all(runs), watch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_of_8_workers_never_put_more_than_3_requests_in_flight_on_a_mailbox() {
    let mut peaks = HashMap::new();
    for algorithm in [Algorithm::Paced, Algorithm::FixedWindow] {
        let app = crate::support::TestApp::builder()
            .per_minute(6_000)
            .sim_per_minute(6_000)
            .sim_concurrency(64)
            .algorithm(algorithm)
            .sim_latency(graph_sim::Latency::Fixed(300))
            .spawn()
            .await;
        app.insert(0, 40, "SCHEDULED").await;
        // The cap, not the speed, is under test: a loaded machine's slow requests make the
        // mailbox look stuck (no lease taken for a second), and its waits then run to a lease's
        // expiry (docs/decisions/0002-in-flight-leases.md).
        run_daemons(&app, 2, 8, Duration::from_secs(180), async || {
            app.count("SENT").await == 40
        })
        .await;
        let stats = app.sim.stats();
        let mailbox = &stats.mailboxes[0];
        assert_eq!(mailbox.accepted, 40, "{algorithm}");
        assert_eq!(
            mailbox.refused.total(),
            0,
            "{algorithm}: {:?}",
            mailbox.refused
        );
        peaks.insert(algorithm, mailbox.max_concurrent);
    }
    assert!(peaks[&Algorithm::Paced] <= 3, "{peaks:?}");
    assert!(
        peaks[&Algorithm::FixedWindow] > 3,
        "without leases 16 workers crowd the mailbox: {peaks:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_mailboxs_mail_goes_out_within_seconds_behind_a_1000_message_backlog() {
    let app = crate::support::TestApp::paced()
        .mailboxes(2)
        .per_minute(120)
        .spawn()
        .await;
    app.insert(0, 1_000, "SCHEDULED").await;
    let b = app.insert(1, 5, "SCHEDULED").await;
    let due = Utc::now();
    let mut b_done = None;
    run_daemons(&app, 1, 16, Duration::from_secs(30), async || {
        let (sent,): (i64,) =
            sqlx::query_as("SELECT count(*) FROM messages WHERE id = ANY($1) AND status = 'SENT'")
                .bind(&b)
                .fetch_one(&app.db.pool)
                .await
                .unwrap();
        if sent == 5 && b_done.is_none() {
            b_done = Some(Utc::now());
        }
        sent == 5
    })
    .await;
    let waited = (b_done.unwrap() - due).num_milliseconds();
    assert!(
        waited < 5_000,
        "B's 5 messages took {waited} ms behind A's backlog"
    );
    // A's backlog was booked once each, not re-checked: no message denied twice.
    let (most,): (i32,) = sqlx::query_as("SELECT max(deferrals) FROM messages")
        .fetch_one(&app.db.pool)
        .await
        .unwrap();
    assert!(most <= 1, "a message was denied {most} times");
    assert_eq!(app.sim_refused(), 0);
}

#[tokio::test]
async fn the_send_history_is_what_postgresql_knows_was_sent_in_the_last_24_h() {
    use mail_worker::store::history::PgSendHistory;
    let app = crate::support::spawn_app().await;
    let ids = app.insert(0, 4, "SENT").await;
    // Two sent 1 h ago (one of them to 3 recipients), one 25 h ago, one never (still ERROR).
    for (id, ago_h, extra_cc) in [(ids[0], 1, 2), (ids[1], 1, 0), (ids[2], 25, 0)] {
        sqlx::query(
            "UPDATE messages SET sent_at = now() - make_interval(hours => $2), \
             cc_recipients = (SELECT coalesce(jsonb_agg(jsonb_build_object('address', 'cc' || g || '@example.org')), '[]') \
                              FROM generate_series(1, $3) g) WHERE id = $1",
        )
        .bind(id)
        .bind(ago_h)
        .bind(extra_cc)
        .execute(&app.db.pool)
        .await
        .unwrap();
    }
    sqlx::query("UPDATE messages SET status = 'ERROR', sent_at = NULL WHERE id = $1")
        .bind(ids[3])
        .execute(&app.db.pool)
        .await
        .unwrap();
    let history = PgSendHistory::new(app.db.pool.clone());
    let mailbox = &app.mailboxes[0].0;
    let mut sent = history
        .sent_since(mailbox, Utc::now() - chrono::Duration::hours(24))
        .await
        .unwrap();
    sent.sort_by_key(|r| r.recipients);
    assert_eq!(
        sent.iter().map(|r| r.recipients).collect::<Vec<_>>(),
        [1, 3]
    );
    // The fail-open read: the same, summed in one row.
    assert_eq!(
        history
            .recipients_since(mailbox, Utc::now() - chrono::Duration::hours(24))
            .await
            .unwrap(),
        4
    );
    let other = MailboxAddress::parse("nobody@contoso.example").unwrap();
    assert_eq!(
        history
            .recipients_since(&other, Utc::now() - chrono::Duration::hours(24))
            .await
            .unwrap(),
        0
    );
    assert!(
        history
            .sent_since(&other, Utc::now() - chrono::Duration::hours(24))
            .await
            .unwrap()
            .is_empty()
    );
}
