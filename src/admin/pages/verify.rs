//! A sender's Verify button: `senders verify`'s checks of that one sender (no test message),
//! rendered as its report — the same [`VerifyReport`] the CLI prints.

use std::sync::Arc;

use super::{form::Posted, mailboxes::parse_address, *};
use crate::service::verify::{VerifyOptions, VerifyReport, verify_senders};

#[derive(Template)]
#[template(path = "admin/verify.html")]
struct VerifyPage {
    nav: bool,
    csrf: String,
    address: String,
    href: String,
    report: VerifyReport,
    failed: bool,
}

/// `POST /mailboxes/{address}/verify` (CSRF as every form): the report of that sender.
pub(super) async fn verify_sender(
    State(state): State<AdminState>,
    Path(raw): Path<String>,
    Posted { session, .. }: Posted,
) -> Result<Html<String>, AdminError> {
    let address = parse_address(&raw)?;
    let options = VerifyOptions {
        addresses: vec![address.to_string()],
        send_test_to: None,
    };
    let report = verify_senders(
        &state.config,
        &state.pool,
        &options,
        Arc::new(crate::clock::SystemClock),
    )
    .await?;
    render(&VerifyPage {
        nav: true,
        csrf: session.csrf,
        href: format!("/mailboxes/{}", segment(address.as_str())),
        address: address.to_string(),
        failed: report.failed(),
        report,
    })
}
