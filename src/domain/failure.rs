//! What a failed recipient's enhanced status code asks of us — one table ([`RULES`]) for both
//! sources that tell a failure after Graph's `202`: a non-delivery report read back from the
//! sender's Inbox (`crate::bounces`) and the message trace's detail events (`crate::delivery`).
//! A hard code suppresses the recipient (`docs/suppressions.md`); a quota or reputation code
//! pauses the budget it names (docs/decisions/0032-quota-ndrs-pause.md); anything else only
//! bounces the message. docs/decisions/0044-delivery-trace.md.

use super::HardBounce;

/// A budget a failure says is used up — the sending mailbox's or its tenant's — rather than
/// that one recipient failed. Each one pauses the budget it names instead of only marking its
/// message `BOUNCED`, so the worker does not go on sending into failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitFinding {
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
    /// What the failure with enhanced status `code` and diagnostic `text` says of a budget, if
    /// anything ([`action_of`]).
    pub fn of(code: &str, text: &str) -> Option<Self> {
        match action_of(code, text) {
            FailureAction::Pause(finding) => Some(finding),
            _ => None,
        }
    }

    /// Whether the pause adds the whole day's budget (nothing fits for 24 h) instead of filling
    /// the window up to it.
    pub fn whole_day(self) -> bool {
        self == Self::TenantBlocked
    }
}

/// What one failed recipient asks of us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureAction {
    /// The address is permanently undeliverable: suppress it.
    Suppress(HardBounce),
    /// A budget of ours is used up: pause it.
    Pause(LimitFinding),
    /// Neither: the message is `BOUNCED`, nothing more.
    Bounce,
}

/// What a code does in [`RULES`].
#[derive(Debug, Clone, Copy)]
enum Rule {
    /// A hard bounce, with what it means.
    Hard(&'static str),
    /// A budget used up.
    Limit(LimitFinding),
    /// `5.2.2`: the sender's submission quota when its text says so, else a full recipient
    /// mailbox (`STOREDRV.Deliver: mailbox full`, `MapiExceptionShutoffQuotaExceeded`): soft.
    SubmissionQuotaIfNamed,
}

/// The one table: enhanced status code → rule. A code not in it only bounces (4.x.x is
/// transient by definition; the other 5.x.x codes name the sender, the message or a policy:
/// 5.1.7, 5.1.8, 5.2.3, 5.7.1 …).
/// Hard codes (suppress the recipient; the codes left out on purpose: `docs/suppressions.md`):
/// - RFC 3463 §3.2 (subject 1, addressing; subject 2, mailbox):
///   <https://www.rfc-editor.org/rfc/rfc3463#section-3.2>
/// - Exchange Online's NDRs 5.1.1 to 5.1.20 (5.1.10: recipient not found by SMTP address lookup):
///   <https://learn.microsoft.com/exchange/troubleshoot/email-delivery/ndr/fix-error-code-550-5-1-1-through-5-1-20-in-exchange-online>
/// - 5.4.1, directory-based edge blocking: the recipient's address does not exist in the
///   recipient's Microsoft 365 tenant:
///   <https://support.microsoft.com/topic/c0e98a8e-81db-49c2-9bf1-32a1734d3e77>
///
/// Quota and reputation codes (pause): [`LimitFinding`]'s variants cite their pages.
const RULES: &[(&str, Rule)] = &[
    ("5.1.1", Rule::Hard("recipient address unknown")),
    ("5.1.2", Rule::Hard("recipient domain does not exist")),
    ("5.1.3", Rule::Hard("recipient address syntax invalid")),
    (
        "5.1.6",
        Rule::Hard("recipient mailbox moved, no forwarding address"),
    ),
    (
        "5.1.10",
        Rule::Hard("recipient not found by SMTP address lookup"),
    ),
    ("5.2.1", Rule::Hard("recipient mailbox disabled")),
    (
        "5.4.1",
        Rule::Hard("recipient address rejected (not in the recipient's tenant)"),
    ),
    ("5.1.90", Rule::Limit(LimitFinding::MailboxQuota)),
    ("5.2.2", Rule::SubmissionQuotaIfNamed),
    ("5.7.233", Rule::Limit(LimitFinding::TenantLimit)),
    ("5.7.705", Rule::Limit(LimitFinding::TenantBlocked)),
    ("5.7.708", Rule::Limit(LimitFinding::TenantBlocked)),
    ("5.7.501", Rule::Limit(LimitFinding::TenantBlocked)),
];

/// What a failure with `code` and diagnostic `text` asks of us. `code` is an enhanced status
/// code (`5.1.1`), alone or inside the status text a report carries (`550 5.1.1 RESOLVER.ADR…`,
/// `#550 5.4.1 …##`): its first `class.subject.detail` token counts. Pure.
pub fn action_of(code: &str, text: &str) -> FailureAction {
    let Some(code) = enhanced_code(code) else {
        return FailureAction::Bounce;
    };
    match RULES.iter().find(|(c, _)| *c == code).map(|(_, r)| *r) {
        Some(Rule::Hard(meaning)) => FailureAction::Suppress(HardBounce {
            code: code.to_owned(),
            meaning,
        }),
        Some(Rule::Limit(finding)) => FailureAction::Pause(finding),
        Some(Rule::SubmissionQuotaIfNamed) if is_submission_quota(text) => {
            FailureAction::Pause(LimitFinding::MailboxQuota)
        }
        Some(Rule::SubmissionQuotaIfNamed) | None => FailureAction::Bounce,
    }
}

/// Whether the delivery status in `dsn_code` is a hard bounce ([`action_of`]'s `Suppress`).
/// No code → `None`.
pub fn classify(dsn_code: &str) -> Option<HardBounce> {
    match action_of(dsn_code, "") {
        FailureAction::Suppress(hard) => Some(hard),
        _ => None,
    }
}

/// The first `class.subject.detail` token of `text`.
pub(crate) fn enhanced_code(text: &str) -> Option<&str> {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map(|t| t.trim_matches('.'))
        .find(|t| is_enhanced_code(t))
}

/// Whether a `5.2.2`'s text is about the sender's submission quota
/// (`STOREDRV.Submission.Exception:SubmissionQuotaExceededException`, "submission quota").
fn is_submission_quota(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    text.contains("submissionquotaexceeded") || text.contains("submission quota")
}

/// `class.subject.detail`: class 2, 4 or 5, subject up to 3 digits, detail up to 3 digits
/// (RFC 3463 §2).
fn is_enhanced_code(token: &str) -> bool {
    let parts: Vec<&str> = token.split('.').collect();
    matches!(parts.as_slice(), [class, subject, detail]
        if matches!(*class, "2" | "4" | "5")
            && [subject, detail].iter().all(|p| (1..=3).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_recipients_and_dbeb_rejections_are_hard() {
        for (given, code) in [
            ("5.1.1", "5.1.1"),
            ("550 5.1.1 RESOLVER.ADR.RecipNotFound; not found", "5.1.1"),
            (
                "#550 5.1.10 RESOLVER.ADR.RecipientNotFound; Recipient not found by SMTP address lookup ##",
                "5.1.10",
            ),
            (
                "550 5.4.1 Recipient address rejected: Access denied.",
                "5.4.1",
            ),
            (" 5.1.2 ", "5.1.2"),
            ("5.2.1.", "5.2.1"),
        ] {
            assert_eq!(
                classify(given).map(|h| h.code),
                Some(code.to_owned()),
                "{given}"
            );
        }
        assert_eq!(
            classify("5.1.1").unwrap().reason(),
            "5.1.1 recipient address unknown"
        );
    }

    #[test]
    fn sender_tenant_message_and_transient_codes_are_not() {
        for given in [
            "5.1.8",  // our mailbox is blocked for outbound spam
            "5.1.90", // our mailbox's daily recipient limit
            "5.1.7",  // invalid sender address
            "550 5.7.233 tenant external recipient limit",
            "5.7.1", // delivery not authorized (policy)
            "5.2.2", // mailbox full
            "5.2.3", // message too large
            "5.4.4", // unable to route
            "4.1.1", // transient class
            "4.4.7",
            "2.0.0",
            "",
            "550",
            "5.1",
            "5.1.1.1",
            "15.1.1",
            "5.1.1000",
        ] {
            assert_eq!(classify(given), None, "{given}");
        }
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
        // The trace's detail events carry the code inside the text (`LED=550 5.1.90 …`).
        assert_eq!(
            LimitFinding::of("550 5.1.90 RESOLVER.ADR.RecipLimit", ""),
            Some(LimitFinding::MailboxQuota)
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

    #[test]
    fn every_code_has_one_action() {
        assert_eq!(
            action_of("5.1.10", ""),
            FailureAction::Suppress(classify("5.1.10").unwrap())
        );
        assert_eq!(
            action_of("5.1.90", ""),
            FailureAction::Pause(LimitFinding::MailboxQuota)
        );
        assert_eq!(action_of("5.7.1", ""), FailureAction::Bounce);
        let mut codes: Vec<&str> = RULES.iter().map(|(c, _)| *c).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), RULES.len(), "a code twice in RULES");
    }
}
