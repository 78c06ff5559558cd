//! Campaign lines for the intake benchmarks (`intake`, `ingest_http`) and their ceiling: the
//! same lines through the file import (`import::enqueue`: the parser and the multi-row `UNNEST`
//! insert, 500 rows a statement).

use std::time::Instant;

use crate::{
    daemon::{self, BenchDb},
    fail, to_f64,
};

/// `n` campaign lines for `mailbox`, due in 2099 (nothing sends here), and their ids.
pub fn lines(mailbox: &str, n: usize) -> Vec<(uuid::Uuid, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let id = uuid::Uuid::new_v4();
            let line = serde_json::json!({
                "id": id,
                "systemMailbox": mailbox,
                "to": [{"address": format!("guest{i}@fabrikam.example"), "name": "Guest"}],
                "subject": "Invitation: Kick-off 2027",
                "body": {"contentType": "html", "content": daemon::BODY},
                "scheduledOn": "2099-01-01T00:00:00Z",
            });
            (id, line.to_string().into_bytes())
        })
        .collect()
}

/// A fresh database (`bench_<label>_<hex>`) with one mailbox; returns it and its address.
pub async fn database(label: &str) -> (BenchDb, String) {
    let db = BenchDb::create(&daemon::shared_postgres(), label).await;
    let mailboxes = daemon::add_mailboxes(&db.pool, label, 1).await;
    let address = mailboxes[0].0.as_str().to_owned();
    (db, address)
}

/// Rows in `messages`.
pub async fn rows(db: &BenchDb) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM messages")
        .fetch_one(&db.pool)
        .await
        .unwrap_or_else(|e| fail(&format!("counting rows: {e}")))
}

/// The file import of `jobs` lines into a fresh database: the ceiling, rows/s.
pub async fn file_import_rate(label: &str, jobs: usize) -> f64 {
    let (db, mailbox) = database(label).await;
    let mut text = Vec::new();
    for (_, line) in lines(&mailbox, jobs) {
        text.extend_from_slice(&line);
        text.push(b'\n');
    }
    let started = Instant::now();
    let done = mail_worker::import::enqueue(&db.pool, &text, Default::default())
        .await
        .unwrap_or_else(|e| fail(&format!("the file import failed: {e}")));
    let seconds = started.elapsed().as_secs_f64();
    if done.inserted as usize != jobs {
        fail(&format!(
            "the file import stored {} of {jobs}",
            done.inserted
        ));
    }
    db.drop().await;
    to_f64(jobs as u64) / seconds
}
