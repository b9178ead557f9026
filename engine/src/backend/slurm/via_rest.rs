//! Slurm over slurmrestd: jobs are read and changed through the REST API; the operations its v0.0.38
//! API does not have are run with the command-line tools instead, and say so in their description:
//! - requeue (`scontrol requeuehold`): v0.0.38 has no requeue;
//! - node drain (`scontrol update NodeName=...`): v0.0.38 nodes are read-only;
//! - submission (`sbatch`): slurmrestd ignores a script's `#SBATCH` lines, which carry the job's size;
//! - usable nodes (`sinfo`).

use async_trait::async_trait;

use super::api::{Operation, SlurmApi};
use super::cli::SlurmCli;
use super::jobcomp::JobCompRecord;
use super::rest::{JobUpdate, RestRequest, SlurmRest};
use super::squeue::{self, SlurmJob};
use crate::backend::BackendError;

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
            Operation::RequeueHold { .. } | Operation::Drain { .. } | Operation::Submit(_) => None,
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
            None => listing(&self.rest.jobs().await?),
            Some(id) => match self.rest.job(id).await? {
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

    async fn usable_nodes(&self, partition: Option<&str>) -> Result<Vec<String>, BackendError> {
        self.cli.usable_nodes(partition).await
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
    use crate::backend::slurm::rest::{RestEndpoint, RestOptions};

    fn api() -> SlurmViaRest {
        SlurmViaRest::new(
            SlurmRest::new(RestOptions::new(RestEndpoint::Unix(
                "/run/slurmrestd/rest.sock".into(),
            )))
            .unwrap(),
            SlurmCli::new(Duration::from_secs(5), Listing::Auto),
        )
    }

    #[test]
    fn job_changes_go_through_the_api_and_the_rest_through_the_tools() {
        let api = api();
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
}
