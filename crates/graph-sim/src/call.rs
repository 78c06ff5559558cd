//! [`Call`]: what every handler but the admin API's reads besides its path and body. Apart from
//! `wire` (the answers' shapes), so that the shapes do not depend on the sim's state.

use std::sync::Arc;

use axum::{
    extract::FromRequestParts,
    http::{HeaderMap, request::Parts},
};

use super::state::SimState;

/// What every handler but the admin API's reads besides its path and body: the sim and the
/// request's headers, as one extractor.
pub(crate) struct Call {
    pub state: Arc<SimState>,
    pub headers: HeaderMap,
}

impl FromRequestParts<Arc<SimState>> for Call {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<SimState>,
    ) -> Result<Self, Self::Rejection> {
        Ok(Self {
            state: Arc::clone(state),
            headers: parts.headers.clone(),
        })
    }
}
