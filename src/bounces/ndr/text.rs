//! The failures an NDR's *text* names: the fallback when it has no `message/delivery-status`
//! part (exchange-online-01/-02 in `tests/fixtures/ndr/` have none), and the JSON view's body.
//! The layouts Exchange writes, each seen in a real NDR:
//! - `Remote Server returned '550 5.1.10 …'` after the recipient's line (exchange-online-01,
//!   -02; in -03 a host's line stands between the address and it);
//! - `… Server at <host> returned '550 5.4.312 …'` after the recipient (exchange-online-06,
//!   -08: a dated line per attempt, a `4.x.x` before the final `5.x.x`);
//! - `#550 5.1.1 RESOLVER.ADR.RecipNotFound; not found ##` after the recipient (Exchange 2007,
//!   exchange-2007-01..03);
//! - `Reported error: 550 5.1.10 …` with `Recipient Address: …` above it (the newest layout,
//!   "Error Details"), or `Status code: 550 5.1.10`.
//!
//! Microsoft documents the text ("Remote server returned '550 5.1.1 …'" per recipient,
//! <https://learn.microsoft.com/exchange/mail-flow-best-practices/non-delivery-reports-in-exchange-online/non-delivery-reports-in-exchange-online>),
//! not its exact layout: read defensively, and the DSN part first when there is one.

use super::{Failure, is_code};

/// Where a line's reply text starts, and whether its recipient is the address above it.
enum Reply<'a> {
    /// `… returned '…'` or `#550 … ##`: the recipient is the nearest address line above.
    Below(&'a str),
    /// `Reported error: …` / `Status code: …`: the recipient is the `Recipient Address:` line.
    Labelled(&'a str),
}

fn reply_of(line: &str) -> Option<Reply<'_>> {
    const RETURNED: &str = "returned '";
    let lower = line.to_ascii_lowercase();
    if let Some(at) = lower.find(RETURNED) {
        let quoted = &line[at + RETURNED.len()..];
        return Some(Reply::Below(quoted.strip_suffix('\'').unwrap_or(quoted)));
    }
    if let Some(rest) = line.strip_prefix('#')
        && rest.starts_with(|c: char| c.is_ascii_digit())
    {
        return Some(Reply::Below(rest.split("##").next().unwrap_or(rest)));
    }
    ["reported error:", "status code:"]
        .iter()
        .find(|label| lower.starts_with(*label))
        .map(|label| Reply::Labelled(&line[label.len()..]))
}

/// `550 5.1.1 text` or `5.1.1 text`: the code and the text after it.
fn code_and_text(reply: &str) -> Option<(&str, &str)> {
    let mut words = reply.split_whitespace();
    let first = words.next()?;
    let code = if is_code(first) {
        first
    } else {
        words.next().filter(|w| is_code(w))?
    };
    let after = reply.find(code).map_or("", |at| &reply[at + code.len()..]);
    Some((code, after.trim()))
}

/// `line` as a bare address (`a@b.example`, `<a@b.example>`), if it is one.
pub(super) fn address(line: &str) -> Option<String> {
    let a = line.trim().trim_start_matches('<').trim_end_matches('>');
    let (local, domain) = a.split_once('@')?;
    (!local.is_empty()
        && domain.contains('.')
        && !domain.contains('@')
        && !a.contains(char::is_whitespace)
        && !a.contains(['<', '>', '(', ')', ':', ';', ',']))
    .then(|| a.to_owned())
}

/// Every failure `body` names (see the module doc); else the first non-`2.x.x` code anywhere,
/// with no recipient. A `4.x.x` attempt of a recipient that also has a `5.x.x` is dropped.
pub(crate) fn failures(body: &str) -> Vec<Failure> {
    let lines: Vec<&str> = body.lines().map(str::trim).collect();
    let labelled = lines.iter().find_map(|l| {
        let lower = l.to_ascii_lowercase();
        lower
            .starts_with("recipient address:")
            .then(|| address(&l["recipient address:".len()..]))
            .flatten()
    });
    let mut out: Vec<Failure> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(reply) = reply_of(line) else {
            continue;
        };
        let (text, recipient) = match reply {
            Reply::Below(text) => (
                text,
                lines[..i]
                    .iter()
                    .rev()
                    .take_while(|l| !l.is_empty())
                    .find_map(|l| address(l)),
            ),
            Reply::Labelled(text) => (text, labelled.clone()),
        };
        let Some((code, text)) = code_and_text(text) else {
            continue;
        };
        let recipient = recipient.unwrap_or_default();
        if out
            .iter()
            .any(|f| f.recipient.eq_ignore_ascii_case(&recipient) && f.code == code)
        {
            continue;
        }
        out.push(Failure {
            recipient,
            code: code.to_owned(),
            text: text.to_owned(),
        });
    }
    let permanent: Vec<String> = out
        .iter()
        .filter(|f| f.code.starts_with('5'))
        .map(|f| f.recipient.to_ascii_lowercase())
        .collect();
    out.retain(|f| {
        f.code.starts_with('5') || !permanent.contains(&f.recipient.to_ascii_lowercase())
    });
    if out.is_empty()
        && let Some(code) = body
            .split(|c: char| {
                c.is_whitespace()
                    || matches!(
                        c,
                        '\'' | '"' | '(' | ')' | ';' | ',' | '#' | '[' | ']' | '<' | '>'
                    )
            })
            .find(|w| is_code(w) && !w.starts_with('2'))
    {
        out.push(Failure {
            recipient: String::new(),
            code: code.to_owned(),
            text: String::new(),
        });
    }
    out
}

/// The original's `<Message-ID>` quoted in the text ("Original message headers:").
pub(super) fn quoted_message_id(body: &str) -> Option<String> {
    body.lines().find_map(|l| {
        let l = l.trim();
        l.get(..11)
            .filter(|p| p.eq_ignore_ascii_case("message-id:"))
            .and_then(|_| super::first_angle(&l[11..]))
    })
}

/// The text of an HTML body: tags dropped, `<br>` and block ends as line breaks, the five
/// entities decoded.
pub(super) fn strip_html(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut rest = html;
    while let Some(start) = rest.find('<') {
        out.push_str(&rest[..start]);
        let Some(end) = rest[start..].find('>') else {
            break;
        };
        let tag = rest[start + 1..start + end].to_ascii_lowercase();
        if tag.starts_with("br")
            || tag.starts_with("/p")
            || tag.starts_with("/div")
            || tag.starts_with("/tr")
        {
            out.push('\n');
        }
        rest = &rest[start + end + 1..];
    }
    out.push_str(rest);
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&nbsp;", " ")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The newest layout ("Error Details"), as lhost-office365-13 of sisimai/set-of-emails and
    /// later Exchange Online NDRs write it.
    const ERROR_DETAILS: &str = "Original Message Details\r\nCreated Date:   9/10/2022 1:05:09 AM\r\nSender Address: noreply@contoso.example\r\nRecipient Address:      Kijitora@Neko.example\r\nSubject:        Hello\r\n\r\nError Details\r\nReported error: 550 5.1.10 RESOLVER.ADR.RecipientNotFound; Recipient not found by SMTP address lookup\r\nDSN generated by:       AM7PR02MB5846.eurprd02.prod.outlook.com\r\n";

    #[test]
    fn the_error_details_layout_names_its_recipient_address_and_reported_error() {
        assert_eq!(
            failures(ERROR_DETAILS),
            [Failure {
                recipient: "Kijitora@Neko.example".into(),
                code: "5.1.10".into(),
                text: "RESOLVER.ADR.RecipientNotFound; Recipient not found by SMTP address lookup"
                    .into(),
            }]
        );
        let status = "Status code: 550 5.1.10\r\nRecipient Address: a@b.example\r\n";
        assert_eq!(failures(status)[0].recipient, "a@b.example");
        assert_eq!(failures(status)[0].code, "5.1.10");
    }

    #[test]
    fn an_address_line_is_bare() {
        assert_eq!(address(" <a@b.example> ").as_deref(), Some("a@b.example"));
        assert_eq!(address("host.example.net"), None);
        assert_eq!(
            address("a@b.example (a@b.example)<mailto:a@b.example>"),
            None
        );
        assert_eq!(address("a@localhost"), None);
    }
}
