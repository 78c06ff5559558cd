//! Sender pools through `mail-worker run` against graph-sim (issue 43 point 1,
//! docs/decisions/0046-sender-pools.md): pooled lines enqueued by name, each message placed on
//! the member with the earliest free slot before its Graph request and kept there.

use std::{
    collections::{BTreeMap, HashSet},
    time::Duration,
};

use mail_worker::{
    domain::MailboxAddress,
    reports::campaign::{campaign_status, forecast_file},
    store::events::Outbox,
};
use uuid::Uuid;

use crate::support::{
    TestApp,
    app::{CLIENT, SECRET, TENANT},
    wait_until,
};

/// `n` campaign lines of pool `pool`, one recipient each.
fn pooled_lines(pool: &str, n: usize) -> (Vec<Uuid>, String) {
    campaign_lines(pool, None, n)
}

/// `n` lines of pool `pool` in campaign `campaign` (`None`: none), one recipient each.
fn campaign_lines(pool: &str, campaign: Option<&str>, n: usize) -> (Vec<Uuid>, String) {
    let campaign = campaign.map_or(String::new(), |c| format!(r#""campaignId":"{c}","#));
    let ids: Vec<Uuid> = (0..n).map(|_| Uuid::new_v4()).collect();
    let text = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            format!(
                r#"{{"id":"{id}",{campaign}"senderPool":"{pool}","to":[{{"address":"guest{i}@example.org"}}],"subject":"s","body":{{"contentType":"text","content":"x"}}}}"#
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
    send_all(&world, "20", 30).await;
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

#[tokio::test]
async fn campaign_status_usage_the_forecast_and_the_campaign_page_know_the_pool() {
    let world = TestApp::paced().mailboxes(3).per_minute(60).spawn().await;
    let members: Vec<MailboxAddress> = world.mailboxes.iter().map(|(a, _)| a.clone()).collect();
    mail_worker::store::pools::upsert(&world.db.pool, "invites", &members, None)
        .await
        .unwrap();
    let (_, text) = campaign_lines("invites", Some("spring"), 12);
    let enqueued = mail_worker::import::enqueue(&world.db.pool, text, Outbox::Off)
        .await
        .unwrap();
    assert_eq!(enqueued.inserted, 12, "{:?}", enqueued.bad);

    // Before any attempt: all 12 wait unplaced, every member at zero.
    let status = campaign_status(&world.config, &world.db.pool, "spring")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.pools.len(), 1);
    assert_eq!(
        (status.pools[0].pool.as_str(), status.pools[0].unplaced),
        ("invites", 12)
    );
    let zeros: Vec<(String, i64, i64)> = status.pools[0]
        .members
        .iter()
        .map(|m| (m.mailbox.clone(), m.sent, m.waiting))
        .collect();
    let expected: Vec<(String, i64, i64)> = members
        .iter()
        .map(|m| (m.as_str().to_owned(), 0, 0))
        .collect();
    assert_eq!(zeros, expected);

    send_all(&world, "60", 12).await;

    // Each member's sent count is what graph-sim received from it.
    let status = campaign_status(&world.config, &world.db.pool, "spring")
        .await
        .unwrap()
        .unwrap();
    let pool = &status.pools[0];
    let received = world.sim.messages();
    let shown: Vec<(String, i64, i64)> = pool
        .members
        .iter()
        .map(|m| (m.mailbox.clone(), m.sent, m.waiting))
        .collect();
    let expected: Vec<(String, i64, i64)> = members
        .iter()
        .map(|m| {
            let n = received.iter().filter(|r| r.mailbox == m.as_str()).count();
            (m.as_str().to_owned(), n as i64, 0)
        })
        .collect();
    assert_eq!(shown, expected);
    assert_eq!(pool.members.iter().map(|m| m.sent).sum::<i64>(), 12);
    assert_eq!((pool.unplaced, pool.overflowed.len()), (0, 0));

    // `mailbox usage` names the member's pool.
    let usage =
        mail_worker::reports::usage::mailbox_usage(&world.config, &world.db.pool, &members[0])
            .await
            .unwrap();
    assert_eq!(usage.pools, ["invites"]);

    // The campaign page shows the pool's members with their counts.
    let (ui, login) = crate::admin::logged_in_ui(&world).await;
    let page = ui.page("/campaigns/spring", &login).await;
    assert!(page.contains("<h2>Pool invites</h2>"), "{page}");
    for (mailbox, sent, _) in &expected {
        let row = format!(
            "<tr class=\"member\"><td>{mailbox}</td><td class=\"sent\">{sent}</td><td class=\"waiting\">0</td>"
        );
        assert!(page.contains(&row), "{row} not in {page}");
    }

    let page = ui
        .page(&format!("/mailboxes/{}", members[1].as_str()), &login)
        .await;
    assert!(
        page.contains("<p id=\"pools\">Member of the sender pools: invites.</p>"),
        "{page}"
    );

    // The forecast spreads 20 more lines over the unpaused members: member 2 is paused by a
    // quota NDR, so members 0 and 1 take 10 each (both idle, their rate equal).
    sqlx::query(
        "INSERT INTO limit_pauses (scope, key, code, whole_day, paused_at, paused_until, reason) \
         VALUES ('mailbox', $1, '5.2.2', false, now(), now() + interval '1 hour', 'test')",
    )
    .bind(members[2].as_str())
    .execute(&world.db.pool)
    .await
    .unwrap();
    let (_, more) = campaign_lines("invites", Some("summer"), 20);
    let forecast = forecast_file(&world.config, &world.db.pool, more.as_bytes(), None)
        .await
        .unwrap();
    assert_eq!(forecast.pools.len(), 1);
    let p = &forecast.pools[0];
    assert_eq!(p.messages, 20);
    let shares: Vec<(String, u64)> = p
        .members
        .iter()
        .map(|m| (m.mailbox.clone(), m.messages))
        .collect();
    // Equal shares but for the member whose last send is still within its pacing interval
    // (one slot at 60 a minute): it may take one line fewer than the other.
    let even = |shares: &[(String, u64)]| {
        assert_eq!(
            shares.iter().map(|(m, _)| m.as_str()).collect::<Vec<_>>(),
            [members[0].as_str(), members[1].as_str()],
            "{shares:?}"
        );
        assert_eq!(shares.iter().map(|(_, n)| n).sum::<u64>(), 20, "{shares:?}");
        assert!(
            shares.iter().all(|(_, n)| (9..=11).contains(n)),
            "{shares:?}"
        );
    };
    even(&shares);
    assert_eq!(p.paused, [members[2].as_str().to_owned()]);
    let per_sender: Vec<(String, u64)> = forecast
        .senders
        .iter()
        .map(|s| (s.mailbox.clone(), s.messages.messages))
        .collect();
    even(&per_sender);
}

/// A row as placed: id, overflow reason, member address (none: overflowed), `scheduled_on`.
type PlacedRow = (
    Uuid,
    Option<String>,
    Option<String>,
    chrono::DateTime<chrono::Utc>,
);

/// The overflow tenant's SendGrid key (the stand-in accepts it).
const SENDGRID_KEY: &str = "SG.pools-test";

#[tokio::test]
async fn a_forecast_misses_pool_overflows_exactly_the_lines_whose_slot_is_after_their_by() {
    // Two members at 20 a minute (slots 3.1 s apart each, R = 0), a campaign of 40 lines whose
    // `by` is 30 s ahead: about 2 × 10 slots fall before it; the rest go to SendGrid at once.
    let world = TestApp::paced().mailboxes(2).per_minute(20).spawn().await;
    let (sendgrid, members) = pool_of_two_overflowing_to_sendgrid(&world, "forecastMisses", |_| {
        r#""rateLimitPerMinute":20"#.to_owned()
    })
    .await;

    let by = world.db_now().await + chrono::Duration::seconds(30);
    let (ids, text) = pooled_lines("invites", 40);
    let text = text.replace(
        r#""senderPool""#,
        &format!(r#""by":"{}","senderPool""#, by.to_rfc3339()),
    );
    // The forecast gives the same split: 10 slots a member before `by`, the rest overflowed,
    // none forecast after its own `by`.
    let forecast = forecast_file(&world.config, &world.db.pool, text.as_bytes(), None)
        .await
        .unwrap();
    let p = &forecast.pools[0];
    let shares: Vec<u64> = p.members.iter().map(|m| m.messages).collect();
    assert_eq!(
        (p.overflow, p.overflowed, shares),
        (Some("forecastMisses"), 20, vec![10, 10])
    );
    let per_sender: Vec<(&str, u64, u64)> = forecast
        .senders
        .iter()
        .map(|s| (s.mailbox.as_str(), s.messages.messages, s.finish.missed_by))
        .collect();
    assert_eq!(
        per_sender,
        [
            (members[0].as_str(), 10, 0),
            (members[1].as_str(), 10, 0),
            ("news@adatum.example", 20, 0)
        ]
    );
    // The CLI's table and `mailbox usage` give the SendGrid overflow sender no Graph limits
    // (a trial found it shown at 25 a minute): SendGrid is not rate-limited here.
    let dir = crate::support::temp_dir("mw-pools-forecast-");
    let path = dir.path().join("campaign.jsonl");
    std::fs::write(&path, &text).unwrap();
    let env = crate::cli::paced_env(&world, "9000");
    let table = crate::cli::text(
        &crate::cli::mail_worker(&["campaign", "forecast", path.to_str().unwrap()], &env).stdout,
    );
    let overflow_row = table
        .lines()
        .find(|l| l.starts_with("news@adatum.example"))
        .unwrap_or_else(|| panic!("{table}"));
    let columns: Vec<&str> = overflow_row.split_whitespace().collect();
    assert_eq!(
        &columns[..7],
        ["news@adatum.example", "20", "20", "0", "0", "-", "-"],
        "{table}"
    );
    let member_row = table
        .lines()
        .find(|l| l.starts_with(members[0].as_str()))
        .unwrap_or_else(|| panic!("{table}"));
    assert_eq!(member_row.split_whitespace().nth(5), Some("20"), "{table}");
    let usage = crate::cli::text(
        &crate::cli::mail_worker(&["mailbox", "usage", "news@adatum.example"], &env).stdout,
    );
    assert!(
        usage.contains("limits              none here (SendGrid: its own plan's limits apply)\n"),
        "{usage}"
    );
    // One more line with a `by` that is not a time: refused, naming the field.
    let bad = format!(
        r#"{{"id":"{}","senderPool":"invites","by":"soon","to":[{{"address":"a@example.org"}}],"body":{{"contentType":"text","content":"x"}}}}"#,
        Uuid::new_v4()
    );
    let enqueued =
        mail_worker::import::enqueue(&world.db.pool, format!("{text}\n{bad}"), Outbox::Off)
            .await
            .unwrap();
    assert_eq!(enqueued.inserted, 40, "{:?}", enqueued.bad);
    assert_eq!(enqueued.bad.len(), 1);
    assert_eq!(enqueued.bad[0].location, "line 41");
    assert!(
        enqueued.bad[0]
            .reason
            .starts_with(r#"by "soon" is not an RFC 3339 time"#),
        "{}",
        enqueued.bad[0]
    );

    send_all_with(
        &world,
        &[
            ("MAIL_RATE_LIMIT_PER_MINUTE", "20"),
            ("MAIL_RATE_LIMIT_RESERVED_PERCENT", "0"),
            ("SENDGRID_API_BASE_URL", sendgrid.base_url().as_str()),
        ],
        40,
    )
    .await;

    // Each message once: by a member or by SendGrid.
    let graph = world.sim.messages();
    let overflowed = sendgrid.messages();
    let mut received: Vec<String> = graph
        .iter()
        .filter_map(|m| m.client_request_id.clone())
        .chain(overflowed.iter().filter_map(|m| m.message_id.clone()))
        .collect();
    received.sort();
    let mut expected: Vec<String> = ids.iter().map(Uuid::to_string).collect();
    expected.sort();
    assert_eq!(received, expected, "each message sent once");
    assert_eq!(world.sim.stats().refused_total(), 0, "no Graph 429");
    // The rows overflowed for `forecastMisses` are exactly SendGrid's.
    let rows: Vec<PlacedRow> = sqlx::query_as(
        "SELECT m.id, m.overflow_reason, s.address, m.scheduled_on FROM messages m \
             LEFT JOIN system_mailboxes s ON s.id = m.system_mailbox_id WHERE m.id = ANY($1)",
    )
    .bind(&ids)
    .fetch_all(&world.db.pool)
    .await
    .unwrap();
    let by_sendgrid: HashSet<String> = overflowed
        .iter()
        .filter_map(|m| m.message_id.clone())
        .collect();
    for (id, reason, _, _) in &rows {
        assert_eq!(
            reason.as_deref(),
            by_sendgrid
                .contains(&id.to_string())
                .then_some("forecastMisses"),
            "{id}"
        );
    }
    // Overflowed at the placement (before any booking), or after a booking past `by` (placed
    // from a read taken while the last slots before `by` were being booked: a deferral).
    let after_booking: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM messages WHERE id = ANY($1) AND overflow_reason IS NOT NULL \
         AND deferrals > 0",
    )
    .bind(&ids)
    .fetch_one(&world.db.pool)
    .await
    .unwrap();
    println!(
        "forecastMisses: 40 lines, by = enqueue + 30 s, 2 members at 20 a minute: {} by Graph, \
         {} overflowed (forecastMisses; {after_booking} after a booking past by), 0 sent twice",
        graph.len(),
        overflowed.len()
    );
    // Only the placements in flight when the last slots before `by` were taken (at most the
    // daemon's 8 worker slots) were booked first; the rest overflowed at their placement.
    assert!(
        after_booking <= 8,
        "{after_booking} overflowed after a booking"
    );
    // At most 2 × 10 slots fit in 30 s (the daemon starts after the enqueue); most did.
    assert!(
        (10..=20).contains(&graph.len()),
        "{} by Graph, {} overflowed",
        graph.len(),
        overflowed.len()
    );
    // Each member's Graph sends went at slots up to `by` (a booked row's `scheduled_on` is its
    // slot, written as PostgreSQL's now() + the wait a moment after the limiter's decision:
    // within `tol`), and its next slot would have been after `by`: none overflowed that could
    // make it. Slots are 3.1 s apart, so `tol` still tells one slot from the next.
    let spacing = chrono::Duration::milliseconds(3_100);
    let tol = chrono::Duration::milliseconds(500);
    for member in &members {
        let mut slots: Vec<_> = rows
            .iter()
            .filter(|(_, reason, address, _)| {
                reason.is_none() && address.as_deref() == Some(member.as_str())
            })
            .map(|(_, _, _, at)| *at)
            .collect();
        slots.sort();
        let last = *slots
            .last()
            .unwrap_or_else(|| panic!("{member} sent nothing"));
        assert!(
            last <= by + tol,
            "{member}: a slot at {last}, after by {by}"
        );
        assert!(
            last + spacing + tol > by,
            "{member}: its next slot {} was before by {by}, yet lines overflowed",
            last + spacing
        );
        // No slot of its own left unused before `by`: booked back to back (the first went
        // at once, its `scheduled_on` the enqueue's).
        for pair in slots[1..].windows(2) {
            let gap = pair[1] - pair[0];
            assert!(
                (gap - spacing).abs() < tol,
                "{member}: slots {} and {} are {gap} apart",
                pair[0],
                pair[1]
            );
        }
    }
}

/// Placements read at once all see a member's last room; the ones its limiter then refuses
/// are placed again on a member with room — not overflowed while one has room, not booked a
/// day ahead on the spent one, and no booking left behind there (a fresh user's trial found
/// 19 of 30 overflowed and 19 bookings days ahead on the spent member).
#[tokio::test]
async fn messages_refused_by_a_spent_member_are_placed_again_not_overflowed_nor_left_booked() {
    let world = TestApp::paced().mailboxes(2).per_minute(30).spawn().await;
    // The first member has room for 1 recipient a day; the second for 9,000.
    let (sendgrid, members) = pool_of_two_overflowing_to_sendgrid(&world, "budgetsSpent", |i| {
        format!(
            r#""rateLimitRecipientsPerDay":{},"rateLimitReservedPercent":0"#,
            [1, 9_000][i]
        )
    })
    .await;
    let (_ids, text) = pooled_lines("invites", 12);
    let enqueued = mail_worker::import::enqueue(&world.db.pool, text, Outbox::Off)
        .await
        .unwrap();
    assert_eq!(enqueued.inserted, 12, "{:?}", enqueued.bad);
    send_all_with(
        &world,
        &[
            ("MAIL_RATE_LIMIT_PER_MINUTE", "30"),
            ("SENDGRID_API_BASE_URL", sendgrid.base_url().as_str()),
        ],
        12,
    )
    .await;
    let mut per_member: BTreeMap<String, usize> = BTreeMap::new();
    for m in world.sim.messages() {
        *per_member.entry(m.mailbox.clone()).or_default() += 1;
    }
    let expected: BTreeMap<String, usize> =
        [(members[0].to_string(), 1), (members[1].to_string(), 11)].into();
    assert_eq!(
        per_member, expected,
        "all 12 by Graph, 1 on the spent member"
    );
    assert_eq!(sendgrid.messages().len(), 0, "none overflowed");
    let overflowed: i64 =
        sqlx::query_scalar("SELECT count(*) FROM messages WHERE overflow_reason IS NOT NULL")
            .fetch_one(&world.db.pool)
            .await
            .unwrap();
    assert_eq!(overflowed, 0);
    for member in &members {
        let usage =
            mail_worker::reports::usage::mailbox_usage(&world.config, &world.db.pool, member)
                .await
                .unwrap();
        let limiter = usage.limiter.expect("a Graph mailbox's limiter");
        assert_eq!(limiter.booked, 0, "{member}: no booking left behind");
    }
}

/// `world`'s two mailboxes imported as pool `invites` (each entry's further fields from
/// `extra(i)`) overflowing to a SendGrid tenant under `when`; the SendGrid stand-in and the
/// members.
async fn pool_of_two_overflowing_to_sendgrid(
    world: &TestApp,
    when: &str,
    extra: impl Fn(usize) -> String,
) -> (graph_sim::sendgrid::SendGridSim, Vec<MailboxAddress>) {
    let sendgrid = graph_sim::sendgrid::SendGridSim::start([SENDGRID_KEY.to_owned()])
        .await
        .unwrap();
    let members: Vec<MailboxAddress> = world.mailboxes.iter().map(|(a, _)| a.clone()).collect();
    let mailboxes: Vec<String> = members
        .iter()
        .enumerate()
        .map(|(i, a)| {
            format!(
                r#"{{"address":"{a}","graphTenantId":"{TENANT}","clientId":"{CLIENT}","clientSecret":"{SECRET}",{}}}"#,
                extra(i)
            )
        })
        .collect();
    let file = format!(
        r#"{{"systemMailboxes":[{}],
            "tenants":[{{"name":"adatum","provider":"sendgrid","sender":"news@adatum.example","sendgridApiKey":"{SENDGRID_KEY}"}}],
            "senderPools":[{{"name":"invites","members":["{}","{}"],
                "overflow":{{"sender":"news@adatum.example","when":"{when}"}}}}]}}"#,
        mailboxes.join(","),
        members[0],
        members[1]
    );
    let file = mail_worker::import::senders::check(&file).unwrap();
    mail_worker::import::senders::import(&world.db.pool, &file)
        .await
        .unwrap();
    (sendgrid, members)
}

/// Runs `mail-worker run` at `per_minute` until `n` messages are `SENT`, then stops it.
async fn send_all(world: &TestApp, per_minute: &str, n: i64) {
    send_all_with(world, &[("MAIL_RATE_LIMIT_PER_MINUTE", per_minute)], n).await;
}

/// Runs `mail-worker run` with `env` until `n` messages are `SENT`, then stops it.
async fn send_all_with(world: &TestApp, env: &[(&str, &str)], n: i64) {
    let mut daemon = world.daemon_command(env).spawn().unwrap();
    wait_until(Duration::from_secs(120), &format!("{n} SENT"), async || {
        world.count("SENT").await == n
    })
    .await;
    daemon.kill().await.unwrap();
}
