use base64::Engine;

use super::{line::parse_line, *};
use crate::{
    domain::BodyContentType,
    mailer::validate::{MAX_INLINE_ATTACHMENT_BYTES, MAX_REQUEST_BYTES},
    store::messages::SenderRef,
};

fn directory() -> SenderDirectory {
    SenderDirectory {
        tenants: [("northwind".to_string(), Uuid::from_u128(1))].into(),
        system_mailboxes: [("events@contoso.example".to_string(), Uuid::from_u128(2))].into(),
        pools: [(
            "invites".to_string(),
            crate::store::pools::PoolRef {
                id: Uuid::from_u128(3),
                members: vec![
                    SenderRef::SystemMailbox(Uuid::from_u128(2)),
                    SenderRef::Tenant(Uuid::from_u128(1)),
                ],
            },
        )]
        .into(),
    }
}

#[test]
fn a_pooled_line_waits_under_a_member_and_names_its_pool() {
    let line = |id: u128, sender: &str| {
        format!(
            r#"{{"id":"{}",{sender},"to":[{{"address":"a@example.org"}}],"body":{{"contentType":"text","content":"x"}}}}"#,
            Uuid::from_u128(id)
        )
    };
    let pooled = |id: u128| parse_line(1, &line(id, r#""senderPool":"invites""#), &directory());
    let (even, odd) = (pooled(10).expect("pooled"), pooled(11).expect("pooled"));
    assert_eq!(even.sender_pool, Some(Uuid::from_u128(3)));
    // Spread over the members by the id until its first attempt places it.
    assert_eq!(even.sender, SenderRef::SystemMailbox(Uuid::from_u128(2)));
    assert_eq!(odd.sender, SenderRef::Tenant(Uuid::from_u128(1)));
    for (sender, needle) in [
        (r#""senderPool":"nope""#, r#"senderPool "nope" is unknown"#),
        (
            r#""senderPool":"invites","tenant":"northwind""#,
            "has both tenant and senderPool; give exactly one of tenant, systemMailbox and senderPool",
        ),
        (
            r#""senderPool":"invites","systemMailbox":"events@contoso.example""#,
            "has both systemMailbox and senderPool",
        ),
    ] {
        let e = parse_line(7, &line(12, sender), &directory()).expect_err(sender);
        assert_eq!(e.location, "line 7");
        assert!(e.reason.contains(needle), "{sender}: {}", e.reason);
    }
}

#[test]
fn good_lines_become_messages_and_bad_lines_are_all_reported() {
    let text = [
        r#"{"id":"6f1c2a9e-3b4d-4e5f-8a7b-9c0d1e2f3a4b","systemMailbox":"Events@Contoso.example","to":[{"address":"a@example.org","name":"A"}],"subject":"s","body":{"contentType":"HTML","content":"<p>x</p>"},"headers":[{"name":"Campaign-Id","value":"c"}],"attachments":[{"name":"i.ics","contentType":"text/calendar","contentBase64":"QkVHSU4="}],"scheduledOn":"2026-12-01T15:55:00Z"}"#,
        "",
        "not json",
        r#"{"id":"00000000-0000-0000-0000-000000000009","tenant":"northwind","to":"jane.private@customer.example","body":{"contentType":"text","content":"x"}}"#,
        r#"{"id":"nope","tenant":"northwind","to":[{"address":"a@example.org"}],"body":{"contentType":"text","content":"x"}}"#,
        r#"{"id":"00000000-0000-0000-0000-000000000001","tenant":"contoso","to":[{"address":"a@example.org"}],"body":{"contentType":"text","content":"x"}}"#,
        r#"{"id":"00000000-0000-0000-0000-000000000002","tenant":"northwind","to":[],"body":{"contentType":"text","content":"x"}}"#,
        r#"{"id":"00000000-0000-0000-0000-000000000003","tenant":"northwind","to":[{"address":"a b@example.org"}],"body":{"contentType":"markdown","content":"x"}}"#,
        r#"{"id":"00000000-0000-0000-0000-000000000004","tenant":"northwind","systemMailbox":"events@contoso.example","to":[{"address":"a@example.org"}],"body":{"contentType":"text","content":"x"}}"#,
        r#"{"id":"6f1c2a9e-3b4d-4e5f-8a7b-9c0d1e2f3a4b","tenant":"northwind","to":[{"address":"first;last@example.org"}],"body":{"contentType":"text","content":"x"}}"#,
    ]
    .join("\n");
    let (good, bad) = parse_bytes(text.as_bytes(), &directory());
    let good: Vec<NewMessage> = good.into_iter().map(|(_, m)| m).collect();
    assert_eq!(good.len(), 1);
    let m = &good[0];
    assert_eq!(m.sender, SenderRef::SystemMailbox(Uuid::from_u128(2)));
    assert_eq!(m.content.body_content_type, BodyContentType::Html);
    assert_eq!(
        m.content.headers[0].name, "Campaign-Id",
        "header names are judged at send time"
    );
    assert_eq!(m.content.attachments[0].content, b"BEGIN");
    assert_eq!(
        m.scheduled_on.unwrap().to_rfc3339(),
        "2026-12-01T15:55:00+00:00"
    );
    let lines: Vec<&str> = bad.iter().map(|b| b.location.as_str()).collect();
    assert_eq!(
        lines,
        [
            "line 3", "line 4", "line 5", "line 6", "line 7", "line 8", "line 9", "line 10"
        ]
    );
    assert!(
        bad[1].reason.contains("j***@customer.example"),
        "{}",
        bad[1]
    );
    assert!(!bad[1].reason.contains("jane.private"), "{}", bad[1]);
    let bad: Vec<_> = bad.into_iter().filter(|b| b.location != "line 4").collect();
    assert!(bad[1].reason.contains("not a UUID"), "{}", bad[1]);
    assert!(
        bad[2].reason.contains("tenant \"contoso\" is unknown"),
        "{}",
        bad[2]
    );
    assert!(bad[3].reason.contains("no recipients"), "{}", bad[3]);
    assert!(bad[4].reason.contains("markdown"), "{}", bad[4]);
    assert!(bad[5].reason.contains("both"), "{}", bad[5]);
    assert!(bad[6].reason.contains("repeats line 1"), "{}", bad[6]);
}

fn line(id: u128, extra: &str) -> String {
    format!(
        r#"{{"id":"{}","tenant":"northwind","to":[{{"address":"a@example.org","name":"A"}}],"subject":"s","body":{{"contentType":"text","content":"x"}}{extra}}}"#,
        Uuid::from_u128(id)
    )
}

#[test]
fn a_line_that_is_not_utf8_is_named_and_the_others_are_kept() {
    let mut bytes = Vec::new();
    for i in 1..=50u128 {
        bytes.extend_from_slice(line(i, "").as_bytes());
        bytes.push(b'\n');
        if i == 25 {
            let bad = line(999, "").replace("\"s\"", "\"caf\u{e9}\"");
            let mut bad = bad.into_bytes();
            // Latin-1 é instead of UTF-8: 0xE9 followed by a quote.
            let at = bad.windows(2).position(|w| w == [0xC3, 0xA9]).unwrap();
            bad.splice(at..at + 2, [0xE9]);
            bytes.extend_from_slice(&bad);
            bytes.extend_from_slice(b"\r\n");
        }
    }
    let (good, bad) = parse_bytes(&bytes, &directory());
    assert_eq!(good.len(), 50);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert_eq!(bad[0].location, "line 26");
    assert!(bad[0].reason.contains("not valid UTF-8"), "{}", bad[0]);
    assert!(bad[0].reason.contains("0xE9"), "{}", bad[0]);
    assert!(
        bad[0].reason.contains(&Uuid::from_u128(999).to_string()),
        "the id is named when it can be read: {}",
        bad[0]
    );
    assert_eq!(good[25].0, 27, "line numbers count the bad line");
}

#[test]
fn a_nul_in_any_string_field_refuses_that_line_naming_the_field() {
    for (extra, field) in [
        (
            r#","headers":[{"name":"x-a","value":"a\u0000b"}]"#,
            "headers[0].value",
        ),
        (
            r#","headers":[{"name":"x-\u0000","value":"v"}]"#,
            "headers[0].name",
        ),
        (
            r#","cc":[{"address":"b@example.org","name":"B\u0000"}]"#,
            "cc[0].name",
        ),
        (
            r#","attachments":[{"name":"a\u0000.txt","contentBase64":"QQ=="}]"#,
            "attachments[0].name",
        ),
        (r#","scheduledOn":"\u0000""#, "scheduledOn"),
    ] {
        let text = line(7, extra);
        let err = parse_line(3, &text, &directory()).unwrap_err();
        assert_eq!(err.location, "line 3");
        assert!(
            err.reason.contains(&format!("{field} contains a NUL")),
            "{field}: {err}"
        );
        assert!(
            err.reason.contains(&Uuid::from_u128(7).to_string()),
            "{err}"
        );
    }
    let text = line(7, "").replace("\"s\"", "\"s\\u0000\"");
    let err = parse_line(1, &text, &directory()).unwrap_err();
    assert!(err.reason.contains("subject contains a NUL"), "{err}");
    let text = line(7, "").replace("\"x\"", "\"x\\u0000\"");
    let err = parse_line(1, &text, &directory()).unwrap_err();
    assert!(err.reason.contains("body.content contains a NUL"), "{err}");
}

#[test]
fn a_line_graph_certainly_refuses_for_size_is_refused_at_parse_time() {
    let big = "a".repeat(MAX_REQUEST_BYTES + 1);
    let text = line(8, "").replace("\"x\"", &format!("\"{big}\""));
    let err = parse_line(4, &text, &directory()).unwrap_err();
    assert!(err.reason.contains("4194304 bytes"), "{err}");
    assert!(err.reason.contains("learn.microsoft.com"), "{err}");
    // 3 MB + 1 of attachments decoded: refused too, naming the inline limit.
    let b64 = base64::engine::general_purpose::STANDARD
        .encode(vec![0u8; MAX_INLINE_ATTACHMENT_BYTES + 1]);
    let text = line(
        8,
        &format!(r#","attachments":[{{"name":"a.bin","contentBase64":"{b64}"}}]"#),
    );
    let err = parse_line(4, &text, &directory()).unwrap_err();
    assert!(
        err.reason.contains("3145729 bytes") || err.reason.contains("4194304 bytes"),
        "{err}"
    );
    // Just under: accepted (send-time validation measures the exact request).
    let text = line(8, "").replace("\"x\"", &format!("\"{}\"", "a".repeat(1_000_000)));
    assert!(parse_line(4, &text, &directory()).is_ok());
}

#[test]
fn unicode_recipient_domains_are_stored_as_punycode() {
    let text = line(9, "").replace("a@example.org", "Jos\u{e9}@B\u{fc}cher.example");
    let m = parse_line(1, &text, &directory()).unwrap();
    assert_eq!(m.content.to[0].address, "Jos\u{e9}@xn--bcher-kva.example");
    let text = line(9, "").replace("a@example.org", "a@example.org ");
    let m = parse_line(1, &text, &directory()).unwrap();
    assert_eq!(
        m.content.to[0].address, "a@example.org ",
        "ASCII is kept as written"
    );
}

#[test]
fn a_byte_order_mark_and_crlf_line_ends_are_accepted() {
    let text = format!("\u{feff}{}\r\n{}\r\n\r\n", line(1, ""), line(2, ""));
    let (good, bad) = parse_bytes(text.as_bytes(), &directory());
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(good.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [1, 2]);
}

proptest::proptest! {
    /// parse ∘ render = id: a message rendered as a campaign line parses back to itself.
    #[test]
    fn a_rendered_line_parses_back_to_the_same_message(
        id in proptest::num::u128::ANY,
        subject in "[^\u{0}]{0,40}",
        body in "[^\u{0}]{0,200}",
        name in proptest::option::of("[^\u{0}]{0,20}"),
        header_value in "[^\u{0}]{0,30}",
        html in proptest::bool::ANY,
        content in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
    ) {
        let rendered = serde_json::json!({
            "id": Uuid::from_u128(id).to_string(),
            "tenant": "northwind",
            "to": [{"address": "a@example.org", "name": name}],
            "subject": subject,
            "body": {"contentType": if html { "html" } else { "text" }, "content": body},
            "headers": [{"name": "x-campaign-id", "value": header_value}],
            "attachments": [{"name": "f.bin", "contentType": "application/pdf",
                             "contentBase64": base64::engine::general_purpose::STANDARD.encode(&content)}],
        })
        .to_string();
        let m = parse_line(1, &rendered, &directory()).unwrap();
        proptest::prop_assert_eq!(m.id, Uuid::from_u128(id));
        proptest::prop_assert_eq!(&m.content.subject, &subject);
        proptest::prop_assert_eq!(&m.content.body, &body);
        proptest::prop_assert_eq!(&m.content.to[0].name, &name);
        proptest::prop_assert_eq!(&m.content.headers[0].value, &header_value);
        proptest::prop_assert_eq!(
            m.content.body_content_type,
            if html { BodyContentType::Html } else { BodyContentType::Text }
        );
        proptest::prop_assert_eq!(&m.content.attachments[0].content, &content);
    }

    /// Arbitrary bytes never panic the parser, and every non-blank line is either a good
    /// message or a bad entry, never both and never neither.
    #[test]
    fn every_line_is_either_good_or_named(
        lines in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..80), 0..8)
    ) {
        let lines: Vec<Vec<u8>> = lines
            .into_iter()
            .map(|l| l.into_iter().map(|b| if b == b'\n' { b' ' } else { b }).collect())
            .collect();
        let bytes = lines.join(&b'\n');
        let (good, bad) = parse_bytes(&bytes, &directory());
        let counted = lines
            .iter()
            .enumerate()
            .map(|(i, l)| if i == 0 { l.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(l) } else { l })
            .filter(|l| !l.strip_suffix(b"\r").unwrap_or(l).iter().all(u8::is_ascii_whitespace))
            .count();
        proptest::prop_assert_eq!(good.len() + bad.len(), counted);
    }
}

/// A one-recipient northwind line with id `id` and `extra` fields after its body.
fn northwind_line(id: &str, extra: &str) -> String {
    format!(
        r#"{{"id":"{id}","tenant":"northwind","to":[{{"address":"a@example.org"}}],"body":{{"contentType":"text","content":"x"}}{extra}}}"#
    )
}

#[test]
fn priority_is_read_absent_is_none_and_an_unknown_word_is_refused_naming_it() {
    let line = |extra: &str| northwind_line("00000000-0000-0000-0000-000000000007", extra);
    let priority = |extra: &str| parse_line(1, &line(extra), &directory()).map(|m| m.priority);
    assert_eq!(priority(""), Ok(None), "the sender's default then");
    assert_eq!(
        priority(r#","priority":"high""#),
        Ok(Some(crate::domain::Priority::High))
    );
    assert_eq!(
        priority(r#","priority":" bulk ""#),
        Ok(Some(crate::domain::Priority::Bulk))
    );
    let refused = priority(r#","priority":"urgent""#).unwrap_err();
    assert_eq!(
        refused.reason,
        "priority \"urgent\" must be `high`, `normal` or `bulk` (id 00000000-0000-0000-0000-000000000007)"
    );
}

#[test]
fn campaign_is_the_campaign_id_else_the_x_campaign_id_header_else_none() {
    let line = |extra: &str| northwind_line("00000000-0000-0000-0000-000000000008", extra);
    let campaign = |extra: &str| parse_line(1, &line(extra), &directory()).map(|m| m.campaign_id);
    assert_eq!(campaign(""), Ok(None));
    assert_eq!(
        campaign(r#","headers":[{"name":"X-Campaign-Id","value":" camp-7 "}]"#),
        Ok(Some("camp-7".into())),
        "the header, any case, trimmed"
    );
    assert_eq!(
        campaign(r#","campaignId":"spring","headers":[{"name":"x-campaign-id","value":"camp-7"}]"#),
        Ok(Some("spring".into())),
        "the field wins over the header"
    );
    assert_eq!(campaign(r#","campaignId":"  ""#), Ok(None), "blank is none");
    let long = "c".repeat(201);
    let refused = campaign(&format!(r#","campaignId":"{long}""#)).unwrap_err();
    assert_eq!(
        refused.reason,
        "campaignId has 201 characters; a campaign id has at most 200 (id 00000000-0000-0000-0000-000000000008)"
    );
    assert!(
        campaign(r#","campaignId":"a\u0000b""#)
            .unwrap_err()
            .reason
            .starts_with("campaignId contains a NUL character")
    );
}

#[test]
fn a_line_that_is_not_one_object_says_what_a_line_must_be() {
    for (text, first) in [
        (r#"[{"id":"x"}]"#, '['),
        (r#""a message""#, '"'),
        ("  42", '4'),
    ] {
        let err = parse_line(3, text, &directory()).unwrap_err();
        assert_eq!(err.location, "line 3");
        assert_eq!(
            err.reason,
            format!(
                "not a message: each line is one JSON object `{{…}}` (this one starts with `{first}`)"
            )
        );
    }
    // serde's position is within the line: its column, not a "line 1" inside line 3.
    let err = parse_line(3, "{broken", &directory()).unwrap_err();
    assert_eq!(
        (err.location.as_str(), err.reason.as_str()),
        ("line 3", "not a message: key must be a string at column 2")
    );
}
