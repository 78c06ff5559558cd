//! The providers: Microsoft Graph (endpoints, send mode, bounce reading), SendGrid, and the
//! HTTP deadlines every provider call shares.

use std::time::Duration;

use url::Url;

use super::Fallback::{Unset, Value};
use super::Setting;
use super::kinds::{Custom, ON_OFF, Optional, Span, SpanAtLeast, TRUE_FALSE, Text, keyword};
use super::urls::ProviderUrl;
use crate::mailer::graph::GraphSendMode;

/// `GRAPH_BOUNCE_FOLDER`: a well-known folder name or a folder id, never a path or URL.
const BOUNCE_FOLDER: Custom<String> = Custom {
    parse: |raw| {
        if raw.contains(['/', '?', '#']) {
            Err("must be a well-known folder name (deleteditems, archive, …) or a folder id")
        } else {
            Ok(raw.to_owned())
        }
    },
    show: String::clone,
};

settings! {
    /// Providers: Microsoft Graph, SendGrid, deadlines.
    pub struct ProviderSettings = "Providers: Microsoft Graph, SendGrid, deadlines" {
        graph_api_base_url: Url = ProviderUrl, Setting {
            name: "GRAPH_API_BASE_URL",
            flag: "graph-api-base-url",
            default: Value("https://graph.microsoft.com/v1.0"),
            help: "Microsoft Graph; the token scope is `<its origin>/.default`; a base URL alone (no user, password, query or fragment)",
            doc: "Microsoft Graph; change it and GRAPH_LOGIN_BASE_URL for national clouds (e.g.\n\
                  graph.microsoft.us / login.microsoftonline.us).",
            ..Setting::NEW
        };
        graph_login_base_url: Url = ProviderUrl, Setting {
            name: "GRAPH_LOGIN_BASE_URL",
            flag: "graph-login-base-url",
            default: Value("https://login.microsoftonline.com"),
            help: "Entra ID token endpoint; a base URL alone",
            doc: "The Entra ID token endpoint (login.microsoftonline.us for the US government cloud).",
            ..Setting::NEW
        };
        save_to_sent_items: bool = TRUE_FALSE, Setting {
            name: "GRAPH_SAVE_TO_SENT_ITEMS",
            flag: "graph-save-to-sent-items",
            default: Value("true"),
            help: "saveToSentItems, `true` or `false` (`sendmail` mode; a draft's send always keeps its copy)",
            doc: "Keep a copy of each message in the mailbox's Sent Items.",
            ..Setting::NEW
        };
        send_mode: GraphSendMode = keyword::<GraphSendMode>(), Setting {
            name: "GRAPH_SEND_MODE",
            flag: "graph-send-mode",
            default: Value("draft"),
            help: "`draft` (exactly once: draft, then send) or `sendmail` (one request; docs/delivery.md)",
            doc: "draft (create a draft with our own internetMessageId, then send it; checked before any resend:\n\
                  exactly once) or sendmail (one sendMail request; at-least-once after an unknown outcome). See\n\
                  docs/delivery.md.",
            ..Setting::NEW
        };
        send_settle: Duration = Span, Setting {
            name: "GRAPH_SEND_SETTLE",
            flag: "graph-send-settle",
            default: Value("2m"),
            help: "after a send with an unknown outcome, how long \\\"still a draft\\\" / \\\"not in Sent Items\\\" is not trusted",
            doc: "After a send with an unknown outcome, how long a check that still sees a draft (or no Sent\n\
                  Items copy) is not trusted to mean \"not sent\"; Graph is eventually consistent.",
            alias_ms: Some("GRAPH_SEND_SETTLE_MS"),
            ..Setting::NEW
        };
        read_bounces: bool = ON_OFF, Setting {
            name: "GRAPH_READ_BOUNCES",
            flag: "graph-read-bounces",
            default: Value("off"),
            help: "`on`: read each Graph sender's Inbox for non-delivery reports and mark their messages BOUNCED (needs Mail.Read and Mail.ReadWrite; per sender `readBounces`)",
            doc: "on: read each Graph sender's Inbox for non-delivery reports (NDRs) and mark their messages\n\
                  BOUNCED with the DSN code (the app needs the Mail.Read and Mail.ReadWrite application\n\
                  permissions; a sender's readBounces: false in the senders file skips it). docs/decisions/0018-bounce-reading.md.",
            ..Setting::NEW
        };
        bounce_interval: Duration = SpanAtLeast(Duration::from_secs(1), "must be at least 1s"), Setting {
            name: "GRAPH_BOUNCE_INTERVAL",
            flag: "graph-bounce-interval",
            default: Value("5m"),
            help: "how often each Inbox is read for bounces (a duration: `ms`, `s`, `m`, `h`, `d`; at least 1s)",
            doc: "How often each Inbox is read (a duration; at least 1s). Each read costs 1 request with no NDR.",
            ..Setting::NEW
        };
        bounce_folder: Option<String> = Optional(BOUNCE_FOLDER, "(unset)"), Setting {
            name: "GRAPH_BOUNCE_FOLDER",
            flag: "graph-bounce-folder",
            default: Unset,
            help: "where a handled NDR is moved (a well-known folder name such as `deleteditems`, or a folder id); unset: it is marked read",
            doc: "Where a handled NDR is moved (a well-known folder name such as deleteditems, or a folder id);\n\
                  unset: it is marked read.",
            example: Some("deleteditems"),
            ..Setting::NEW
        };
        sendgrid_api_base_url: Url = ProviderUrl, Setting {
            name: "SENDGRID_API_BASE_URL",
            flag: "sendgrid-api-base-url",
            default: Value("https://api.sendgrid.com"),
            help: "SendGrid v3; a base URL alone",
            doc: "SendGrid's v3 API.",
            ..Setting::NEW
        };
        cleartext_hosts: Option<String> = Optional(Text, "(unset)"), Setting {
            name: "PROVIDER_CLEARTEXT_HOSTS",
            flag: "provider-cleartext-hosts",
            default: Unset,
            help: "host names the three provider URLs may reach over http:// besides loopback (compose's graph-sim); anything else must be https://",
            doc: "Provider URLs must be https:// except to loopback or to a host named here (a stand-in on a\n\
                  private network, e.g. compose's graph-sim; never a real provider). Comma-separated.",
            example: Some("graph-sim"),
            ..Setting::NEW
        };
        http_timeout: Duration = Span, Setting {
            name: "HTTP_TIMEOUT",
            flag: "http-timeout",
            default: Value("30s"),
            help: "whole-request deadline of provider calls",
            doc: "Whole-request deadline of every provider call.",
            alias_ms: Some("HTTP_TIMEOUT_MS"),
            ..Setting::NEW
        };
        shutdown_grace: Duration = Span, Setting {
            name: "SHUTDOWN_GRACE",
            flag: "shutdown-grace",
            default: Value("30s"),
            help: "time for in-flight sends after SIGTERM",
            doc: "After SIGTERM/SIGINT, how long in-flight sends may finish.",
            alias_ms: Some("SHUTDOWN_GRACE_MS"),
            ..Setting::NEW
        };
    }
}
