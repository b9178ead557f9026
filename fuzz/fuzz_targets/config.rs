//! The TOML config file: parsing, validation, and the line an error points to.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use runguard_engine::config::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = Config::parse(text, Path::new("config.toml")) else {
        return;
    };
    // A config runguard accepts can be written back and reads the same (Debug, so that a NaN where
    // one is allowed compares equal to itself).
    let written = toml::to_string(&config).unwrap_or_else(|err| panic!("written back: {err}"));
    let again = Config::parse(&written, Path::new("written.toml"))
        .unwrap_or_else(|err| panic!("{err}\n{written}"));
    assert_eq!(format!("{config:?}"), format!("{again:?}"));
});
