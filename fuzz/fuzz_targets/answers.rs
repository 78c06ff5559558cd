//! Fuzzes the Graph and SendGrid answer mappings (status, headers and body → outcome): they
//! must never panic; every 2xx is "sent" (never resent); a 429 is always a throttle; no other
//! status is "sent".
#![no_main]

use chrono::TimeZone;
use libfuzzer_sys::fuzz_target;
use mail_worker::mailer::{MailErrorKind, graph::fuzz_graph_answer, sendgrid::fuzz_interpret};

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let status = u16::from_be_bytes([data[0], data[1]]) % 1000;
    let rest = &data[2..];
    // `header\nheader\nbody`
    let mut parts = rest.splitn(3, |b| *b == b'\n');
    let header = |p: Option<&[u8]>| {
        p.and_then(|p| std::str::from_utf8(p).ok())
            .map(str::to_owned)
    };
    let first = header(parts.next());
    let second = header(parts.next());
    let body = parts.next().unwrap_or_default().to_vec();
    let now = chrono::Utc.with_ymd_and_hms(2025, 3, 1, 12, 0, 0).unwrap();

    let graph = fuzz_graph_answer(status, first.clone(), second.clone(), body.clone(), now);
    let sendgrid = fuzz_interpret(status, second, first, body, now);
    let two_xx = (200..300).contains(&status);
    assert_eq!(graph.is_ok(), two_xx, "graph {status}: {graph:?}");
    assert_eq!(sendgrid.is_ok(), two_xx, "sendgrid {status}: {sendgrid:?}");
    if status == 429 {
        assert!(matches!(
            graph.as_ref().map_err(|e| &e.kind),
            Err(MailErrorKind::Throttled { .. })
        ));
        assert!(matches!(
            sendgrid.as_ref().map_err(|e| &e.kind),
            Err(MailErrorKind::Throttled { .. })
        ));
    }
    for e in [graph.err(), sendgrid.err()].into_iter().flatten() {
        let _ = e.to_string();
    }
});
