//! A non-delivery report as Exchange Online writes one into the sender's Inbox. What
//! Microsoft documents: an NDR is an item of message class `REPORT.IPM.Note.NDR`
//! (<https://learn.microsoft.com/office/client-developer/outlook/mapi/pidtagmessageclass-canonical-property>),
//! its text names each failed recipient with the remote server's answer and the enhanced status
//! code (<https://learn.microsoft.com/exchange/mail-flow-best-practices/non-delivery-reports-in-exchange-online/non-delivery-reports-in-exchange-online>),
//! and it is sent by the tenant's postmaster, shown as "Microsoft Outlook". What is assumed
//! (docs/decisions/bounce-reading.md): through Graph it reads as a plain `message` (no
//! `@odata.type` of its own in a listing), its `internetMessageHeaders` carry the original's
//! `Message-ID` as `In-Reply-To` and `References`, and its text body ends with the original's
//! headers, `Message-ID:` among them.

use chrono::{DateTime, Utc};

use crate::{
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
/// The postmaster's display name on an Exchange Online NDR.
pub(crate) const POSTMASTER_NAME: &str = "Microsoft Outlook";
/// The local part of Exchange Online's postmaster address (the same in every tenant).
pub(crate) const POSTMASTER_LOCAL: &str = "MicrosoftExchange329e71ec88ae4615bbc36ab6ce41109e";

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

    fn explanation(&self) -> String {
        let (user, domain) = self
            .recipient
            .rsplit_once('@')
            .unwrap_or((self.recipient.as_str(), ""));
        if self.code.starts_with("5.1.") {
            format!("{user} wasn't found at {domain}.")
        } else {
            "Your organization has sent to more external recipients in 24 hours than it is allowed to. Try again later.".to_owned()
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

/// The NDR of `original` for `failures`, visible from `visible_at_ms`.
pub(crate) fn report(
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
    let server = "AM9PR05MB8000.eurprd05.prod.outlook.com";
    let mut body = String::new();
    for f in failures {
        body.push_str(&format!(
            "Your message to {} couldn't be delivered.\r\n\r\n{}\r\n\r\n",
            f.recipient,
            f.explanation()
        ));
    }
    body.push_str(&format!(
        "Diagnostic information for administrators:\r\n\r\nGenerating server: {server}\r\n\r\n"
    ));
    for f in failures {
        body.push_str(&format!(
            "{}\r\nRemote server returned '{} {} {}'\r\n\r\n",
            f.recipient, f.reply, f.code, f.text
        ));
    }
    body.push_str(&format!(
        "Original message headers:\r\n\r\nFrom: {mailbox}\r\nTo: {to}\r\nSubject: {subject}\r\nDate: {date}\r\nMessage-ID: {imid}\r\nMIME-Version: 1.0\r\n",
        mailbox = original.mailbox,
        to = failures
            .iter()
            .map(|f| f.recipient.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        subject = original.subject,
        date = original.sent_at.to_rfc2822(),
        imid = original.internet_message_id,
    ));
    let own_id = format!("<{}@{server}>", uuid::Uuid::new_v4().simple());
    InboxItem {
        idx: original.mailbox_idx,
        id: new_item_id(),
        folder: INBOX.to_owned(),
        visible_at_ms,
        received_at,
        is_read: false,
        message_class: NDR_CLASS,
        subject: format!("Undeliverable: {}", original.subject),
        from_name: POSTMASTER_NAME.to_owned(),
        from_address: format!("{POSTMASTER_LOCAL}@{domain}"),
        to: original.mailbox.to_owned(),
        body,
        headers: vec![
            (
                "In-Reply-To".to_owned(),
                original.internet_message_id.to_owned(),
            ),
            (
                "References".to_owned(),
                original.internet_message_id.to_owned(),
            ),
            (
                "Content-Type".to_owned(),
                "multipart/report; report-type=delivery-status; boundary=\"_000_\"".to_owned(),
            ),
            ("X-MS-Exchange-Message-Is-Ndr".to_owned(), String::new()),
            ("Message-ID".to_owned(), own_id.clone()),
        ],
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
    inner
        .inbox
        .push(report(&original, failures, visible_at_ms, received_at));
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
