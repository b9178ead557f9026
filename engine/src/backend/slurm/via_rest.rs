//! Slurm over slurmrestd: jobs are read and changed through the REST API; the operations it does not
//! have (or, for drains, v0.0.38 does not have) are run with the command-line tools instead, and say
//! so in their description:
//! - requeue (`scontrol requeuehold`): no version has a requeue;
//! - node drain (`scontrol update NodeName=...`): v0.0.38 nodes are read-only;
//! - submission (`sbatch`): slurmrestd ignores a script's `#SBATCH` lines, which carry the job's size;
//! - usable nodes (`sinfo`).
//!
//! The tools also settle one doubt: when a listing through slurmrestd fails the way both a refused
//! token and a lost controller make it fail, `scontrol ping` says which.

use async_trait::async_trait;

use super::api::{Operation, SlurmApi};
use super::cli::{SlurmCli, argv};
use super::jobcomp::JobCompRecord;
use super::rest::{JobUpdate, RestRequest, SlurmRest};
use super::squeue::{self, SlurmJob};
use crate::backend::{BackendError, NodeCapacity};

/// slurmrestd first, the command-line tools for what it cannot do.
pub struct SlurmViaRest {
    rest: SlurmRest,
    cli: SlurmCli,
}

impl SlurmViaRest {
    pub fn new(rest: SlurmRest, cli: SlurmCli) -> Self {
        Self { rest, cli }
    }

    /// The REST request an operation is, or `None` when the command-line tools run it.
    fn request(operation: &Operation) -> Option<RestRequest> {
        let update = |job_id: &String, update: JobUpdate| RestRequest::UpdateJob {
            job_id: job_id.clone(),
            update,
        };
        match operation {
            Operation::ExcludeNodes { job_id, nodes } => Some(update(
                job_id,
                JobUpdate {
                    exclude_nodes: Some(nodes.clone()),
                    ..JobUpdate::default()
                },
            )),
            Operation::Release { job_id } => Some(update(
                job_id,
                JobUpdate {
                    hold: Some(false),
                    ..JobUpdate::default()
                },
            )),
            Operation::Hold { job_id } => Some(update(
                job_id,
                JobUpdate {
                    hold: Some(true),
                    ..JobUpdate::default()
                },
            )),
            Operation::StartNow { job_id } => Some(update(
                job_id,
                JobUpdate {
                    start_now: true,
                    ..JobUpdate::default()
                },
            )),
            Operation::Cancel { job_id } => Some(RestRequest::Cancel {
                job_id: job_id.clone(),
            }),
            Operation::RequeueHold { .. }
            | Operation::Drain { .. }
            | Operation::Resume { .. }
            | Operation::Signal { .. }
            | Operation::Submit(_) => None,
        }
    }
}

impl SlurmViaRest {
    /// A listing failed as `message` while the token was in doubt: when slurmctld answers the
    /// command-line tools, it was the token slurmctld refused, not the controller that went away.
    async fn settle_doubt(&self, message: String) -> BackendError {
        let ping = self.cli.run(&argv(&["scontrol", "ping"])).await;
        match ping {
            // "Slurmctld(primary) at head is UP"
            Ok(out) if out.contains(" is UP") => BackendError::Credentials(format!(
                "{message}; yet `scontrol ping` reaches slurmctld, so slurmctld refused {} \
                 (signed with another key, or for a user it does not know; slurmctld's log says \
                 why): write a fresh `scontrol token` there",
                self.rest.token_source()
            )),
            _ => BackendError::Unavailable(message),
        }
    }

    async fn checked<T>(&self, result: Result<T, BackendError>) -> Result<T, BackendError> {
        match result {
            Err(BackendError::Unavailable(message)) if self.rest.token_in_doubt() => {
                Err(self.settle_doubt(message).await)
            }
            other => other,
        }
    }
}

fn listing(text: &str) -> Result<(Vec<SlurmJob>, Vec<String>), BackendError> {
    squeue::parse(text).map_err(|err| BackendError::Unavailable(format!("slurmrestd: {err}")))
}

#[async_trait]
impl SlurmApi for SlurmViaRest {
    async fn jobs(
        &self,
        job_id: Option<&str>,
    ) -> Result<(Vec<SlurmJob>, Vec<String>), BackendError> {
        match job_id {
            None => listing(&self.checked(self.rest.jobs().await).await?),
            Some(id) => match self.checked(self.rest.job(id).await).await? {
                Some(text) => listing(&text),
                None => Ok((Vec::new(), Vec::new())),
            },
        }
    }

    async fn perform(&self, operation: &Operation) -> Result<String, BackendError> {
        match Self::request(operation) {
            Some(RestRequest::UpdateJob { job_id, update }) => {
                self.rest.update_job(&job_id, &update).await?;
                Ok(String::new())
            }
            Some(RestRequest::Cancel { job_id }) => {
                self.rest.cancel(&job_id).await?;
                Ok(String::new())
            }
            Some(other) => Err(BackendError::Invalid(format!(
                "{} is not an operation",
                self.rest.describe(&other)
            ))),
            None => self.cli.perform(operation).await,
        }
    }

    fn describe(&self, operation: &Operation) -> String {
        match Self::request(operation) {
            Some(request) => self.rest.describe(&request),
            None => self.cli.describe(operation),
        }
    }

    async fn usable_nodes(&self, partition: Option<&str>) -> Result<NodeCapacity, BackendError> {
        self.cli.usable_nodes(partition).await
    }

    async fn node_reasons(
        &self,
        nodes: &[String],
    ) -> Result<Vec<(String, String, String)>, BackendError> {
        self.cli.node_reasons(nodes).await
    }

    async fn node_states(&self, nodes: &[String]) -> Result<Vec<(String, String)>, BackendError> {
        self.cli.node_states(nodes).await
    }

    async fn history(&self, job_id: &str) -> Result<Option<Vec<JobCompRecord>>, BackendError> {
        self.cli.history(job_id).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::backend::slurm::cli::Listing;
    use crate::backend::slurm::rest::{ApiVersion, RestEndpoint, RestOptions};

    fn api(version: &str) -> SlurmViaRest {
        let mut options = RestOptions::new(RestEndpoint::Unix("/run/slurmrestd/rest.sock".into()));
        options.api_version = ApiVersion::parse(version);
        SlurmViaRest::new(
            SlurmRest::new(options).unwrap(),
            SlurmCli::new(Duration::from_secs(5), Listing::Auto),
        )
    }

    #[test]
    fn job_changes_go_through_the_api_and_the_rest_through_the_tools() {
        let api = api("v0.0.38");
        let exclude = Operation::ExcludeNodes {
            job_id: "42".into(),
            nodes: vec!["n2".into()],
        };
        assert_eq!(
            api.describe(&exclude),
            r#"POST /slurm/v0.0.38/job/42 {"exclude_nodes":"n2"}"#
        );
        assert_eq!(
            api.describe(&Operation::StartNow {
                job_id: "42".into()
            }),
            r#"POST /slurm/v0.0.38/job/42 {"begin_time":"now"}"#
        );
        assert_eq!(
            api.describe(&Operation::RequeueHold {
                job_id: "42".into()
            }),
            "scontrol requeuehold 42"
        );
        assert!(
            api.describe(&Operation::Drain {
                node: "n2".into(),
                reason: "xid".into()
            })
            .starts_with("scontrol update NodeName=n2")
        );
    }

    #[test]
    fn job_changes_take_the_field_names_of_the_version_in_use() {
        let api = api("v0.0.42");
        let exclude = Operation::ExcludeNodes {
            job_id: "42".into(),
            nodes: vec!["n2".into(), "n3".into()],
        };
        assert_eq!(
            api.describe(&exclude),
            r#"POST /slurm/v0.0.42/job/42 {"excluded_nodes":["n2","n3"]}"#
        );
        assert_eq!(
            api.describe(&Operation::Cancel {
                job_id: "42".into()
            }),
            "DELETE /slurm/v0.0.42/job/42"
        );
    }
}
