//! Fuzzes the campaign line parser (`import::campaign::parse_line_bytes`) with arbitrary bytes:
//! it must never panic, and a line it accepts must be storable (no NUL anywhere) and pass
//! through local validation without a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mail_worker::{
    domain::{MailboxAddress, OutgoingMail},
    import::campaign::{SenderDirectory, parse_bytes, parse_line_bytes},
    mailer::validate::validate,
};

fuzz_target!(|data: &[u8]| {
    let senders = SenderDirectory {
        tenants: [("northwind".to_string(), uuid::Uuid::from_u128(1))].into(),
        system_mailboxes: [(
            "events@contoso.example".to_string(),
            uuid::Uuid::from_u128(2),
        )]
        .into(),
        pools: Default::default(),
    };
    // The whole-file splitter too: every line is either good or reported, never both.
    let (good, bad) = parse_bytes(data, &senders);
    assert!(
        good.iter()
            .all(|(n, _)| bad.iter().all(|b| b.location != format!("line {n}")))
    );
    if let Ok(m) = parse_line_bytes(1, data, &senders) {
        let strings = m
            .content
            .to
            .iter()
            .chain(&m.content.cc)
            .chain(&m.content.bcc)
            .flat_map(|r| [Some(r.address.as_str()), r.name.as_deref()])
            .flatten()
            .chain([m.content.subject.as_str(), m.content.body.as_str()])
            .chain(
                m.content
                    .headers
                    .iter()
                    .flat_map(|h| [h.name.as_str(), h.value.as_str()]),
            )
            .chain(
                m.content
                    .attachments
                    .iter()
                    .flat_map(|a| [a.name.as_str(), a.content_type.as_str()]),
            );
        for s in strings {
            assert!(!s.contains('\0'), "a NUL reached an accepted message");
        }
        let mail = OutgoingMail {
            id: m.id,
            from: MailboxAddress::parse("events@contoso.example").unwrap(),
            content: m.content,
            priority: m.priority.unwrap_or_default(),
        };
        let _ = validate(&mail);
    }
});
