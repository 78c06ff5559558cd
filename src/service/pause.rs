//! Paused senders: a sender whose credentials are missing (`env:` not set, `file:` unreadable)
//! or refused (AADSTS…) is *paused* instead of failing its backlog. Its messages go back to
//! `SCHEDULED` without counting an attempt, until the pause's next probe (5 s, doubling, capped
//! at 15 min); the first message due after that is the probe. The pause ends when a probe gets
//! past the credentials, or when the sender's configuration fingerprint (the factory's config
//! digest, or the resolution error) changes — a set variable, a rotated secret, a fixed row.
//!
//! The state is per process (each replica finds out by itself, within one probe); the rows
//! show it to every reader: a paused message's `last_error` starts with [`PAUSED_PREFIX`].

use std::{collections::HashMap, sync::Mutex, time::Duration};

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// The longest wait between two probes: 15 min.
pub(crate) const MAX_PROBE_INTERVAL: Duration = Duration::from_secs(15 * 60);

/// A probe that has not reported back within this is presumed lost: 2 min.
const PROBE_LOST_AFTER: chrono::TimeDelta = chrono::TimeDelta::minutes(2);

/// The wait before probe `level` (1, 2, …): 5 s × 2^(level−1), capped at [`MAX_PROBE_INTERVAL`].
pub(crate) fn probe_interval(level: u32) -> Duration {
    let ms = 5_000u64.saturating_mul(1u64 << level.saturating_sub(1).min(20));
    Duration::from_millis(ms).min(MAX_PROBE_INTERVAL)
}

#[derive(Debug, Clone)]
struct Pause {
    mailbox: String,
    reason: String,
    fingerprint: String,
    level: u32,
    next_probe: DateTime<Utc>,
    probing_since: Option<DateTime<Utc>>,
}

/// What to do with a message of a sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Send it (the sender is not paused, this is its probe, or its configuration changed).
    Go {
        /// The pause this ends because the configuration changed: `(mailbox, reason)`.
        resumed: Option<(String, String)>,
    },
    /// Do not try: defer it to `until` (the next probe).
    Wait {
        /// The next probe.
        until: DateTime<Utc>,
        /// Why the sender is paused.
        reason: String,
    },
}

/// A pause that started or changed its reason: log `mail.sender.paused` once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Paused {
    /// When its messages come back.
    pub until: DateTime<Utc>,
    /// Whether this is a new state (a new pause or another reason): log it.
    pub changed: bool,
    /// The probe level (1 = first).
    pub level: u32,
}

/// The paused senders of this process, by sender id.
#[derive(Debug, Default)]
pub(crate) struct SenderPauses {
    pauses: Mutex<HashMap<Uuid, Pause>>,
}

impl SenderPauses {
    /// Decides for one message of `sender` whose configuration fingerprint is `fingerprint`.
    pub(crate) fn admit(&self, sender: Uuid, fingerprint: &str, now: DateTime<Utc>) -> Admit {
        let Ok(mut pauses) = self.pauses.lock() else {
            return Admit::Go { resumed: None };
        };
        let Some(pause) = pauses.get_mut(&sender) else {
            return Admit::Go { resumed: None };
        };
        if pause.fingerprint != fingerprint {
            let pause = pauses.remove(&sender).expect("just seen");
            return Admit::Go {
                resumed: Some((pause.mailbox, pause.reason)),
            };
        }
        let probe_free = pause
            .probing_since
            .is_none_or(|since| now - since > PROBE_LOST_AFTER);
        if now >= pause.next_probe && probe_free {
            pause.probing_since = Some(now);
            return Admit::Go { resumed: None };
        }
        Admit::Wait {
            until: pause.next_probe.max(now),
            reason: pause.reason.clone(),
        }
    }

    /// The credentials of `sender` were missing or refused (`reason`): starts the pause or
    /// moves it to its next level.
    pub(crate) fn failed(
        &self,
        sender: Uuid,
        mailbox: &str,
        reason: &str,
        fingerprint: &str,
        now: DateTime<Utc>,
    ) -> Paused {
        let mut pauses = match self.pauses.lock() {
            Ok(p) => p,
            Err(poisoned) => poisoned.into_inner(),
        };
        let at = |level: u32| {
            now + chrono::Duration::from_std(probe_interval(level))
                .unwrap_or(chrono::TimeDelta::MAX)
        };
        match pauses.get_mut(&sender) {
            Some(pause) if pause.fingerprint == fingerprint => {
                let changed = pause.reason != reason;
                // Only a probe (or the first failure after a change) moves the level on; the
                // other messages that were already running just join the pause.
                if pause.probing_since.is_some() || changed {
                    pause.level += 1;
                    pause.next_probe = at(pause.level);
                    pause.probing_since = None;
                }
                pause.reason = reason.to_owned();
                Paused {
                    until: pause.next_probe,
                    changed,
                    level: pause.level,
                }
            }
            _ => {
                let pause = Pause {
                    mailbox: mailbox.to_owned(),
                    reason: reason.to_owned(),
                    fingerprint: fingerprint.to_owned(),
                    level: 1,
                    next_probe: at(1),
                    probing_since: None,
                };
                let until = pause.next_probe;
                pauses.insert(sender, pause);
                Paused {
                    until,
                    changed: true,
                    level: 1,
                }
            }
        }
    }

    /// A message of `sender` got past its credentials: ends the pause. Returns the ended
    /// pause's `(mailbox, reason)`.
    pub(crate) fn succeeded(&self, sender: Uuid) -> Option<(String, String)> {
        let mut pauses = self.pauses.lock().ok()?;
        pauses.remove(&sender).map(|p| (p.mailbox, p.reason))
    }

    /// A probe ended without telling (our limiter or the provider's throttling answered before
    /// the credentials were used): the next message may probe.
    pub(crate) fn inconclusive(&self, sender: Uuid) {
        if let Ok(mut pauses) = self.pauses.lock()
            && let Some(pause) = pauses.get_mut(&sender)
        {
            pause.probing_since = None;
        }
    }

    /// The paused senders: `(sender id, fingerprint)`.
    pub(crate) fn paused(&self) -> Vec<(Uuid, String)> {
        self.pauses
            .lock()
            .map(|p| p.iter().map(|(k, v)| (*k, v.fingerprint.clone())).collect())
            .unwrap_or_default()
    }

    /// Ends the pause of `sender` because its configuration changed; returns `(mailbox,
    /// reason)`.
    pub(crate) fn resume(&self, sender: Uuid) -> Option<(String, String)> {
        self.succeeded(sender)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, 8, 0, 0).unwrap()
    }

    #[test]
    fn probes_back_off_doubling_to_fifteen_minutes() {
        assert_eq!(probe_interval(1), Duration::from_secs(5));
        assert_eq!(probe_interval(2), Duration::from_secs(10));
        assert_eq!(probe_interval(8), Duration::from_secs(640));
        assert_eq!(probe_interval(9), MAX_PROBE_INTERVAL);
        assert_eq!(probe_interval(40), MAX_PROBE_INTERVAL);
    }

    #[test]
    fn a_pause_holds_messages_until_its_probe_and_a_changed_config_resumes_it() {
        let pauses = SenderPauses::default();
        let id = Uuid::new_v4();
        assert_eq!(pauses.admit(id, "a", t0()), Admit::Go { resumed: None });
        let first = pauses.failed(id, "mb@x", "env:S not set", "a", t0());
        assert!(first.changed);
        assert_eq!(first.until, t0() + chrono::Duration::seconds(5));
        // A second message that was already running joins without a new log line or level.
        let again = pauses.failed(id, "mb@x", "env:S not set", "a", t0());
        assert!(!again.changed);
        assert_eq!(again.level, 1);
        // Before the probe: wait.
        let soon = t0() + chrono::Duration::seconds(1);
        assert!(
            matches!(pauses.admit(id, "a", soon), Admit::Wait { until, .. } if until == first.until)
        );
        // At the probe: one goes, the next waits.
        let later = t0() + chrono::Duration::seconds(6);
        assert_eq!(pauses.admit(id, "a", later), Admit::Go { resumed: None });
        assert!(matches!(pauses.admit(id, "a", later), Admit::Wait { .. }));
        let second = pauses.failed(id, "mb@x", "env:S not set", "a", later);
        assert!(!second.changed);
        assert_eq!(second.level, 2);
        assert_eq!(second.until, later + chrono::Duration::seconds(10));
        // The configuration changed: go, and the pause is over.
        assert_eq!(
            pauses.admit(id, "b", later),
            Admit::Go {
                resumed: Some(("mb@x".into(), "env:S not set".into()))
            }
        );
        assert!(pauses.paused().is_empty());
    }
}
