//! Named points where a chaos trial may stop the engine dead, to prove that a crash at the worst moment
//! loses nothing and repeats nothing. Compiled in only with the `chaos` feature (the test and bench
//! builds); without it every point is an empty inline function.
//!
//! `RUNGUARD_CHAOS_ABORT_AT=NAME:N` aborts the process (SIGABRT: no destructor, no flush, no commit —
//! the same as SIGKILL for the engine's state) the N-th time the point NAME is passed.

/// The points, in the order a recovery passes them.
pub const POINTS: [&str; 6] = [
    // A failure, its attribution and the planned action were committed; nothing ran yet.
    "failure_recorded",
    // An action was marked executing; its command did not run yet.
    "action_executing",
    // Between the steps of a requeue: the job is requeued and held, not yet released (Slurm).
    "requeue_held",
    // An action's command ran; its outcome is not recorded yet.
    "action_ran",
    // An alert was delivered; the delivery is not recorded yet.
    "alert_sent",
    // Inside a store transaction, its changes made and not committed.
    "store_commit",
];

/// Passes the point `name`: aborts the process when the environment asks for this passage.
#[cfg(feature = "chaos")]
pub fn point(name: &str) {
    armed::pass(name);
}

#[cfg(not(feature = "chaos"))]
#[inline(always)]
pub fn point(_name: &str) {}

#[cfg(feature = "chaos")]
mod armed {
    use std::io::Write;
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// The environment variable naming the point and the passage to abort at.
    pub const VARIABLE: &str = "RUNGUARD_CHAOS_ABORT_AT";

    static TARGET: OnceLock<Option<(String, u64)>> = OnceLock::new();
    static PASSED: AtomicU64 = AtomicU64::new(0);

    /// `NAME:N` (N from 1), or `NAME` for the first passage; anything else arms nothing.
    pub fn parse(text: &str) -> Option<(String, u64)> {
        let (name, count) = match text.rsplit_once(':') {
            Some((name, count)) => (name, count.trim().parse().ok()?),
            None => (text, 1),
        };
        let name = name.trim();
        (!name.is_empty() && count > 0).then(|| (name.to_string(), count))
    }

    pub fn pass(name: &str) {
        let target = TARGET.get_or_init(|| {
            let text = std::env::var(VARIABLE).ok()?;
            let target = parse(&text);
            if target.is_none() {
                eprintln!("{VARIABLE}={text:?} is not NAME:N; no chaos point is armed");
            }
            target
        });
        let Some((wanted, count)) = target else {
            return;
        };
        if wanted != name {
            return;
        }
        if PASSED.fetch_add(1, Ordering::SeqCst) + 1 == *count {
            let mut stderr = std::io::stderr().lock();
            let _ = writeln!(stderr, "chaos: aborting at {name}:{count}");
            let _ = stderr.flush();
            std::process::abort();
        }
    }

    #[cfg(test)]
    mod tests {
        use super::parse;

        #[test]
        fn a_point_is_named_with_the_passage_to_abort_at() {
            assert_eq!(parse("action_ran:3"), Some(("action_ran".to_string(), 3)));
            assert_eq!(parse("alert_sent"), Some(("alert_sent".to_string(), 1)));
            assert_eq!(parse("action_ran:0"), None);
            assert_eq!(parse("action_ran:x"), None);
            assert_eq!(parse(":2"), None);
        }
    }
}
