//! The intake queue on a real 3-master Redis Cluster (private redis-server processes): jobs
//! pushed through the cluster client become rows, the CLI reads the queue through the seeds, a
//! failover mid-campaign loses nothing, and `mail-worker run` consumes on cluster seeds.

use std::{sync::Arc, time::Duration};

use mail_worker::{
    import::campaign::{SenderDirectory, parse_line_bytes},
    intake::{self, dead},
    ops::Metrics,
    rate_limit::RedisUrls,
};
use redis::AsyncCommands;
use uuid::Uuid;

use crate::{
    intake::{
        ALIVE, cli_on, consume_with, drained, line, python_with_redis, quick_settings,
        wait_for_stats_within,
    },
    support::{
        TestApp,
        private_redis::{PrivateRedis, free_port, owner, start_cluster},
        spawn_app, wait_until,
    },
};

/// Waits until the messages `ids` are stored (`SCHEDULED`, and no other row) and `queue` holds
/// only `dead` dead jobs (nothing waiting, in flight or done).
async fn wait_for_drain(
    app: &TestApp,
    conn: &intake::QueueConnection,
    queue: &str,
    ids: &[Uuid],
    dead: u64,
) {
    let pool = app.db.pool.clone();
    let mut seen = (-1, -1);
    // Patience, not a speed goal: after a failover the consumer works through the rest on
    // whatever the machine has left (a CI beside another took over 60 s). What it saw is
    // printed (a test's output shows only when it fails).
    wait_until(Duration::from_secs(180), "the rows", async || {
        let counts: (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE id = ANY($1)), count(*) FROM messages WHERE status = 'SCHEDULED'",
        )
        .bind(ids)
        .fetch_one(&pool)
        .await
        .unwrap();
        if counts != seen {
            seen = counts;
            eprintln!("stored: {} of ours, {} in all", counts.0, counts.1);
        }
        counts.0 == ids.len() as i64 && counts.1 == counts.0
    })
    .await;
    wait_for_stats_within(
        Duration::from_secs(30),
        conn,
        queue,
        "the dead, the queue drained",
        |s| s.dead == dead && s.scheduled == 0 && drained(s),
    )
    .await;
}

/// `mail_worker_intake_jobs_total` says `inserted` and `dead`.
fn assert_counted(metrics: &Metrics, inserted: u64, dead: u64) {
    let text = metrics.encode();
    for (outcome, n) in [("inserted", inserted), ("dead", dead)] {
        let line = format!("mail_worker_intake_jobs_total{{outcome=\"{outcome}\"}} {n}");
        assert!(text.contains(&line), "{line} in {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_a_3_master_cluster_500_pushed_jobs_become_rows_and_2_bad_ones_are_dead() {
    let nodes = start_cluster(3, 0);
    let (seeds, urls) = seeds_of(&nodes);
    let app = spawn_app().await;
    let mailbox = app.mailboxes[0].0.as_str().to_owned();
    // A queue whose slot is on another master than apalis-redis's global queue list, the key
    // its own register script writes (refused there: the case this works around).
    let global = owner(&nodes, "core:apalis:queues:list");
    let queue = (0..)
        .map(|i| format!("{{{}}}", app.keys.sub(&format!("intake{i}"))))
        .find(|q| owner(&nodes, &format!("{q}:active")) != global)
        .unwrap();

    // Half the jobs through `enqueue --via queue` (which refuses a file with a bad line before it
    // pushes anything), half and the two bad lines through the Python producer example (which
    // does not check), both with the seeds as REDIS_URL.
    let ids: Vec<Uuid> = (0..500).map(|_| Uuid::new_v4()).collect();
    let bad = [
        b"not json at all".to_vec(),
        line(Uuid::new_v4(), "nobody@contoso.example"),
    ];
    let dir = crate::support::temp_dir("mw-intake-cluster-");
    let files: Vec<std::path::PathBuf> = [(&ids[..250], &bad[..0]), (&ids[250..], &bad[..])]
        .into_iter()
        .map(|(ids, bad)| {
            let mut text = Vec::new();
            for l in ids
                .iter()
                .map(|id| line(*id, &mailbox))
                .chain(bad.iter().cloned())
            {
                text.extend(l);
                text.push(b'\n');
            }
            let file = dir.path().join(format!("{}.jsonl", Uuid::new_v4()));
            std::fs::write(&file, text).unwrap();
            file
        })
        .collect();
    let pushed = cli_on(
        &seeds,
        &["enqueue", files[0].to_str().unwrap(), "--via", "queue"],
        &queue,
        &app.db.url,
    );
    assert!(
        pushed.starts_with("250 of 250 lines pushed onto"),
        "{pushed}"
    );
    let python = std::process::Command::new(python_with_redis())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/producers/python/push.py"
        ))
        .arg(&files[1])
        .env("INTAKE_QUEUE", &queue)
        .env("REDIS_URL", &seeds)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&python.stdout),
        format!("252 lines pushed onto {queue} (0 already queued)\n"),
        "{}",
        String::from_utf8_lossy(&python.stderr)
    );

    let conn = intake::connect(&urls).await.unwrap();
    assert!(conn.is_cluster());
    let metrics = Arc::new(Metrics::new());
    let (stop, consumer) =
        consume_with(quick_settings(&queue, "it-cluster"), &app, &conn, &metrics);
    wait_for_drain(&app, &conn, &queue, &ids, 2).await;
    assert_counted(&metrics, 500, 2);

    // The operators' commands on the cluster: stats, the dead with the file import's reasons,
    // discard.
    let stats = cli_on(&seeds, &["queue", "stats"], &queue, &app.db.url);
    assert_eq!(
        stats,
        format!(
            "{queue}: waiting 0, scheduled 0, in flight 0, dead 2, done (not yet removed) 0, oldest waiting -, workers alive 1 (0 silent for over 30 s)\n"
        )
    );
    let directory = SenderDirectory {
        tenants: Default::default(),
        pools: Default::default(),
        system_mailboxes: [(mailbox.clone(), app.mailboxes[0].1)]
            .into_iter()
            .collect(),
    };
    let listed = cli_on(&seeds, &["queue", "dead"], &queue, &app.db.url);
    for l in &bad {
        let reason = parse_line_bytes(1, l, &directory).unwrap_err().reason;
        assert!(
            listed.contains(&format!("bytes): {reason}\n")),
            "{reason} in {listed}"
        );
    }
    assert_eq!(listed.lines().count(), 2, "{listed}");
    let discarded = cli_on(&seeds, &["queue", "discard", "--all"], &queue, &app.db.url);
    assert_eq!(discarded, "2 dead jobs discarded\n");
    // One URL is one node: on a node that does not serve the queue's slot the commands fail,
    // saying what to fix.
    let home = owner(&nodes, &format!("{queue}:active"));
    let other = nodes[(home + 1) % nodes.len()].url();
    let mut one = intake::connect(&other.clone().into()).await.unwrap();
    let e = dead::stats(&mut one, &queue, ALIVE)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("REDIS_URL names one node of a Redis Cluster: give it the cluster's seeds"),
        "{e}"
    );

    // Stopped, the queue leaves no key on any node, and apalis-redis's global list was never
    // written.
    stop.cancel();
    consumer.await.unwrap().unwrap();
    for node in &nodes {
        let mut n = redis::Client::open(node.url().as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let keys: Vec<String> = n.keys("*").await.unwrap();
        assert_eq!(keys, Vec::<String>::new(), "keys left on {}", node.url());
    }
}

/// The cluster's seeds as `REDIS_URL` reads them (comma-separated), and parsed.
fn seeds_of(nodes: &[PrivateRedis]) -> (String, RedisUrls) {
    let urls = RedisUrls::new(nodes.iter().map(PrivateRedis::url).collect()).unwrap();
    let text = urls
        .as_slice()
        .iter()
        .map(url::Url::as_str)
        .collect::<Vec<_>>()
        .join(",");
    (text, urls)
}

/// `redis-cli -p <port> <args>`'s output.
fn redis_cli(node: &PrivateRedis, args: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &node.port.to_string()])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The number after `<field>:` in an `INFO` answer.
fn info_field(info: &str, field: &str) -> Option<u64> {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_the_queues_master_fails_over_mid_campaign_every_job_is_stored_once() {
    let mut nodes = start_cluster(3, 1);
    let (_, urls) = seeds_of(&nodes);
    let app = spawn_app().await;
    let mailbox = app.mailboxes[0].0.as_str().to_owned();
    let queue = format!("{{{}}}", app.keys.sub("intake"));
    let conn = intake::connect(&urls).await.unwrap();
    let ids: Vec<Uuid> = (0..3_000).map(|_| Uuid::new_v4()).collect();
    let lines = ids.iter().map(|id| line(*id, &mailbox));
    assert_eq!(
        intake::push_lines(conn.clone(), &queue, lines)
            .await
            .unwrap(),
        3_000
    );
    // The master's replica has every push before the consumer starts (replication is
    // asynchronous: a push not yet copied would die with the master).
    let home = owner(&nodes, &format!("{queue}:active"));
    let offset = info_field(
        &redis_cli(&nodes[home], &["info", "replication"]),
        "master_repl_offset",
    )
    .unwrap();
    let replica = (0..nodes.len())
        .find(|&i| {
            info_field(
                &redis_cli(&nodes[i], &["info", "replication"]),
                "master_port",
            ) == Some(u64::from(nodes[home].port))
        })
        .expect("the queue's master has a replica");
    wait_until(Duration::from_secs(30), "the replica in sync", async || {
        let info = redis_cli(&nodes[replica], &["info", "replication"]);
        info_field(&info, "slave_repl_offset").is_some_and(|o| o >= offset)
    })
    .await;

    let metrics = Arc::new(Metrics::new());
    let mut settings = quick_settings(&queue, "it-failover");
    // A worker silent for 3 × 3 s is dead and its jobs go back (should the consumer's worker
    // fail with the master and start again under a new name).
    settings.heartbeat = Duration::from_secs(3);
    let (stop, consumer) = consume_with(settings, &app, &conn, &metrics);
    let pool = app.db.pool.clone();
    let stored = async || -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM messages WHERE status = 'SCHEDULED'")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    wait_until(Duration::from_secs(60), "the first 200 rows", async || {
        stored().await >= 200
    })
    .await;
    nodes[home].kill();
    let before = stored().await;
    assert!(
        before < 3_000,
        "the master died mid-campaign: {before} stored"
    );
    // Its replica takes over; the consumer follows it and every job is stored exactly once.
    wait_for_drain(&app, &conn, &queue, &ids, 0).await;
    stop.cancel();
    consumer.await.unwrap().unwrap();
    let promoted = redis_cli(&nodes[replica], &["info", "replication"]);
    assert!(promoted.contains("role:master"), "{promoted}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mail_worker_run_on_cluster_seeds_sends_the_queued_campaign_and_is_ready() {
    let nodes = start_cluster(3, 0);
    let (seeds, urls) = seeds_of(&nodes);
    let app = TestApp::paced()
        .per_minute(1_000)
        .sim_per_minute(1_000)
        .spawn()
        .await;
    let queue = format!("{{{}}}", app.keys.sub("intake"));
    let conn = intake::connect(&urls).await.unwrap();
    let ids: Vec<Uuid> = (0..20).map(|_| Uuid::new_v4()).collect();
    let lines = ids.iter().map(|id| line(*id, app.mailboxes[0].0.as_str()));
    assert_eq!(
        intake::push_lines(conn.clone(), &queue, lines)
            .await
            .unwrap(),
        20
    );
    // The daemon with the seeds as REDIS_URL: the intake queue and the limiter on the cluster.
    let listen = format!("127.0.0.1:{}", free_port());
    let mut daemon = app
        .daemon_command(&[
            ("REDIS_URL", &seeds),
            ("INTAKE_QUEUE", &queue),
            ("METRICS_LISTEN", &listen),
        ])
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(60), "20 SENT", async || {
        app.count("SENT").await == 20
    })
    .await;
    assert_eq!(app.sim.messages().len(), 20, "each sent once");
    let body = reqwest::get(format!("http://{listen}/readyz"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let ready: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ready["checks"]["intake_redis"]["ok"], true, "{body}");
    assert_eq!(ready["ready"], true, "{body}");
    wait_for_stats_within(
        Duration::from_secs(30),
        &conn,
        &queue,
        "the queue drained",
        |s| (s.waiting, s.in_flight, s.done, s.dead, s.workers) == (0, 0, 0, 0, 1),
    )
    .await;
    daemon.kill().await.unwrap();
}
