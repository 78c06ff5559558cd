use super::*;

#[test]
fn names_follow_the_contract() {
    let m = Metrics::new();
    m.send(PROVIDER_GRAPH, OutcomeLabel::Sent);
    m.send(PROVIDER_GRAPH, OutcomeLabel::Sent);
    m.rate_limit_decision("allowed", Duration::from_millis(2));
    m.claim_statement(Duration::from_micros(300));
    m.claim_statement(Duration::from_millis(3));
    m.provider_request(PROVIDER_GRAPH, "accepted", Duration::from_millis(40));
    m.set_messages(&[("SENT".into(), 7)]);
    m.set_messages_of(
        &["SCHEDULED"],
        &[("SCHEDULED".into(), 4), ("SENT".into(), 1)],
    );
    m.claimed(3);
    m.purged(1_000);
    m.purged(40);
    m.recipients_suppressed(STAGE_INTAKE, 3);
    m.recipients_suppressed(STAGE_SEND, 1);
    let guard = m.in_flight();
    let text = m.encode();
    drop(guard);
    for line in [
        "mail_worker_sends_total{provider=\"graph\",outcome=\"sent\"} 2",
        "mail_worker_rate_limit_decisions_total{decision=\"allowed\"} 1",
        "mail_worker_rate_limit_seconds_count 1",
        "mail_worker_claim_duration_seconds_count 2",
        "mail_worker_claim_duration_seconds_bucket{le=\"0.00025\"} 0",
        "mail_worker_claim_duration_seconds_bucket{le=\"+Inf\"} 2",
        "mail_worker_provider_requests_total{provider=\"graph\",status=\"accepted\"} 1",
        "mail_worker_provider_seconds_count{provider=\"graph\"} 1",
        "mail_worker_messages{status=\"SENT\"} 7",
        "mail_worker_messages{status=\"ERROR\"} 0",
        "mail_worker_messages{status=\"SCHEDULED\"} 4",
        "mail_worker_in_flight 1",
        "mail_worker_claimed_total 3",
        "mail_worker_messages_purged_total 1040",
        "mail_worker_recipients_suppressed_total{stage=\"intake\"} 3",
        "mail_worker_recipients_suppressed_total{stage=\"send\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
    }
    assert!(m.encode().lines().any(|l| l == "mail_worker_in_flight 0"));
    // Buckets √2 apart (cumulative): 0.3 ms is in the second (up to 0.354 ms), 3 ms in
    // the ninth (above 0.25 · √2⁷ ≈ 2.83 ms, up to 4 ms).
    let claim_buckets: Vec<(f64, u64)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("mail_worker_claim_duration_seconds_bucket{le=\""))
        .filter_map(|l| {
            let (le, n) = l.split_once("\"} ")?;
            Some((le.parse().ok()?, n.parse().ok()?))
        })
        .collect();
    assert_eq!(claim_buckets.len(), 33, "{text}");
    assert!(
        text.contains("mail_worker_claim_duration_seconds_bucket{le=\"0.000354\"} 1"),
        "{text}"
    );
    let at = |i: usize| claim_buckets[i];
    assert!(
        (at(1).0 - 0.000_354).abs() < 1e-9 && at(1).1 == 1,
        "{:?}",
        at(1)
    );
    assert!(
        (at(7).0 - 0.002_83).abs() < 1e-9 && at(7).1 == 1,
        "{:?}",
        at(7)
    );
    assert!(
        (at(8).0 - 0.004).abs() < 1e-9 && at(8).1 == 2,
        "{:?}",
        at(8)
    );
}
