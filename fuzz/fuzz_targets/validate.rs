//! Fuzzes local validation as the Graph mailer runs it (`mailer::validate::validate`, then
//! `mailer::graph::check_request_size`): a message built from arbitrary fields must never panic
//! it, and a message it passes has no CR/LF in its subject, header names, header values or
//! display names, only `x-` header names, at most 5 headers, and a `sendMail` body of at most
//! 4 MB.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mail_worker::{
    domain::{BodyContentType, Header, MailboxAddress, MessageContent, OutgoingMail, Recipient},
    mailer::{
        graph::{check_request_size, send_mail_body},
        validate::{MAX_HEADERS, MAX_REQUEST_BYTES, validate},
    },
};

fuzz_target!(|data: &[u8]| {
    // Fields separated by 0xFF (never in UTF-8): address, name, subject, body, then header
    // name/value pairs.
    let fields: Vec<String> = data
        .split(|b| *b == 0xFF)
        .map(|f| String::from_utf8_lossy(f).into_owned())
        .collect();
    let field = |i: usize| fields.get(i).cloned().unwrap_or_default();
    let headers: Vec<Header> = fields
        .get(4..)
        .unwrap_or_default()
        .chunks(2)
        .map(|pair| Header {
            name: pair[0].clone(),
            value: pair.get(1).cloned().unwrap_or_default(),
        })
        .collect();
    let mail = OutgoingMail {
        id: uuid::Uuid::nil(),
        from: MailboxAddress::parse("events@contoso.example").unwrap(),
        content: MessageContent {
            to: vec![Recipient {
                address: field(0),
                name: Some(field(1)).filter(|n| !n.is_empty()),
            }],
            cc: vec![],
            bcc: vec![],
            subject: field(2),
            body_content_type: BodyContentType::Html,
            body: field(3),
            headers,
            attachments: vec![],
        },
        priority: Default::default(),
    };
    if validate(&mail)
        .and_then(|()| check_request_size(&mail))
        .is_ok()
    {
        let crlf = |s: &str| s.contains(['\r', '\n']);
        assert!(!crlf(&mail.content.subject));
        assert!(
            mail.content
                .to
                .iter()
                .all(|r| !r.name.as_deref().is_some_and(crlf))
        );
        assert!(mail.content.headers.len() <= MAX_HEADERS);
        for h in &mail.content.headers {
            assert!(!crlf(&h.name) && !crlf(&h.value));
            assert!(h.name.trim().to_ascii_lowercase().starts_with("x-"));
        }
        assert!(send_mail_body(&mail, true).len() <= MAX_REQUEST_BYTES);
    }
});
