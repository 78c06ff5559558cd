//! The attempt journal: what the mailer notes before a request that may deliver (when, and the
//! draft's id), kept in memory and written with the attempt's outcome.

use std::time::Instant;

use crate::{mailer::SendJournal, store::messages};

/// The mailer's [`SendJournal`] for one attempt: what it noted, kept in memory and written with
/// the attempt's outcome ([`messages::Attempted`]) — not a row write of its own.
pub(super) struct AttemptJournal {
    pub(super) noted: std::sync::Mutex<Option<messages::Attempted>>,
}

impl SendJournal for AttemptJournal {
    fn send_attempted(&self, draft_id: Option<&str>) {
        let mut noted = self.noted.lock().unwrap_or_else(|e| e.into_inner());
        let draft_id = draft_id
            .map(str::to_owned)
            .or_else(|| noted.take().and_then(|n| n.draft_id));
        *noted = Some(messages::Attempted {
            at: Instant::now(),
            draft_id,
        });
    }
}

impl AttemptJournal {
    pub(super) fn take(&self) -> Option<messages::Attempted> {
        self.noted.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Whether a request that may deliver the message was noted.
    pub(super) fn noted(&self) -> bool {
        self.noted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }
}
