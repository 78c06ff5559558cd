//! A limiter that starts while its only Redis Cluster seed is dead (issue 46): it keeps
//! looking for its cluster and counts again once the seed answers.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use mail_worker::{
    domain::MailboxAddress,
    rate_limit::{Algorithm, Decision, MailRateLimiter, RateLimiter},
};
use uuid::Uuid;

use crate::{
    budgets::{ask_in, at, config, limits},
    support::{logs::Capture, private_redis::start_cluster, wait_until},
};

/// Whether one decision for a fresh mailbox (so pacing never denies it) was counted in Redis.
async fn counted(limiter: &MailRateLimiter, i: usize) -> bool {
    let mailbox = MailboxAddress::parse(&format!("events{i}@contoso.example")).unwrap();
    let ask = ask_in(
        "contoso.example",
        &mailbox,
        Uuid::new_v4(),
        limits(30, 9_000),
    );
    matches!(
        limiter.check_and_reserve(&ask, at(12, 0, 0)).await.unwrap(),
        Decision::Allowed(r) if r.is_counted()
    )
}

#[tokio::test]
async fn a_limiter_started_while_its_single_seed_is_dead_counts_within_10_s_of_the_seed_answering()
{
    let (capture, _guard) = Capture::install();
    let mut nodes = start_cluster(3, 1);
    // The seed is a replica: the cluster serves every slot while it is down.
    let seed = nodes
        .iter()
        .position(|n| {
            let out = std::process::Command::new("redis-cli")
                .args(["-p", &n.port.to_string(), "role"])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).starts_with("master")
        })
        .expect("a replica");
    nodes[seed].kill();
    let mut c = config(&nodes[seed].url(), "rl", Algorithm::Paced, 1);
    c.redis_timeout = Duration::from_millis(250);
    let limiter = Arc::new(MailRateLimiter::new(&c).unwrap());
    let mut i = 0;
    for _ in 0..10 {
        i += 1;
        assert!(!counted(&limiter, i).await, "the seed is dead: fail-open");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    nodes[seed].spawn();
    let back = Instant::now();
    loop {
        i += 1;
        if counted(&limiter, i).await {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(10),
            "not counted within 10 s of the seed answering ({i} calls)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "counted {:.1} s after the seed answered",
        back.elapsed().as_secs_f64()
    );
    assert!(limiter.is_cluster().await, "following the cluster");
    // One seed of a cluster is a start-up warning naming the fix.
    let port = nodes[seed].port;
    wait_until(
        Duration::from_secs(35),
        "the one-seed warning",
        async || !capture.with_event("config.warning").is_empty(),
    )
    .await;
    let warnings = capture.with_event("config.warning");
    assert_eq!(warnings.len(), 1, "once");
    let text = warnings[0].field("message").to_owned();
    assert!(
        text.contains(&format!("one node of a Redis Cluster (127.0.0.1:{port})"))
            && text.contains("list the cluster's masters comma-separated")
            && text.contains("DNS name that resolves to all of them"),
        "{text}"
    );
}

#[tokio::test]
async fn a_limiter_on_a_standalone_redis_says_nothing_of_seeds() {
    let (capture, _guard) = Capture::install();
    let keys = crate::support::TestKeys::new();
    let standalone = config(
        &crate::support::redis_url(),
        &keys.prefix,
        Algorithm::Paced,
        1,
    );
    let limiter = MailRateLimiter::new(&standalone).unwrap();
    assert!(counted(&limiter, 0).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(capture.with_event("config.warning").is_empty());
}
