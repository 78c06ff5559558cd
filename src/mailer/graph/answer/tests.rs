use super::*;
use crate::mailer::MailErrorKind;
use chrono::TimeZone;
use std::time::Duration;

fn mailbox() -> MailboxAddress {
    MailboxAddress::parse("events@contoso.example").unwrap()
}

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 3, 1, 12, 0, 0).unwrap()
}

fn answer(status: u16, retry_after: Option<&str>, body: &str) -> Verdict {
    interpret(
        Ok(HttpAnswer {
            status,
            retry_after: retry_after.map(str::to_owned),
            request_id: Some("req-1".into()),
            body: body.as_bytes().to_vec(),
        }),
        &mailbox(),
        now(),
    )
}

fn graph_body(code: &str, message: &str) -> String {
    serde_json::json!({"error": {"code": code, "message": message}}).to_string()
}

#[test]
fn accepted_answers_are_sent_even_with_retry_after() {
    let sent = Verdict::Sent(SendReceipt {
        provider_id: Some("req-1".into()),
        ..SendReceipt::default()
    });
    assert_eq!(answer(202, None, ""), sent);
    assert_eq!(answer(202, Some("30"), ""), sent);
    assert_eq!(answer(200, None, "{}"), sent);
}

#[test]
fn throttling_statuses_carry_the_parsed_retry_after() {
    use crate::domain::adaptive::Signal;
    for status in [429, 503, 504] {
        // A 429 without Graph's text names no limit; a 503/504 is a server error (5xx).
        let signal = (status != 429).then_some(Signal::ServerErrors);
        let throttled = |wait| Verdict::Failed(MailError::throttled_by(wait, signal));
        assert_eq!(
            answer(status, Some("2.128"), ""),
            throttled(Some(Duration::from_secs(3))),
            "{status}"
        );
        assert_eq!(
            answer(status, Some("Sat, 01 Mar 2025 12:01:00 GMT"), ""),
            throttled(Some(Duration::from_secs(60)))
        );
        assert_eq!(answer(status, None, ""), throttled(None));
    }
    let body = r#"{"error":{"code":"ApplicationThrottled","message":"Application is over its MailboxConcurrency limit."}}"#;
    assert_eq!(
        answer(429, Some("1"), body),
        Verdict::Failed(MailError::throttled_by(
            Some(Duration::from_secs(1)),
            Some(Signal::MailboxConcurrency)
        ))
    );
}

#[test]
fn a_401_asks_for_a_token_refresh() {
    let verdict = answer(
        401,
        None,
        &graph_body("InvalidAuthenticationToken", "Access token has expired."),
    );
    assert_eq!(
        verdict,
        Verdict::TokenRejected(MailError::unauthorized(
            "Graph refused the access token for mailbox events@contoso.example twice: InvalidAuthenticationToken: Access token has expired."
        ))
    );
}

#[test]
fn client_errors_are_permanent_with_graphs_code_and_masked_message() {
    // One row per status; tests/it/mailer.rs sends every code Graph documents.
    for (status, code) in [
        (400, "ErrorInvalidRecipients"),
        (403, "ErrorSendAsDenied"),
        (404, "ErrorItemNotFound"),
        (413, "ErrorMessageSizeExceeded"),
    ] {
        let verdict = answer(
            status,
            None,
            &graph_body(
                code,
                "Recipient 'lotte.jansen@example.com' is not resolved.",
            ),
        );
        assert_eq!(
            verdict,
            Verdict::Failed(MailError::permanent(
                code,
                format!(
                    "Graph refused the message (HTTP {status}): Recipient 'l***@example.com' is not resolved."
                )
            ))
        );
    }
    assert_eq!(
        answer(413, None, "<html>too large</html>"),
        Verdict::Failed(MailError::permanent(
            "ErrorMessageSizeExceeded",
            "Graph refused the message (HTTP 413): Graph answered HTTP 413 without an error body"
        ))
    );
}

#[test]
fn server_errors_are_outcome_unknown_and_request_timeouts_transient() {
    for status in [408, 302] {
        let verdict = answer(status, Some("5"), "");
        assert!(
            matches!(
                verdict,
                Verdict::Failed(MailError {
                    kind: MailErrorKind::Transient(_),
                    ..
                })
            ),
            "{status}: {verdict:?}"
        );
    }
    for status in [500, 502] {
        let verdict = answer(status, Some("5"), "");
        assert!(
            matches!(
                verdict,
                Verdict::Failed(MailError {
                    kind: MailErrorKind::OutcomeUnknown(_),
                    ..
                })
            ),
            "{status}: {verdict:?}"
        );
    }
    let Verdict::Failed(MailError {
        kind: MailErrorKind::OutcomeUnknown(text),
        ..
    }) = answer(500, None, &graph_body("generalException", "boom"))
    else {
        panic!()
    };
    assert_eq!(
        text,
        "Graph sendMail for mailbox events@contoso.example answered 500: generalException: boom"
    );
}
