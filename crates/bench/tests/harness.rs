//! The benchmark harness (this package's library, imported by the benchmarks as `support`): its percentiles, medians, number formatting,
//! scaled clock and Redis clean-up, tested here because the benchmark targets run without
//! libtest.

use mail_worker_bench as support;

use chrono::{TimeDelta, TimeZone, Utc};
use mail_worker::clock::Clock;
use redis::AsyncCommands;
use url::Url;

/// The PostgreSQL server of the tests (`TEST_DATABASE_URL`, default the local one).
fn server_url() -> Url {
    let raw = std::env::var("TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    Url::parse(&raw).expect("TEST_DATABASE_URL is a URL")
}

/// The Redis of the tests (`TEST_REDIS_URL`, default `redis://127.0.0.1:6379`).
fn redis_url() -> Url {
    let raw = std::env::var("TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    Url::parse(&raw).expect("TEST_REDIS_URL is a URL")
}

/// A key prefix of this test's own (`test:<12 hex>`), deleted by the test that uses it.
fn redis_prefix() -> String {
    format!("test:{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
}

#[test]
fn percentiles_are_the_sample_at_the_nearest_rank() {
    let samples: Vec<u64> = (1..=100).collect();
    assert_eq!(support::percentile(&samples, 50.0), Some(50));
    assert_eq!(support::percentile(&samples, 99.0), Some(99));
    assert_eq!(support::percentile(&samples, 100.0), Some(100));
    let ten: Vec<u64> = (1..=10).map(|i| i * 10).collect();
    // ceil(0.99 × 10) = 10th sample; ceil(0.5 × 10) = 5th.
    assert_eq!(support::percentile(&ten, 99.0), Some(100));
    assert_eq!(support::percentile(&ten, 50.0), Some(50));
    assert_eq!(support::percentile(&[7], 99.0), Some(7));
    assert_eq!(support::percentile(&[], 50.0), None);
}

#[test]
fn medians_take_the_middle_or_the_mean_of_the_two_middles() {
    assert_eq!(support::median(&[3.0, 1.0, 2.0]), Some(2.0));
    assert_eq!(support::median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    assert_eq!(support::median(&[5.0]), Some(5.0));
    assert_eq!(support::median(&[]), None);
}

#[test]
fn figures_print_as_whole_numbers_with_thousands_separators() {
    assert_eq!(support::thousands(1_234_567.8), "1,234,568");
    assert_eq!(support::thousands(999.4), "999");
    assert_eq!(support::thousands(-1_000.0), "-1,000");
    assert_eq!(support::us(1_500), 1.5);
}

#[test]
fn a_scaled_clock_runs_speedup_times_faster_from_its_origins() {
    let virtual_origin = Utc.with_ymd_and_hms(2030, 1, 1, 12, 0, 0).unwrap();
    let clock = support::ScaledClock {
        real_origin: Utc::now() - TimeDelta::seconds(2),
        virtual_origin,
        speedup: 60,
    };
    // 2 real seconds (and a little more) at 60× is 120 virtual seconds (and 60× a little more).
    let shown = clock.now() - virtual_origin;
    assert!(shown >= TimeDelta::seconds(120), "{shown}");
    assert!(shown < TimeDelta::seconds(180), "{shown}");
    assert_eq!(
        clock.real_time_of(virtual_origin + TimeDelta::minutes(3)),
        clock.real_origin + TimeDelta::seconds(3)
    );
    assert_eq!(
        clock.real_wait_until(virtual_origin),
        std::time::Duration::ZERO
    );
}

#[tokio::test]
async fn unlink_prefix_deletes_its_prefix_and_nothing_else() {
    let prefix = redis_prefix();
    let neighbour = format!("{prefix}x");
    let mut conn = support::redis_connection(&redis_url()).await;
    for i in 0..1_500 {
        let _: () = conn.set(format!("{prefix}:k{i}"), i).await.unwrap();
    }
    let _: () = conn.set(format!("{neighbour}:k"), 1).await.unwrap();
    let deleted = support::unlink_prefix(&mut conn, &prefix).await.unwrap();
    assert_eq!(deleted, 1_500);
    let left: Option<u32> = conn.get(format!("{prefix}:k7")).await.unwrap();
    assert_eq!(left, None);
    let kept: Option<u32> = conn.get(format!("{neighbour}:k")).await.unwrap();
    assert_eq!(kept, Some(1));
    assert_eq!(
        support::unlink_prefix(&mut conn, &neighbour).await.unwrap(),
        1
    );
}

#[test]
fn commandstats_lines_become_calls_and_microseconds_per_command() {
    let info = "# Commandstats\r\n\
        cmdstat_evalsha:calls=4759,usec=871520,usec_per_call=183.13,rejected_calls=0,failed_calls=1\r\n\
        cmdstat_client|setinfo:calls=2,usec=3,usec_per_call=1.50,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_get:calls=9512,usec=17138,usec_per_call=1.80,rejected_calls=0,failed_calls=0\r\n";
    let stats = support::daemon::parse_commandstats(info);
    assert_eq!(stats.len(), 3);
    assert_eq!(stats["evalsha"].calls, 4_759);
    assert_eq!(stats["evalsha"].usec, 871_520);
    assert_eq!(stats["client|setinfo"].calls, 2);
    assert_eq!(stats["get"].usec, 17_138);
}

#[test]
fn command_deltas_leave_out_the_harness_reads_and_unchanged_commands() {
    use support::daemon::{CommandCount, command_delta, total_calls};
    let count = |calls, usec| CommandCount { calls, usec };
    let before = [
        ("evalsha".to_owned(), count(10, 100)),
        ("get".to_owned(), count(5, 5)),
        ("info".to_owned(), count(3, 30)),
    ]
    .into_iter()
    .collect();
    let after = [
        ("evalsha".to_owned(), count(25, 400)),
        ("get".to_owned(), count(5, 5)),
        ("info".to_owned(), count(9, 90)),
        ("hlen".to_owned(), count(2, 2)),
        ("dbsize".to_owned(), count(2, 2)),
        ("zadd".to_owned(), count(4, 8)),
    ]
    .into_iter()
    .collect();
    let delta = command_delta(&before, &after);
    assert_eq!(delta.keys().collect::<Vec<_>>(), ["evalsha", "zadd"]);
    assert_eq!(delta["evalsha"].calls, 15);
    assert_eq!(delta["evalsha"].usec, 300);
    assert_eq!(total_calls(&delta), 19);
}

#[test]
fn gnu_time_reports_give_cpu_seconds_peak_rss_and_the_exit() {
    let report = "\tCommand being timed: \"target/release/mail-worker run\"\n\
        \tUser time (seconds): 2.86\n\
        \tSystem time (seconds): 1.25\n\
        \tPercent of CPU this job got: 1%\n\
        \tMaximum resident set size (kbytes): 17292\n\
        \tVoluntary context switches: 35593\n\
        \tInvoluntary context switches: 30747\n\
        \tExit status: 0\n";
    let exit = support::daemon::parse_time_report(report);
    assert_eq!(exit.user_s, Some(2.86));
    assert_eq!(exit.system_s, Some(1.25));
    assert!((exit.cpu_s - 4.11).abs() < 1e-9, "{}", exit.cpu_s);
    assert_eq!(exit.max_rss_kib, 17_292);
    assert_eq!(exit.voluntary_switches, Some(35_593));
    assert_eq!(exit.involuntary_switches, Some(30_747));
    assert_eq!(exit.status, "exit 0");
    let killed = support::daemon::parse_time_report(
        "\tCommand terminated by signal 9\n\tUser time (seconds): 0.10\n",
    );
    assert_eq!(killed.status, "Command terminated by signal 9");
}

#[test]
fn row_write_deltas_keep_only_the_tables_written_to() {
    use support::daemon::{RowWrites, total_writes, writes_delta};
    let w = |inserted, updated, hot_updated, deleted| RowWrites {
        inserted,
        updated,
        hot_updated,
        deleted,
    };
    let before = [
        ("messages".to_owned(), w(1_000, 10, 0, 0)),
        ("system_mailboxes".to_owned(), w(1, 0, 0, 0)),
    ]
    .into_iter()
    .collect();
    let after = [
        ("messages".to_owned(), w(1_000, 160, 2, 1)),
        ("system_mailboxes".to_owned(), w(1, 0, 0, 0)),
        ("message_attachments".to_owned(), w(3, 0, 0, 0)),
    ]
    .into_iter()
    .collect();
    let delta = writes_delta(&before, &after);
    assert_eq!(
        delta.keys().collect::<Vec<_>>(),
        ["message_attachments", "messages"]
    );
    assert_eq!(delta["messages"].updated, 150);
    assert_eq!(delta["messages"].hot_updated, 2);
    let total = total_writes(&delta);
    assert_eq!(total.total(), 3 + 150 + 1);
}

#[test]
fn a_scenario_is_bounded_by_its_concurrency_over_the_latency_and_by_the_budgets() {
    let scenario = |daemons, concurrency, latency_ms| support::e2e::Scenario {
        section: "scale-out".into(),
        daemons,
        concurrency,
        scheduler_interval_ms: None,
        latency_ms,
        messages: 5_000,
        arrivals_per_s: None,
        timeout: std::time::Duration::from_secs(1),
    };
    // 128 in flight (the default), 20 ms each: 6,400 per second.
    assert_eq!(support::e2e::DEFAULT_CONCURRENCY, 128);
    assert_eq!(scenario(1, None, 20).concurrency_bound(), 6_400.0);
    assert_eq!(scenario(4, Some(16), 200).concurrency_bound(), 320.0);
    // 500 mailboxes at 100,000 a minute.
    assert_eq!(support::e2e::Scenario::budget_bound(500).round(), 833_333.0);
    assert_eq!(
        scenario(2, Some(16), 200).name(),
        "scale-out: 2 daemons, concurrency 16, +200 ms"
    );
}

#[test]
fn perf_report_lines_give_self_time_object_and_symbol() {
    let line = "     7.31%  [kernel.kallsyms]  [k] _raw_spin_unlock_irqrestore";
    let sample = support::perf::parse_report_line(line).unwrap();
    assert_eq!(sample.own, 7.31);
    assert_eq!(sample.dso, "[kernel.kallsyms]");
    assert_eq!(sample.symbol, "_raw_spin_unlock_irqrestore");
    let rust = support::perf::parse_report_line(
        "     0.55%  mail-worker        [.] <tokio::time::timeout::Timeout<T> as core::future::future::Future>::poll",
    )
    .unwrap();
    assert_eq!(rust.dso, "mail-worker");
    assert_eq!(support::perf::crate_of(&rust.dso, &rust.symbol), "tokio");
    assert!(support::perf::parse_report_line("# Samples: 3K of event 'cpu-clock'").is_none());
}

#[test]
fn symbols_belong_to_the_crate_of_their_innermost_path() {
    use support::perf::crate_of;
    assert_eq!(
        crate_of(
            "mail-worker",
            "core::ptr::drop_in_place<sqlx_core::pool::connection::PoolConnection<sqlx_postgres::database::Postgres>>"
        ),
        "sqlx_core"
    );
    assert_eq!(
        crate_of(
            "mail-worker",
            "mail_worker::store::messages::start_sending::{{closure}}"
        ),
        "mail_worker"
    );
    assert_eq!(
        crate_of("mail-worker", "alloc::fmt::format::format_inner"),
        "Rust std (alloc, fmt, collections)"
    );
    assert_eq!(crate_of("[kernel.kallsyms]", "tcp_sendmsg"), "[kernel]");
    assert_eq!(crate_of("libc.so.6", "malloc"), "libc.so.6");
}

#[test]
fn perf_samples_count_for_the_innermost_library_on_their_stack() {
    // Four samples, leaf first: a send(2) under sqlx (through tokio's TcpStream), a malloc in
    // our own code, a tokio-only stack, and a bare libc frame.
    let script = "\
\tffffffff82026060 __tcp_transmit_skb ([kernel.kallsyms])
\t          10aba4 __libc_send (inlined)
\t          b663ce tokio::net::tcp::stream::TcpStream::try_write (/x/target/release/mail-worker)
\t          5a62fc <sqlx_core::net::socket::Write<S> as core::future::future::Future>::poll (/x/target/release/mail-worker)
\t          53c6b9 mail_worker::store::messages::start_sending::{{closure}} (/x/target/release/mail-worker)
\tffffffffffffffff [unknown] ([unknown])

\t           97cc3 _int_malloc (/usr/lib/x86_64-linux-gnu/libc.so.6)
\t          c449ee <alloc::string::String as core::clone::Clone>::clone (/x/target/release/mail-worker)
\t          53c6b9 mail_worker::service::spread_ms (/x/target/release/mail-worker)

\t          b4d345 tokio::runtime::io::registration::Registration::try_io (/x/target/release/mail-worker)
\t          b4d346 tokio::runtime::scheduler::multi_thread::worker::Context::run (/x/target/release/mail-worker)

\t           97cc3 _int_free (/usr/lib/x86_64-linux-gnu/libc.so.6)
";
    let shares = support::perf::components_of_script(script).unwrap();
    let share = |name: &str| {
        shares
            .iter()
            .find(|(n, _)| n.starts_with(name))
            .map(|(_, p)| *p)
    };
    assert_eq!(shares.len(), 4, "{shares:?}");
    assert_eq!(share("PostgreSQL client"), Some(25.0));
    assert_eq!(share("mail-worker's own code"), Some(25.0));
    assert_eq!(share("tokio runtime"), Some(25.0));
    assert_eq!(share("unattributed"), Some(25.0));
    assert!(support::perf::components_of_script("\n\n").is_err());
}

#[tokio::test]
async fn a_private_redis_counts_only_the_commands_sent_to_it() {
    let mut redis = support::daemon::MeasuredRedis::start().await;
    let before = redis.commandstats().await;
    let client = redis::Client::open(redis.url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    for _ in 0..3 {
        let _: u64 = redis::cmd("INCR")
            .arg("bench-test:counter")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    assert_eq!(redis.hlen("bench-test:absent").await, 0);
    assert_eq!(redis.dbsize().await, 1);
    let delta = support::daemon::command_delta(&before, &redis.commandstats().await);
    assert_eq!(delta["incr"].calls, 3);
    assert!(!delta.contains_key("info") && !delta.contains_key("hlen"));
    assert!(redis.used_memory().await > 0);
    let pid = redis.pid();
    drop(redis);
    assert!(
        support::daemon::cpu_seconds(pid).is_none(),
        "the private redis-server {pid} still runs after drop"
    );
}

#[tokio::test]
async fn a_settled_setup_pool_has_published_its_row_writes() {
    let db = support::daemon::BenchDb::create(&server_url(), "test").await;
    let setup = db.setup_pool().await;
    let mailboxes = support::daemon::add_mailboxes(&setup, "settle", 2).await;
    let ids: Vec<_> = mailboxes.iter().map(|(_, id)| *id).collect();
    support::daemon::insert_messages(&setup, &ids, 7).await;
    db.settle(setup).await;
    let writes = db.row_writes().await;
    assert_eq!(writes["system_mailboxes"].inserted, 2);
    assert_eq!(writes["messages"].inserted, 7);
    // Round robin over the two mailboxes, oldest first.
    let owners: Vec<uuid::Uuid> =
        sqlx::query_scalar("SELECT system_mailbox_id FROM messages ORDER BY scheduled_on")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(owners[..4], [ids[0], ids[1], ids[0], ids[1]]);
    assert_eq!(db.status_counts().await["SCHEDULED"], 7);
    db.drop().await;
}
