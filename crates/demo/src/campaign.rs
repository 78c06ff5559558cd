//! The demo's default senders and a generated campaign in the JSONL format of
//! `mail-worker enqueue`.

use mail_worker::import::senders::{SendersFile, SystemMailboxEntry};

/// Three system mailboxes of one Contoso app: two on the default limits, one with an admin's
/// override of 20 messages per minute.
pub fn demo_senders() -> SendersFile {
    let mailbox = |address: &str, per_minute: Option<u32>| SystemMailboxEntry {
        address: address.into(),
        graph_tenant_id: "contoso.example".into(),
        client_id: "11111111-1111-4111-8111-111111111111".into(),
        client_secret: "env:DEMO_CONTOSO_GRAPH_SECRET".into(),
        client_certificate: None,
        rate_limit_per_minute: per_minute,
        rate_limit_recipients_per_day: None,
        rate_limit_reserved_percent: None,
        external_recipients_per_day: None,
        accepted_domains: None,
        priority: None,
        read_bounces: None,
        trace_delivery: None,
        warm_up: None,
    };
    SendersFile {
        sender_pools: Vec::new(),
        system_mailboxes: vec![
            mailbox("events@contoso.example", None),
            mailbox("noreply@contoso.example", Some(20)),
            mailbox("invites@contoso.example", None),
        ],
        tenants: Vec::new(),
    }
}

const NAMES: [&str; 8] = [
    "Lotte Jansen",
    "Daan El Amrani",
    "Jürgen Smit",
    "Zoë de Vries",
    "Mohammed Müller",
    "Ana-María Visser",
    "Thijs Bakker",
    "Noor Ö'Connor",
];

/// `per_sender` invitation messages for every sender of `file` (one recipient each).
pub fn generate(file: &SendersFile, per_sender: usize) -> String {
    let senders = file
        .system_mailboxes
        .iter()
        .map(|m| serde_json::json!({ "systemMailbox": m.address }))
        .chain(
            file.tenants
                .iter()
                .map(|t| serde_json::json!({ "tenant": t.name })),
        );
    let mut out = String::new();
    for (s, sender) in senders.enumerate() {
        for i in 0..per_sender {
            let name = NAMES[(s * 31 + i) % NAMES.len()];
            let local: String = name
                .to_lowercase()
                .chars()
                .filter(|c| c.is_ascii_alphanumeric())
                .collect();
            let mut line = serde_json::json!({
                "id": uuid::Uuid::new_v4(),
                "to": [{ "address": format!("{local}{s}{i}@example.com"), "name": name }],
                "subject": format!("Invitation: Kick-off 2027 — {name}"),
                "body": { "contentType": "html",
                          "content": format!("<p>Beste {name},</p><p>Je bent uitgenodigd voor onze kick-off op <b>15 januari</b>.</p>") },
                "headers": [{ "name": "x-campaign-id", "value": "demo" }],
            });
            if let (Some(line), Some(sender)) = (line.as_object_mut(), sender.as_object()) {
                line.extend(sender.clone());
            }
            out.push_str(&line.to_string());
            out.push('\n');
        }
    }
    out
}
