//! The configuration's tests: defaults, every variable read, bad values named; the URLs'
//! rules and their redaction in `urls.rs`. Each test reads the whole table through
//! [`Config::from_lookup`].

use super::*;
use std::collections::HashMap;

mod urls;

fn parse(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::from_lookup(|k| map.get(k).cloned())
}

/// The limiter's knobs: per minute, recipients per day, reserved percent, Redis timeout, key
/// prefix.
fn limiter_knobs(c: &Config) -> (u32, u32, u8, Duration, &str) {
    let r = &c.rate_limit;
    (
        r.defaults.per_minute.get(),
        r.defaults.recipients_per_day.get(),
        r.defaults.reserved_percent,
        r.redis_timeout,
        &r.key_prefix,
    )
}

/// The worker's knobs: metrics refresh, concurrency, database connections, scheduler
/// interval and batch size, send lease.
fn worker_knobs(c: &Config) -> (Duration, u32, u32, Duration, u32, Duration) {
    (
        c.metrics_refresh,
        c.worker.concurrency.get(),
        c.database_max_connections.get(),
        c.worker.scheduler_interval,
        c.worker.scheduler_batch_size.get(),
        c.worker.send_lease,
    )
}

#[test]
fn defaults_match_the_documented_table() {
    let c = parse(&[]).unwrap();
    assert_eq!(
        c.database_url.as_str(),
        "postgres://postgres@127.0.0.1:5432/mail_worker"
    );
    assert_eq!(c.redis_url.first().as_str(), "redis://127.0.0.1:6379");
    assert_eq!(c.rate_limit.redis_url, c.redis_url);
    assert_eq!(
        limiter_knobs(&c),
        (25, 9000, 20, Duration::from_millis(250), "mail:rl")
    );
    assert_eq!(c.defer_spread_max, Duration::from_millis(30_000));
    assert_eq!(c.max_attempts, None);
    assert_eq!(c.retry_for, Duration::from_secs(24 * 3600));
    assert_eq!(c.metrics_listen, Some("0.0.0.0:9184".parse().unwrap()));
    assert_eq!(
        worker_knobs(&c),
        (
            Duration::from_secs(15),
            128,
            10,
            Duration::from_millis(250),
            100,
            Duration::from_secs(600)
        )
    );
    assert_eq!(
        c.graph.api_base_url.as_str(),
        "https://graph.microsoft.com/v1.0"
    );
    assert_eq!(
        c.graph.login_base_url.as_str(),
        "https://login.microsoftonline.com/"
    );
    assert!(c.graph.save_to_sent_items);
    assert_eq!(
        c.sendgrid_api_base_url.as_str(),
        "https://api.sendgrid.com/"
    );
    assert_eq!(c.http_timeout, Duration::from_secs(30));
    assert_eq!(c.shutdown_grace, Duration::from_secs(30));
    assert_eq!(c.log_format, LogFormat::Json);
    assert_eq!(c.log_filter, "info");
    assert_eq!(c.admin.listen, Some("127.0.0.1:9185".parse().unwrap()));
    assert_eq!(c.admin.token, None);
    assert!(!c.admin.cookie_secure);
}

#[test]
fn the_admin_variables_are_read_and_the_token_is_never_printed() {
    let c = parse(&[
        ("ADMIN_LISTEN", "0.0.0.0:9999"),
        ("ADMIN_TOKEN", "a-literal-token-hunter2"),
        ("ADMIN_COOKIE_SECURE", "true"),
    ])
    .unwrap();
    assert_eq!(c.admin.listen, Some("0.0.0.0:9999".parse().unwrap()));
    assert!(c.admin.cookie_secure);
    let text = c.redacted_lines().join("\n");
    assert!(text.contains("ADMIN_TOKEN=<literal>"), "{text}");
    assert!(!text.contains("hunter2") && !format!("{c:?}").contains("hunter2"));
    let c = parse(&[
        ("ADMIN_LISTEN", "off"),
        ("ADMIN_TOKEN", "file:/run/secrets/admin"),
    ])
    .unwrap();
    assert_eq!(c.admin.listen, None);
    let c = parse(&[("ADMIN_LISTEN", "localhost:9185")]).unwrap();
    assert_eq!(c.admin.listen, Some("127.0.0.1:9185".parse().unwrap()));
    let c = parse(&[
        ("ADMIN_LISTEN", "off"),
        ("ADMIN_TOKEN", "file:/run/secrets/admin"),
    ])
    .unwrap();
    assert!(
        c.redacted_lines()
            .contains(&"ADMIN_TOKEN=file:/run/secrets/admin".to_owned())
    );
    for (var, value) in [
        ("ADMIN_LISTEN", "9185"),
        ("ADMIN_COOKIE_SECURE", "sometimes"),
    ] {
        let err = parse(&[(var, value)]).unwrap_err();
        assert_eq!(err.var, var, "{err}");
    }
}

#[test]
fn every_variable_is_read() {
    let c = parse(&[
        ("DATABASE_URL", "postgres://u:pw@db:5433/x"),
        ("REDIS_URL", "redis://q:6380"),
        ("MAIL_RATE_LIMIT_REDIS_URL", "redis://rl:6381"),
        ("MAIL_RATE_LIMIT_PER_MINUTE", "10"),
        ("MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY", "500"),
        ("MAIL_RATE_LIMIT_RESERVED_PERCENT", "0"),
        ("MAIL_RATE_LIMIT_REDIS_TIMEOUT", "100ms"),
        ("MAIL_RATE_LIMIT_KEY_PREFIX", "t:rl"),
        ("MAIL_DEFER_SPREAD_MAX", "5s"),
        ("MAIL_MAX_ATTEMPTS", "3"),
        ("MAIL_RETRY_FOR", "1m"),
        ("METRICS_LISTEN", "off"),
        ("METRICS_REFRESH", "500ms"),
        ("WORKER_CONCURRENCY", "64"),
        ("DATABASE_MAX_CONNECTIONS", "7"),
        ("SCHEDULER_INTERVAL", "400ms"),
        ("SCHEDULER_BATCH_SIZE", "20"),
        ("SEND_LEASE", "1m"),
        ("GRAPH_API_BASE_URL", "http://127.0.0.1:9/v1.0"),
        ("GRAPH_LOGIN_BASE_URL", "http://127.0.0.1:9"),
        ("GRAPH_SAVE_TO_SENT_ITEMS", "false"),
        ("SENDGRID_API_BASE_URL", "http://127.0.0.1:8"),
        ("HTTP_TIMEOUT", "5s"),
        ("SHUTDOWN_GRACE", "2s"),
        ("LOG_FORMAT", "pretty"),
        ("RUST_LOG", "debug"),
    ])
    .unwrap();
    assert_eq!(c.database_url.port(), Some(5433));
    assert_eq!(c.redis_url.first().host_str(), Some("q"));
    assert_eq!(c.rate_limit.redis_url.first().host_str(), Some("rl"));
    assert_eq!(
        limiter_knobs(&c),
        (10, 500, 0, Duration::from_millis(100), "t:rl")
    );
    assert_eq!(c.defer_spread_max, Duration::from_millis(5000));
    assert_eq!(c.max_attempts.map(NonZeroU32::get), Some(3));
    assert_eq!(c.retry_for, Duration::from_secs(60));
    assert_eq!(c.metrics_listen, None);
    assert_eq!(
        worker_knobs(&c),
        (
            Duration::from_millis(500),
            64,
            7,
            Duration::from_millis(400),
            20,
            Duration::from_secs(60)
        )
    );
    assert_eq!(c.graph.api_base_url.port(), Some(9));
    assert!(!c.graph.save_to_sent_items);
    assert_eq!(c.sendgrid_api_base_url.port(), Some(8));
    assert_eq!(c.http_timeout, Duration::from_secs(5));
    assert_eq!(c.shutdown_grace, Duration::from_secs(2));
    assert_eq!(c.log_format, LogFormat::Pretty);
    assert_eq!(c.log_filter, "debug");
}

#[test]
fn bad_values_name_the_variable() {
    for (var, value, needle) in [
        ("MAIL_RATE_LIMIT_PER_MINUTE", "abc", "whole number"),
        ("MAIL_RATE_LIMIT_PER_MINUTE", "0", "whole number"),
        ("MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY", "-5", "whole number"),
        ("MAIL_RATE_LIMIT_RESERVED_PERCENT", "91", "from 0 to 90"),
        ("MAIL_RATE_LIMIT_RESERVED_PERCENT", "20%", "from 0 to 90"),
        ("MAIL_RATE_LIMIT_RESERVED_PERCENT", "-1", "from 0 to 90"),
        ("WORKER_CONCURRENCY", "1.5", "whole number"),
        ("SCHEDULER_INTERVAL_MS", "0", "not 0"),
        ("HTTP_TIMEOUT_MS", "soon", "milliseconds"),
        ("GRAPH_SAVE_TO_SENT_ITEMS", "maybe", "true"),
        ("GRAPH_SAVE_TO_SENT_ITEMS", "yes", "`true` or `false`"),
        ("GRAPH_SAVE_TO_SENT_ITEMS", "1", "`true` or `false`"),
        ("MAIL_RATE_LIMIT_REDIS_URL", "http://x", "schemes"),
        ("LOG_FORMAT", "xml", "json"),
        ("REDIS_URL", "http://x", "schemes"),
        ("DATABASE_URL", "not a url", "not a URL"),
        ("METRICS_LISTEN", "9184", "an IP address and port"),
        (
            "ADMIN_LISTEN",
            "admin.internal:9185",
            "host names are not resolved",
        ),
        ("MAIL_RETRY_FOR", "a day", "unit"),
        ("MAIL_RETRY_FOR", "3600", "unit"),
        ("SEND_LEASE", "1s", "HTTP_TIMEOUT"),
        ("SEND_LEASE", "50s", "twice HTTP_TIMEOUT"),
    ] {
        let err = parse(&[(var, value)]).unwrap_err();
        assert_eq!(err.var, var);
        let text = err.to_string();
        assert!(text.starts_with(var), "{text}");
        assert!(text.contains(needle), "{var}={value}: {text}");
    }
}

#[test]
fn save_to_sent_items_takes_only_true_or_false() {
    assert!(
        parse(&[("GRAPH_SAVE_TO_SENT_ITEMS", "true")])
            .unwrap()
            .graph
            .save_to_sent_items
    );
    assert!(
        !parse(&[("GRAPH_SAVE_TO_SENT_ITEMS", " FALSE ")])
            .unwrap()
            .graph
            .save_to_sent_items
    );
    for bad in ["yes", "no", "1", "0", "on"] {
        let err = parse(&[("GRAPH_SAVE_TO_SENT_ITEMS", bad)]).unwrap_err();
        assert_eq!(err.var, "GRAPH_SAVE_TO_SENT_ITEMS", "{bad}");
    }
}

#[test]
fn a_send_lease_under_twice_the_http_timeout_blames_the_variable_that_was_set() {
    let err = parse(&[("SEND_LEASE", "59999ms")]).unwrap_err();
    assert_eq!(err.var, "SEND_LEASE");
    assert_eq!(err.value, "59999ms");
    assert!(
        err.problem.contains("at least twice HTTP_TIMEOUT (30s)"),
        "{err}"
    );
    assert!(parse(&[("SEND_LEASE", "1m")]).is_ok());
    // SEND_LEASE left at its default, HTTP_TIMEOUT raised past half of it.
    let err = parse(&[("HTTP_TIMEOUT", "300001ms")]).unwrap_err();
    assert_eq!(err.var, "HTTP_TIMEOUT");
    assert_eq!(err.value, "300001ms");
    assert!(err.problem.contains("SEND_LEASE (10m"), "{err}");
    assert!(parse(&[("HTTP_TIMEOUT", "5m")]).is_ok());
    // Both set: the lease is the one to raise.
    let err = parse(&[("HTTP_TIMEOUT", "700s"), ("SEND_LEASE", "1399999ms")]).unwrap_err();
    assert_eq!(err.var, "SEND_LEASE");
    assert!(parse(&[("HTTP_TIMEOUT", "700s"), ("SEND_LEASE", "1400s")]).is_ok());
}

#[test]
fn default_limits_above_exchange_online_are_warned_about() {
    assert_eq!(parse(&[]).unwrap().warnings(), Vec::<String>::new());
    let at_exchange = parse(&[
        ("MAIL_RATE_LIMIT_PER_MINUTE", "30"),
        ("MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY", "10000"),
    ])
    .unwrap();
    assert!(at_exchange.warnings().is_empty());
    let above = parse(&[
        ("MAIL_RATE_LIMIT_PER_MINUTE", "31"),
        ("MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY", "10001"),
    ])
    .unwrap();
    let warnings = above.warnings();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].starts_with("MAIL_RATE_LIMIT_PER_MINUTE=31 "),
        "{warnings:?}"
    );
    assert!(
        warnings[1].starts_with("MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY=10001 "),
        "{warnings:?}"
    );
    for w in &warnings {
        assert!(w.contains("https://learn.microsoft.com/"), "{w}");
    }
    let only_day = parse(&[("MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY", "20000")]).unwrap();
    assert_eq!(only_day.warnings().len(), 1);
}

#[test]
fn retention_is_a_duration_of_at_least_a_day_or_off() {
    for huge in [
        "99999999999d",
        "36501d",
        "9999999999999h",
        "99999999999999999999999d",
    ] {
        let e = parse(&[("MAIL_RETENTION", huge)]).unwrap_err();
        assert_eq!(e.var, "MAIL_RETENTION");
        assert!(e.to_string().contains("at most 36500d"), "{e}");
    }
    assert_eq!(
        parse(&[("MAIL_RETENTION", "36500d")]).unwrap().retention,
        Some(Duration::from_secs(36_500 * 86_400))
    );
    let day = Duration::from_secs(86_400);
    assert_eq!(parse(&[]).unwrap().retention, Some(30 * day));
    assert_eq!(
        parse(&[("MAIL_RETENTION", "30D")]).unwrap().retention,
        Some(30 * day)
    );
    let e = parse(&[("MAIL_RETENTION", "1M")]).unwrap_err();
    assert!(e.to_string().contains("ms, s, m, h or d"), "{e}");
    assert_eq!(
        parse(&[("MAIL_RETENTION", "45d")]).unwrap().retention,
        Some(45 * day)
    );
    assert_eq!(
        parse(&[("MAIL_RETENTION", "24h")]).unwrap().retention,
        Some(day)
    );
    for off in ["off", "OFF", " Off "] {
        assert_eq!(parse(&[("MAIL_RETENTION", off)]).unwrap().retention, None);
    }
    for (value, problem) in [
        ("23h", "must be at least 24h"),
        ("90m", "must be at least 24h"),
        ("30", "unit"),
        ("never", "unit"),
    ] {
        let e = parse(&[("MAIL_RETENTION", value)]).unwrap_err();
        assert_eq!(e.var, "MAIL_RETENTION");
        assert!(e.problem.contains(problem), "{value}: {e}");
    }
}

#[test]
fn an_empty_intake_queue_or_key_prefix_is_an_error_naming_it_not_the_default() {
    for empty in ["", "  "] {
        let e = parse(&[("MAIL_RATE_LIMIT_KEY_PREFIX", empty)]).unwrap_err();
        assert_eq!(e.var, "MAIL_RATE_LIMIT_KEY_PREFIX");
        assert!(e.to_string().contains("empty prefix is refused"), "{e}");
        let e = parse(&[("INTAKE_QUEUE", empty)]).unwrap_err();
        assert_eq!(e.var, "INTAKE_QUEUE");
        assert!(e.to_string().contains("is set but empty"), "{e}");
        assert!(e.to_string().contains("`off`"), "{e}");
    }
}
