//! What a multiphase workflow does next, as a pure function of its phases and of what became of the
//! runs submitted for them: the next phase starts only once the one before it succeeded, and a phase
//! that failed for good stops every phase after it.

use crate::model::{MultiphaseState, Phase, PhaseState};

/// What became of the run of a submitted phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// The submission is recorded but has not run yet (waiting for approval, or for the next pass).
    SubmissionPending,
    /// The submission failed or was rejected, in these words.
    SubmissionFailed(String),
    /// The job is submitted (under this id, when known) and has not finished.
    Running { job_id: Option<String> },
    /// The run finished its training.
    Succeeded { job_id: Option<String> },
    /// runguard stopped recovering it, for this reason.
    Failed {
        job_id: Option<String>,
        reason: String,
    },
}

/// One change to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Submit phase `index` now.
    Submit { index: u32 },
    /// Phase `index` moves to `state`.
    Set {
        index: u32,
        state: PhaseState,
        job_id: Option<String>,
        reason: Option<String>,
    },
    /// The workflow as a whole ends.
    Finish {
        state: MultiphaseState,
        reason: Option<String>,
    },
}

/// The steps that bring `phases` (in order) up to date with `outcome` of each submitted phase's run.
pub fn advance(phases: &[Phase], outcome: impl Fn(&Phase) -> Option<RunOutcome>) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut failed: Option<(String, String)> = None;
    for phase in phases {
        let index = phase.index;
        if let Some((name, reason)) = &failed {
            if !phase.state.is_final() {
                steps.push(Step::Set {
                    index,
                    state: PhaseState::Skipped,
                    job_id: None,
                    reason: Some(format!("phase {name:?} failed: {reason}")),
                });
            }
            continue;
        }
        let state = match phase.state {
            PhaseState::Waiting => {
                steps.push(Step::Submit { index });
                return steps;
            }
            PhaseState::Submitting | PhaseState::Running => {
                let set = |state, job_id, reason| Step::Set {
                    index,
                    state,
                    job_id,
                    reason,
                };
                match outcome(phase) {
                    None | Some(RunOutcome::SubmissionPending) => return steps,
                    Some(RunOutcome::Running { job_id }) => {
                        if phase.state == PhaseState::Submitting || job_id != phase.job_id {
                            steps.push(set(PhaseState::Running, job_id, None));
                        }
                        return steps;
                    }
                    Some(RunOutcome::SubmissionFailed(reason)) => {
                        let reason = format!("submission failed: {reason}");
                        steps.push(set(PhaseState::Failed, None, Some(reason.clone())));
                        failed = Some((phase.spec.name.clone(), reason));
                        continue;
                    }
                    Some(RunOutcome::Succeeded { job_id }) => {
                        steps.push(set(PhaseState::Succeeded, job_id, None));
                        PhaseState::Succeeded
                    }
                    Some(RunOutcome::Failed { job_id, reason }) => {
                        steps.push(set(PhaseState::Failed, job_id, Some(reason.clone())));
                        failed = Some((phase.spec.name.clone(), reason));
                        continue;
                    }
                }
            }
            other => other,
        };
        match state {
            PhaseState::Failed => {
                failed = Some((
                    phase.spec.name.clone(),
                    phase
                        .reason
                        .clone()
                        .unwrap_or_else(|| "it failed".to_string()),
                ));
            }
            PhaseState::Succeeded | PhaseState::Skipped => {}
            // Handled above.
            PhaseState::Waiting | PhaseState::Submitting | PhaseState::Running => {}
        }
    }
    steps.push(match failed {
        Some((name, reason)) => Step::Finish {
            state: MultiphaseState::Failed,
            reason: Some(format!("phase {name:?} failed: {reason}")),
        },
        None => Step::Finish {
            state: MultiphaseState::Succeeded,
            reason: None,
        },
    });
    steps
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::model::{PhaseJob, PhaseSpec};

    fn phase(index: u32, state: PhaseState) -> Phase {
        Phase {
            multiphase_id: 1,
            index,
            spec: PhaseSpec {
                name: ["pretrain", "extend", "eval"][index as usize].to_string(),
                job: PhaseJob::Batch {
                    script: "x.sbatch".into(),
                    args: vec![],
                    sbatch_args: vec![],
                },
                nodes: None,
                min_nodes: None,
                max_failures: None,
                checkpoint_dir: None,
                work_dir: None,
            },
            state,
            workflow_id: Some(i64::from(index) + 10),
            job_id: None,
            reason: None,
            updated_at: Utc::now(),
        }
    }

    #[test]
    fn the_next_phase_is_submitted_in_the_pass_the_previous_one_succeeded() {
        let phases = [
            phase(0, PhaseState::Running),
            phase(1, PhaseState::Waiting),
            phase(2, PhaseState::Waiting),
        ];
        let steps = advance(&phases, |_| {
            Some(RunOutcome::Succeeded {
                job_id: Some("7".into()),
            })
        });
        assert_eq!(
            steps,
            [
                Step::Set {
                    index: 0,
                    state: PhaseState::Succeeded,
                    job_id: Some("7".into()),
                    reason: None
                },
                Step::Submit { index: 1 }
            ]
        );
    }

    #[test]
    fn a_running_phase_holds_back_every_later_one() {
        let phases = [
            phase(0, PhaseState::Succeeded),
            phase(1, PhaseState::Running),
            phase(2, PhaseState::Waiting),
        ];
        let steps = advance(&phases, |_| Some(RunOutcome::Running { job_id: None }));
        assert!(steps.is_empty(), "{steps:?}");
        let pending = [
            phase(0, PhaseState::Submitting),
            phase(1, PhaseState::Waiting),
        ];
        assert!(advance(&pending, |_| Some(RunOutcome::SubmissionPending)).is_empty());
    }

    #[test]
    fn a_phase_that_fails_for_good_skips_the_later_ones_and_fails_the_workflow() {
        let phases = [
            phase(0, PhaseState::Succeeded),
            phase(1, PhaseState::Running),
            phase(2, PhaseState::Waiting),
        ];
        let steps = advance(&phases, |_| {
            Some(RunOutcome::Failed {
                job_id: Some("9".into()),
                reason: "crash loop".into(),
            })
        });
        assert_eq!(steps.len(), 3, "{steps:?}");
        assert!(matches!(
            &steps[1],
            Step::Set { index: 2, state: PhaseState::Skipped, reason: Some(reason), .. }
                if reason.contains("\"extend\" failed: crash loop")
        ));
        assert!(matches!(
            &steps[2],
            Step::Finish {
                state: MultiphaseState::Failed,
                ..
            }
        ));
    }

    #[test]
    fn a_rejected_submission_fails_its_phase() {
        let phases = [
            phase(0, PhaseState::Submitting),
            phase(1, PhaseState::Waiting),
        ];
        let steps = advance(&phases, |_| {
            Some(RunOutcome::SubmissionFailed("rejected".into()))
        });
        assert!(matches!(
            &steps[0],
            Step::Set { index: 0, state: PhaseState::Failed, reason: Some(r), .. }
                if r.contains("rejected")
        ));
        assert!(matches!(
            &steps[1],
            Step::Set {
                index: 1,
                state: PhaseState::Skipped,
                ..
            }
        ));
    }

    #[test]
    fn every_phase_succeeded_ends_the_workflow() {
        let phases = [
            phase(0, PhaseState::Succeeded),
            phase(1, PhaseState::Succeeded),
        ];
        assert_eq!(
            advance(&phases, |_| None),
            [Step::Finish {
                state: MultiphaseState::Succeeded,
                reason: None
            }]
        );
    }
}
