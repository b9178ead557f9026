//! Slurm's errors in slurmrestd's answers, and what each means for runguard.

use std::fmt;

use serde_json::Value;

use crate::backend::BackendError;

/// Slurm's error numbers that say something to the caller (slurm_errno.h).
const EPERM: i64 = 1;
const SLURM_PROTOCOL_AUTHENTICATION_ERROR: i64 = 1007;
const ESLURM_ACCESS_DENIED: i64 = 2002;
const ESLURM_USER_ID_MISSING: i64 = 2010;
const ESLURM_INVALID_JOB_ID: i64 = 2017;
pub(super) const ESLURM_ALREADY_DONE: i64 = 2021;
const SLURM_PROTOCOL_SOCKET_ZERO_BYTES_SENT: i64 = 5005;
/// ESLURM_AUTH_CRED_INVALID (6000) .. ESLURM_AUTH_UNABLE_TO_GENERATE_TOKEN (6009).
const ESLURM_AUTH: std::ops::RangeInclusive<i64> = 6000..=6009;

/// One entry of the `errors` array slurmrestd puts in its answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SlurmError {
    /// Slurm's error number (`error_number`, or `error_code` in some answers); -1 when unspecified.
    pub(super) number: Option<i64>,
    pub(super) error: String,
    pub(super) description: String,
    /// The Slurm call that failed (`slurm_load_jobs`, `_parse_job_list`, ...).
    pub(super) source: String,
}

impl SlurmError {
    pub(super) fn from_value(value: &Value) -> Self {
        let text = |key: &str| {
            value
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let number = value
            .get("error_number")
            .or_else(|| value.get("error_code"))
            .and_then(Value::as_i64);
        let mut error = Self {
            number,
            error: text("error"),
            description: text("description"),
            source: text("source"),
        };
        if error.error.is_empty() && error.description.is_empty() && !value.is_object() {
            error.error = value.to_string();
        }
        error
    }

    /// Slurm could not reach slurmctld: errors 1000-1999 are communication failures, and a lost
    /// controller shows as "Unspecified error" (-1) from the load calls, even for `GET /job/{id}`.
    pub(super) fn controller_unreachable(&self) -> bool {
        match self.number {
            Some(SLURM_PROTOCOL_AUTHENTICATION_ERROR) => false,
            Some(number) if (1000..2000).contains(&number) => true,
            // 24.11 names its handler: "Unable to query JobId=1" from `_handle_job_get`.
            Some(-1) => {
                self.source.starts_with("slurm_load") || self.source.starts_with("_handle_job_get")
            }
            _ => false,
        }
    }

    /// Slurm says the credential itself was refused.
    pub(super) fn credential_refused(&self) -> bool {
        self.number
            .is_some_and(|n| n == SLURM_PROTOCOL_AUTHENTICATION_ERROR || ESLURM_AUTH.contains(&n))
    }

    /// What a refused token looks like through 22.05's slurmrestd, and what a controller that went
    /// away looks like too: the connection closed without an answer, or a load call failing unspecified.
    pub(super) fn credential_or_controller(&self) -> bool {
        self.number == Some(SLURM_PROTOCOL_SOCKET_ZERO_BYTES_SENT)
            || (self.number == Some(-1) && self.controller_unreachable())
    }
}

impl fmt::Display for SlurmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let number = self
            .number
            .map_or(String::new(), |number| format!(" {number}"));
        if self.description.is_empty() || self.description == self.error {
            write!(f, "{} (Slurm error{number})", self.error)
        } else {
            write!(
                f,
                "{} (Slurm error{number}: {})",
                self.description, self.error
            )
        }
    }
}

pub(super) fn slurm_errors(answer: &Value) -> Vec<SlurmError> {
    answer
        .get("errors")
        .and_then(Value::as_array)
        .map(|errors| errors.iter().map(SlurmError::from_value).collect())
        .unwrap_or_default()
}

/// The error Slurm's `errors` entries stand for; all their messages are kept.
pub(super) fn classify(what: &str, job_id: Option<&str>, errors: &[SlurmError]) -> BackendError {
    let message = errors
        .iter()
        .map(SlurmError::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    let has = |number: i64| errors.iter().any(|error| error.number == Some(number));
    // 24.11 refuses to signal another user's job with EPERM; elsewhere EPERM is a key it does not take.
    let kill_not_permitted = errors
        .iter()
        .any(|error| error.number == Some(EPERM) && error.source.starts_with("slurm_kill_job"));
    // A lost controller first: it also makes "Unable to find JobId" answers for jobs that exist.
    if errors.iter().any(SlurmError::controller_unreachable) {
        BackendError::Unavailable(format!(
            "{what}: slurmrestd cannot reach slurmctld: {message}"
        ))
    } else if has(ESLURM_INVALID_JOB_ID) {
        BackendError::NoSuchJob(job_id.map_or(message, str::to_string))
    } else if has(ESLURM_ACCESS_DENIED) || has(ESLURM_USER_ID_MISSING) || kill_not_permitted {
        BackendError::Refused {
            command: what.to_string(),
            message,
        }
    } else if has(SLURM_PROTOCOL_SOCKET_ZERO_BYTES_SENT) {
        BackendError::Unavailable(format!(
            "{what}: slurmctld closed the connection without answering: {message}"
        ))
    } else {
        BackendError::Invalid(format!("{what}: {message}"))
    }
}
