//! Fuzzes the senders file parser and validator (`import::senders::check`, no database): it
//! must never panic, and a refusal always names at least one entry.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mail_worker::import::senders::{ImportError, check};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match check(text) {
        Ok(_) | Err(ImportError::Parse(_)) | Err(ImportError::Store(_)) => {}
        Err(ImportError::BadEntries(entries)) => {
            assert!(!entries.is_empty(), "a refusal without a reason");
        }
    }
});
