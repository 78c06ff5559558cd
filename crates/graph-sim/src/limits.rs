//! Exchange's per-mailbox limits as rolling windows over the sim's clock (all times in ms).
//!
//! - messages in any rolling 60 s and recipients in any rolling 24 h, per mailbox (Exchange Online
//!   sending limits: 30 messages a minute, 10,000 recipients a day,
//!   <https://learn.microsoft.com/office365/servicedescriptions/exchange-online-service-description/exchange-online-limits#sending-limits>);
//! - requests in any rolling 10 min per app and mailbox (Outlook service limits: 10,000 requests
//!   per 10 minutes, <https://learn.microsoft.com/graph/throttling-limits#outlook-service-limits>).
//!
//! An entry stamped `t` is in a window of length `w` at `now` while `now < t + w`; the
//! `Retry-After` of a refusal is the time until enough entries age out, rounded up to whole
//! seconds (at least 1).

use std::collections::{HashMap, VecDeque};

use super::config::{MailboxLimits, MinuteOverflow};

/// 60 s in ms.
pub(crate) const MINUTE_MS: i64 = 60_000;
/// 24 h in ms.
pub(crate) const DAY_MS: i64 = 86_400_000;
/// 10 min in ms.
pub(crate) const TEN_MINUTES_MS: i64 = 600_000;

/// 5 min in ms.
pub(crate) const FIVE_MINUTES_MS: i64 = 300_000;
/// The request bytes one app may upload (`PATCH`, `POST`, `PUT`) to one mailbox in any 5 min:
/// 150 MB ("150 megabytes (MB) upload (PATCH, POST, PUT) in a 5 minute period", Outlook
/// service limits, per app ID and mailbox,
/// <https://learn.microsoft.com/graph/throttling-limits#outlook-service-limits>).
pub const UPLOAD_BYTES_PER_5_MINUTES: u64 = 150 * 1024 * 1024;

/// The request bytes uploaded by one app to one mailbox in the last 5 minutes.
#[derive(Debug, Default)]
pub(crate) struct UploadBudget {
    entries: VecDeque<(i64, u64)>,
    sum: u64,
}

impl UploadBudget {
    /// Counts `bytes` at `now` when they fit in [`UPLOAD_BYTES_PER_5_MINUTES`] with the last
    /// 5 minutes' bytes; else counts nothing and returns the ms until enough age out.
    pub(crate) fn charge(&mut self, now: i64, bytes: u64) -> Result<(), i64> {
        while self
            .entries
            .front()
            .is_some_and(|&(t, _)| t + FIVE_MINUTES_MS <= now)
        {
            if let Some((_, b)) = self.entries.pop_front() {
                self.sum -= b;
            }
        }
        if self.sum + bytes <= UPLOAD_BYTES_PER_5_MINUTES {
            self.sum += bytes;
            self.entries.push_back((now, bytes));
            return Ok(());
        }
        let mut left = self.sum;
        for &(t, b) in &self.entries {
            left -= b;
            if left + bytes <= UPLOAD_BYTES_PER_5_MINUTES {
                return Err((t + FIVE_MINUTES_MS - now).max(1));
            }
        }
        Err(FIVE_MINUTES_MS)
    }
}

/// What the sending limits say about one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendVerdict {
    /// Within every limit; recorded.
    Accept,
    /// Over the minute limit in [`MinuteOverflow::AcceptDelayed`] mode; recorded as delayed.
    AcceptDelayed,
    /// Over the minute limit: retry after this many ms.
    RefuseMinute { retry_after_ms: i64 },
    /// Over the day's recipients: retry after this many ms; `None` when the message alone has
    /// more recipients than the whole day allows (it never fits).
    RefuseDay { retry_after_ms: Option<i64> },
}

/// One mailbox's rolling windows and the peaks seen in them.
#[derive(Debug, Default)]
pub(crate) struct MailboxWindows {
    /// Accepted (and delayed) messages of the last 60 s.
    sends: VecDeque<i64>,
    /// Accepted messages of the last 24 h with their recipient counts.
    recipients: VecDeque<(i64, u32)>,
    /// The sum of `recipients`.
    recipients_sum: u64,
    /// Requests of the last 10 min, per client id.
    requests: HashMap<String, VecDeque<i64>>,
    /// The current UTC minute (`ms / 60,000`) and its messages.
    utc_minute: Option<(i64, u32)>,
    /// The most messages seen in any rolling 60 s.
    pub max_in_rolling_60s: u32,
    /// The most messages seen in one UTC minute.
    pub max_in_utc_minute: u32,
}

impl MailboxWindows {
    fn prune(&mut self, now: i64) {
        while self.sends.front().is_some_and(|&t| t + MINUTE_MS <= now) {
            self.sends.pop_front();
        }
        while let Some(&(t, n)) = self.recipients.front() {
            if t + DAY_MS > now {
                break;
            }
            self.recipients.pop_front();
            self.recipients_sum -= u64::from(n);
        }
    }

    /// Counts one request of `client_id` against `limit` requests per 10 min, unless it is over.
    ///
    /// # Errors
    /// The ms until the oldest counted request ages out.
    pub(crate) fn check_request(
        &mut self,
        client_id: &str,
        now: i64,
        limit: u32,
    ) -> Result<(), i64> {
        let window = self.requests.entry(client_id.to_owned()).or_default();
        while window.front().is_some_and(|&t| t + TEN_MINUTES_MS <= now) {
            window.pop_front();
        }
        let limit = limit as usize;
        if window.len() >= limit {
            let blocking = window[window.len() - limit];
            return Err(blocking + TEN_MINUTES_MS - now);
        }
        window.push_back(now);
        Ok(())
    }

    /// Checks one message of `recipients` recipients against the day then the minute limit and
    /// records it when it is accepted (delayed or not).
    pub(crate) fn check_send(
        &mut self,
        now: i64,
        recipients: u32,
        limits: &MailboxLimits,
    ) -> SendVerdict {
        self.prune(now);
        let wanted = u64::from(recipients);
        if self.recipients_sum + wanted > limits.recipients_per_day {
            return SendVerdict::RefuseDay {
                retry_after_ms: self.day_retry_after(now, wanted, limits.recipients_per_day),
            };
        }
        let per_minute = limits.messages_per_minute as usize;
        let mut verdict = SendVerdict::Accept;
        if self.sends.len() >= per_minute {
            match limits.minute_overflow {
                MinuteOverflow::Refuse => {
                    let blocking = self.sends[self.sends.len() - per_minute];
                    return SendVerdict::RefuseMinute {
                        retry_after_ms: blocking + MINUTE_MS - now,
                    };
                }
                MinuteOverflow::AcceptDelayed => verdict = SendVerdict::AcceptDelayed,
            }
        }
        self.record(now, recipients);
        verdict
    }

    fn day_retry_after(&self, now: i64, wanted: u64, limit: u64) -> Option<i64> {
        if wanted > limit {
            return None;
        }
        let mut remaining = self.recipients_sum;
        for &(t, n) in &self.recipients {
            remaining -= u64::from(n);
            if remaining + wanted <= limit {
                return Some(t + DAY_MS - now);
            }
        }
        // Unreachable while `wanted <= limit`: once every entry aged out, it fits.
        Some(DAY_MS)
    }

    fn record(&mut self, now: i64, recipients: u32) {
        self.sends.push_back(now);
        self.recipients.push_back((now, recipients));
        self.recipients_sum += u64::from(recipients);
        let in_window = u32::try_from(self.sends.len()).unwrap_or(u32::MAX);
        self.max_in_rolling_60s = self.max_in_rolling_60s.max(in_window);
        let minute = now.div_euclid(MINUTE_MS);
        let count = match self.utc_minute {
            Some((m, c)) if m == minute => c + 1,
            _ => 1,
        };
        self.utc_minute = Some((minute, count));
        self.max_in_utc_minute = self.max_in_utc_minute.max(count);
    }

    /// Recipients of the messages of the last 24 h at `now`.
    pub(crate) fn recipients_last_24h(&mut self, now: i64) -> u64 {
        self.prune(now);
        self.recipients_sum
    }

    /// Messages of the last 60 s at `now`.
    pub(crate) fn messages_last_60s(&mut self, now: i64) -> u32 {
        self.prune(now);
        u32::try_from(self.sends.len()).unwrap_or(u32::MAX)
    }
}

/// One tenant's external recipients of the last 24 h (its external recipient rate limit).
#[derive(Debug, Default)]
pub(crate) struct TenantWindow {
    entries: VecDeque<(i64, u32)>,
    sum: u64,
}

impl TenantWindow {
    /// Whether `external` recipients at `now` fit under `limit` per rolling 24 h (counting
    /// nothing).
    pub(crate) fn fits(&mut self, now: i64, external: u32, limit: u64) -> bool {
        while let Some(&(t, n)) = self.entries.front() {
            if t + DAY_MS > now {
                break;
            }
            self.entries.pop_front();
            self.sum -= u64::from(n);
        }
        self.sum + u64::from(external) <= limit
    }

    /// Counts `external` recipients at `now` when they fit under `limit` per rolling 24 h;
    /// `false`, counting nothing, when they do not.
    pub(crate) fn try_count(&mut self, now: i64, external: u32, limit: u64) -> bool {
        if !self.fits(now, external, limit) {
            return false;
        }
        self.entries.push_back((now, external));
        self.sum += u64::from(external);
        true
    }
}

/// A `Retry-After` header value (whole or fractional seconds) in ms; `None` when it is not a
/// number of seconds (an HTTP date is not used by Graph).
pub(crate) fn retry_after_ms(value: &str) -> Option<i64> {
    let secs: f64 = value.trim().parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| (secs * 1000.0).ceil() as i64)
}

/// A wait in ms as a `Retry-After` value: whole seconds, rounded up, at least 1.
pub(crate) fn retry_after_secs(ms: i64) -> u64 {
    let secs = (ms.max(0) as u64).div_ceil(1000);
    secs.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(per_minute: u32, per_day: u64) -> MailboxLimits {
        MailboxLimits {
            messages_per_minute: per_minute,
            recipients_per_day: per_day,
            // These tests probe the refusal; the default accepts and delays.
            minute_overflow: MinuteOverflow::Refuse,
            ..MailboxLimits::default()
        }
    }

    #[test]
    fn the_upload_budget_takes_150_megabytes_per_5_minutes_then_says_when_room_frees() {
        let mut budget = UploadBudget::default();
        let chunk = 50 * 1024 * 1024;
        assert_eq!(budget.charge(0, chunk), Ok(()));
        assert_eq!(budget.charge(1_000, chunk), Ok(()));
        assert_eq!(budget.charge(2_000, chunk), Ok(()));
        // 150 MB used: one byte more waits until the first 50 MB age out.
        assert_eq!(budget.charge(3_000, 1), Err(FIVE_MINUTES_MS - 3_000));
        assert_eq!(budget.charge(FIVE_MINUTES_MS, 1), Ok(()));
    }

    #[test]
    fn the_31st_message_within_60_s_waits_for_the_oldest_to_age_out() {
        let mut w = MailboxWindows::default();
        let l = limits(30, 10_000);
        for i in 0..30 {
            assert_eq!(w.check_send(1_000 * i, 1, &l), SendVerdict::Accept);
        }
        // At 30.5 s the oldest (0 s) leaves the window at 60 s: 29.5 s to go.
        assert_eq!(
            w.check_send(30_500, 1, &l),
            SendVerdict::RefuseMinute {
                retry_after_ms: 29_500
            }
        );
        assert_eq!(retry_after_secs(29_500), 30);
        assert_eq!(
            w.check_send(59_999, 1, &l),
            SendVerdict::RefuseMinute { retry_after_ms: 1 }
        );
        assert_eq!(w.check_send(60_000, 1, &l), SendVerdict::Accept);
        assert_eq!(w.max_in_rolling_60s, 30);
        assert_eq!(w.messages_last_60s(60_000), 30);
    }

    #[test]
    fn delayed_mode_accepts_past_the_minute_limit_and_says_so() {
        let mut w = MailboxWindows::default();
        let l = MailboxLimits {
            minute_overflow: MinuteOverflow::AcceptDelayed,
            ..limits(2, 100)
        };
        assert_eq!(w.check_send(0, 1, &l), SendVerdict::Accept);
        assert_eq!(w.check_send(1, 1, &l), SendVerdict::Accept);
        assert_eq!(w.check_send(2, 1, &l), SendVerdict::AcceptDelayed);
        assert_eq!(w.max_in_rolling_60s, 3);
    }

    #[test]
    fn recipients_age_out_after_24_hours() {
        let mut w = MailboxWindows::default();
        let l = limits(1_000, 1_000);
        assert_eq!(w.check_send(0, 600, &l), SendVerdict::Accept);
        assert_eq!(w.check_send(3_600_000, 400, &l), SendVerdict::Accept);
        // 1,000 used; 300 more must wait until the first 600 leave at 24 h.
        assert_eq!(
            w.check_send(7_200_000, 300, &l),
            SendVerdict::RefuseDay {
                retry_after_ms: Some(DAY_MS - 7_200_000)
            }
        );
        assert_eq!(w.recipients_last_24h(DAY_MS - 1), 1_000);
        assert_eq!(w.recipients_last_24h(DAY_MS), 400);
        assert_eq!(w.check_send(DAY_MS, 300, &l), SendVerdict::Accept);
        // A message larger than the whole day never fits.
        assert_eq!(
            w.check_send(DAY_MS, 1_001, &l),
            SendVerdict::RefuseDay {
                retry_after_ms: None
            }
        );
    }

    #[test]
    fn rolling_and_utc_minute_peaks_differ_across_a_minute_edge() {
        let mut w = MailboxWindows::default();
        let l = limits(100, 10_000);
        // 00:40 … 00:59, then 01:00 … 01:19: 40 in one rolling minute, 20 per UTC minute.
        for i in 0..40 {
            assert_eq!(w.check_send(40_000 + 1_000 * i, 1, &l), SendVerdict::Accept);
        }
        assert_eq!(w.max_in_utc_minute, 20);
        assert_eq!(w.max_in_rolling_60s, 40);
    }

    #[test]
    fn requests_per_ten_minutes_are_counted_per_app() {
        let mut w = MailboxWindows::default();
        assert_eq!(w.check_request("a", 0, 2), Ok(()));
        assert_eq!(w.check_request("a", 1_000, 2), Ok(()));
        assert_eq!(w.check_request("a", 2_000, 2), Err(TEN_MINUTES_MS - 2_000));
        assert_eq!(w.check_request("b", 2_000, 2), Ok(()));
        assert_eq!(w.check_request("a", TEN_MINUTES_MS, 2), Ok(()));
    }

    #[test]
    fn a_tenants_external_recipients_age_out_after_24_hours() {
        let mut t = TenantWindow::default();
        assert!(t.try_count(0, 4, 5));
        assert!(!t.try_count(1_000, 2, 5), "6 > 5: nothing counted");
        assert!(t.try_count(2_000, 1, 5));
        assert!(!t.try_count(DAY_MS - 1, 1, 5));
        assert!(t.try_count(DAY_MS, 4, 5), "the first 4 left the window");
    }

    #[test]
    fn retry_after_values_are_read_as_seconds() {
        assert_eq!(retry_after_ms("315"), Some(315_000));
        assert_eq!(retry_after_ms("2.128"), Some(2_128));
        assert_eq!(retry_after_ms("Wed, 21 Oct 2026 07:28:00 GMT"), None);
        assert_eq!(retry_after_ms("-1"), None);
    }

    #[test]
    fn retry_after_is_rounded_up_to_whole_seconds_and_never_zero() {
        assert_eq!(retry_after_secs(0), 1);
        assert_eq!(retry_after_secs(1), 1);
        assert_eq!(retry_after_secs(1_000), 1);
        assert_eq!(retry_after_secs(1_001), 2);
        assert_eq!(retry_after_secs(-5), 1);
    }
}
