//! What the token grants, checked: its application permissions against what the sender's mode
//! and features need, and one harmless mailbox request.

use super::{Check, explain};
use crate::{
    config::Config,
    mailer::graph::{
        GraphSendMode, permissions,
        verify::{Grant, GraphProbe},
    },
};

/// What the token grants against what this sender's mode and features need
/// (`permissions::needs`, the product's one table).
pub(super) fn permissions_check(config: &Config, grant: &Grant) -> Check {
    let needs = permissions::needs(
        config.graph.send_mode,
        config.graph.save_to_sent_items,
        config.bounces.enabled,
    );
    let Some(roles) = &grant.roles else {
        return Check::warn(
            "permissions",
            "the token is not a JWT that can be read: its application permissions cannot be checked",
            "none needed if the mailbox check passes; a missing permission shows there as 403",
        );
    };
    if roles.is_empty()
        && let Some(scp) = &grant.delegated
    {
        return Check::fail(
            "permissions",
            format!(
                "the token carries delegated permissions (scp: {scp}) and no application permissions (roles): delegated permissions were granted instead of application ones"
            ),
            "in the app registration's API permissions, add Microsoft Graph permissions of type Application (not Delegated) — Mail.Send and what the lines name — and grant admin consent",
        );
    }
    let has = if roles.is_empty() {
        "none".to_owned()
    } else {
        roles.join(", ")
    };
    let unmet = permissions::unmet(&needs, roles);
    if unmet.is_empty() {
        return Check::ok(
            "permissions",
            format!(
                "roles {has}: all that GRAPH_SEND_MODE={}{} needs",
                config.graph.send_mode.as_str(),
                if config.bounces.enabled {
                    " and GRAPH_READ_BOUNCES=on"
                } else {
                    ""
                }
            ),
        );
    }
    let missing: Vec<String> = unmet
        .iter()
        .map(|n| format!("{} (needed {})", n.any_of[0], n.what))
        .collect();
    let mut grant_roles: Vec<&str> = unmet.iter().map(|n| n.any_of[0]).collect();
    grant_roles.dedup();
    let mut alternatives: Vec<&str> = unmet.iter().map(|n| permissions::alternative(*n)).collect();
    alternatives.dedup();
    Check::fail(
        "permissions",
        format!("missing {} — its roles: {has}", missing.join("; ")),
        format!(
            "grant {} to the app as application permissions with admin consent{}",
            grant_roles.join(" and "),
            alternatives.concat()
        ),
    )
}

/// One harmless request: in draft mode a draft created and deleted, else (or when the roles
/// allow no draft) one message id read; a `warn` when the roles allow neither.
pub(super) async fn mailbox_check(config: &Config, probe: &GraphProbe, grant: &Grant) -> Check {
    let roles = grant.roles.as_deref();
    let outcome = if config.graph.send_mode == GraphSendMode::Draft
        && roles.is_none_or(permissions::can_write)
    {
        (
            "create and delete a draft",
            probe.create_and_delete_draft().await,
        )
    } else if roles.is_none_or(permissions::can_read) {
        ("read one message id", probe.read_one().await)
    } else {
        return Check::warn(
            "mailbox",
            "cannot be checked without sending: the app's roles allow no harmless request (no Mail.ReadWrite, Mail.Read or Mail.ReadBasic.All)",
            "run again with --send-test-to ADDRESS to send one test message",
        );
    };
    match outcome {
        (what, Ok(answer)) => explain::mailbox(&answer, what),
        (what, Err(e)) => Check::fail(
            "mailbox",
            format!("{what}: {e}"),
            "check that this host reaches GRAPH_API_BASE_URL (graph.microsoft.com) and run the check again",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::verify::Outcome;

    fn config() -> Config {
        Config::from_lookup(|_| None).unwrap()
    }

    #[test]
    fn a_delegated_grant_fails_saying_so_and_each_missing_role_is_named_with_its_use() {
        let delegated = Grant {
            roles: Some(vec![]),
            delegated: Some("Mail.Send User.Read".into()),
        };
        let check = permissions_check(&config(), &delegated);
        assert_eq!(check.outcome, Outcome::Fail);
        assert!(
            check
                .found
                .contains("delegated permissions were granted instead of application ones")
        );
        let only_send = Grant {
            roles: Some(vec!["Mail.Send".into()]),
            delegated: None,
        };
        let check = permissions_check(&config(), &only_send);
        assert_eq!(
            check.found,
            "missing Mail.ReadWrite (needed to create drafts (GRAPH_SEND_MODE=draft)); Mail.Read (needed to check a sent message before any resend) — its roles: Mail.Send"
        );
        assert_eq!(
            check.fix.as_deref(),
            Some(
                "grant Mail.ReadWrite and Mail.Read to the app as application permissions with admin consent, or set GRAPH_SEND_MODE=sendmail"
            )
        );
    }
}
