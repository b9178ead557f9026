//! The catalog's fixes as a batch job reads them when it is submitted again: its arguments rewritten
//! where they carry the setting (`--num-workers 8` → `--num-workers 2`), otherwise environment
//! variables passed with the submission. Pure: the scheduler's submission turns the result into argv.

use crate::model::SpecChange;

/// A command line and the environment to add, with what changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandOverride {
    pub args: Vec<String>,
    /// Variables to set, in the order the changes name them; a later one of the same name wins.
    pub environment: Vec<(String, String)>,
    /// One line per change, `old → new`, for approvals and the journal.
    pub diff: Vec<String>,
}

/// Why a change cannot reach a batch job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverrideError {
    #[error("{0} cannot be made to a batch job's command line or environment")]
    NotACommandChange(String),
    #[error(
        "environment variable {name:?} cannot be passed to a batch job: a name is letters, digits and _, \
         not starting with a digit"
    )]
    BadName { name: String },
    #[error(
        "the value of {name} holds a comma, which Slurm's --export splits on: set it in the job yourself"
    )]
    CommaInValue { name: String },
}

/// `args` with `changes` applied: a flag the command already has is rewritten in place, otherwise the
/// change's environment variable is added.
pub fn apply(args: &[String], changes: &[SpecChange]) -> Result<CommandOverride, OverrideError> {
    let mut result = CommandOverride {
        args: args.to_vec(),
        ..CommandOverride::default()
    };
    for change in changes {
        if let Some((flag, old, new)) = rewrite_flag(&mut result.args, change) {
            result
                .diff
                .push(format!("argument {flag} {old} → {flag} {new}"));
            continue;
        }
        let Some((name, value)) = change.environment() else {
            return Err(OverrideError::NotACommandChange(change.describe()));
        };
        check_variable(&name, &value)?;
        result.diff.push(format!("environment + {name}={value}"));
        result.environment.retain(|(known, _)| *known != name);
        result.environment.push((name, value));
    }
    Ok(result)
}

/// Whether `change` can reach a batch job at all, whatever its command line holds.
pub fn fits_a_batch_job(change: &SpecChange) -> bool {
    apply(&[], std::slice::from_ref(change)).is_ok()
}

/// Rewrites the first of `change`'s flags found in `args` (`--flag value` or `--flag=value`);
/// the flag with its old and new value.
fn rewrite_flag(args: &mut [String], change: &SpecChange) -> Option<(String, String, String)> {
    for index in 0..args.len() {
        for flag in change.flags() {
            if let Some(old) = args[index].strip_prefix(&format!("{flag}=")) {
                let old = old.to_string();
                let new = change.new_flag_value(&old);
                args[index] = format!("{flag}={new}");
                return Some((flag.to_string(), old, new));
            }
            if args[index] == *flag && index + 1 < args.len() {
                let old = args[index + 1].clone();
                let new = change.new_flag_value(&old);
                args[index + 1] = new.clone();
                return Some((flag.to_string(), old, new));
            }
        }
    }
    None
}

fn check_variable(name: &str, value: &str) -> Result<(), OverrideError> {
    let mut chars = name.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(OverrideError::BadName {
            name: name.to_string(),
        });
    }
    if value.contains(',') {
        return Err(OverrideError::CommaInValue {
            name: name.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn a_flag_the_command_has_is_rewritten_in_either_spelling() {
        let spaced = apply(
            &words("--epochs 3 --num-workers 8 --lr 0.1"),
            &[SpecChange::DataLoaderWorkers { workers: 2 }],
        )
        .unwrap();
        assert_eq!(spaced.args, words("--epochs 3 --num-workers 2 --lr 0.1"));
        assert!(spaced.environment.is_empty());
        assert_eq!(spaced.diff, ["argument --num-workers 8 → --num-workers 2"]);

        let joined = apply(
            &words("--micro_batch_size=6"),
            &[SpecChange::HalveMicroBatch],
        )
        .unwrap();
        assert_eq!(joined.args, words("--micro_batch_size=3"));
    }

    #[test]
    fn without_the_flag_the_job_gets_the_variable_and_its_arguments_stay() {
        let fixed = apply(
            &words("train.py --epochs 3"),
            &[
                SpecChange::DataLoaderWorkers { workers: 4 },
                SpecChange::Env {
                    name: "NCCL_SOCKET_IFNAME".into(),
                    value: "ib0".into(),
                },
            ],
        )
        .unwrap();
        assert_eq!(fixed.args, words("train.py --epochs 3"));
        assert_eq!(
            fixed.environment,
            [
                ("DATALOADER_NUM_WORKERS".to_string(), "4".to_string()),
                ("NCCL_SOCKET_IFNAME".to_string(), "ib0".to_string())
            ]
        );
        assert_eq!(
            fixed.diff,
            [
                "environment + DATALOADER_NUM_WORKERS=4",
                "environment + NCCL_SOCKET_IFNAME=ib0"
            ]
        );
    }

    #[test]
    fn a_flag_with_no_value_after_it_is_not_rewritten() {
        let fixed = apply(&words("--workers"), &[SpecChange::HalveMicroBatch]).unwrap();
        assert_eq!(fixed.args, words("--workers"));
        assert_eq!(fixed.environment[0].0, "MICRO_BATCH_SIZE_FACTOR");
    }

    #[test]
    fn what_a_batch_job_cannot_take_is_refused_not_dropped() {
        let pod_only = apply(
            &[],
            &[SpecChange::SharedMemory {
                size_limit: "8Gi".into(),
            }],
        );
        assert!(matches!(pod_only, Err(OverrideError::NotACommandChange(_))));
        let comma = apply(
            &[],
            &[SpecChange::Env {
                name: "PYTORCH_CUDA_ALLOC_CONF".into(),
                value: "expandable_segments:True,max_split_size_mb:128".into(),
            }],
        );
        assert!(matches!(comma, Err(OverrideError::CommaInValue { .. })));
        let name = apply(
            &[],
            &[SpecChange::Env {
                name: "1BAD".into(),
                value: "x".into(),
            }],
        );
        assert!(matches!(name, Err(OverrideError::BadName { .. })));
    }
}
