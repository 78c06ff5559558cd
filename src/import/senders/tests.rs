//! The senders file's tests: the format, every refusal at its path, the import.

use super::*;

fn errors(text: &str) -> Vec<String> {
    match check(text) {
        Err(ImportError::BadEntries(e)) => e.iter().map(ToString::to_string).collect(),
        other => panic!("expected bad entries, got {other:?}"),
    }
}

/// Asserts that one of `found` is at `path` (it starts with it).
fn assert_one_at(found: &[String], path: &str) {
    assert!(
        found.iter().any(|e| e.starts_with(path)),
        "{path}: {found:?}"
    );
}

#[test]
fn a_document_that_is_not_an_object_is_refused_even_an_empty_array() {
    for text in ["[]", "[{}]", "42", "null", r#""senders""#] {
        let found = errors(text);
        assert_eq!(found.len(), 1, "{text}: {found:?}");
        assert!(found[0].starts_with("(file): "), "{text}: {found:?}");
    }
}

#[test]
fn null_is_read_as_absent_as_the_checker_reads_it() {
    let empty = check(r#"{"systemMailboxes": null, "tenants": null}"#).expect("null lists");
    assert_eq!((empty.system_mailboxes.len(), empty.tenants.len()), (0, 0));
    let with_certificate = check(
        r#"{"systemMailboxes":[{"address":"a@x.example","graphTenantId":"x.example","clientId":"c","clientSecret":null,"clientCertificate":"env:CERT"}]}"#,
    )
    .expect("a null secret beside a certificate");
    assert_eq!(with_certificate.system_mailboxes[0].client_secret, "");
    // Beside `null`, the other errors are still reported at their paths.
    let found = errors(r#"{"tenants": null, "systemMailboxes":[{"address":"nope"}]}"#);
    assert!(
        found.iter().all(|e| e.starts_with("systemMailboxes[0].")),
        "{found:?}"
    );
    assert_one_at(&found, "systemMailboxes[0].address:");
}

#[test]
fn shape_and_value_errors_are_reported_together_at_their_paths() {
    let found = errors(
        r#"{"systemMailboxes":[{"address":"a@x.example","graphTenantId":"x.example","clientId":7,"clientSecret":"env:A"}],
            "tenants":[{"name":"t","provider":"sendgrid","sender":"nope","sendgridApiKey":"file:relative"}, 3]}"#,
    );
    assert_eq!(found.len(), 4, "{found:?}");
    assert!(found[0].starts_with("systemMailboxes[0].clientId: must be a string, got a number"));
    assert_one_at(&found, "tenants[0].sender:");
    assert_one_at(&found, "tenants[0].sendgridApiKey:");
    assert_one_at(&found, "tenants[1]: must be an object");
}

#[test]
fn a_literal_secret_is_never_quoted_in_an_error() {
    let found = errors(
        r#"{"tenants":[{"name":"t","provider":"sendgrid","sender":"a@t.example","sendgridApiKey":"https://hunter2@x"}]}"#,
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(!found[0].contains("hunter2"), "{found:?}");
}

fn mailbox_with(budget: &str) -> String {
    format!(
        r#"{{"systemMailboxes":[{{"address":"a@contoso.example","graphTenantId":"contoso.example","clientId":"c","clientSecret":"env:S"{budget}}}]}}"#
    )
}

#[test]
fn bad_tenant_budgets_are_refused_naming_the_field() {
    for (budget, path, needle) in [
        (
            r#","externalRecipientsPerDay":0,"acceptedDomains":["contoso.example"]"#,
            "systemMailboxes[0].externalRecipientsPerDay",
            "positive whole number",
        ),
        (
            r#","externalRecipientsPerDay":-5,"acceptedDomains":["contoso.example"]"#,
            "systemMailboxes[0].externalRecipientsPerDay",
            "positive whole number",
        ),
        (
            r#","externalRecipientsPerDay":"500","acceptedDomains":["contoso.example"]"#,
            "systemMailboxes[0].externalRecipientsPerDay",
            "positive whole number",
        ),
        (
            r#","externalRecipientsPerDay":1.5,"acceptedDomains":["contoso.example"]"#,
            "systemMailboxes[0].externalRecipientsPerDay",
            "positive whole number",
        ),
        (
            r#","externalRecipientsPerDay":500"#,
            "systemMailboxes[0].acceptedDomains",
            "is required with externalRecipientsPerDay",
        ),
        (
            r#","acceptedDomains":["contoso.example"]"#,
            "systemMailboxes[0].externalRecipientsPerDay",
            "is required with acceptedDomains",
        ),
        (
            r#","externalRecipientsPerDay":500,"acceptedDomains":[]"#,
            "systemMailboxes[0].acceptedDomains",
            "at least one domain",
        ),
        (
            r#","externalRecipientsPerDay":500,"acceptedDomains":"contoso.example""#,
            "systemMailboxes[0].acceptedDomains",
            "must be an array",
        ),
        (
            r#","externalRecipientsPerDay":500,"acceptedDomains":["contoso.example","contoso"]"#,
            "systemMailboxes[0].acceptedDomains[1]",
            "not a domain name",
        ),
        (
            r#","externalRecipientsPerDay":500,"acceptedDomains":[7]"#,
            "systemMailboxes[0].acceptedDomains[0]",
            "must be a domain name",
        ),
    ] {
        let found = errors(&mailbox_with(budget));
        assert_eq!(found.len(), 1, "{budget}: {found:?}");
        assert!(
            found[0].starts_with(&format!("{path}: ")),
            "{budget}: {found:?}"
        );
        assert!(found[0].contains(needle), "{budget}: {found:?}");
    }
    let good = r#","externalRecipientsPerDay":500,"acceptedDomains":["Contoso.example."]"#;
    assert!(check(&mailbox_with(good)).is_ok());
}

#[test]
fn a_graph_tenant_has_one_budget_and_sendgrid_none() {
    // Two entries of one graphTenantId (any case) with different budgets.
    let found = errors(
        r#"{"systemMailboxes":[
             {"address":"a@contoso.example","graphTenantId":"contoso.example","clientId":"c","clientSecret":"env:S","externalRecipientsPerDay":500,"acceptedDomains":["contoso.example"]},
             {"address":"b@contoso.example","graphTenantId":"Contoso.Example","clientId":"c","clientSecret":"env:S"}],
           "tenants":[
             {"name":"t","provider":"microsoft-graph","sender":"t@contoso.example","graphTenantId":"contoso.example","clientId":"c","clientSecret":"env:S","externalRecipientsPerDay":500,"acceptedDomains":["CONTOSO.example"]},
             {"name":"s","provider":"sendgrid","sender":"s@adatum.example","sendgridApiKey":"env:K","externalRecipientsPerDay":10}]}"#,
    );
    assert_eq!(found.len(), 2, "{found:?}");
    // Entry by entry first; the one-budget check runs over the whole file at the end.
    assert!(
        found[1].starts_with("systemMailboxes[1].externalRecipientsPerDay: graphTenantId contoso.example has a different tenant budget at systemMailboxes[0]"),
        "{found:?}"
    );
    assert!(
        found[0].starts_with(
            "tenants[1].externalRecipientsPerDay: is only for provider microsoft-graph"
        ),
        "{found:?}"
    );
}

#[test]
fn the_example_file_is_clean() {
    let text = include_str!("../../../examples/senders.json");
    assert!(check(text).is_ok());
}

#[test]
fn a_reserved_percent_is_a_whole_number_from_0_to_90() {
    for good in ["0", "20", "90"] {
        let file = check(&mailbox_with(&format!(
            r#","rateLimitReservedPercent":{good}"#
        )));
        let file = file.unwrap_or_else(|e| panic!("{good}: {e:?}"));
        assert_eq!(
            file.system_mailboxes[0].rate_limit_reserved_percent,
            Some(good.parse().unwrap())
        );
    }
    for bad in ["91", "-1", "12.5", r#""20""#, "true"] {
        let found = errors(&mailbox_with(&format!(
            r#","rateLimitReservedPercent":{bad}"#
        )));
        assert_eq!(
            found,
            [format!(
                "systemMailboxes[0].rateLimitReservedPercent: must be a whole number from 0 to 90, got {bad}"
            )],
            "{bad}"
        );
    }
}

#[test]
fn an_unknown_provider_does_not_hide_the_entrys_other_errors() {
    let found = errors(
        r#"{"tenants":[{"name":"t","provider":"sendgrd","sender":"a@t.example","sendgridApiKey":"file:relative"},
            {"name":"u","provider":"graph","sender":"b@u.example","graphTenantId":"u.example","clientId":"c","clientSecret":"http://x/secret"}]}"#,
    );
    assert_eq!(found.len(), 4, "{found:?}");
    for path in [
        "tenants[0].provider:",
        "tenants[0].sendgridApiKey:",
        "tenants[1].provider:",
        "tenants[1].clientSecret:",
    ] {
        assert_one_at(&found, path);
    }
}
