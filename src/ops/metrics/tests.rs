use super::*;

#[test]
fn names_follow_the_contract() {
    let m = Metrics::new();
    m.send(PROVIDER_GRAPH, OutcomeLabel::Sent);
    m.send(PROVIDER_GRAPH, OutcomeLabel::Sent);
    m.rate_limit_decision("allowed", Duration::from_millis(2));
    m.provider_request(PROVIDER_GRAPH, "accepted", Duration::from_millis(40));
    m.set_messages(&[("SENT".into(), 7)]);
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
        "mail_worker_provider_requests_total{provider=\"graph\",status=\"accepted\"} 1",
        "mail_worker_provider_seconds_count{provider=\"graph\"} 1",
        "mail_worker_messages{status=\"SENT\"} 7",
        "mail_worker_messages{status=\"ERROR\"} 0",
        "mail_worker_in_flight 1",
        "mail_worker_claimed_total 3",
        "mail_worker_messages_purged_total 1040",
        "mail_worker_recipients_suppressed_total{stage=\"intake\"} 3",
        "mail_worker_recipients_suppressed_total{stage=\"send\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
    }
    assert!(m.encode().lines().any(|l| l == "mail_worker_in_flight 0"));
}
