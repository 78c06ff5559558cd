//! Issue 40: a sender-level fault (a missing application permission) pauses the sender through
//! the real stack against graph-sim: no message ends ERROR, and a grant resumes it within one
//! probe (the probe fetches a fresh token).

use std::sync::Arc;

use mail_worker::clock::ManualClock;

use crate::support::{TestApp, app::noon, claim_and_send};

#[tokio::test]
async fn draft_mode_with_only_mail_send_pauses_naming_mail_readwrite_and_a_grant_resumes_it() {
    let h = TestApp::builder()
        .sim_roles(vec!["Mail.Send".to_owned()])
        .spawn()
        .await;
    let clock = ManualClock::new(noon());
    let handler = h.real_handler(Arc::new(clock.clone()));
    let ids = h.insert(0, 3, "SCHEDULED").await;
    for &id in &ids {
        claim_and_send(&h.db.pool, &handler, id).await.unwrap();
    }
    for &id in &ids {
        let (status, reason, _) = h.status_of(id).await;
        assert_eq!(status, "SCHEDULED");
        let reason = reason.unwrap();
        assert!(
            reason.starts_with("sender paused: misconfigured: ")
                && reason.contains("lacks the application permission Mail.ReadWrite")
                && reason.contains("GRAPH_SEND_MODE=sendmail"),
            "{reason}"
        );
    }
    assert_eq!(h.count("ERROR").await, 0);
    assert_eq!(
        h.sim.drafts().len(),
        0,
        "no request reached Graph's mailbox"
    );

    // The grant; the next probe (5 s + spread under 30 s) fetches a new token and sends.
    assert!(
        h.sim
            .grant_roles(crate::support::app::CLIENT, ["Mail.Send", "Mail.ReadWrite"])
    );
    clock.set(noon() + chrono::Duration::seconds(40));
    for id in h.due_by(clock.now_for_test()).await {
        claim_and_send(&h.db.pool, &handler, id).await.unwrap();
    }
    for id in h.due_by(clock.now_for_test()).await {
        claim_and_send(&h.db.pool, &handler, id).await.unwrap();
    }
    assert_eq!(h.count("SENT").await, 3, "resumed within one probe");
    assert_eq!(h.count("ERROR").await, 0);
}

#[tokio::test]
async fn one_mailbox_out_of_scope_among_three_waits_paused_while_the_others_send() {
    let h = TestApp::builder()
        .mailboxes(3)
        .sim_mailbox_scope(vec![
            "mb0@contoso.example".to_owned(),
            "mb2@contoso.example".to_owned(),
        ])
        .spawn()
        .await;
    let clock = ManualClock::new(noon());
    let handler = h.real_handler(Arc::new(clock.clone()));
    let mut ids = Vec::new();
    for mailbox in 0..3 {
        ids.push(h.insert(mailbox, 2, "SCHEDULED").await);
    }
    for id in ids.iter().flatten() {
        claim_and_send(&h.db.pool, &handler, *id).await.unwrap();
    }
    assert_eq!(h.count("SENT").await, 4, "mb0 and mb2 send");
    assert_eq!(h.count("ERROR").await, 0);
    for &id in &ids[1] {
        let (status, reason, _) = h.status_of(id).await;
        assert_eq!(status, "SCHEDULED");
        let reason = reason.unwrap();
        assert!(
            reason.starts_with("sender paused: unauthorized: Graph answered 403 ErrorAccessDenied")
                && reason.contains("application access policy"),
            "{reason}"
        );
    }
    assert_eq!(h.sim.messages().len(), 4);
}
