//! A non-delivery report as Exchange Online writes one into the sender's Inbox. What
//! Microsoft documents: an NDR is an item of message class `REPORT.IPM.Note.NDR`
//! (<https://learn.microsoft.com/office/client-developer/outlook/mapi/pidtagmessageclass-canonical-property>),
//! its text names each failed recipient with the remote server's answer and the enhanced status
//! code (<https://learn.microsoft.com/exchange/mail-flow-best-practices/non-delivery-reports-in-exchange-online/non-delivery-reports-in-exchange-online>).
//! What real NDRs show (the product's `tests/fixtures/ndr/`, from sisimai/set-of-emails): MIME
//! `multipart/report` in several layouts ([`crate::config::NdrLayout`], written by [`mime`]),
//! from the tenant's postmaster or from `Microsoft Outlook <postmaster@outlook.com>`, with
//! `In-Reply-To`/`References` only in the latter. Through Graph it reads as a plain `message`;
//! its MIME at `$value`, its JSON view derived from that same MIME.

mod mime;

use chrono::{DateTime, Utc};

use crate::{
    config::NdrLayout,
    records::InboxItem,
    state::{Inner, SimState},
    validate::ParsedMessage,
    wire::new_item_id,
};

/// The Inbox's well-known name.
pub(crate) const INBOX: &str = "inbox";

/// The message class of an NDR.
pub(crate) const NDR_CLASS: &str = "REPORT.IPM.Note.NDR";
/// The message class of an ordinary message.
pub(crate) const NOTE_CLASS: &str = "IPM.Note";
/// The sender of an outlook.com NDR (exchange-online-04..08).
pub(crate) const OUTLOOK_POSTMASTER: &str = "Microsoft Outlook <postmaster@outlook.com>";

/// One failed recipient of a message: its address, the SMTP reply code (`550`), the enhanced
/// status code (`5.1.1`) and the server's text.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub recipient: String,
    pub reply: &'static str,
    pub code: String,
    pub text: String,
}

impl Failure {
    /// An unknown recipient (`5.1.1` at a remote domain, `5.1.10` in Exchange Online).
    pub(crate) fn unknown(recipient: &str, code: &str) -> Self {
        let text = if code == "5.1.10" {
            "RESOLVER.ADR.RecipientNotFound; Recipient not found by SMTP address lookup"
        } else {
            "RESOLVER.ADR.RecipNotFound; not found"
        };
        Self {
            recipient: recipient.to_owned(),
            reply: "550",
            code: code.to_owned(),
            text: text.to_owned(),
        }
    }

    /// The tenant's external recipient rate limit (TERRL).
    pub(crate) fn tenant_limit(recipient: &str) -> Self {
        Self {
            recipient: recipient.to_owned(),
            reply: "550",
            code: "5.7.233".to_owned(),
            text: "Your message can't be sent because your organization has exceeded its tenant external recipient rate limit".to_owned(),
        }
    }

    /// A new tenant's reputation (`5.7.705`, `5.7.708`, `5.7.501`), in the words of Microsoft's
    /// page on NDRs 5.7.700 through 5.7.750
    /// (<https://learn.microsoft.com/exchange/mail-flow-best-practices/non-delivery-reports-in-exchange-online/fix-error-code-5-7-700-through-5-7-750>).
    pub(crate) fn reputation(recipient: &str, code: &str) -> Self {
        let text = match code {
            "5.7.705" => "Access denied, tenant has exceeded threshold",
            "5.7.501" => "Access denied, spam abuse detected",
            _ => "Access denied, traffic not accepted from this IP",
        };
        Self {
            recipient: recipient.to_owned(),
            reply: "550",
            code: code.to_owned(),
            text: text.to_owned(),
        }
    }

    /// The mailbox's recipients per day used up: `550 5.1.90`, "Your message can't be sent
    /// because you've reached your daily limit for message recipients"
    /// (<https://learn.microsoft.com/exchange/mail-flow-best-practices/non-delivery-reports-in-exchange-online/non-delivery-reports-in-exchange-online>).
    pub(crate) fn daily_quota(recipient: &str) -> Self {
        Self {
            recipient: recipient.to_owned(),
            reply: "550",
            code: "5.1.90".to_owned(),
            text: "Your message can't be sent because you've reached your daily limit for message recipients".to_owned(),
        }
    }
}

/// What the NDR reports on: the original message.
pub(crate) struct Original<'a> {
    pub mailbox_idx: usize,
    pub mailbox: &'a str,
    pub subject: &'a str,
    pub internet_message_id: &'a str,
    pub sent_at: DateTime<Utc>,
}

/// The NDR of `original` for `failures` in `layout`, visible from `visible_at_ms`.
pub(crate) fn report(
    layout: NdrLayout,
    original: &Original<'_>,
    failures: &[Failure],
    visible_at_ms: i64,
    received_at: DateTime<Utc>,
) -> InboxItem {
    let domain = original
        .mailbox
        .rsplit('@')
        .next()
        .unwrap_or("graph-sim.example");
    let (from_name, from_address) = match layout {
        NdrLayout::OutlookCom => ("Microsoft Outlook", "postmaster@outlook.com".to_owned()),
        _ => ("", format!("postmaster@{domain}")),
    };
    let from = if from_name.is_empty() {
        format!("<{from_address}>")
    } else {
        OUTLOOK_POSTMASTER.to_owned()
    };
    let own_id = format!("<{}@{}>", uuid::Uuid::new_v4(), mime::SERVER);
    let written = mime::write(layout, original, failures, &own_id, &from);
    InboxItem {
        idx: original.mailbox_idx,
        id: new_item_id(),
        folder: INBOX.to_owned(),
        visible_at_ms,
        received_at,
        is_read: false,
        message_class: NDR_CLASS,
        subject: format!("Undeliverable: {}", original.subject),
        from_name: from_name.to_owned(),
        from_address,
        to: original.mailbox.to_owned(),
        body: written.text,
        headers: written.headers,
        mime: written.mime,
        internet_message_id: own_id,
    }
}

/// Files the NDR of `message` (sent by mailbox `idx`, accepted at `now`) for `failures` in the
/// mailbox's Inbox, visible after the configured delay. Nothing when `failures` is empty.
pub(crate) fn bounce(
    state: &SimState,
    inner: &mut Inner,
    idx: usize,
    message: &ParsedMessage,
    failures: &[Failure],
    now: DateTime<Utc>,
) {
    if failures.is_empty() {
        return;
    }
    let generated;
    let imid = match &message.internet_message_id {
        Some(id) => id.as_str(),
        None => {
            generated = format!("<{}@graph-sim.example>", uuid::Uuid::new_v4().simple());
            &generated
        }
    };
    let delay = i64::try_from(state.bounces.delay_ms).unwrap_or(i64::MAX / 2);
    let original = Original {
        mailbox_idx: idx,
        mailbox: state.mailboxes[idx].address.as_str(),
        subject: message.subject.as_deref().unwrap_or_default(),
        internet_message_id: imid,
        sent_at: now,
    };
    let visible_at_ms = now.timestamp_millis().saturating_add(delay);
    let received_at = now + chrono::Duration::milliseconds(delay);
    inner.inbox.push(report(
        state.bounces.layout,
        &original,
        failures,
        visible_at_ms,
        received_at,
    ));
}

/// The failures of an accepted message: its recipients configured as unknown.
pub(crate) fn unknown_failures(state: &SimState, message: &ParsedMessage) -> Vec<Failure> {
    message
        .to
        .iter()
        .chain(&message.cc)
        .chain(&message.bcc)
        .filter_map(|r| {
            state
                .bounces
                .unknown(r)
                .map(|code| Failure::unknown(r, code))
        })
        .collect()
}
