//! What each finding means and how to fix it: the token endpoint's `AADSTS…` codes, Graph's
//! answers to the mailbox request, the sender's address and its configured limits. Pure
//! functions from findings to [`Check`] lines (unit-tested here; the requests are in
//! `crate::mailer::graph::verify`).
//!
//! Sources: the AADSTS codes from Microsoft's reference
//! (<https://learn.microsoft.com/entra/identity-platform/reference-error-codes>, and for revoked
//! keys <https://learn.microsoft.com/entra/workload-id/troubleshoot-revoked-credentials>); the
//! mailbox scope from <https://learn.microsoft.com/exchange/permissions-exo/application-rbac>
//! (RBAC for Applications; changes are cached, "between 30 minutes and 2 hours") and
//! <https://learn.microsoft.com/graph/auth-limit-mailbox-access> (application access policies:
//! a change "can take longer than 1 hour"); Exchange Online's limits from
//! <https://learn.microsoft.com/office365/servicedescriptions/exchange-online-service-description/exchange-online-limits>
//! (30 messages a minute, 10,000 recipients a day); the onmicrosoft.com limit (100 external
//! recipients per 24 h, NDR `550 5.7.236`, message-center MC1302901) from the Exchange team's
//! <https://techcommunity.microsoft.com/blog/exchange/limiting-onmicrosoft-domain-usage-for-sending-emails/4446167>.

use crate::{mailer::graph::verify::ProbeAnswer, rate_limit::RateLimits};

use super::report::Check;

/// The cause and fix of a token endpoint refusal by its `AADSTS` number; `None` for one not
/// mapped (the line then quotes Microsoft's text and points at its error lookup page).
pub(crate) fn aadsts(code: u32) -> Option<(&'static str, &'static str)> {
    Some(match code {
        7000215 => (
            "wrong client secret",
            "copy the secret's Value (not its Secret ID) from the app registration's Certificates & secrets into the sender's secret, or add a new secret there",
        ),
        7000222 => (
            "the client secret has expired",
            "add a new client secret to the app registration (Certificates & secrets), put it in the sender's secret, then delete the expired one; a certificate credential lasts longer",
        ),
        7005003 => (
            "the client secret was revoked",
            "add a new client secret to the app registration and put it in the sender's secret",
        ),
        700016 => (
            "unknown application: no app with this client id in the tenant",
            "check the sender's clientId (the app registration's Application (client) ID) and graphTenantId; a multi-tenant app needs admin consent in this tenant",
        ),
        90002 => (
            "unknown tenant",
            "check the sender's graphTenantId (the Directory (tenant) ID or a verified domain of the tenant) and GRAPH_LOGIN_BASE_URL's cloud",
        ),
        900023 => (
            "the tenant id is neither a valid tenant id nor a domain",
            "set the sender's graphTenantId to the Directory (tenant) ID (a GUID) or a verified domain",
        ),
        700027 => (
            "the certificate is not registered on the app (or its key was revoked), or the assertion's signature is bad",
            "upload the certificate (its public part, .cer/.pem) to the app registration's Certificates & secrets; the sender's secret must hold that certificate and its private key",
        ),
        700024 => (
            "the client assertion is not within its valid time range",
            "set this host's clock right (NTP): the assertion is dated by it",
        ),
        7000216 | 7000218 => (
            "no credential was sent",
            "set the sender's secret (a client secret or a certificate bundle)",
        ),
        7000112 => (
            "the application is disabled",
            "enable the app's service principal (Enterprise applications → the app → Properties → Enabled for users to sign in)",
        ),
        700025 => (
            "the app is registered as a public client, which may not use a secret",
            "in the app registration's Authentication, set Allow public client flows to No",
        ),
        70011 => (
            "the scope was refused",
            "check GRAPH_API_BASE_URL: the scope is its origin + /.default",
        ),
        500011 => (
            "Microsoft Graph's service principal is not in the tenant",
            "grant admin consent to the app's Microsoft Graph permissions in this tenant",
        ),
        53003 => (
            "Conditional Access blocked the app's sign-in",
            "exclude the app (workload identity) from the blocking Conditional Access policy, or allow this host's network location",
        ),
        _ => return None,
    })
}

/// The `credentials` line of a refused token request: `message` is the product's refusal
/// text (it names the app, the tenant, the error and Microsoft's first description line).
pub(crate) fn refused(message: &str) -> Check {
    let code = crate::mailer::graph::token::aadsts_code(message);
    let number = code
        .as_deref()
        .and_then(|c| c.strip_prefix("AADSTS"))
        .and_then(|n| n.parse::<u32>().ok());
    match number.and_then(aadsts) {
        Some((cause, fix)) => Check::fail(
            "credentials",
            format!("{} — {cause}: {message}", code.unwrap_or_default()),
            fix,
        ),
        None => Check::fail(
            "credentials",
            message.to_owned(),
            match number {
                Some(n) => format!(
                    "look the code up at https://login.microsoftonline.com/error?code={n} and fix the app registration"
                ),
                None => "check the sender's graphTenantId, clientId and secret, and GRAPH_LOGIN_BASE_URL".to_owned(),
            },
        ),
    }
}

/// The `mailbox` line of Graph's answer to the harmless request (`what`: which request).
pub(crate) fn mailbox(answer: &ProbeAnswer, what: &str) -> Check {
    if answer.ok() {
        return Check::ok("mailbox", format!("{what}: HTTP {}", answer.status));
    }
    let code = answer.code.as_deref().unwrap_or_default();
    let quoted = format!(
        "{what}: Graph answered HTTP {} {code}{}",
        answer.status,
        answer
            .message
            .as_deref()
            .map(|m| format!(" ({m})"))
            .unwrap_or_default()
    );
    match (answer.status, code) {
        (403, "ErrorAccessDenied") => Check::fail(
            "mailbox",
            format!(
                "{quoted} — the mailbox is outside the app's mailbox scope (Exchange refused the mailbox; the app's permissions are checked above)"
            ),
            "add the mailbox to the app's scope: RBAC for Applications (New-ManagementRoleAssignment with a management scope holding this mailbox; check with Test-ServicePrincipalAuthorization) or the older application access policy (its group must hold the mailbox; Test-ApplicationAccessPolicy); a new or changed scope can take 30 minutes to 2 hours to apply (learn.microsoft.com/exchange/permissions-exo/application-rbac, learn.microsoft.com/graph/auth-limit-mailbox-access)",
        ),
        (404, "ErrorInvalidUser") => Check::fail(
            "mailbox",
            format!("{quoted} — no such mailbox in the tenant"),
            "check the sender's address (a user or shared mailbox of this tenant, its primary SMTP address or UPN) and graphTenantId",
        ),
        (404, "MailboxNotEnabledForRESTAPI") => Check::fail(
            "mailbox",
            format!(
                "{quoted} — the mailbox has no Exchange Online licence, is inactive or soft-deleted, or is on-premises"
            ),
            "assign the user an Exchange Online licence (a shared mailbox needs none but must be in Exchange Online), or send from a mailbox in Exchange Online",
        ),
        (401, _) => Check::fail(
            "mailbox",
            format!("{quoted} — Graph did not accept the fresh token"),
            "check GRAPH_API_BASE_URL and GRAPH_LOGIN_BASE_URL are of the same cloud",
        ),
        (429 | 503 | 504, _) => Check::warn(
            "mailbox",
            format!("{quoted} — throttled"),
            "run the check again later",
        ),
        _ => Check::fail(
            "mailbox",
            quoted,
            "see Graph's code in https://learn.microsoft.com/graph/errors",
        ),
    }
}

/// The `address` line: a sender on `*.onmicrosoft.com` warns.
pub(crate) fn address(address: &str) -> Check {
    let domain = address.rsplit('@').next().unwrap_or_default();
    if domain.to_ascii_lowercase().ends_with(".onmicrosoft.com") {
        Check::warn(
            "address",
            format!(
                "{domain} is the tenant's onmicrosoft.com domain: Exchange allows it 100 external recipients per 24 h for the whole tenant (MC1302901), then bounces with NDR 550 5.7.236"
            ),
            "send from a mailbox on a custom domain verified in the tenant",
        )
    } else {
        Check::ok(
            "address",
            format!("{domain} is not an onmicrosoft.com domain"),
        )
    }
}

/// The `limits` line: the limits in force for this sender against Exchange Online's (the
/// warnings of `crate::config::above_exchange`, the one place they are worded).
pub(crate) fn limits(limits: RateLimits) -> Check {
    let per_minute = limits.per_minute.get();
    let per_day = limits.recipients_per_day.get();
    let over = crate::config::above_exchange(
        Some(("messages per minute", per_minute)),
        Some(("recipients per day", per_day)),
    );
    if over.is_empty() {
        Check::ok(
            "limits",
            format!(
                "{per_minute} messages a minute and {per_day} recipients a day, within Exchange Online's 30 and 10,000"
            ),
        )
    } else {
        Check::warn(
            "limits",
            over.join("; "),
            "lower them (MAIL_RATE_LIMIT_PER_MINUTE, MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY, or `mailbox set-limits` for a system mailbox)",
        )
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;
    use crate::service::verify::report::Outcome;

    fn answer(status: u16, code: &str) -> ProbeAnswer {
        ProbeAnswer {
            status,
            code: Some(code.to_owned()),
            message: None,
        }
    }

    #[test]
    fn each_aadsts_code_has_its_cause_and_an_unknown_one_points_at_microsofts_lookup() {
        let wrong = refused(
            "the token endpoint refused app a in tenant t: invalid_client (AADSTS7000215): AADSTS7000215: Invalid client secret provided.",
        );
        assert_eq!(wrong.outcome, Outcome::Fail);
        assert!(
            wrong
                .found
                .starts_with("AADSTS7000215 — wrong client secret"),
            "{}",
            wrong.found
        );
        for (code, cause) in [
            (7000222, "expired"),
            (700016, "unknown application"),
            (90002, "unknown tenant"),
            (700027, "certificate is not registered"),
        ] {
            assert!(aadsts(code).unwrap().0.contains(cause), "{code}");
        }
        let other = refused("refused: invalid_client (AADSTS1234567): x");
        assert!(other.fix.unwrap().contains("error?code=1234567"));
    }

    #[test]
    fn graphs_mailbox_answers_are_explained() {
        let scope = mailbox(&answer(403, "ErrorAccessDenied"), "read");
        assert!(scope.found.contains("outside the app's mailbox scope"));
        assert!(scope.fix.unwrap().contains("RBAC for Applications"));
        assert!(
            mailbox(&answer(404, "ErrorInvalidUser"), "read")
                .found
                .contains("no such mailbox")
        );
        assert!(
            mailbox(&answer(404, "MailboxNotEnabledForRESTAPI"), "read")
                .found
                .contains("no Exchange Online licence")
        );
        assert_eq!(mailbox(&answer(201, ""), "draft").outcome, Outcome::Ok);
    }

    #[test]
    fn onmicrosoft_senders_and_limits_above_exchanges_warn() {
        assert_eq!(address("a@contoso.onmicrosoft.com").outcome, Outcome::Warn);
        assert_eq!(address("a@contoso.example").outcome, Outcome::Ok);
        let at = |m: u32, d: u32| RateLimits {
            per_minute: NonZeroU32::new(m).unwrap(),
            recipients_per_day: NonZeroU32::new(d).unwrap(),
            reserved_percent: 0,
        };
        assert_eq!(limits(at(30, 10_000)).outcome, Outcome::Ok);
        assert_eq!(limits(at(31, 10_000)).outcome, Outcome::Warn);
        assert_eq!(limits(at(25, 10_001)).outcome, Outcome::Warn);
    }
}
