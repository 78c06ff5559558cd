//! The admin UI in headless Chromium (placeholder while written).
