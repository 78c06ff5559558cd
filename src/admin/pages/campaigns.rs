//! The campaigns page (every campaign with its counts and forecast finish) and a campaign's
//! page by sender: the reports of `mail-worker campaign status`.

use super::*;
use crate::{
    rate_limit::Algorithm,
    reports::campaign::{CampaignStatus, Readings, campaign_status, status_with},
    store::campaigns::{self, CampaignLine},
};

/// The most campaigns the page lists.
pub(crate) const CAMPAIGNS_PAGE: u32 = 50;

#[derive(Template)]
#[template(path = "admin/campaigns.html")]
struct CampaignsPage {
    nav: bool,
    csrf: String,
    /// Each campaign, its page's path segment, and its forecast finish (`-`: nothing waits).
    campaigns: Vec<(CampaignLine, String, String)>,
    limit: u32,
}

fn time(t: Option<chrono::DateTime<chrono::Utc>>) -> String {
    t.map_or("-".to_owned(), |t| {
        t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
    })
}

pub(super) async fn campaigns_page(
    State(state): State<AdminState>,
    Authed(session): Authed,
) -> Result<Html<String>, AdminError> {
    let booking = state.config.rate_limit.algorithm == Algorithm::Paced;
    let mut lines = Vec::new();
    let mut readings = Readings::new(&state.config, &state.pool).await?;
    for line in campaigns::list(&state.pool, booking, CAMPAIGNS_PAGE).await? {
        let finish = if line.counts.waiting > 0 {
            status_with(&mut readings, &state.pool, &line.campaign)
                .await?
                .and_then(|s| s.forecast_finish)
        } else {
            None
        };
        let path = segment(&line.campaign);
        lines.push((line, path, time(finish)));
    }
    render(&CampaignsPage {
        nav: true,
        csrf: session.csrf,
        campaigns: lines,
        limit: CAMPAIGNS_PAGE,
    })
}

#[derive(Template)]
#[template(path = "admin/campaign.html")]
struct CampaignPage {
    nav: bool,
    csrf: String,
    status: CampaignStatus,
    /// Per sender: its mailbox page's path segment and its forecast finish.
    senders: Vec<(String, String)>,
    finish: String,
    last_sent: String,
}

pub(super) async fn campaign_page(
    State(state): State<AdminState>,
    Authed(session): Authed,
    Path(campaign): Path<String>,
) -> Result<Html<String>, AdminError> {
    let status = campaign_status(&state.config, &state.pool, &campaign)
        .await?
        .ok_or_else(|| AdminError::NotFound(format!("campaign {campaign:?}")))?;
    render(&CampaignPage {
        nav: true,
        csrf: session.csrf,
        senders: status
            .senders
            .iter()
            .map(|s| (segment(&s.mailbox), time(s.forecast_finish)))
            .collect(),
        finish: time(status.forecast_finish),
        last_sent: time(status.total.last_sent),
        status,
    })
}
