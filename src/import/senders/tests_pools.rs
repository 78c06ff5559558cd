//! The senders file's `senderPools`: accepted, and every refusal at its path.

use super::*;

/// A file with two system mailboxes, a Graph tenant and a SendGrid tenant, and `pools`.
fn file_with(pools: &str) -> String {
    format!(
        r#"{{"systemMailboxes":[
            {{"address":"a@contoso.example","graphTenantId":"contoso.example","clientId":"c","clientSecret":"env:S"}},
            {{"address":"b@contoso.example","graphTenantId":"contoso.example","clientId":"c","clientSecret":"env:S"}}],
          "tenants":[
            {{"name":"fabrikam","provider":"microsoft-graph","sender":"c@fabrikam.example","graphTenantId":"fabrikam.example","clientId":"c","clientSecret":"env:F"}},
            {{"name":"adatum","provider":"sendgrid","sender":"news@adatum.example","sendgridApiKey":"env:K"}}],
          "senderPools":{pools}}}"#
    )
}

fn pool_errors(pools: &str) -> Vec<String> {
    match check(&file_with(pools)) {
        Err(ImportError::BadEntries(e)) => e.iter().map(ToString::to_string).collect(),
        other => panic!("expected bad entries, got {other:?}"),
    }
}

#[test]
fn a_pool_of_mailboxes_and_graph_tenants_with_an_overflow_is_accepted() {
    let file = check(&file_with(
        r#"[{"name":"invites","members":["a@contoso.example","B@contoso.example","c@fabrikam.example"],
             "overflow":{"sender":"news@adatum.example","when":"budgetsSpent","externalOnly":true}},
            {"name":"other","members":["a@contoso.example"],
             "overflow":{"sender":"news@adatum.example","when":"budgetsSpent","externalOnly":true}}]"#,
    ))
    .expect("a good pool");
    assert_eq!(file.sender_pools.len(), 2);
    assert_eq!(file.sender_pools[0].members.len(), 3);
}

#[test]
fn a_pool_with_an_unknown_member_is_refused_naming_the_entry() {
    let found =
        pool_errors(r#"[{"name":"invites","members":["a@contoso.example","z@contoso.example"]}]"#);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("senderPools[0].members[1]: z@contoso.example is unknown"),
        "{found:?}"
    );
}

#[test]
fn a_member_in_two_pools_with_different_overflow_rules_is_refused_naming_both() {
    let found = pool_errors(
        r#"[{"name":"one","members":["a@contoso.example"],"overflow":{"sender":"news@adatum.example","when":"budgetsSpent"}},
            {"name":"two","members":["b@contoso.example","a@contoso.example"]}]"#,
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("senderPools[1].members[1]: a@contoso.example is also in senderPools[0] with a different overflow rule"),
        "{found:?}"
    );
}

#[test]
fn every_other_bad_pool_is_refused_at_its_path() {
    for (pools, path, needle) in [
        (
            r#"[{"name":"p","members":[]}]"#,
            "senderPools[0].members",
            "is empty",
        ),
        (r#"[{"name":"p"}]"#, "senderPools[0].members", "is required"),
        (
            r#"[{"members":["a@contoso.example"]}]"#,
            "senderPools[0].name",
            "is required",
        ),
        (
            r#"[{"name":"p","members":["news@adatum.example"]}]"#,
            "senderPools[0].members[0]",
            "SendGrid",
        ),
        (
            r#"[{"name":"p","members":["a@contoso.example","a@contoso.example"]}]"#,
            "senderPools[0].members[1]",
            "twice",
        ),
        (
            r#"[{"name":"p","members":["a@contoso.example"]},{"name":"p","members":["b@contoso.example"]}]"#,
            "senderPools[1].name",
            "more than once",
        ),
        (
            r#"[{"name":"p","members":["a@contoso.example"],"overflow":{"sender":"x@nowhere.example","when":"budgetsSpent"}}]"#,
            "senderPools[0].overflow.sender",
            "unknown",
        ),
        (
            r#"[{"name":"p","members":["a@contoso.example"],"overflow":{"sender":"a@contoso.example","when":"budgetsSpent"}}]"#,
            "senderPools[0].overflow.sender",
            "member of this pool",
        ),
        (
            r#"[{"name":"p","members":["a@contoso.example"],"overflow":{"sender":"news@adatum.example","when":"later"}}]"#,
            "senderPools[0].overflow.when",
            "budgetsSpent",
        ),
        (
            r#"[{"name":"p","members":["a@contoso.example"],"overflow":{"sender":"news@adatum.example","when":"budgetsSpent","externalOnly":"yes"}}]"#,
            "senderPools[0].overflow.externalOnly",
            "true or false",
        ),
        (
            r#"[{"name":"p","members":["a@contoso.example"],"spill":1}]"#,
            "senderPools[0].spill",
            "unknown field",
        ),
    ] {
        let found = pool_errors(pools);
        assert!(
            found
                .iter()
                .any(|e| e.starts_with(path) && e.contains(needle)),
            "{pools}: expected {path} … {needle}, got {found:?}"
        );
    }
}
