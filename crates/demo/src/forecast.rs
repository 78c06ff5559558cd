//! The forecast the demo makes before it enqueues (`mail-worker campaign forecast`'s code) and
//! how it compares with each mailbox's actual last send (the goal: within 5 % or 30 s,
//! whichever is larger).

use serde::Serialize;
use sqlx::PgPool;

use mail_worker::reports::campaign::CampaignForecast;

/// One mailbox: its forecast finish and its actual one, in seconds from the forecast.
#[derive(Debug, Clone, Serialize)]
pub struct ForecastLine {
    /// The sending mailbox.
    pub mailbox: String,
    /// Messages forecast.
    pub messages: u64,
    /// Forecast: seconds from the forecast to the last slot.
    pub forecast_s: f64,
    /// Actual: seconds from the forecast to the last `sent_at` (`None`: nothing sent).
    pub actual_s: Option<f64>,
    /// |actual − forecast|, seconds.
    pub error_s: Option<f64>,
    /// Whether the error is within max(5 % of the forecast, 30 s).
    pub within_goal: Option<bool>,
}

/// The forecast's one-line summary, printed before the campaign is enqueued.
pub fn summary(forecast: &CampaignForecast) -> String {
    let senders: Vec<String> = forecast
        .senders
        .iter()
        .map(|s| format!("{} {:.0} s", s.mailbox, s.seconds))
        .collect();
    format!(
        "mail-worker-demo: forecast (campaign forecast): done in {:.0} s ({})",
        (forecast.finish - forecast.now).num_milliseconds() as f64 / 1000.0,
        senders.join(", ")
    )
}

/// Each forecast mailbox against its actual last send.
///
/// # Errors
/// Database errors.
pub async fn compare(
    pool: &PgPool,
    forecast: &CampaignForecast,
) -> sqlx::Result<Vec<ForecastLine>> {
    let last: Vec<(String, Option<chrono::DateTime<chrono::Utc>>)> = sqlx::query_as(
        "SELECT lower(coalesce(s.address, t.sender_address)), max(m.sent_at) FROM messages m \
         LEFT JOIN tenants t ON t.id = m.tenant_id \
         LEFT JOIN system_mailboxes s ON s.id = m.system_mailbox_id GROUP BY 1",
    )
    .fetch_all(pool)
    .await?;
    Ok(forecast
        .senders
        .iter()
        .map(|s| {
            let actual = last
                .iter()
                .find(|(m, _)| m.eq_ignore_ascii_case(&s.mailbox))
                .and_then(|(_, t)| *t)
                .map(|t| (t - forecast.now).num_milliseconds() as f64 / 1000.0);
            let error = actual.map(|a| (a - s.seconds).abs());
            ForecastLine {
                mailbox: s.mailbox.clone(),
                messages: s.messages.messages,
                forecast_s: s.seconds,
                actual_s: actual,
                error_s: error,
                within_goal: error.map(|e| e <= (0.05 * s.seconds).max(30.0)),
            }
        })
        .collect())
}

/// The comparison as a table.
pub fn render(lines: &[ForecastLine]) -> String {
    let mut out = format!(
        "\nforecast vs actual finish (goal: within 5 % or 30 s, whichever is larger)\n{:<30} {:>8} {:>10} {:>10} {:>9}  {}\n",
        "mailbox", "messages", "forecast", "actual", "error", "goal"
    );
    let secs = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1} s"));
    for l in lines {
        out.push_str(&format!(
            "{:<30} {:>8} {:>10} {:>10} {:>9}  {}\n",
            l.mailbox,
            l.messages,
            secs(Some(l.forecast_s)),
            secs(l.actual_s),
            secs(l.error_s),
            match l.within_goal {
                Some(true) => "met",
                Some(false) => "MISSED",
                None => "-",
            }
        ));
    }
    out
}
