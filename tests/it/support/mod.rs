//! The integration tests' harness: the `test-support` crate (crates/test-support), which the
//! benchmarks share, re-exported so that a test writes `use crate::support::…`.

pub use test_support::*;
