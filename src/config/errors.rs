//! Every bad variable at once, for the start-up message: [`Config::from_lookup`] stops at the
//! first, so it is read again with each one named so far left unset, until it passes.

use super::{Config, ConfigError};

impl Config {
    /// The configuration of `lookup`, or every variable that cannot be used (in the order
    /// they are read; at least one). A variable only wrong together with another (e.g.
    /// `SEND_LEASE` under twice `HTTP_TIMEOUT`) is named once.
    ///
    /// # Errors
    /// The bad variables, each with its value and what is wrong with it.
    pub fn from_lookup_all(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, Vec<ConfigError>> {
        let mut errors: Vec<ConfigError> = Vec::new();
        loop {
            let unset = |name: &str| errors.iter().any(|e| e.var == name);
            match Self::from_lookup(|name| if unset(name) { None } else { lookup(name) }) {
                Ok(config) if errors.is_empty() => return Ok(config),
                Ok(_) => return Err(errors),
                // Named before yet wrong again (a default that clashes with another variable):
                // the first report stands.
                Err(e) if unset(e.var) => return Err(errors),
                Err(e) => errors.push(e),
            }
        }
    }
}
