//! An NDR's MIME as Exchange writes it, in the layouts of real NDRs ([`NdrLayout`]; the files
//! are the product's `tests/fixtures/ndr/`, from sisimai/set-of-emails): `multipart/report;
//! report-type=delivery-status` (RFC 6522) holding a `multipart/alternative` text and HTML, then
//! per layout a `message/delivery-status` part (RFC 3464: `Reporting-MTA`, then per recipient
//! `Final-Recipient`, `Action`, `Status`, `Diagnostic-Code`) and the original returned as
//! `message/rfc822`. Graph serves it at `GET …/messages/{id}/$value`
//! (<https://learn.microsoft.com/graph/outlook-get-mime-message>); the JSON view (`body`,
//! `internetMessageHeaders`) is derived from the same [`Written`] parts, so the two never
//! disagree. Written as 7-bit text (the real ones use quoted-printable for the text parts: the
//! same text once decoded).

use super::{Failure, Original};
use crate::config::NdrLayout;

/// An NDR written: its top-level headers, text, HTML and whole MIME.
pub(crate) struct Written {
    /// The top-level headers in order (the JSON view's `internetMessageHeaders`).
    pub headers: Vec<(String, String)>,
    /// The `text/plain` part (the JSON view's text body).
    pub text: String,
    /// The raw MIME (`$value`).
    pub mime: String,
}

/// The server names Exchange Online writes (any such name does).
pub(crate) const SERVER: &str = "AM9PR05MB8000.eurprd05.prod.outlook.com";

/// The explanation a person reads above the diagnostic information, per code.
fn explanation(f: &Failure) -> &'static str {
    match f.code.as_str() {
        "5.1.90" => {
            "Your message can't be sent because you've reached your daily limit for message recipients."
        }
        "5.7.705" | "5.7.708" | "5.7.501" => {
            "Your message wasn't delivered because your organization's sending reputation does not allow it (a new tenant, or suspicious traffic from it)."
        }
        "5.7.233" => {
            "Your organization has sent to more external recipients in 24 hours than it is allowed to. Try again later."
        }
        _ => {
            "The email address wasn't found at the destination domain. It might be misspelled or it might not exist any longer."
        }
    }
}

/// The remote server that refused `f`'s recipient (`mx.<its domain>`).
fn remote_host(f: &Failure) -> String {
    format!(
        "mx.{}",
        f.recipient.rsplit('@').next().unwrap_or("example.org")
    )
}

/// The text part: "Delivery has failed to these recipients or groups:", each recipient with
/// its explanation, "Diagnostic information for administrators:", each recipient's line and
/// "Remote Server returned '…'", then "Original message headers:" with the original's
/// headers (exchange-online-01, -02, -03). With `remote_host`, the remote server's name stands
/// between the recipient and "Remote Server returned", as in exchange-online-03.
fn text(failures: &[Failure], quoted_headers: &str, with_remote_host: bool) -> String {
    let mut t = String::from("Delivery has failed to these recipients or groups:\r\n\r\n");
    for f in failures {
        t.push_str(&format!(
            "{r}<mailto:{r}>\r\n{}\r\n\r\n",
            explanation(f),
            r = f.recipient
        ));
    }
    t.push_str(&format!(
        "Diagnostic information for administrators:\r\n\r\nGenerating server: {SERVER}\r\n\r\n"
    ));
    for f in failures {
        let host = if with_remote_host {
            format!("{}\r\n", remote_host(f))
        } else {
            String::new()
        };
        t.push_str(&format!(
            "{}\r\n{host}Remote Server returned '{} {} {}'\r\n\r\n",
            f.recipient, f.reply, f.code, f.text
        ));
    }
    t.push_str("Original message headers:\r\n\r\n");
    t.push_str(quoted_headers);
    t
}

/// The original's headers as the NDR quotes or returns them.
fn original_headers(original: &Original<'_>, failures: &[Failure]) -> String {
    format!(
        "From: <{from}>\r\nTo: {to}\r\nSubject: {subject}\r\nDate: {date}\r\nMessage-ID: {imid}\r\nMIME-Version: 1.0\r\nContent-Type: text/plain\r\n",
        from = original.mailbox,
        to = failures
            .iter()
            .map(|f| format!("<{}>", f.recipient))
            .collect::<Vec<_>>()
            .join(", "),
        subject = original.subject,
        date = original.sent_at.to_rfc2822(),
        imid = original.internet_message_id,
    )
}

/// The `message/delivery-status` part's body (RFC 3464 §2.1: the per-message block, then one
/// block per recipient).
fn delivery_status(failures: &[Failure]) -> String {
    let mut d = format!("Reporting-MTA: dns;{SERVER}\r\n");
    for f in failures {
        d.push_str(&format!(
            "\r\nFinal-Recipient: rfc822;{r}\r\nAction: failed\r\nStatus: {c}\r\nDiagnostic-Code: smtp;{reply} {c} {text}\r\n",
            r = f.recipient,
            c = f.code,
            reply = f.reply,
            text = f.text,
        ));
    }
    d
}

fn escape_html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace("\r\n", "<br>\r\n")
}

/// Writes the NDR of `original` for `failures` in `layout`, with its own `message_id`, sent
/// from `from` (`Name <address>` or `<address>`).
pub(crate) fn write(
    layout: NdrLayout,
    original: &Original<'_>,
    failures: &[Failure],
    message_id: &str,
    from: &str,
) -> Written {
    let quoted = original_headers(original, failures);
    let text = text(failures, &quoted, layout == NdrLayout::PostmasterDsn);
    let mut headers = vec![
        ("From".to_owned(), from.to_owned()),
        ("To".to_owned(), format!("<{}>", original.mailbox)),
        ("Date".to_owned(), original.sent_at.to_rfc2822()),
    ];
    let outer = format!("{}", uuid::Uuid::new_v4());
    let inner = format!("{}", uuid::Uuid::new_v4());
    if layout != NdrLayout::Plain {
        headers.push((
            "Content-Type".to_owned(),
            format!("multipart/report; report-type=delivery-status; boundary=\"{outer}\""),
        ));
        headers.push(("X-MS-Exchange-Message-Is-Ndr".to_owned(), String::new()));
        headers.push(("Content-Language".to_owned(), "en-US".to_owned()));
    }
    headers.push(("Message-ID".to_owned(), message_id.to_owned()));
    if layout == NdrLayout::OutlookCom {
        headers.push((
            "In-Reply-To".to_owned(),
            original.internet_message_id.to_owned(),
        ));
        headers.push((
            "References".to_owned(),
            original.internet_message_id.to_owned(),
        ));
    }
    headers.push((
        "Subject".to_owned(),
        format!("Undeliverable: {}", original.subject),
    ));
    if layout != NdrLayout::Plain {
        headers.push(("Auto-Submitted".to_owned(), "auto-replied".to_owned()));
        headers.push(("MIME-Version".to_owned(), "1.0".to_owned()));
    }
    let mut mime: String = headers
        .iter()
        .map(|(n, v)| {
            if v.is_empty() {
                format!("{n}:\r\n")
            } else {
                format!("{n}: {v}\r\n")
            }
        })
        .collect();
    mime.push_str("\r\n");
    if layout == NdrLayout::Plain {
        mime.push_str(&text);
        return Written {
            headers,
            text,
            mime,
        };
    }
    mime.push_str(&format!(
        "--{outer}\r\nContent-Type: multipart/alternative; differences=Content-Type;\r\n\tboundary=\"{inner}\"\r\n\r\n\
         --{inner}\r\nContent-Type: text/plain; charset=\"us-ascii\"\r\nContent-Transfer-Encoding: 7bit\r\n\r\n{text}\r\n\
         --{inner}\r\nContent-Type: text/html; charset=\"us-ascii\"\r\nContent-Transfer-Encoding: 7bit\r\n\r\n<html><body>{html}</body></html>\r\n\
         --{inner}--\r\n\r\n",
        html = escape_html(&text),
    ));
    if layout != NdrLayout::PostmasterText {
        mime.push_str(&format!(
            "--{outer}\r\nContent-Type: message/delivery-status\r\n\r\n{}\r\n",
            delivery_status(failures)
        ));
    }
    if layout == NdrLayout::OutlookCom {
        mime.push_str(&format!(
            "--{outer}\r\nContent-Type: message/rfc822\r\n\r\n{quoted}\r\n{}\r\n\r\n",
            original.subject
        ));
    }
    mime.push_str(&format!("--{outer}--\r\n"));
    Written {
        headers,
        text,
        mime,
    }
}
