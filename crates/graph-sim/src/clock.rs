//! graph-sim's clock: every window, token expiry and NDR delay reads it. Its own, not the
//! product's (graph-sim shares no code with the product it checks); a test that drives both on one
//! virtual time hands graph-sim an adapter over its own clock.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};

/// Tells the current UTC time.
pub trait Clock: Send + Sync + 'static {
    /// Now, in UTC.
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock (the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock set by hand. Clones share the same time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Mutex<DateTime<Utc>>>);

impl ManualClock {
    /// A clock showing `at`.
    pub fn new(at: DateTime<Utc>) -> Self {
        Self(Arc::new(Mutex::new(at)))
    }

    /// Moves the time forward.
    pub fn advance(&self, by: std::time::Duration) {
        let mut t = self.0.lock().expect("clock lock");
        *t += chrono::Duration::from_std(by).expect("duration in range");
    }

    /// Sets the time.
    pub fn set(&self, at: DateTime<Utc>) {
        *self.0.lock().expect("clock lock") = at;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().expect("clock lock")
    }
}
