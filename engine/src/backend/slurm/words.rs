//! Slurm's own words for job states and hold reasons, mapped to the model: the rest of the engine never
//! compares a Slurm word.

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

/// Whether Slurm keeps a pending job from starting because it was held by its user or requeued in the
/// held state (`scontrol requeuehold`): `JobHeldUser` in `squeue --json`, `job_requeued_in_held_state`
/// in `scontrol`. An administrator's hold (`JobHeldAdmin`) is not one runguard ever releases.
pub fn is_user_or_requeue_hold(reason: &str) -> bool {
    matches!(
        reason,
        "JobHeldUser" | "job_requeued_in_held_state" | "job requeued in held state"
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
    fn a_user_or_requeue_hold_is_told_from_an_administrators() {
        assert!(is_user_or_requeue_hold("JobHeldUser"));
        assert!(is_user_or_requeue_hold("job_requeued_in_held_state"));
        assert!(!is_user_or_requeue_hold("JobHeldAdmin"));
        assert!(!is_user_or_requeue_hold("BeginTime"));
    }
}
