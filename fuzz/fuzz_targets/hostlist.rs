//! Slurm's compressed host lists, as found in every listing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runguard_engine::backend::slurm::hostlist;

/// The most hosts one list may expand to, and the longest name a range may make (see
/// `hostlist::expand`).
const MAX_HOSTS: usize = 100_000;
const MAX_HOST_NAME: usize = 255;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(hosts) = hostlist::expand(&text) {
        assert!(hosts.len() <= MAX_HOSTS);
        assert!(
            hosts
                .iter()
                .all(|host| host.len() <= MAX_HOST_NAME.max(text.len()))
        );
        // A list without brackets or commas is its own single host.
        if !text.contains(['[', ',']) && !text.trim().is_empty() {
            assert!(hosts.len() <= 1);
        }
    }
});
