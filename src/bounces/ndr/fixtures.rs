//! Every real NDR of `tests/fixtures/ndr/` (sisimai/set-of-emails, BSD-2 licence beside them)
//! read from its MIME: the values asserted were read from each file by hand.

use super::Report;
use crate::domain::LimitFinding;

/// One fixture: the file, the failed recipient, its code, the original's `Message-ID`.
struct Case {
    file: &'static str,
    raw: &'static [u8],
    recipient: &'static str,
    code: &'static str,
    original: Option<&'static str>,
}

macro_rules! case {
    ($file:literal, $recipient:literal, $code:literal, $original:expr) => {
        Case {
            file: $file,
            raw: include_bytes!(concat!("../../../tests/fixtures/ndr/", $file)),
            recipient: $recipient,
            code: $code,
            original: $original,
        }
    };
}

const CASES: [Case; 11] = [
    // Text only, the original's headers quoted in the text.
    case!(
        "exchange-online-01.eml",
        "kijitora@example.com",
        "5.1.10",
        Some("<FFFFFFFF.EEEEEEEE@example.ed.jp>")
    ),
    // Not even MIME: a plain message.
    case!(
        "exchange-online-02.eml",
        "kijitora@example.onmicrosoft.com",
        "5.1.1",
        Some("<c302b7e8-9b97-40ef-90eb-313cc6c25133@NYAAAAN.example.org>")
    ),
    // A DSN part, no returned original, no In-Reply-To: the text's quoted Message-ID.
    case!(
        "exchange-online-03.eml",
        "kijitora@example.com",
        "5.1.0",
        Some("<000000000000.2222.22222222222200000000@NEKO-NYAAN>")
    ),
    case!(
        "exchange-online-04.eml",
        "otsu-sakaba-hunter-neko-nyaaaaaaan@ezweb.ne.jp",
        "5.1.351",
        Some("<SLXP216MB0381A8F03A83505296890D11A9950@SLXP216MB0381.KORP216.PROD.OUTLOOK.COM>")
    ),
    case!(
        "exchange-online-05.eml",
        "kijitora@example.jp",
        "5.1.8",
        Some("<SLXP216MB0381016D56DE89DBC2139287A96B0@SLXP216MB0381.KORP216.PROD.OUTLOOK.COM>")
    ),
    case!(
        "exchange-online-06.eml",
        "neko@libsisimai.org",
        "5.4.312",
        Some("<SLXP216MB03812EA2935A3C31767F16B7A96B0@SLXP216MB0381.KORP216.PROD.OUTLOOK.COM>")
    ),
    case!(
        "exchange-online-07.eml",
        "otsu-sakaba-hunter-neko-nyaaaaaaan@ezweb.ne.jp",
        "5.1.351",
        Some("<SLXP216MB0381E73A6665E8145952FF0CA9940@SLXP216MB0381.KORP216.PROD.OUTLOOK.COM>")
    ),
    case!(
        "exchange-online-08.eml",
        "nyaan@neko.example.jp",
        "5.4.316",
        Some("<SLXP216MB038146098DE3C3F3086AE5C9A97C0@SLXP216MB0381.KORP216.PROD.OUTLOOK.COM>")
    ),
    // The returned original has no Message-ID, nor does the NDR's text.
    case!(
        "exchange-2007-01.eml",
        "mikeneko@example.co.jp",
        "5.1.1",
        None
    ),
    // The returned original's Message-ID wins over another one quoted in the text.
    case!(
        "exchange-2007-02.eml",
        "kijitora@example.edu",
        "5.2.2",
        Some("<20110429233445.FFFFFFFFEEE@neko.example.com>")
    ),
    case!(
        "exchange-2007-03.eml",
        "kijitora@neko.example.com",
        "5.2.3",
        Some("<20100429233445.FF00FFEE0000@r2.example.org>")
    ),
];

#[test]
fn every_real_ndr_gives_its_recipient_code_and_original() {
    for case in &CASES {
        let report = Report::from_mime(case.raw);
        let got: Vec<(&str, &str)> = report
            .failures
            .iter()
            .map(|f| (f.recipient.as_str(), f.code.as_str()))
            .collect();
        assert_eq!(got, [(case.recipient, case.code)], "{}", case.file);
        assert_eq!(report.original.as_deref(), case.original, "{}", case.file);
    }
}

#[test]
fn the_dsn_and_the_text_layouts_read_the_same_failure() {
    // The text alone (the DSN part removed) gives the same recipient and code wherever the
    // text names them next to the code: the fallback is not a weaker reading.
    for case in &CASES[2..] {
        let raw = String::from_utf8_lossy(case.raw).replace(
            "Content-Type: message/delivery-status",
            "Content-Type: application/x-removed",
        );
        let report = Report::from_mime(raw.as_bytes());
        let first = report
            .failures
            .first()
            .map(|f| (f.recipient.as_str(), f.code.as_str()));
        assert_eq!(first, Some((case.recipient, case.code)), "{}", case.file);
    }
}

#[test]
fn the_diagnostic_code_gives_the_text_after_the_code() {
    let report = Report::from_mime(CASES[5].raw);
    assert_eq!(report.failures[0].text, "Message expired, DNS query failed");
    let report = Report::from_mime(CASES[0].raw);
    assert_eq!(
        report.failures[0].text,
        "RESOLVER.ADR.RecipientNotFound; Recipient not found by SMTP address lookup"
    );
}

/// Every real NDR of `tests/fixtures/ndr/` (unknown users, a full recipient mailbox, …):
/// none is about a budget of ours.
#[test]
fn no_real_fixture_pauses_anything() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/ndr");
    let mut read = 0;
    let mut codes = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "eml") {
            continue;
        }
        let report = Report::from_mime(&std::fs::read(&path).unwrap());
        for f in &report.failures {
            codes.push(f.code.clone());
            assert_eq!(LimitFinding::of(&f.code, &f.text), None, "{path:?}: {f:?}");
        }
        read += 1;
    }
    assert_eq!(read, 11);
    assert!(codes.iter().any(|c| c == "5.2.2"), "{codes:?}");
}

#[test]
fn the_full_recipient_mailbox_of_exchange_2007_02_is_not_a_quota() {
    let raw = include_bytes!("../../../tests/fixtures/ndr/exchange-2007-02.eml");
    let report = Report::from_mime(raw);
    let f = &report.failures[0];
    assert_eq!(f.code, "5.2.2");
    assert!(
        f.text.contains("MapiExceptionShutoffQuotaExceeded"),
        "{}",
        f.text
    );
    assert_eq!(LimitFinding::of(&f.code, &f.text), None);
}
