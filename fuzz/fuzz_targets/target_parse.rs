//! `Target::parse` on any text: never panics; a target it accepts prints (Display) as text it
//! parses back to the same target.
#![no_main]

use libfuzzer_sys::fuzz_target;
use libwool::connection::{ErrorKind, Target};

fuzz_target!(|text: &str| {
    match Target::parse(text) {
        Ok(target) => {
            let printed = target.to_string();
            let again = Target::parse(&printed).unwrap_or_else(|e| {
                panic!("{text:?} parsed, but its form {printed:?} does not: {e}")
            });
            assert_eq!(again, target, "{text:?} → {printed:?}");
        }
        Err(error) => {
            assert_eq!(error.kind(), ErrorKind::InvalidArgument);
            assert!(!error.to_string().is_empty());
        }
    }
});
