//! The application permissions a Graph app needs for the configured send mode and features,
//! checked against the `roles` claim of each new token before it is used.
//!
//! An app-only access token from Entra ID is a JWT whose payload's `roles` lists the
//! application permissions granted to the app, and leaves the claim out when none is
//! (<https://learn.microsoft.com/entra/identity-platform/access-token-claims-reference>). A token
//! we cannot read as a JWT is not checked (Microsoft calls access tokens opaque to clients);
//! Graph's `403 ErrorAccessDenied` then still pauses the sender (`answer.rs`).
//!
//! What each use needs (the Application row of each endpoint's "Permissions" table; a higher
//! privileged permission Microsoft lists is accepted too):
//!
//! | use | needs one of | Microsoft page |
//! |---|---|---|
//! | send (`sendMail`, a draft's `send`) | Mail.Send | <https://learn.microsoft.com/graph/api/user-sendmail>, <https://learn.microsoft.com/graph/api/message-send> |
//! | `GRAPH_SEND_MODE=draft`: create the draft, attachments, upload sessions, delete | Mail.ReadWrite | <https://learn.microsoft.com/graph/api/user-post-messages>, <https://learn.microsoft.com/graph/api/attachment-createuploadsession> |
//! | look a message up (draft mode's checks; sendmail mode's Sent Items check with `GRAPH_SAVE_TO_SENT_ITEMS=true`) | Mail.Read, Mail.ReadBasic.All, Mail.ReadWrite | <https://learn.microsoft.com/graph/api/user-list-messages>, <https://learn.microsoft.com/graph/api/message-get> |
//! | `GRAPH_READ_BOUNCES=on`: read the NDRs' bodies | Mail.Read, Mail.ReadWrite | <https://learn.microsoft.com/graph/api/user-list-messages> (Mail.ReadBasic.All leaves out the body) |
//! | `GRAPH_READ_BOUNCES=on`: mark read, move | Mail.ReadWrite | <https://learn.microsoft.com/graph/api/message-update>, <https://learn.microsoft.com/graph/api/message-move> |
//!
//! The harsher reading is taken where a use is only sometimes needed: sendmail mode's Sent
//! Items check runs only after an unknown outcome, but a missing read permission pauses the
//! sender at once rather than at the first timeout.

use base64::Engine as _;

use super::GraphSendMode;

/// One use of Graph and the roles of which the token needs one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Need {
    /// What it is for, as the pause's reason says it.
    pub what: &'static str,
    /// Accepted roles; the first is the one to grant.
    pub any_of: &'static [&'static str],
}

const SEND: Need = Need {
    what: "to send",
    any_of: &["Mail.Send"],
};
const DRAFTS: Need = Need {
    what: "to create drafts (GRAPH_SEND_MODE=draft)",
    any_of: &["Mail.ReadWrite"],
};
const LOOK_UP: Need = Need {
    what: "to check a sent message before any resend",
    any_of: &["Mail.Read", "Mail.ReadBasic.All", "Mail.ReadWrite"],
};
const READ_BOUNCES: Need = Need {
    what: "to read non-delivery reports (GRAPH_READ_BOUNCES=on)",
    any_of: &["Mail.Read", "Mail.ReadWrite"],
};
const MOVE_BOUNCES: Need = Need {
    what: "to mark read and move non-delivery reports (GRAPH_READ_BOUNCES=on)",
    any_of: &["Mail.ReadWrite"],
};

/// What `mode`, the Sent Items check (`save_to_sent_items`) and bounce reading need.
pub(crate) fn needs(
    mode: GraphSendMode,
    save_to_sent_items: bool,
    read_bounces: bool,
) -> Vec<Need> {
    let mut needs = vec![SEND];
    if mode == GraphSendMode::Draft {
        needs.extend([DRAFTS, LOOK_UP]);
    } else if save_to_sent_items {
        needs.push(LOOK_UP);
    }
    if read_bounces {
        needs.extend([READ_BOUNCES, MOVE_BOUNCES]);
    }
    needs
}

/// The payload of `token` read as a JWT's claims; `None` when it is not a JWT we can read.
fn claims(token: &str) -> Option<serde_json::Value> {
    let mut parts = token.split('.');
    let (_, payload, _) = (parts.next()?, parts.next()?, parts.next()?);
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The `scp` claim of `token` (space-separated delegated permissions), when there is one: a
/// token issued for a signed-in user, not for the app itself
/// (<https://learn.microsoft.com/entra/identity-platform/access-token-claims-reference>).
pub(crate) fn delegated_scopes(token: &str) -> Option<String> {
    claims(token)?
        .get("scp")?
        .as_str()
        .map(str::to_owned)
        .filter(|s| !s.trim().is_empty())
}

/// The `roles` claim of `token`: `None` when the token is not a JWT we can read (not checked),
/// an empty list when the claim is absent (nothing granted).
pub(crate) fn roles_claim(token: &str) -> Option<Vec<String>> {
    let claims = claims(token)?;
    let roles = match claims.get("roles") {
        None | Some(serde_json::Value::Null) => Vec::new(),
        Some(roles) => roles
            .as_array()?
            .iter()
            .filter_map(|r| r.as_str().map(str::to_owned))
            .collect(),
    };
    Some(roles)
}

/// The first need `roles` does not meet, as the pause's reason: the app, what it has, the role
/// missing and what it is for, and the fix.
pub(crate) fn missing(needs: &[Need], roles: &[String], client_id: &str) -> Option<String> {
    let need = unmet(needs, roles).into_iter().next()?;
    let role = need.any_of[0];
    let has = if roles.is_empty() {
        "none".to_owned()
    } else {
        roles.join(", ")
    };
    let alternative = alternative(need);
    Some(format!(
        "the Graph token of app {client_id} lacks the application permission {role} (its roles: {has}), needed {}; fix: grant {role} to the app with admin consent (a grant reaches only tokens issued after it: each probe fetches a new one){alternative}",
        need.what
    ))
}

/// Every need `roles` does not meet, in the order of `needs` (what `senders verify` lists).
pub(crate) fn unmet(needs: &[Need], roles: &[String]) -> Vec<Need> {
    needs
        .iter()
        .filter(|n| !n.any_of.iter().any(|a| roles.iter().any(|r| r == a)))
        .copied()
        .collect()
}

/// The setting that drops `need` instead of granting its role (`, or set …`), or empty.
pub(crate) fn alternative(need: Need) -> &'static str {
    if need == DRAFTS || need == LOOK_UP {
        ", or set GRAPH_SEND_MODE=sendmail"
    } else if need == READ_BOUNCES || need == MOVE_BOUNCES {
        ", or set GRAPH_READ_BOUNCES=off"
    } else {
        ""
    }
}

/// Whether `roles` allow reading a mailbox's messages (`GET …/messages`).
pub(crate) fn can_read(roles: &[String]) -> bool {
    unmet(&[LOOK_UP], roles).is_empty()
}

/// Whether `roles` allow creating and deleting a draft.
pub(crate) fn can_write(roles: &[String]) -> bool {
    unmet(&[DRAFTS], roles).is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(claims: &serde_json::Value) -> String {
        let b64 = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
        format!(
            "{}.{}.sig",
            b64(br#"{"typ":"JWT","alg":"RS256"}"#),
            b64(claims.to_string().as_bytes())
        )
    }

    fn owned(roles: &[&str]) -> Vec<String> {
        roles.iter().map(|r| (*r).to_owned()).collect()
    }

    #[test]
    fn the_roles_claim_is_read_and_an_opaque_token_is_not_checked() {
        let token = jwt(&serde_json::json!({"roles": ["Mail.Send", "Mail.Read"]}));
        assert_eq!(
            roles_claim(&token),
            Some(owned(&["Mail.Send", "Mail.Read"]))
        );
        assert_eq!(
            roles_claim(&jwt(&serde_json::json!({"tid": "t"}))),
            Some(vec![])
        );
        assert_eq!(roles_claim("EwBwA8l6BAAU-opaque"), None);
        let delegated = jwt(&serde_json::json!({"scp": "Mail.Send User.Read"}));
        assert_eq!(
            delegated_scopes(&delegated).as_deref(),
            Some("Mail.Send User.Read")
        );
        assert_eq!(roles_claim(&delegated), Some(vec![]));
        assert_eq!(delegated_scopes(&token), None);
        assert_eq!(roles_claim("a.!!!.c"), None);
    }

    #[test]
    fn each_mode_and_feature_names_the_first_missing_role_and_its_fix() {
        let draft = needs(GraphSendMode::Draft, true, false);
        let why = missing(&draft, &owned(&["Mail.Send"]), "app-1").unwrap();
        assert_eq!(
            why,
            "the Graph token of app app-1 lacks the application permission Mail.ReadWrite (its roles: Mail.Send), needed to create drafts (GRAPH_SEND_MODE=draft); fix: grant Mail.ReadWrite to the app with admin consent (a grant reaches only tokens issued after it: each probe fetches a new one), or set GRAPH_SEND_MODE=sendmail"
        );
        assert_eq!(
            missing(&draft, &owned(&["Mail.Send", "Mail.ReadWrite"]), "a"),
            None
        );
        let sendmail = needs(GraphSendMode::SendMail, false, false);
        assert_eq!(missing(&sendmail, &owned(&["Mail.Send"]), "a"), None);
        assert!(
            missing(&sendmail, &[], "a")
                .unwrap()
                .contains("Mail.Send (its roles: none)")
        );
        let checked = needs(GraphSendMode::SendMail, true, false);
        assert!(
            missing(&checked, &owned(&["Mail.Send"]), "a")
                .unwrap()
                .contains("permission Mail.Read ")
        );
        let bounces = needs(GraphSendMode::SendMail, false, true);
        let why = missing(&bounces, &owned(&["Mail.Send", "Mail.ReadBasic.All"]), "a").unwrap();
        assert!(why.contains("Mail.Read (its roles"), "{why}");
        assert!(why.ends_with("or set GRAPH_READ_BOUNCES=off"), "{why}");
        assert!(
            missing(&bounces, &owned(&["Mail.Send", "Mail.Read"]), "a")
                .unwrap()
                .contains("Mail.ReadWrite")
        );
    }
}
