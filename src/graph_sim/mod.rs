//! A Microsoft Graph stand-in for tests, the demo and capacity planning (see issue: graph-sim).
