//! The URL settings: https only except to loopback, TLS Redis, cluster seeds, and their
//! passwords never shown.

use super::*;

/// The provider base URLs (one rule for all three).
const PROVIDER_URLS: [&str; 3] = [
    "GRAPH_API_BASE_URL",
    "GRAPH_LOGIN_BASE_URL",
    "SENDGRID_API_BASE_URL",
];

#[test]
fn provider_urls_must_be_https_except_to_loopback() {
    for var in PROVIDER_URLS {
        for bad in [
            "http://graph.microsoft.com/v1.0",
            "http://10.0.0.5:8080",
            "http://localhost.evil.example",
            "http://[::2]:80",
            "ftp://127.0.0.1",
        ] {
            let err = parse(&[(var, bad)]).unwrap_err();
            assert_eq!(err.var, var, "{bad}");
            assert!(err.to_string().starts_with(var), "{err}");
        }
        let err = parse(&[(var, "http://graph.example")]).unwrap_err();
        assert!(err.problem.contains("https://"), "{err}");
        for good in [
            "https://graph.example",
            "http://127.0.0.1:9",
            "http://127.8.9.10",
            "http://[::1]:8080",
            "http://localhost:3000",
            "http://LOCALHOST",
            "http://sim.localhost:1",
        ] {
            assert!(parse(&[(var, good)]).is_ok(), "{var}={good}");
        }
        // A stand-in on a private network, named explicitly; nothing else gets through.
        let named = [("PROVIDER_CLEARTEXT_HOSTS", "graph-sim, other")];
        assert!(parse(&[named[0], (var, "http://graph-sim:8025/v1.0")]).is_ok());
        assert!(parse(&[named[0], (var, "http://graph-sim.example:8025")]).is_err());
        assert!(parse(&[(var, "http://graph-sim:8025")]).is_err());
    }
}

#[test]
fn redacted_lines_hide_url_passwords() {
    let c = parse(&[
        ("DATABASE_URL", "postgres://app:hunter2@db/x"),
        ("REDIS_URL", "redis://:s3cret@cache:6379"),
    ])
    .unwrap();
    let text = c.redacted_lines().join("\n");
    assert!(
        !text.contains("hunter2") && !text.contains("s3cret"),
        "{text}"
    );
    assert!(
        text.contains("DATABASE_URL=postgres://app:***@db/x"),
        "{text}"
    );
    assert!(!format!("{c:?}").contains("hunter2"));
    let err = parse(&[("DATABASE_URL", "mysql://app:hunter2@db/x")]).unwrap_err();
    assert!(!err.to_string().contains("hunter2"), "{err}");
    let err = parse(&[("DATABASE_URL", "postgres://app:hunter2@db:54x2/mail")]).unwrap_err();
    assert_eq!(err.value, "postgres://***@db:54x2/mail");
    // Without `//` a URL has no host: refused, its secret never echoed (found by a new user).
    for (var, bad) in [
        ("MAIL_RATE_LIMIT_REDIS_URL", "redis:/:hunter2@a:1"),
        ("REDIS_URL", "redis::hunter2@a:1"),
        ("DATABASE_URL", "postgres:/u:hunter2@h/db"),
        ("REDIS_URL", "redis//:hunter2@a:1"),
    ] {
        let err = parse(&[(var, bad)]).unwrap_err();
        assert_eq!(err.var, var);
        assert!(!err.to_string().contains("hunter2"), "{err}");
        assert!(!err.value.contains("hunter2"), "{err:?}");
    }
    let c = parse(&[("DATABASE_URL", "postgres://db/x?user=app&password=hunter2")]).unwrap();
    assert!(!c.redacted_lines().join("\n").contains("hunter2"));
    let c = parse(&[("REDIS_URL", "rediss://:s3cret@cache:6380")]).unwrap();
    assert!(!c.redacted_lines().join("\n").contains("s3cret"));
}

#[test]
fn provider_urls_with_credentials_a_query_or_a_fragment_are_refused_without_showing_them() {
    for var in PROVIDER_URLS {
        for raw in [
            "https://gw:hunter2@graph.example/v1.0",
            "https://hunter2@graph.example/v1.0",
            "https://graph.example/v1.0?token=hunter2",
            "https://graph.example/v1.0#hunter2",
        ] {
            let err = parse(&[(var, raw)]).unwrap_err();
            assert_eq!(err.var, var, "{raw}");
            assert!(err.problem.contains("base URL alone"), "{err}");
            assert_eq!(
                err.value,
                "https://graph.example/v1.0 (its user, password, query or #fragment not shown)",
                "{raw}"
            );
            assert!(!err.to_string().contains("hunter2"), "{err}");
        }
    }
}

#[test]
fn tls_redis_urls_are_accepted_for_the_queue_and_the_limiter() {
    let c = parse(&[
        ("REDIS_URL", "rediss://queue.example:6380"),
        (
            "MAIL_RATE_LIMIT_REDIS_URL",
            "rediss://limiter.example:6380/0",
        ),
    ])
    .unwrap();
    assert_eq!(c.redis_url.first().scheme(), "rediss");
    assert_eq!(
        c.rate_limit.redis_url.first().as_str(),
        "rediss://limiter.example:6380/0"
    );
    // The limiter inherits the queue's TLS URL when it has none of its own.
    let c = parse(&[("REDIS_URL", "rediss://queue.example:6380")]).unwrap();
    assert_eq!(c.rate_limit.redis_url.first().scheme(), "rediss");
    // And the redis crate can open it (TLS compiled in).
    assert!(redis::Client::open(c.rate_limit.redis_url.first().as_str()).is_ok());
}

#[test]
fn the_limiters_redis_may_be_a_list_of_cluster_seeds_each_checked_and_redacted() {
    let seeds = "redis://:pw@a:7000, redis://:pw@b:7001,redis://:pw@c:7002";
    let c = parse(&[("MAIL_RATE_LIMIT_REDIS_URL", seeds)]).unwrap();
    let hosts: Vec<_> = c
        .rate_limit
        .redis_url
        .as_slice()
        .iter()
        .map(|u| u.host_str().unwrap())
        .collect();
    assert_eq!(hosts, ["a", "b", "c"]);
    assert!(c.rate_limit.redis_url.is_cluster());
    assert!(c.redacted_lines().contains(
        &"MAIL_RATE_LIMIT_REDIS_URL=redis://:***@a:7000,redis://:***@b:7001,redis://:***@c:7002"
            .to_owned()
    ));
    // REDIS_URL, when it is the limiter's, too; the intake queue on it needs a hash tag.
    let cluster = ("REDIS_URL", "redis://a:7000,redis://b:7001");
    let c = parse(&[cluster]).unwrap();
    assert_eq!(
        c.intake.queue.as_deref(),
        Some("{mail-worker:campaign-sends}")
    );
    for name in ["mail-worker:q", "q{}", "q}{", "{q"] {
        let e = parse(&[cluster, ("INTAKE_QUEUE", name)]).unwrap_err();
        assert_eq!(e.var, "INTAKE_QUEUE");
        assert!(e.problem.contains("hash tag (braces"), "{}", e.problem);
    }
    assert!(parse(&[cluster, ("INTAKE_QUEUE", "mail-worker:{q}")]).is_ok());
    assert!(
        parse(&[("INTAKE_QUEUE", "mail-worker:q")]).is_ok(),
        "one node: any name"
    );
    let c = parse(&[cluster, ("INTAKE_QUEUE", "off")]).unwrap();
    assert_eq!(c.intake.queue, None);
    // `off` in any case, as the other settings read it: never a queue named "OFF".
    for off in ["OFF", "Off", " off "] {
        let c = parse(&[("INTAKE_QUEUE", off), ("MAIL_BUDGET_ALERT_PERCENT", off)]).unwrap();
        assert_eq!(c.intake.queue, None, "INTAKE_QUEUE={off:?}");
        assert_eq!(
            c.budget_alert_percent, None,
            "MAIL_BUDGET_ALERT_PERCENT={off:?}"
        );
    }
    assert_eq!(c.rate_limit.redis_url.as_slice().len(), 2);
    assert!(!c.redis_url.redacted().contains("***"));
    for (value, needle) in [
        (
            "redis://a:7000,http://b:7001",
            "list element 2 must use one of the schemes",
        ),
        ("redis://a:7000,,redis://c:7002", "list element 2 is empty"),
        ("redis://a:7000,not a url", "list element 2 is not a URL"),
        (
            "redis://:pw@a:7000,redis://:other@b:7001",
            "list element 2 must use the first",
        ),
        (
            "redis://a:7000,rediss://b:7001",
            "list element 2 must use the first",
        ),
    ] {
        let err = parse(&[("MAIL_RATE_LIMIT_REDIS_URL", value)]).unwrap_err();
        assert_eq!(err.var, "MAIL_RATE_LIMIT_REDIS_URL");
        let text = err.to_string();
        assert!(text.contains(needle), "{value}: {text}");
        assert!(!text.contains("other"), "the password is redacted: {text}");
    }
}

#[test]
fn a_password_with_an_unencoded_hash_slash_or_question_mark_says_to_encode_it() {
    for raw in [
        "postgres://app:pa#hunter2@db.example/mail",
        "postgres://app:12/hunter2@db.example/mail",
        "redis://:ab?hunter2@cache.example:6379",
    ] {
        let var = if raw.starts_with("redis") {
            "REDIS_URL"
        } else {
            "DATABASE_URL"
        };
        let err = parse(&[(var, raw)]).unwrap_err();
        assert_eq!(err.var, var);
        assert!(
            err.problem.contains("percent-encoded (%23, %2F, %3F, %40)"),
            "{raw}: {err}"
        );
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
    let encoded = parse(&[(
        "DATABASE_URL",
        "postgres://app:pa%23hunter2@db.example/mail",
    )]);
    assert_eq!(encoded.unwrap().database_url.host_str(), Some("db.example"));
}
