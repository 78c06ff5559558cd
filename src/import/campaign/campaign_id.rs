//! A line's campaign id: its `campaignId`, else its `x-campaign-id` header; what `suspend
//! --campaign` takes too.

use crate::domain::Header;

/// The longest campaign id kept (a label, not a payload).
pub(crate) const MAX_CAMPAIGN_ID_CHARS: usize = 200;

/// A line's campaign: its `campaignId` (trimmed), else the value of its `x-campaign-id` header
/// (any case, the first one); `None` when neither is given or the one given is blank.
///
/// # Errors
/// A `campaignId` over [`MAX_CAMPAIGN_ID_CHARS`] characters, naming the field.
pub(super) fn campaign_of(
    given: Option<&str>,
    headers: &[Header],
) -> Result<Option<String>, String> {
    let (field, raw) = match given {
        Some(raw) => ("campaignId", raw),
        None => match headers
            .iter()
            .find(|h| h.name.trim().eq_ignore_ascii_case("x-campaign-id"))
        {
            Some(h) => ("the x-campaign-id header", h.value.as_str()),
            None => return Ok(None),
        },
    };
    let id = raw.trim();
    if id.chars().count() > MAX_CAMPAIGN_ID_CHARS {
        return Err(format!(
            "{field} has {} characters; a campaign id has at most {MAX_CAMPAIGN_ID_CHARS}",
            id.chars().count()
        ));
    }
    Ok((!id.is_empty()).then(|| id.to_owned()))
}
