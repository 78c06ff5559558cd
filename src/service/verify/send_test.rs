//! `--send-test-to ADDRESS`: one real message from the sender, through the mailer factory
//! like any other send — the configured `GRAPH_SEND_MODE`, and the limiter, which reserves
//! room in the mailbox's budgets first and releases it after — then its `internetMessageId`
//! looked for in Sent Items. When the limiter has no room, nothing is sent and the slot it
//! booked for the test message is dropped.

use std::{sync::Arc, time::Duration};

use uuid::Uuid;

use crate::{
    clock::Clock,
    config::Config,
    domain::{
        BodyContentType, MailboxAddress, MessageContent, OutgoingMail, Priority, Recipient, Sender,
        mask_address,
    },
    mailer::{
        MailErrorKind, MailerFactory,
        graph::{GraphSendMode, internet_message_id, verify::GraphProbe},
    },
    rate_limit::MailRateLimiter,
};

use super::{VerifyError, report::Check};

/// How long the Sent Items copy is waited for (Exchange files it within seconds).
const SENT_ITEMS_WAIT: Duration = Duration::from_secs(30);

/// The test message's recipient and the factory (and limiter) it is sent through.
pub(super) struct SendTest {
    to: MailboxAddress,
    factory: MailerFactory<MailRateLimiter>,
    limiter: Arc<MailRateLimiter>,
    clock: Arc<dyn Clock>,
    mode: GraphSendMode,
    save_to_sent_items: bool,
}

impl SendTest {
    /// A factory on `config`'s limiter for test messages to `to`.
    ///
    /// # Errors
    /// [`VerifyError::BadAddress`] for `to`; [`VerifyError::Setup`] when the limiter or the
    /// factory cannot be built.
    pub(super) fn new(
        config: &Config,
        to: &str,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, VerifyError> {
        let to = MailboxAddress::parse(to).map_err(|_| VerifyError::BadAddress(to.to_owned()))?;
        let limiter = MailRateLimiter::new(&config.rate_limit)
            .map_err(|e| VerifyError::Setup(format!("the rate limiter: {e}")))?;
        let limiter = Arc::new(limiter);
        let factory = MailerFactory::new(config, Arc::clone(&limiter), Arc::clone(&clock))
            .map_err(|e| VerifyError::Setup(format!("the mailers: {e}")))?;
        Ok(Self {
            to,
            factory,
            limiter,
            clock,
            mode: config.graph.send_mode,
            save_to_sent_items: config.graph.save_to_sent_items,
        })
    }

    /// Sends the test message from `sender` and looks for it in Sent Items through `probe`
    /// (when `readable`: the token's roles allow the read).
    pub(super) async fn run(&self, sender: &Sender, probe: &GraphProbe, readable: bool) -> Check {
        let from = sender.mailbox().clone();
        let mail = self.message(&from);
        let mailer = match sender {
            Sender::Tenant(t) => self.factory.mailer_for_tenant(t).await,
            Sender::SystemMailbox(m) => self.factory.mailer_for_system_mailbox(m).await,
        };
        let to = mask_address(self.to.as_str());
        let sent = match mailer {
            Ok(mailer) => mailer.send(&mail).await,
            Err(e) => Err(e),
        };
        match sent.map_err(|e| e.kind) {
            Ok(_) => {}
            Err(MailErrorKind::RateLimitExceeded {
                reason,
                retry_after,
                booked,
            }) => {
                // The slot booked for the test message is given back: it will not come again.
                if booked && let Some(graph) = sender.graph() {
                    let tenant = graph.graph_tenant_id.to_lowercase();
                    let now = self.clock.now();
                    // A Redis failure here leaves the booking to expire after its grace.
                    let _ = self.limiter.unbook(&tenant, &from, &[mail.id], now).await;
                }
                return Check::warn(
                    "send test",
                    format!(
                        "not sent: the limiter has no room in this mailbox's budget now ({reason}); the test message counts like any other send"
                    ),
                    format!("run it again in {} s", retry_after.as_secs().max(1)),
                );
            }
            Err(e) => {
                return Check::fail(
                    "send test",
                    format!("the test message to {to} was not sent: {e}"),
                    "fix what the lines above say, then run it again",
                );
            }
        }
        let imid = internet_message_id(mail.id, &from);
        // A limiter that does not answer failed open: the message went out uncounted by the
        // shared budgets, which the line must say (the daemon would be failing open too).
        let limiter = match self.limiter.ping().await {
            Ok(()) => "through the limiter".to_owned(),
            Err(e) => format!("the limiter's Redis did not answer ({e}): sent failing open"),
        };
        let sent = format!(
            "one message sent to {to} (GRAPH_SEND_MODE={}, {limiter})",
            self.mode.as_str()
        );
        if limiter.contains("failing open") {
            return Check::warn(
                "send test",
                sent,
                "check MAIL_RATE_LIMIT_REDIS_URL (default REDIS_URL): the daemon would fail open too, its sends counted only when Redis answers again",
            );
        }
        if self.mode == GraphSendMode::SendMail && !self.save_to_sent_items {
            return Check::ok(
                "send test",
                format!("{sent}; not looked up: GRAPH_SAVE_TO_SENT_ITEMS=false keeps no copy"),
            );
        }
        if !readable {
            return Check::warn(
                "send test",
                format!("{sent}; not looked up in Sent Items: the app's roles allow no read"),
                "grant Mail.Read (application) to confirm sends by internetMessageId",
            );
        }
        let deadline = std::time::Instant::now() + SENT_ITEMS_WAIT;
        loop {
            match probe.find_in_sent_items(&imid).await {
                Ok(Some(_)) => {
                    return Check::ok(
                        "send test",
                        format!("{sent}; found in Sent Items by its internetMessageId {imid}"),
                    );
                }
                Ok(None) if std::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Ok(None) => {
                    return Check::warn(
                        "send test",
                        format!(
                            "{sent}; its internetMessageId {imid} is not in Sent Items after {} s",
                            SENT_ITEMS_WAIT.as_secs()
                        ),
                        "look for it in the mailbox's Sent Items and in message trace; Exchange may have replaced the internetMessageId",
                    );
                }
                Err(e) => {
                    return Check::warn(
                        "send test",
                        format!("{sent}; the Sent Items look-up failed: {e}"),
                        "look for it in the mailbox's Sent Items",
                    );
                }
            }
        }
    }

    fn message(&self, from: &MailboxAddress) -> OutgoingMail {
        let id = Uuid::new_v4();
        OutgoingMail {
            id,
            from: from.clone(),
            content: MessageContent {
                to: vec![Recipient {
                    address: self.to.as_str().to_owned(),
                    name: None,
                }],
                cc: Vec::new(),
                bcc: Vec::new(),
                subject: format!("mail-worker senders verify: test message from {from}"),
                body_content_type: BodyContentType::Text,
                body: format!(
                    "This is a test message sent by `mail-worker senders verify --send-test-to` to check that {from} can send through Microsoft Graph. No reply is needed. (check {id})"
                ),
                headers: Vec::new(),
                attachments: Vec::new(),
            },
            priority: Priority::Normal,
        }
    }
}
