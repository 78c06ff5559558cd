//! Operators' queries behind `mail-worker messages retry|cancel` and `mailbox usage`, with
//! filters and a dry run (instead of hand-written SQL).

use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use super::{
    StoreError,
    waiting::{WaitReason, wait_reason_sql},
};
use crate::domain::MessageStatus;
use crate::domain::sql_status;

/// `last_error` of a cancelled message starts with this.
pub const CANCELLED_PREFIX: &str = "cancelled by an operator (mail-worker messages cancel)";

/// Which messages a command touches; every given filter must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct MessageFilter {
    /// The sender: a system mailbox's or tenant's address, or a tenant's name.
    pub sender: Option<String>,
    /// Their status.
    pub status: Option<MessageStatus>,
    /// `last_error ILIKE '%TEXT%'`.
    pub error_like: Option<String>,
    /// These ids only.
    pub ids: Vec<Uuid>,
}

/// What a command did (or, with `--dry-run`, would do).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Changed {
    /// `retry` or `cancel`.
    pub action: &'static str,
    /// Whether nothing was written.
    pub dry_run: bool,
    /// Rows that matched the filters and the statuses the action accepts.
    pub matched: u64,
    /// Rows written (0 on a dry run).
    pub changed: u64,
    /// Matched rows by status.
    pub by_status: std::collections::BTreeMap<String, u64>,
    /// The rows written: their bookings in the limiter go (`reports::bookings`).
    #[serde(skip)]
    pub changed_ids: Vec<Uuid>,
}

const MATCH: &str = "FROM messages m \
     LEFT JOIN tenants t ON t.id = m.tenant_id \
     LEFT JOIN system_mailboxes s ON s.id = m.system_mailbox_id \
     WHERE m.status = ANY($1) \
       AND ($2::text IS NULL OR lower(coalesce(s.address, t.sender_address)) = lower($2) OR t.name = $2) \
       AND ($3::text IS NULL OR m.last_error ILIKE '%' || $3 || '%') \
       AND (cardinality($4::uuid[]) = 0 OR m.id = ANY($4))";

/// The matching rows; without `cancelled`, not those an operator cancelled.
async fn select(
    pool: &PgPool,
    statuses: &[&str],
    filter: &MessageFilter,
    cancelled: bool,
) -> Result<Vec<(Uuid, String)>, StoreError> {
    let sql = format!(
        "SELECT m.id, m.status {MATCH} AND ($5 OR NOT starts_with(coalesce(m.last_error, ''), $6))"
    );
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(statuses)
        .bind(&filter.sender)
        .bind(&filter.error_like)
        .bind(&filter.ids)
        .bind(cancelled)
        .bind(CANCELLED_PREFIX)
        .fetch_all(pool)
        .await?)
}

fn statuses(
    filter: &MessageFilter,
    allowed: &[MessageStatus],
    default: MessageStatus,
) -> Result<Vec<&'static str>, StoreError> {
    match filter.status {
        None => Ok(vec![default.as_str()]),
        Some(s) if allowed.contains(&s) => Ok(vec![s.as_str()]),
        Some(s) => Err(StoreError::Invalid {
            field: "status",
            reason: format!(
                "{} is not accepted here (accepted: {})",
                s.as_str(),
                allowed
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }),
    }
}

fn summary(action: &'static str, dry_run: bool, rows: &[(Uuid, String)], changed: u64) -> Changed {
    let mut by_status = std::collections::BTreeMap::new();
    for (_, status) in rows {
        *by_status.entry(status.clone()).or_insert(0) += 1;
    }
    Changed {
        action,
        dry_run,
        matched: rows.len() as u64,
        changed,
        by_status,
        changed_ids: Vec::new(),
    }
}

/// An operator's change of the matching messages: `messages retry|cancel` and the admin UI's
/// buttons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BulkAction {
    /// `messages retry`: matching `ERROR` (default) or `SCHEDULED` rows become `SCHEDULED`,
    /// due now, with their attempts, first attempt and deferrals reset. `SENT` rows are never
    /// resent; cancelled ones only when named by id or `--error-like`.
    Retry,
    /// `messages cancel`: matching `SCHEDULED` rows end `ERROR` with `last_error` starting
    /// [`CANCELLED_PREFIX`]. Rows being sent or sent are left alone.
    Cancel,
}

impl BulkAction {
    /// Its name in the summary: `retry` or `cancel`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Retry => "retry",
            Self::Cancel => "cancel",
        }
    }

    /// The statuses it changes; the first is the default when the filter names none.
    pub(crate) fn accepted(self) -> &'static [MessageStatus] {
        match self {
            Self::Retry => &[MessageStatus::Error, MessageStatus::Scheduled],
            Self::Cancel => &[MessageStatus::Scheduled],
        }
    }

    /// The `UPDATE` of the rows with ids `$1` still in a status of `$2` (cancel: `$3` is the
    /// new `last_error`).
    fn update(self) -> &'static str {
        match self {
            Self::Retry => concat!(
                "UPDATE messages SET status = ",
                sql_status!(Scheduled),
                ", scheduled_on = now(), attempts = 0, \
                     deferrals = 0, throttles = 0, wait_reason = NULL, first_attempt_at = NULL, updated_at = now(), \
                     last_error = 'retried by an operator (mail-worker messages retry); was: ' || coalesce(last_error, '') \
                 WHERE id = ANY($1) AND status = ANY($2) RETURNING id"
            ),
            Self::Cancel => concat!(
                "UPDATE messages SET status = ",
                sql_status!(Error),
                ", updated_at = now(), last_error = $3 \
                 WHERE id = ANY($1) AND status = ANY($2) RETURNING id"
            ),
        }
    }

    /// Selects the matching rows and, unless `dry_run` (or none match), changes them.
    ///
    /// # Errors
    /// Database errors; a `--status` not [`Self::accepted`].
    pub(crate) async fn apply(
        self,
        pool: &PgPool,
        filter: &MessageFilter,
        dry_run: bool,
        outbox: super::events::Outbox,
    ) -> Result<Changed, StoreError> {
        let accepted = self.accepted();
        let statuses = statuses(filter, accepted, accepted[0])?;
        // A retry takes cancelled rows only when named (`--id`, `--error-like`): a plain
        // `messages retry` after a cancelled campaign must not send it after all.
        let cancelled =
            self == Self::Cancel || !filter.ids.is_empty() || filter.error_like.is_some();
        let rows = select(pool, &statuses, filter, cancelled).await?;
        if dry_run || rows.is_empty() {
            return Ok(summary(self.name(), dry_run, &rows, 0));
        }
        let ids: Vec<Uuid> = rows.iter().map(|(id, _)| *id).collect();
        let mut update = sqlx::query_scalar(self.update()).bind(&ids).bind(&statuses);
        if self == Self::Cancel {
            update = update.bind(CANCELLED_PREFIX);
        }
        // A cancel writes its `cancelled` events in its transaction.
        let mut tx = pool.begin().await?;
        let changed: Vec<Uuid> = update.fetch_all(&mut *tx).await?;
        if self == Self::Cancel && outbox.is_on() {
            super::events::record(&mut *tx, crate::domain::EventKind::Cancelled, &changed).await?;
        }
        tx.commit().await?;
        let mut done = summary(self.name(), false, &rows, changed.len() as u64);
        done.changed_ids = changed;
        Ok(done)
    }
}

/// One sender's messages by status, and how many wait for its pause.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SenderMessages {
    /// Rows by status (every status, 0 when none).
    pub by_status: std::collections::BTreeMap<String, i64>,
    /// `SCHEDULED` rows whose sender is paused (`last_error` starts with `sender paused: `).
    pub paused: i64,
    /// The latest pause reason, if any row waits for one.
    pub paused_reason: Option<String>,
}

impl SenderMessages {
    /// No messages: every status at 0.
    pub(crate) fn zeros() -> Self {
        Self {
            by_status: crate::ops::metrics::STATUSES
                .iter()
                .map(|s| ((*s).to_owned(), 0))
                .collect(),
            paused: 0,
            paused_reason: None,
        }
    }
}

/// One message as the admin UI lists it: recipients masked, the error scrubbed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct MessageLine {
    /// Its id.
    pub id: Uuid,
    /// The sending mailbox.
    pub mailbox: String,
    /// Its status.
    pub status: String,
    /// Its subject.
    pub subject: String,
    /// The first `To` recipient, masked (`g***@example.org`), and how many more there are.
    pub to: String,
    /// Transient attempts so far.
    pub attempts: i32,
    /// Deferrals so far.
    pub deferrals: i32,
    /// `last_error`, addresses masked and credentials redacted.
    pub last_error: Option<String>,
    /// When it is (or was) due.
    pub scheduled_on: chrono::DateTime<chrono::Utc>,
    /// When its row last changed.
    pub updated_at: chrono::DateTime<chrono::Utc>,
    /// A `SCHEDULED` row's reason to wait ([`WaitReason`]'s keyword).
    pub wait_reason: Option<&'static str>,
    /// The same in words, with until when.
    pub waiting: Option<String>,
    /// A `BOUNCED` row's DSN status code and the NDR's text (scrubbed when it was read).
    pub bounce: Option<String>,
}

/// Every status, for a list without a status filter.
const ALL_STATUSES: [&str; 6] = crate::domain::MessageStatus::ALL_NAMES;

/// The messages matching `filter` (any status when it names none), most recently changed
/// first, at most `limit` — what `messages retry|cancel` would select, for the admin UI.
///
/// # Errors
/// Database errors.
pub(crate) async fn list(
    pool: &PgPool,
    filter: &MessageFilter,
    limit: u32,
) -> Result<Vec<MessageLine>, StoreError> {
    let statuses: Vec<&str> = match filter.status {
        Some(s) => vec![s.as_str()],
        None => ALL_STATUSES.to_vec(),
    };
    let sql = format!(
        "SELECT m.id, coalesce(s.address, t.sender_address), m.status, m.subject, \
             m.to_recipients->0->>'address', jsonb_array_length(m.to_recipients), \
             m.attempts, m.deferrals, m.last_error, m.scheduled_on, m.updated_at, \
             CASE WHEN m.status = {scheduled} THEN {reason} END, now(), \
             CASE WHEN m.bounce_code IS NOT NULL \
                 THEN concat_ws(' ', m.bounce_code, m.bounce_text) END \
         {MATCH} ORDER BY m.updated_at DESC, m.id LIMIT $5",
        scheduled = sql_status!(Scheduled),
        reason = wait_reason_sql!(),
    );
    type Row = (
        Uuid,
        String,
        String,
        String,
        Option<String>,
        i32,
        i32,
        i32,
        Option<String>,
        chrono::DateTime<chrono::Utc>,
        chrono::DateTime<chrono::Utc>,
        Option<String>,
        chrono::DateTime<chrono::Utc>,
        Option<String>,
    );
    let rows: Vec<Row> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(&statuses)
        .bind(&filter.sender)
        .bind(&filter.error_like)
        .bind(&filter.ids)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?;
    Ok(rows
        .into_iter()
        .map(
            |(
                id,
                mailbox,
                status,
                subject,
                first,
                n,
                attempts,
                deferrals,
                error,
                due,
                updated,
                reason,
                now,
                bounce,
            )| {
                let reason = reason.as_deref().map(WaitReason::of);
                let first =
                    first.map_or_else(|| "-".to_owned(), |a| crate::domain::mask_address(&a));
                MessageLine {
                    id,
                    status,
                    subject,
                    to: if n > 1 {
                        format!("{first} +{}", n - 1)
                    } else {
                        first
                    },
                    attempts,
                    deferrals,
                    last_error: error.map(|e| crate::mailer::redact::scrub_provider_text(&e)),
                    scheduled_on: due,
                    updated_at: updated,
                    wait_reason: reason.map(WaitReason::as_str),
                    waiting: reason.map(|r| r.describe(&mailbox, due, now)),
                    bounce,
                    mailbox,
                }
            },
        )
        .collect())
}
