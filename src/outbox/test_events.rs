//! Events for the outbox's unit tests.

use chrono::Utc;
use uuid::Uuid;

use crate::store::events::delivery::Event;

/// A `sent` event of one recipient, occurred now: `id` and `message_id` as given, at
/// transaction `xid`, position `seq`.
pub(super) fn sent(id: Uuid, message_id: Uuid, (xid, seq): (i64, i64)) -> Event {
    Event {
        id,
        kind: "sent".into(),
        message_id,
        campaign_id: None,
        sender: None,
        sender_id: None,
        recipients: 1,
        reason: None,
        next_attempt_at: None,
        recipient: None,
        occurred_at: Utc::now(),
        xid,
        seq,
    }
}
