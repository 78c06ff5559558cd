//! `sender_warmups`: each sender's warm-up ramp and where it stands (docs/decisions/0047-warm-up.md).
//! `configure` writes the senders file's `warmUp`; `evaluate_due` counts the last sending day of
//! every ramp not yet evaluated today and steps it (idempotent: the rows are locked, and a row
//! evaluated today is not taken again, so any replica may call it at any time); `of_sender` and
//! `all` read the state for `mailbox usage`, the admin UI, the gauge and the forecast.

use chrono::{DateTime, Days, NaiveDate, Utc};
use sqlx::{PgPool, Postgres, Row, Transaction, postgres::PgRow};
use uuid::Uuid;

use super::{SenderRef, StoreError};
use crate::domain::{DayOutcome, REPUTATION_CODES, Verdict, WarmUp, WarmUpGate, classify};

/// One sender's ramp and its state.
#[derive(Debug, Clone, PartialEq)]
pub struct WarmUpState {
    /// `tenants.id` or `system_mailboxes.id`.
    pub sender_id: Uuid,
    /// The sending mailbox (lower case).
    pub mailbox: String,
    /// The ramp.
    pub ramp: WarmUp,
    /// The current step (0: the first sending day's budget).
    pub step: u32,
    /// The current step's day budget.
    pub day_budget: u32,
    /// Sending days counted so far.
    pub sending_days: u32,
    /// The last sending day counted.
    pub last_sending_day: Option<NaiveDate>,
    /// The UTC day it was last evaluated.
    pub evaluated_on: Option<NaiveDate>,
    /// What the last counted day did (`stepped`, `held`, `steppedDown`, `atMax`).
    pub verdict: Option<String>,
    /// Why it held or stepped down.
    pub held_reason: Option<String>,
}

/// What one evaluation did.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// The sender's state after it.
    pub state: WarmUpState,
    /// The sending day counted.
    pub day: NaiveDate,
    /// The step before.
    pub step_before: u32,
    /// That day's outcomes.
    pub outcome: DayOutcome,
    /// What it did.
    pub verdict: Verdict,
}

const STATE: &str = "w.sender_id, w.start_per_day, w.growth, w.max_per_day, w.step, w.day_budget, \
     w.sending_days, w.last_sending_day, w.evaluated_on, w.verdict, w.held_reason, \
     w.evaluated_at, coalesce(s.address, lower(t.sender_address)) AS mailbox, \
     lower(coalesce(s.graph_tenant_id, t.graph_tenant_id)) AS graph_tenant \
     FROM sender_warmups w LEFT JOIN system_mailboxes s ON s.id = w.system_mailbox_id \
     LEFT JOIN tenants t ON t.id = w.tenant_id";

fn count(row: &PgRow, column: &str) -> Result<u32, StoreError> {
    Ok(u32::try_from(row.try_get::<i32, _>(column)?).unwrap_or(0))
}

fn state_from_row(row: &PgRow) -> Result<WarmUpState, StoreError> {
    let positive = |column: &str| {
        count(row, column).and_then(|v| {
            std::num::NonZeroU32::new(v).ok_or_else(|| StoreError::BadRow {
                table: "sender_warmups",
                problem: format!("{column} is not positive"),
            })
        })
    };
    Ok(WarmUpState {
        sender_id: row.try_get("sender_id")?,
        mailbox: row.try_get("mailbox")?,
        ramp: WarmUp {
            start_per_day: positive("start_per_day")?,
            growth: row.try_get("growth")?,
            max_per_day: positive("max_per_day")?,
        },
        step: count(row, "step")?,
        day_budget: count(row, "day_budget")?,
        sending_days: count(row, "sending_days")?,
        last_sending_day: row.try_get("last_sending_day")?,
        evaluated_on: row.try_get("evaluated_on")?,
        verdict: row.try_get("verdict")?,
        held_reason: row.try_get("held_reason")?,
    })
}

fn int(v: u32) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

/// Writes `sender`'s ramp (the senders file's `warmUp`): a new ramp starts at step 0; a changed
/// one keeps its step (up to the new ramp's end) and takes the step's new budget; `None`
/// removes the ramp and its state (the sender's own budget alone applies).
///
/// # Errors
/// Database errors.
pub async fn configure(
    pool: &PgPool,
    sender: SenderRef,
    ramp: Option<WarmUp>,
) -> Result<(), StoreError> {
    let (tenant, mailbox, id) = match sender {
        SenderRef::Tenant(id) => (Some(id), None, id),
        SenderRef::SystemMailbox(id) => (None, Some(id), id),
    };
    let Some(ramp) = ramp else {
        sqlx::query("DELETE FROM sender_warmups WHERE sender_id = $1")
            .bind(id)
            .execute(pool)
            .await?;
        return Ok(());
    };
    let mut tx = pool.begin().await?;
    let step: Option<i32> =
        sqlx::query_scalar("SELECT step FROM sender_warmups WHERE sender_id = $1 FOR UPDATE")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
    let step = step
        .and_then(|s| u32::try_from(s).ok())
        .unwrap_or(0)
        .min(ramp.top_step());
    sqlx::query(
        "INSERT INTO sender_warmups (tenant_id, system_mailbox_id, start_per_day, growth, \
             max_per_day, step, day_budget) VALUES ($1, $2, $3, $4, $5, $6, $7) \
         ON CONFLICT (sender_id) DO UPDATE SET start_per_day = EXCLUDED.start_per_day, \
             growth = EXCLUDED.growth, max_per_day = EXCLUDED.max_per_day, \
             step = EXCLUDED.step, day_budget = EXCLUDED.day_budget",
    )
    .bind(tenant)
    .bind(mailbox)
    .bind(int(ramp.start_per_day.get()))
    .bind(ramp.growth)
    .bind(int(ramp.max_per_day.get()))
    .bind(int(step))
    .bind(int(ramp.budget(step).get()))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// The ramps of `sender_ids`, by sender id (one query).
///
/// # Errors
/// Database errors.
pub async fn of_senders(
    pool: &PgPool,
    sender_ids: &[Uuid],
) -> Result<std::collections::HashMap<Uuid, WarmUpState>, StoreError> {
    let sql = format!("SELECT {STATE} WHERE w.sender_id = ANY($1)");
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(sender_ids)
        .fetch_all(pool)
        .await?
        .iter()
        .map(|row| state_from_row(row).map(|s| (s.sender_id, s)))
        .collect()
}

/// Every ramp, by mailbox.
///
/// # Errors
/// Database errors.
pub async fn all(pool: &PgPool) -> Result<Vec<WarmUpState>, StoreError> {
    let sql = format!("SELECT {STATE} ORDER BY mailbox");
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .fetch_all(pool)
        .await?
        .iter()
        .map(state_from_row)
        .collect()
}

/// Evaluates every ramp not yet evaluated on `now`'s UTC day (`None`: PostgreSQL's `now()`): its last sending day before today
/// not counted yet (none: nothing changes, the day is only marked evaluated) is counted, its
/// outcomes read and the step moved by [`WarmUp::next`] under `gate`. Rows another caller holds
/// are skipped (it evaluates them); a row evaluated today is not taken again.
///
/// # Errors
/// Database errors (nothing is changed then).
pub async fn evaluate_due(
    pool: &PgPool,
    now: Option<DateTime<Utc>>,
    gate: WarmUpGate,
) -> Result<Vec<Evaluation>, StoreError> {
    let mut tx = pool.begin().await?;
    let now = match now {
        Some(now) => now,
        None => {
            sqlx::query_scalar("SELECT now()")
                .fetch_one(&mut *tx)
                .await?
        }
    };
    let today = now.date_naive();
    let sql = format!(
        "SELECT {STATE} WHERE w.evaluated_on IS NULL OR w.evaluated_on < $1 \
         ORDER BY w.sender_id FOR UPDATE OF w SKIP LOCKED"
    );
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(today)
        .fetch_all(&mut *tx)
        .await?;
    let mut done = Vec::new();
    for row in &rows {
        let mut state = state_from_row(row)?;
        let since: Option<DateTime<Utc>> = row.try_get("evaluated_at")?;
        let graph_tenant: Option<String> = row.try_get("graph_tenant")?;
        let day: Option<NaiveDate> = sqlx::query_scalar(
            "SELECT max((sent_at AT TIME ZONE 'UTC')::date) FROM messages \
             WHERE coalesce(system_mailbox_id, tenant_id) = $1 \
               AND sent_at < ($2::date)::timestamp AT TIME ZONE 'UTC' \
               AND ($3::date IS NULL OR sent_at >= ($3::date + 1)::timestamp AT TIME ZONE 'UTC')",
        )
        .bind(state.sender_id)
        .bind(today)
        .bind(state.last_sending_day)
        .fetch_one(&mut *tx)
        .await?;
        let Some(day) = day else {
            sqlx::query(
                "UPDATE sender_warmups SET evaluated_on = $2, evaluated_at = $3 WHERE sender_id = $1",
            )
            .bind(state.sender_id)
            .bind(today)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            continue;
        };
        let outcome = day_outcome(&mut tx, &state, graph_tenant.as_deref(), day, since).await?;
        let step_before = state.step;
        let (step, verdict) = state.ramp.next(step_before, &outcome, gate);
        state.step = step;
        state.day_budget = state.ramp.budget(step).get();
        state.sending_days += 1;
        state.last_sending_day = Some(day);
        state.evaluated_on = Some(today);
        state.verdict = Some(verdict.as_str().to_owned());
        state.held_reason = verdict.reason().map(str::to_owned);
        sqlx::query(
            "UPDATE sender_warmups SET step = $2, day_budget = $3, sending_days = $4, \
                 last_sending_day = $5, evaluated_on = $6, evaluated_at = $7, verdict = $8, \
                 held_reason = $9 WHERE sender_id = $1",
        )
        .bind(state.sender_id)
        .bind(int(state.step))
        .bind(int(state.day_budget))
        .bind(int(state.sending_days))
        .bind(day)
        .bind(today)
        .bind(now)
        .bind(&state.verdict)
        .bind(&state.held_reason)
        .execute(&mut *tx)
        .await?;
        done.push(Evaluation {
            state,
            day,
            step_before,
            outcome,
            verdict,
        });
    }
    tx.commit().await?;
    Ok(done)
}

/// What `day` came to for the sender: its messages sent that day, the hard bounces among them,
/// the delivery trace's filtered share of their recipients, and a reputation NDR among their
/// bounces, their traced failures, or read since the last evaluation (`since`: a late NDR of an
/// earlier day still steps down), or a reputation pause of its mailbox or Graph tenant since.
async fn day_outcome(
    tx: &mut Transaction<'_, Postgres>,
    state: &WarmUpState,
    graph_tenant: Option<&str>,
    day: NaiveDate,
    since: Option<DateTime<Utc>>,
) -> Result<DayOutcome, StoreError> {
    let start = day.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc();
    let end = start + Days::new(1);
    let since = since.unwrap_or(start).min(start);
    let row = sqlx::query(
        "SELECT count(*)::int AS sent, \
             coalesce(array_agg(bounce_code) FILTER (WHERE bounce_code IS NOT NULL), '{}') AS codes \
         FROM messages WHERE coalesce(system_mailbox_id, tenant_id) = $1 \
           AND sent_at >= $2 AND sent_at < $3",
    )
    .bind(state.sender_id)
    .bind(start)
    .bind(end)
    .fetch_one(&mut **tx)
    .await?;
    let sent = count(&row, "sent")?;
    let codes: Vec<String> = row.try_get("codes")?;
    let trace = sqlx::query(
        "SELECT count(*) FILTER (WHERE o.outcome <> 'pending')::int AS traced, \
             count(*) FILTER (WHERE o.outcome = 'filtered')::int AS filtered, \
             coalesce(array_agg(o.code) FILTER (WHERE o.outcome = 'failed' AND o.code IS NOT NULL), \
                 '{}') AS codes \
         FROM recipient_outcomes o JOIN messages m ON m.id = o.message_id \
         WHERE coalesce(m.system_mailbox_id, m.tenant_id) = $1 \
           AND m.sent_at >= $2 AND m.sent_at < $3",
    )
    .bind(state.sender_id)
    .bind(start)
    .bind(end)
    .fetch_one(&mut **tx)
    .await?;
    let traced_codes: Vec<String> = trace.try_get("codes")?;
    let late: Vec<String> = sqlx::query_scalar(
        "SELECT bounce_code FROM messages WHERE coalesce(system_mailbox_id, tenant_id) = $1 \
           AND bounced_at >= $2 AND bounce_code IS NOT NULL \
         UNION ALL SELECT code FROM limit_pauses \
           WHERE paused_at >= $2 AND key IN ($3, coalesce($4, ''))",
    )
    .bind(state.sender_id)
    .bind(since)
    .bind(&state.mailbox)
    .bind(graph_tenant)
    .fetch_all(&mut **tx)
    .await?;
    let reputation = codes
        .iter()
        .chain(&traced_codes)
        .chain(&late)
        .find_map(|c| reputation_code(c));
    Ok(DayOutcome {
        sent,
        hard_bounced: u32::try_from(codes.iter().filter(|c| classify(c).is_some()).count())
            .unwrap_or(u32::MAX),
        reputation: reputation.map(str::to_owned),
        traced: count(&trace, "traced")?,
        filtered: count(&trace, "filtered")?,
    })
}

/// The reputation code ([`REPUTATION_CODES`]) a status text carries (`550 5.7.708 …`), if any.
fn reputation_code(text: &str) -> Option<&'static str> {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map(|t| t.trim_matches('.'))
        .find_map(|t| REPUTATION_CODES.iter().copied().find(|c| *c == t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reputation_codes_are_found_in_status_texts() {
        assert_eq!(reputation_code("5.7.708"), Some("5.7.708"));
        assert_eq!(
            reputation_code("550 5.7.501 Access denied, spam abuse detected"),
            Some("5.7.501")
        );
        assert_eq!(reputation_code("550 5.7.7080 x"), None);
        assert_eq!(reputation_code("5.1.1"), None);
    }
}
