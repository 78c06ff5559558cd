//! Which NDRs say that a budget is used up — the sending mailbox's or its tenant's — rather
//! than that one recipient failed. Each one pauses the budget it names (`pause.rs`) instead of
//! only marking its message `BOUNCED`, so the worker does not go on sending into NDRs.

/// A budget an NDR says is used up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LimitFinding {
    /// The sending mailbox's recipients per rolling 24 h: `5.1.90` ("Your message can't be
    /// sent because you've reached your daily limit for message recipients") or `5.2.2` with
    /// a *submission* quota (`SubmissionQuotaExceeded`: the sender's, not a full recipient
    /// mailbox's). Paused until the mailbox's rolling 24 h window frees.
    /// <https://learn.microsoft.com/exchange/mail-flow-best-practices/non-delivery-reports-in-exchange-online/fix-error-code-5-1-90>,
    /// <https://learn.microsoft.com/office365/servicedescriptions/exchange-online-service-description/exchange-online-limits#sending-limits>
    MailboxQuota,
    /// The Graph tenant's external recipients per rolling 24 h (TERRL): `5.7.233`. Its
    /// external mail is paused until its window frees.
    /// <https://learn.microsoft.com/exchange/mail-flow-best-practices/non-delivery-reports-in-exchange-online/non-delivery-reports-in-exchange-online>
    TenantLimit,
    /// The tenant is blocked from sending (`5.7.705`, "tenant has exceeded threshold"), or a
    /// new tenant's sending IPs are not trusted yet (`5.7.708`, `5.7.501` "access denied, spam
    /// abuse detected"). Microsoft gives no end (a support case lifts it), so its external
    /// mail is paused for 24 h (docs/decisions/0032-quota-ndrs-pause.md).
    /// <https://learn.microsoft.com/exchange/mail-flow-best-practices/non-delivery-reports-in-exchange-online/fix-error-code-5-7-700-through-5-7-750>
    TenantBlocked,
}

impl LimitFinding {
    /// What the NDR with enhanced status `code` and diagnostic `text` says of a budget, if
    /// anything. A `5.2.2` is a full recipient mailbox (`STOREDRV.Deliver: mailbox full`,
    /// `MapiExceptionShutoffQuotaExceeded`) unless its text names the submission quota.
    pub(crate) fn of(code: &str, text: &str) -> Option<Self> {
        match code {
            "5.1.90" => Some(Self::MailboxQuota),
            "5.2.2" if is_submission_quota(text) => Some(Self::MailboxQuota),
            "5.7.233" => Some(Self::TenantLimit),
            "5.7.705" | "5.7.708" | "5.7.501" => Some(Self::TenantBlocked),
            _ => None,
        }
    }

    /// Whether the pause adds the whole day's budget (nothing fits for 24 h) instead of filling
    /// the window up to it.
    pub(crate) fn whole_day(self) -> bool {
        self == Self::TenantBlocked
    }
}

/// Whether a `5.2.2`'s text is about the sender's submission quota
/// (`STOREDRV.Submission.Exception:SubmissionQuotaExceededException`, "submission quota").
fn is_submission_quota(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    text.contains("submissionquotaexceeded") || text.contains("submission quota")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bounces::ndr::Report;

    /// Every real NDR of `tests/fixtures/ndr/` (unknown users, a full recipient mailbox, …):
    /// none is about a budget of ours.
    #[test]
    fn no_real_fixture_pauses_anything() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/ndr");
        let mut read = 0;
        let mut codes = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "eml") {
                continue;
            }
            let report = Report::from_mime(&std::fs::read(&path).unwrap());
            for f in &report.failures {
                codes.push(f.code.clone());
                assert_eq!(LimitFinding::of(&f.code, &f.text), None, "{path:?}: {f:?}");
            }
            read += 1;
        }
        assert_eq!(read, 11);
        assert!(codes.iter().any(|c| c == "5.2.2"), "{codes:?}");
    }

    #[test]
    fn the_full_recipient_mailbox_of_exchange_2007_02_is_not_a_quota() {
        let raw = include_bytes!("../../tests/fixtures/ndr/exchange-2007-02.eml");
        let report = Report::from_mime(raw);
        let f = &report.failures[0];
        assert_eq!(f.code, "5.2.2");
        assert!(
            f.text.contains("MapiExceptionShutoffQuotaExceeded"),
            "{}",
            f.text
        );
        assert_eq!(LimitFinding::of(&f.code, &f.text), None);
    }

    #[test]
    fn quota_and_reputation_codes_are_findings() {
        assert_eq!(
            LimitFinding::of(
                "5.1.90",
                "Your message can't be sent because you've reached your daily limit for message recipients"
            ),
            Some(LimitFinding::MailboxQuota)
        );
        assert_eq!(
            LimitFinding::of(
                "5.2.2",
                "STOREDRV.Submission.Exception:SubmissionQuotaExceededException; Failed to process message due to a permanent exception with message Cannot submit message."
            ),
            Some(LimitFinding::MailboxQuota)
        );
        assert_eq!(
            LimitFinding::of("5.2.2", "Submission quota exceeded"),
            Some(LimitFinding::MailboxQuota)
        );
        assert_eq!(
            LimitFinding::of("5.2.2", "STOREDRV.Deliver: mailbox full"),
            None
        );
        assert_eq!(
            LimitFinding::of("5.7.233", ""),
            Some(LimitFinding::TenantLimit)
        );
        for code in ["5.7.705", "5.7.708", "5.7.501"] {
            assert_eq!(
                LimitFinding::of(code, ""),
                Some(LimitFinding::TenantBlocked)
            );
        }
        assert!(LimitFinding::TenantBlocked.whole_day() && !LimitFinding::MailboxQuota.whole_day());
        for code in ["5.1.1", "5.1.10", "5.7.1", "4.4.7", "5.2.3"] {
            assert_eq!(LimitFinding::of(code, "quota"), None, "{code}");
        }
    }
}
