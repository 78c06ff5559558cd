//! Sender pools through `mail-worker run` against graph-sim (issue 43 point 1,
//! docs/decisions/0046-sender-pools.md): pooled lines enqueued by name, each message placed on
//! the member with the earliest free slot before its Graph request and kept there.

use std::{collections::BTreeMap, time::Duration};

use mail_worker::{domain::MailboxAddress, store::events::Outbox};
use uuid::Uuid;

use crate::support::{TestApp, wait_until};

/// `n` campaign lines of pool `pool`, one recipient each.
fn pooled_lines(pool: &str, n: usize) -> (Vec<Uuid>, String) {
    let ids: Vec<Uuid> = (0..n).map(|_| Uuid::new_v4()).collect();
    let text = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            format!(
                r#"{{"id":"{id}","senderPool":"{pool}","to":[{{"address":"guest{i}@example.org"}}],"subject":"s","body":{{"contentType":"text","content":"x"}}}}"#
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    (ids, text)
}

#[tokio::test]
async fn a_pool_spreads_its_campaign_over_its_members_each_message_sent_once_from_one() {
    // Three members at 20 a minute each: 30 messages take the pool about 30 s, one mailbox 90.
    let world = TestApp::paced().mailboxes(3).per_minute(20).spawn().await;
    let members: Vec<MailboxAddress> = world.mailboxes.iter().map(|(a, _)| a.clone()).collect();
    mail_worker::store::pools::upsert(&world.db.pool, "invites", &members, None)
        .await
        .unwrap();
    let (ids, text) = pooled_lines("invites", 30);
    let enqueued = mail_worker::import::enqueue(&world.db.pool, text, Outbox::Off)
        .await
        .unwrap();
    assert_eq!(
        (enqueued.inserted, enqueued.bad.len()),
        (30, 0),
        "{:?}",
        enqueued.bad
    );
    let mut daemon = world
        .daemon_command(&[("MAIL_RATE_LIMIT_PER_MINUTE", "20")])
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(120), "30 SENT", async || {
        world.count("SENT").await == 30
    })
    .await;
    daemon.kill().await.unwrap();
    let sent = world.sim.messages();
    assert_eq!(sent.len(), 30, "each sent once");
    assert_eq!(world.sim.stats().refused_total(), 0, "no Graph 429");
    let mut per_member: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for m in &sent {
        per_member
            .entry(m.mailbox.clone())
            .or_default()
            .push(m.received_at_ms);
    }
    assert_eq!(per_member.len(), 3, "every member sent: {per_member:?}");
    for (mailbox, times) in &mut per_member {
        times.sort_unstable();
        let most_in_60s = (0..times.len())
            .map(|i| times[i..].partition_point(|t| *t < times[i] + 60_000))
            .max()
            .unwrap_or(0);
        assert!(
            most_in_60s <= 20,
            "{mailbox}: {most_in_60s} in a rolling 60 s"
        );
    }
    // Each row was placed once, on the member graph-sim received it from.
    let rows: Vec<(Uuid, String, bool)> = sqlx::query_as(
        "SELECT m.id, s.address, m.pool_placed_at IS NOT NULL FROM messages m \
         JOIN system_mailboxes s ON s.id = m.system_mailbox_id WHERE m.id = ANY($1)",
    )
    .bind(&ids)
    .fetch_all(&world.db.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 30);
    for (id, address, placed) in rows {
        assert!(placed, "{id} not placed");
        let received = sent
            .iter()
            .find(|m| m.client_request_id.as_deref() == Some(id.to_string().as_str()))
            .map(|m| m.mailbox.clone());
        assert_eq!(received.as_deref(), Some(address.as_str()), "{id}");
    }
}
