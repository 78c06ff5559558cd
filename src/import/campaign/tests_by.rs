//! A line's `by` (issue 43 point 2): read as UTC, absent is `None`, a bad one refused naming
//! the field.

use chrono::{TimeZone, Utc};

use super::{SenderDirectory, line::parse_line};

fn directory() -> SenderDirectory {
    SenderDirectory {
        tenants: [("northwind".to_string(), uuid::Uuid::from_u128(1))].into(),
        system_mailboxes: Default::default(),
        pools: Default::default(),
    }
}

fn line(extra: &str) -> String {
    format!(
        r#"{{"id":"00000000-0000-0000-0000-000000000009","tenant":"northwind","to":[{{"address":"a@example.org"}}],"body":{{"contentType":"text","content":"x"}}{extra}}}"#
    )
}

#[test]
fn by_is_read_as_utc_absent_is_none_and_a_bad_one_is_refused_naming_it() {
    let by = |extra: &str| parse_line(4, &line(extra), &directory()).map(|m| m.send_by);
    assert_eq!(by(""), Ok(None));
    assert_eq!(
        by(r#","by":" 2026-12-07T10:30:00+01:00 ""#),
        Ok(Some(Utc.with_ymd_and_hms(2026, 12, 7, 9, 30, 0).unwrap()))
    );
    let refused = by(r#","by":"tomorrow""#).unwrap_err();
    assert_eq!(refused.location, "line 4");
    assert!(
        refused
            .reason
            .starts_with("by \"tomorrow\" is not an RFC 3339 time: "),
        "{refused}"
    );
    assert!(
        refused
            .reason
            .ends_with(" (id 00000000-0000-0000-0000-000000000009)"),
        "{refused}"
    );
    // Before its own scheduledOn: it could never be met.
    let refused =
        by(r#","scheduledOn":"2026-12-07T10:00:00Z","by":"2026-12-07T09:00:00Z""#).unwrap_err();
    assert_eq!(
        refused.reason,
        "by 2026-12-07T09:00:00+00:00 is before scheduledOn 2026-12-07T10:00:00+00:00: the message \
         could never be sent by then (id 00000000-0000-0000-0000-000000000009)"
    );
    // Equal is fine; a NUL in it is named.
    assert!(by(r#","scheduledOn":"2026-12-07T10:00:00Z","by":"2026-12-07T10:00:00Z""#).is_ok());
    let refused = by(r#","by":"\u0000""#).unwrap_err();
    assert!(refused.reason.starts_with("by contains a NUL"), "{refused}");
}

#[test]
fn a_field_of_the_wrong_type_is_named_by_its_path() {
    let refused = |extra: &str| {
        parse_line(4, &line(extra), &directory())
            .unwrap_err()
            .reason
    };
    assert_eq!(
        refused(r#","by":12345"#),
        "not a message: by: invalid type: integer `12345`, expected a string at column 155 \
         (id 00000000-0000-0000-0000-000000000009)"
    );
    // Nested: the recipient's index is in the path; trailing text is not in a field.
    let nested = parse_line(
        2,
        r#"{"id":"x","tenant":"northwind","to":[{"address":7}],"body":{"contentType":"text","content":"x"}}"#,
        &directory(),
    )
    .unwrap_err();
    assert!(
        nested
            .reason
            .starts_with("not a message: to[0].address: invalid type: integer `7`"),
        "{nested}"
    );
    let trailing = refused("} x");
    assert!(
        trailing.starts_with("not a message: trailing characters at column "),
        "{trailing}"
    );
}
