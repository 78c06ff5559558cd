//! The tenant budget: external recipients of every mailbox of a tenant.

#[allow(unused_imports)]
use super::*;

#[tokio::test]
async fn the_tenant_budget_counts_external_recipients_of_every_mailbox_of_the_tenant() {
    let keys = TestKeys::new();
    let prefix = keys.sub("rl");
    let (a, b) = (mailbox("a"), mailbox("b"));
    let mut all = Vec::new();
    for m in [&a, &b] {
        for i in 0..10 {
            all.push(Msg {
                id: Uuid::new_v4(),
                mailbox: m.clone(),
                recipients: 2,
                // Half of the messages go to one colleague and one outsider.
                external: if i % 2 == 0 { 2 } else { 1 },
                priority: Priority::Normal,
                due_ms: 0,
            });
        }
    }
    let start = at(12, 0, 0);
    let mut run = drain(
        vec![limiter(&prefix, Algorithm::Paced)],
        limits(1_000, 9_000),
        start + chrono::Duration::days(4),
    );
    run.tenant_budget = NonZeroU32::new(12);
    let drained = run.run(all, start).await;
    assert_eq!(drained.sends.len(), 20);
    let in_first_day: u64 = drained
        .sends
        .iter()
        .filter(|s| s.0 < start.timestamp_millis() + 86_400_000)
        .map(|s| u64::from(s.3))
        .sum();
    assert!(
        in_first_day <= 12,
        "{in_first_day} external recipients in the first 24 h"
    );
    assert!(
        drained
            .reasons
            .get(&DenyReason::Tenant)
            .copied()
            .unwrap_or(0)
            > 0
    );
    // The tenant's 24 h window over both mailboxes together.
    let mut together: Vec<(i64, u64)> = drained
        .sends
        .iter()
        .map(|s| (s.0, u64::from(s.3)))
        .collect();
    together.sort_unstable();
    for (i, (t, _)) in together.iter().enumerate() {
        let window: u64 = together[i..]
            .iter()
            .take_while(|(u, _)| u - t < 86_400_000)
            .map(|(_, e)| e)
            .sum();
        assert!(window <= 12, "{window} external in the 24 h from {t}");
    }
}
