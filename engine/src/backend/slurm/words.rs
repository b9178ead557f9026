//! Slurm's own words for job states and hold reasons, mapped to the model: the rest of the engine never
//! compares a Slurm word.

use crate::backend::Hold;
use crate::model::JobState;

/// Maps a Slurm state word (`RUNNING`, `NODE_FAIL`, `CANCELLED by 0`, ...) to the model.
pub fn job_state(word: &str) -> JobState {
    let head = word
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_ascii_uppercase();
    match head.trim_end_matches('+') {
        "PENDING" | "PD" | "CONFIGURING" | "CF" | "REQUEUE_HOLD" | "RH" | "RESV_DEL_HOLD" => {
            JobState::Pending
        }
        "RUNNING" | "R" | "RESIZING" | "SIGNALING" | "STAGE_OUT" => JobState::Running,
        "COMPLETING" | "CG" => JobState::Completing,
        "SUSPENDED" | "S" | "STOPPED" | "ST" => JobState::Suspended,
        "COMPLETED" | "CD" => JobState::Completed,
        "FAILED" | "F" | "BOOT_FAIL" | "BF" | "DEADLINE" | "DL" => JobState::Failed,
        "CANCELLED" | "CA" | "REVOKED" | "RV" => JobState::Cancelled,
        "TIMEOUT" | "TO" => JobState::Timeout,
        "NODE_FAIL" | "NF" => JobState::NodeFail,
        "PREEMPTED" | "PR" => JobState::Preempted,
        "OUT_OF_MEMORY" | "OOM" => JobState::OutOfMemory,
        "REQUEUED" | "RQ" | "REQUEUE_FED" | "RF" => JobState::Requeued,
        _ => JobState::Unknown,
    }
}

/// Who holds a pending job, from its reason and description. Measured the same on 22.05 and 24.11: a
/// requeue-hold and a user's hold both say `JobHeldUser`; only the description (JSON
/// `state_description` "job requeued in held state", `scontrol`'s `Reason=job_requeued_in_held_state`)
/// tells the requeue's; `JobHeldAdmin` is an administrator's.
pub fn hold(reason: &str, description: Option<&str>) -> Option<Hold> {
    let requeued = |text: &str| {
        matches!(
            text,
            "job_requeued_in_held_state" | "job requeued in held state"
        )
    };
    if requeued(reason) || description.is_some_and(requeued) {
        return Some(Hold::Requeue);
    }
    match reason {
        "JobHeldUser" => Some(Hold::User),
        "JobHeldAdmin" => Some(Hold::Admin),
        _ => None,
    }
}

/// How a node in `sinfo`'s compact state (`%t`) is dead under the jobs it runs, in plain words: it
/// does not answer the controller (a trailing `*`), or is DOWN or FAILing. `None` when it is not: a
/// drained or draining node still runs its jobs, and a powered-down one (`~`) runs none.
pub fn node_death(state: &str) -> Option<&'static str> {
    if state.ends_with('*') {
        return Some("not responding");
    }
    match state.trim_end_matches(|c: char| !c.is_ascii_alphabetic()) {
        "down" => Some("down"),
        "fail" | "failg" | "failing" => Some("failing"),
        _ => None,
    }
}

/// Whether a node in `sinfo`'s compact state is drained or draining (`drain`, `drng`, `drain*`...).
pub fn drained(state: &str) -> bool {
    matches!(
        state.trim_end_matches(|c: char| !c.is_ascii_alphabetic()),
        "drain" | "drained" | "drng" | "draining"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_words_map_with_their_suffixes_and_abbreviations() {
        assert_eq!(job_state("CANCELLED by 0"), JobState::Cancelled);
        assert_eq!(job_state("RUNNING+"), JobState::Running);
        assert_eq!(job_state("NF"), JobState::NodeFail);
        assert_eq!(job_state("REQUEUE_HOLD"), JobState::Pending);
        assert_eq!(job_state("SOMETHING_NEW"), JobState::Unknown);
    }

    #[test]
    fn dead_nodes_are_the_silent_the_down_and_the_failing() {
        // As sinfo printed them on 22.05 and 24.11 with n2's slurmd stopped (tests/fixtures/slurm).
        for dead in [
            "alloc*", "mix*", "down*", "down", "fail", "failg", "drain*", "idle*",
        ] {
            assert!(node_death(dead).is_some(), "{dead}");
        }
        for alive in [
            "alloc", "mix", "idle", "drain", "drng", "comp", "idle~", "plnd", "mix-",
        ] {
            assert_eq!(node_death(alive), None, "{alive}");
        }
    }

    #[test]
    fn a_requeues_hold_is_told_from_a_users_and_an_administrators() {
        let description = Some("job requeued in held state");
        assert_eq!(hold("JobHeldUser", description), Some(Hold::Requeue));
        assert_eq!(
            hold("job_requeued_in_held_state", None),
            Some(Hold::Requeue)
        );
        assert_eq!(hold("JobHeldUser", None), Some(Hold::User));
        assert_eq!(hold("JobHeldUser", Some("")), Some(Hold::User));
        assert_eq!(hold("JobHeldAdmin", None), Some(Hold::Admin));
        assert_eq!(hold("BeginTime", None), None);
    }
}
