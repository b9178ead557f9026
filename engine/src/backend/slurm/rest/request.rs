//! The requests the client sends, and their bodies in each API version's words.

use std::collections::BTreeMap;
use std::path::PathBuf;

use chrono::Utc;
use reqwest::Method;
use serde_json::{Map, Value, json};

use super::ApiVersion;
use crate::backend::BackendError;

/// What a job submitted with no environment gets: v0.0.38 refuses a job without one ("environment
/// must be set"), and a batch script without PATH finds none of its tools.
pub(super) const FALLBACK_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Changes to one job, sent together in one `POST /job/{id}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobUpdate {
    /// Replaces the nodes the job must not run on; an empty list clears them. Slurm changes this
    /// only while the job is pending ("Job is no longer pending execution" otherwise).
    pub exclude_nodes: Option<Vec<String>>,
    /// `Some(true)` holds the job, `Some(false)` releases it. Holding a running job is accepted but
    /// only sets its priority to 0.
    pub hold: Option<bool>,
    /// Makes the job eligible now, ending the ~2 minute BeginTime wait Slurm puts on a requeued job.
    pub start_now: bool,
}

impl JobUpdate {
    /// Whether the update changes nothing.
    pub fn is_empty(&self) -> bool {
        self.exclude_nodes.is_none() && self.hold.is_none() && !self.start_now
    }

    pub(super) fn body(&self, version: ApiVersion) -> Value {
        let mut body = Map::new();
        if let Some(nodes) = &self.exclude_nodes {
            if version == ApiVersion::V38 {
                body.insert("exclude_nodes".into(), nodes.join(",").into());
            } else {
                body.insert("excluded_nodes".into(), nodes.clone().into());
            }
        }
        if let Some(hold) = self.hold {
            body.insert("hold".into(), hold.into());
        }
        if self.start_now {
            // v0.0.39 reads begin_time as a plain number: the client's clock is the best it can get.
            let now = if version > ApiVersion::V38 && version < ApiVersion::V40 {
                Value::from(Utc::now().timestamp())
            } else {
                Value::from("now")
            };
            body.insert("begin_time".into(), now);
        }
        Value::Object(body)
    }
}

/// A batch job to submit. slurmrestd ignores the script's `#SBATCH` lines (sbatch reads them, not
/// Slurm): whatever the job needs must be given here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubmitOptions {
    pub name: String,
    pub comment: Option<String>,
    /// Node count (`sbatch -N`); Slurm's default of one node when `None`.
    pub nodes: Option<u32>,
    /// Slurm's default partition when `None`.
    pub partition: Option<String>,
    /// Nodes the job must not run on.
    pub exclude: Vec<String>,
    /// Where the job runs and writes relative outputs. Required: without it Slurm uses slurmrestd's
    /// own working directory, where the job's user usually cannot write.
    pub work_dir: PathBuf,
    /// The output path pattern (`%x_%j.log`), relative to `work_dir`; Slurm's default when `None`.
    pub output: Option<String>,
    /// The job's environment: slurmrestd passes on nothing of its own. When empty, only
    /// `PATH=/usr/local/bin:/usr/bin:/bin` is sent, since v0.0.38 refuses an empty environment.
    pub environment: BTreeMap<String, String>,
}

impl SubmitOptions {
    pub(super) fn job(&self, version: ApiVersion) -> Value {
        let legacy = version == ApiVersion::V38;
        let mut job = Map::new();
        if !self.name.is_empty() {
            job.insert("name".into(), self.name.clone().into());
        }
        if let Some(comment) = &self.comment {
            job.insert("comment".into(), comment.clone().into());
        }
        if let Some(nodes) = self.nodes {
            // v0.0.38: a number (the [min, max] array its schema describes is read as one node);
            // later versions parse a count range such as "2" or "2-4".
            let nodes = if legacy {
                Value::from(nodes)
            } else {
                Value::from(nodes.to_string())
            };
            job.insert("nodes".into(), nodes);
        }
        if let Some(partition) = &self.partition {
            job.insert("partition".into(), partition.clone().into());
        }
        if !self.exclude.is_empty() {
            if legacy {
                job.insert("exclude_nodes".into(), self.exclude.join(",").into());
            } else {
                job.insert("excluded_nodes".into(), self.exclude.clone().into());
            }
        }
        job.insert(
            "current_working_directory".into(),
            self.work_dir.display().to_string().into(),
        );
        if let Some(output) = &self.output {
            job.insert("standard_output".into(), output.clone().into());
        }
        let fallback = BTreeMap::from([("PATH".to_string(), FALLBACK_PATH.to_string())]);
        let environment = if self.environment.is_empty() {
            &fallback
        } else {
            &self.environment
        };
        let environment = if legacy {
            Value::Object(
                environment
                    .iter()
                    .map(|(key, value)| (key.clone(), Value::from(value.clone())))
                    .collect(),
            )
        } else {
            Value::Array(
                environment
                    .iter()
                    .map(|(key, value)| Value::from(format!("{key}={value}")))
                    .collect(),
            )
        };
        job.insert("environment".into(), environment);
        Value::Object(job)
    }
}

/// One request to slurmrestd, as the client sends it; [`SlurmRest::describe`] shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestRequest {
    Ping,
    Jobs,
    Job {
        job_id: String,
    },
    Cancel {
        job_id: String,
    },
    UpdateJob {
        job_id: String,
        update: JobUpdate,
    },
    Submit {
        script: String,
        options: SubmitOptions,
    },
}

impl RestRequest {
    pub(super) fn method(&self) -> Method {
        match self {
            RestRequest::Ping | RestRequest::Jobs | RestRequest::Job { .. } => Method::GET,
            RestRequest::Cancel { .. } => Method::DELETE,
            RestRequest::UpdateJob { .. } | RestRequest::Submit { .. } => Method::POST,
        }
    }

    pub(super) fn path(&self, version: &str) -> String {
        let tail = match self {
            RestRequest::Ping => "ping".to_string(),
            RestRequest::Jobs => "jobs".to_string(),
            RestRequest::Job { job_id }
            | RestRequest::Cancel { job_id }
            | RestRequest::UpdateJob { job_id, .. } => format!("job/{job_id}"),
            RestRequest::Submit { .. } => "job/submit".to_string(),
        };
        format!("/slurm/{version}/{tail}")
    }

    pub(super) fn body(&self, version: ApiVersion) -> Option<Value> {
        match self {
            RestRequest::UpdateJob { update, .. } => Some(update.body(version)),
            RestRequest::Submit { script, options } => {
                Some(json!({ "script": script, "job": options.job(version) }))
            }
            _ => None,
        }
    }

    /// The body as shown to people: a submission's script and environment are summarised, since the
    /// one is long and the other may hold secrets.
    pub(super) fn shown_body(&self, version: ApiVersion) -> Option<Value> {
        let mut body = self.body(version)?;
        if let RestRequest::Submit { script, .. } = self {
            body["script"] = format!("<script, {} lines>", script.lines().count()).into();
            let variables = match &body["job"]["environment"] {
                Value::Object(environment) => environment.len(),
                Value::Array(environment) => environment.len(),
                _ => 0,
            };
            body["job"]["environment"] = format!("<{variables} variables>").into();
        }
        Some(body)
    }

    pub(super) fn job_id(&self) -> Option<&str> {
        match self {
            RestRequest::Job { job_id }
            | RestRequest::Cancel { job_id }
            | RestRequest::UpdateJob { job_id, .. } => Some(job_id),
            _ => None,
        }
    }
}

/// A job id that can go into a URL path: digits, with `_` or `+` for array and heterogeneous jobs.
pub(super) fn checked_job_id(job_id: &str) -> Result<(), BackendError> {
    let fits = !job_id.is_empty()
        && job_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '+');
    if fits {
        Ok(())
    } else {
        Err(BackendError::Invalid(format!(
            "{job_id:?} is not a Slurm job id"
        )))
    }
}
