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
