//! An injectable clock, so minute and day edges are testable.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};

/// Tells the current UTC time.
pub trait Clock: std::fmt::Debug + Send + Sync + 'static {
    /// Now, in UTC.
    fn now(&self) -> DateTime<Utc>;

    /// Whether this is a test's virtual time, which row times (`scheduled_on`) follow instead of
    /// PostgreSQL's `now()`. A replica's wall clock (the default) never decides a row time: it
    /// may be off, and claims and leases compare with PostgreSQL's clock.
    fn is_virtual(&self) -> bool {
        false
    }
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock tests set by hand. Clones share the same time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Mutex<DateTime<Utc>>>);

impl ManualClock {
    /// A clock showing `at`.
    pub fn new(at: DateTime<Utc>) -> Self {
        Self(Arc::new(Mutex::new(at)))
    }

    /// Sets the time.
    pub fn set(&self, at: DateTime<Utc>) {
        *self.0.lock().expect("clock lock") = at;
    }

    /// Moves the time forward.
    pub fn advance(&self, by: std::time::Duration) {
        let mut t = self.0.lock().expect("clock lock");
        *t += chrono::Duration::from_std(by).expect("duration in range");
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().expect("clock lock")
    }

    fn is_virtual(&self) -> bool {
        true
    }
}

impl ManualClock {
    /// The time it shows (same as [`Clock::now`], without importing the trait).
    pub fn now_for_test(&self) -> DateTime<Utc> {
        self.now()
    }
}
