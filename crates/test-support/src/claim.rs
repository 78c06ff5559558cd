//! Given messages through the production claim, for the tests and benchmarks that drive rows of
//! their choosing: [`claim_and_send`] one, [`claim_and_send_all`] several at once.

use mail_worker::{
    service::SendOutcome,
    store::{
        StoreError,
        messages::{self, StoredMessage},
    },
    worker::handler::Handler,
};
use sqlx::PgPool;
use uuid::Uuid;

/// Claims message `id` with the claim production uses ([`messages::claim_due`]) and sends it
/// with `handler`; `Ok(None)` when it is not `SCHEDULED`.
///
/// # Errors
/// PostgreSQL errors, as [`Handler::send`].
pub async fn claim_and_send(
    pool: &PgPool,
    handler: &Handler,
    id: Uuid,
) -> Result<Option<SendOutcome>, StoreError> {
    match claim(pool, &[id]).await?.pop() {
        Some(message) => handler.send(&message).await.map(Some),
        None => Ok(None),
    }
}

/// Claims every `SCHEDULED` one of `ids` in one go, then sends them all at once, as a replica
/// does with a claim; the outcomes in `ids` order, `None` for a row that was not `SCHEDULED`.
///
/// # Errors
/// PostgreSQL errors of the claim.
///
/// # Panics
/// On a PostgreSQL error of a send's outcome write.
pub async fn claim_and_send_all(
    pool: &PgPool,
    handler: &Handler,
    ids: &[Uuid],
) -> Result<Vec<Option<SendOutcome>>, StoreError> {
    let claimed = claim(pool, ids).await?;
    let sent = futures::future::join_all(claimed.iter().map(|m| handler.send(m))).await;
    let by_id: std::collections::HashMap<Uuid, SendOutcome> = claimed
        .iter()
        .zip(sent)
        .map(|(m, outcome)| (m.id, outcome.expect("the outcome was written")))
        .collect();
    Ok(ids.iter().map(|id| by_id.get(id).cloned()).collect())
}

/// Claims the `SCHEDULED` ones of `ids` through [`messages::claim_due`], and no other row: they
/// are put first in line and the other due rows — and those due within the hour, which a slow
/// claim could reach — step a millennium ahead while the claim runs;
/// all get their `scheduled_on` back. Claims in this process take turns.
///
/// # Panics
/// When the claim took other rows.
async fn claim(pool: &PgPool, ids: &[Uuid]) -> Result<Vec<StoredMessage>, StoreError> {
    static ONE_CLAIM_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _turn = ONE_CLAIM_AT_A_TIME.lock().await;
    let wanted: Vec<Uuid> = sqlx::query_scalar(
        "SELECT id FROM messages WHERE id = ANY($1) AND status = 'SCHEDULED' ORDER BY id",
    )
    .bind(ids)
    .fetch_all(pool)
    .await?;
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query(
        "UPDATE messages SET scheduled_on = scheduled_on + CASE WHEN id = ANY($1) \
             THEN -interval '1000 years' ELSE interval '1000 years' END \
         WHERE status = 'SCHEDULED' AND (id = ANY($1) OR scheduled_on <= now() + interval '1 hour')",
    )
    .bind(&wanted)
    .execute(pool)
    .await?;
    // A claim takes an equal share of each sender's rows: claim again until all are taken.
    let mut claimed: Vec<StoredMessage> = Vec::new();
    let result = loop {
        let left = (wanted.len() - claimed.len()) as i64;
        match messages::claim_due(pool, left).await {
            Ok(round) if !round.is_empty() && claimed.len() + round.len() < wanted.len() => {
                claimed.extend(round);
            }
            Ok(round) => {
                claimed.extend(round);
                break Ok(());
            }
            Err(e) => break Err(e),
        }
    };
    sqlx::query(
        "UPDATE messages SET scheduled_on = scheduled_on + CASE WHEN id = ANY($1) \
             THEN interval '1000 years' ELSE -interval '1000 years' END \
         WHERE id = ANY($1) \
            OR (status = 'SCHEDULED' AND scheduled_on > now() + interval '500 years')",
    )
    .bind(&wanted)
    .execute(pool)
    .await?;
    result?;
    let mut got: Vec<Uuid> = claimed.iter().map(|m| m.id).collect();
    got.sort();
    assert_eq!(got, wanted, "the claim took exactly the given rows");
    Ok(claimed)
}
