//! A signal to a workload's training processes, as a person sends it with `kubectl exec POD -c
//! CONTAINER -- kill -s USR1 1`: the pods/exec subresource over a WebSocket (the
//! `v5.channel.k8s.io`/`v4.channel.k8s.io` subprotocols), `kill` run as argv (no shell) in the training
//! container of every running pod, at PID 1, its main process. The exit status comes back on the
//! status channel as a `metav1.Status`: a pod whose `kill` did not succeed fails the action with its
//! reason.

use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::Api;
use kube::api::AttachParams;
use serde_json::Value;
use tokio::io::AsyncReadExt;

use super::backend::KubeBackend;
use super::workload::{PodIndex, WorkloadKind, WorkloadRef, annotation, at, pods_of, str_at};
use crate::backend::{ActionOutcome, BackendError};

/// The signals runguard sends by name: those a training framework may handle to save or stop, never
/// one that cannot be caught (KILL, STOP) nor one that reports a fault (SEGV, BUS...).
pub const SIGNALS: [&str; 13] = [
    "HUP", "INT", "QUIT", "ABRT", "USR1", "USR2", "ALRM", "TERM", "CONT", "WINCH", "URG", "XCPU",
    "PWR",
];

/// Longest one pod's `kill` may take, connection included.
const EXEC_TIMEOUT: Duration = Duration::from_secs(30);

/// The PID of a container's main process, as the container sees it.
const MAIN_PID: &str = "1";

/// The configured signal as `kill -s` takes it (`USR1`), refused unless it is one of [`SIGNALS`]:
/// the name comes from the config and goes into a command run in someone's container.
pub fn signal_name(given: &str) -> Result<&'static str, BackendError> {
    let trimmed = given.trim();
    let upper = trimmed.to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    SIGNALS
        .iter()
        .find(|known| **known == bare)
        .copied()
        .ok_or_else(|| {
            BackendError::Invalid(format!(
                "{given:?} is not a signal runguard sends to a pod (one of {}, with or without SIG; \
                 check [ledger] checkpoint_signal)",
                SIGNALS.join(", ")
            ))
        })
}

/// The argv run in the container: `kill -s SIGNAL 1`.
pub fn kill_command(signal: &str) -> Vec<String> {
    ["kill", "-s", signal, MAIN_PID]
        .iter()
        .map(|word| word.to_string())
        .collect()
}

/// The kubectl command that does the same by hand.
pub fn kubectl_command(namespace: &str, pod: &str, container: &str, signal: &str) -> String {
    format!(
        "kubectl exec -n {namespace} {pod} -c {container} -- {}",
        kill_command(signal).join(" ")
    )
}

/// The container a workload's training runs in, in one of its pods: the one the pod names as its
/// default (`kubectl.kubernetes.io/default-container`, which kubectl also goes by), else the one its
/// operator requires by name (a PyTorchJob's `pytorch`, a TrainJob's `node`), else the first.
pub fn training_container(kind: WorkloadKind, pod: &Value) -> Option<String> {
    let names: Vec<&str> = at(pod, "/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|container| str_at(container, "/name"))
        .collect();
    let named = |wanted: &str| names.iter().find(|name| **name == wanted).copied();
    annotation(pod, "kubectl.kubernetes.io/default-container")
        .and_then(named)
        .or_else(|| match kind {
            WorkloadKind::PyTorchJob => named("pytorch"),
            WorkloadKind::TrainJob => named("node"),
            _ => None,
        })
        .or_else(|| names.first().copied())
        .map(str::to_string)
}

/// Whether `container` of the pod runs now (a signal to a container that does not run reaches
/// nothing).
fn runs(pod: &Value, container: &str) -> bool {
    str_at(pod, "/status/phase") == Some("Running")
        && at(pod, "/status/containerStatuses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|status| {
                str_at(status, "/name") == Some(container) && at(status, "/state/running").is_some()
            })
}

/// What the exec's status channel said: `Ok` when `kill` exited 0, else why not (its exit code and
/// what it wrote to stderr, or the server's message).
pub fn exec_result(status: Option<&Status>, stderr: &str) -> Result<(), String> {
    let stderr = stderr.trim();
    let said = |text: String| {
        if stderr.is_empty() {
            text
        } else {
            format!("{text}: {stderr}")
        }
    };
    let Some(status) = status else {
        return Err(said(
            "the exec ended without an exit status on its status channel".to_string(),
        ));
    };
    if status.status.as_deref() == Some("Success") {
        return Ok(());
    }
    let exit_code = status
        .details
        .as_ref()
        .and_then(|details| details.causes.as_ref())
        .into_iter()
        .flatten()
        .find(|cause| cause.reason.as_deref() == Some("ExitCode"))
        .and_then(|cause| cause.message.as_deref())
        .and_then(|code| code.trim().parse::<i32>().ok());
    match (status.reason.as_deref(), exit_code) {
        (Some("NonZeroExitCode"), Some(code)) => Err(said(format!("exited with status {code}"))),
        _ => Err(said(format!(
            "{} ({})",
            status
                .message
                .clone()
                .unwrap_or_else(|| "the exec failed".to_string()),
            status.reason.as_deref().unwrap_or("no reason given")
        ))),
    }
}

/// One pod to signal: (pod, container).
type Target = (String, String);

/// How one pod's `kill` went wrong.
#[derive(Debug)]
enum Failure {
    /// RBAC refused the exec (403), with the server's words.
    Refused(String),
    /// The API server could not be reached: nothing was run.
    Unreached(String),
    /// It ran, or may have, and did not succeed.
    Failed(String),
}

/// Ray workloads take no signal: see [`KubeBackend::send_signal`].
pub(super) fn is_ray(kind: WorkloadKind) -> bool {
    matches!(kind, WorkloadKind::RayJob | WorkloadKind::RayCluster)
}

/// Whether the workload `job_id` names can be asked to save with a signal.
pub(super) fn takes_signal(job_id: &str, default_namespace: &str) -> bool {
    WorkloadRef::parse(job_id, default_namespace).is_some_and(|reference| !is_ray(reference.kind))
}

impl KubeBackend {
    /// The pods of the workload that run now, each with its training container, in rank order.
    pub(super) fn signal_targets(&self, reference: &WorkloadRef) -> Option<Vec<Target>> {
        let workload = self.cached_workload(reference)?;
        let pods = self.pods_labelled_for(&workload);
        let index = PodIndex::new(&pods);
        Some(
            pods_of(reference.kind, &workload, &index)
                .into_iter()
                .filter_map(|pod| {
                    let name = str_at(pod, "/metadata/name")?;
                    let container = training_container(reference.kind, pod)?;
                    runs(pod, &container).then(|| (name.to_string(), container))
                })
                .collect(),
        )
    }

    /// The kubectl commands [`KubeBackend::send_signal`] amounts to, for approvals and refusals.
    pub(super) fn signal_commands(&self, job_id: &str, signal: &str) -> String {
        let signal = match signal_name(signal) {
            Ok(signal) => signal,
            Err(err) => return format!("(cannot signal {job_id}: {err})"),
        };
        let Some(reference) = WorkloadRef::parse(job_id, self.default_namespace()) else {
            return format!("(cannot signal {job_id}: not a workload reference)");
        };
        if is_ray(reference.kind) {
            return format!(
                "(no signal is sent to a Ray workload's pods: {})",
                reference.id()
            );
        }
        match self.signal_targets(&reference) {
            Some(targets) if !targets.is_empty() => targets
                .iter()
                .map(|(pod, container)| {
                    kubectl_command(&reference.namespace, pod, container, signal)
                })
                .collect::<Vec<_>>()
                .join("; "),
            _ => format!(
                "kubectl exec -n {} POD -c CONTAINER -- {} (in the training container of every \
                 running pod of {})",
                reference.namespace,
                kill_command(signal).join(" "),
                reference.id()
            ),
        }
    }

    /// Sends `signal` to the main process of the training container of every running pod of the
    /// workload, all at once; fails, naming each pod it did not reach, unless every `kill` succeeded.
    pub(super) async fn send_signal(
        &self,
        job_id: &str,
        signal: &str,
    ) -> Result<ActionOutcome, BackendError> {
        let signal = signal_name(signal)?;
        let reference = WorkloadRef::parse(job_id, self.default_namespace()).ok_or_else(|| {
            BackendError::Invalid(format!("{job_id:?} is not a workload reference"))
        })?;
        if is_ray(reference.kind) {
            // Ray's processes (raylet, the GCS, `ray job submit`) end on an unhandled USR1, and Ray
            // Train saves its checkpoints by itself.
            return Err(BackendError::Invalid(format!(
                "{} is a Ray workload: runguard sends no signal to its pods (its processes do not \
                 save on one, and end on an unhandled one)",
                reference.id()
            )));
        }
        let targets = self.signal_targets(&reference).ok_or_else(|| {
            BackendError::NoSuchJob(format!("{} is not known to the watchers", reference.id()))
        })?;
        if targets.is_empty() {
            return Err(BackendError::Invalid(format!(
                "no pod of {} runs its training container now: no process to signal",
                reference.id()
            )));
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &reference.namespace);
        let results = join_all(targets.iter().map(|(pod, container)| {
            let pods = pods.clone();
            async move {
                match tokio::time::timeout(EXEC_TIMEOUT, exec_kill(&pods, pod, container, signal))
                    .await
                {
                    Ok(result) => result,
                    Err(_) => Err(Failure::Failed(format!(
                        "no exit status within {} s (the signal may have been sent)",
                        EXEC_TIMEOUT.as_secs()
                    ))),
                }
            }
        }))
        .await;
        let commands: Vec<String> = targets
            .iter()
            .map(|(pod, container)| kubectl_command(&reference.namespace, pod, container, signal))
            .collect();
        let reached: Vec<&str> = targets
            .iter()
            .zip(&results)
            .filter(|(_, result)| result.is_ok())
            .map(|((pod, _), _)| pod.as_str())
            .collect();
        let failures: Vec<(&Target, &Failure, &String)> = targets
            .iter()
            .zip(&results)
            .zip(&commands)
            .filter_map(|((target, result), command)| {
                result
                    .as_ref()
                    .err()
                    .map(|failure| (target, failure, command))
            })
            .collect();
        let containers: Vec<&str> = {
            let mut names: Vec<&str> = targets.iter().map(|(_, c)| c.as_str()).collect();
            names.sort_unstable();
            names.dedup();
            names
        };
        if failures.is_empty() {
            return Ok(ActionOutcome {
                detail: format!(
                    "sent SIG{signal} to the main process (PID 1) of container {} in {} pod{} of \
                     {}: {} (kill exited 0 in each)",
                    containers.join(","),
                    targets.len(),
                    if targets.len() == 1 { "" } else { "s" },
                    reference.id(),
                    reached.join(", ")
                ),
                new_job_id: None,
            });
        }
        if reached.is_empty() {
            if failures
                .iter()
                .all(|(_, failure, _)| matches!(failure, Failure::Refused(_)))
                && let Some((_, Failure::Refused(message), _)) = failures.first()
            {
                return Err(BackendError::Refused {
                    command: commands.join("; "),
                    message: message.clone(),
                });
            }
            if failures
                .iter()
                .all(|(_, failure, _)| matches!(failure, Failure::Unreached(_)))
            {
                return Err(BackendError::Unavailable(format!(
                    "no pod of {} could be reached to signal: {}",
                    reference.id(),
                    describe(&failures)
                )));
            }
        }
        // Some pods have it and some do not (or none does, for reasons of their own): sending it
        // again would signal the ones that have it twice, so the action fails with what is left.
        let left: Vec<&str> = failures
            .iter()
            .map(|(_, _, command)| command.as_str())
            .collect();
        Err(BackendError::Unconfirmed(format!(
            "SIG{signal} reached {} of the {} running pods of {}{}; not reached: {}; to send it \
             by hand: {}",
            reached.len(),
            targets.len(),
            reference.id(),
            if reached.is_empty() {
                String::new()
            } else {
                format!(" ({})", reached.join(", "))
            },
            describe(&failures),
            left.join("; ")
        )))
    }
}

fn describe(failures: &[(&Target, &Failure, &String)]) -> String {
    failures
        .iter()
        .map(|((pod, container), failure, _)| {
            let why = match failure {
                Failure::Refused(message) => format!("refused: {message}"),
                Failure::Unreached(message) | Failure::Failed(message) => message.clone(),
            };
            format!("{pod} (container {container}): {why}")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Runs `kill -s SIGNAL 1` in one pod's container and reads its exit status.
async fn exec_kill(
    pods: &Api<Pod>,
    pod: &str,
    container: &str,
    signal: &str,
) -> Result<(), Failure> {
    let params = AttachParams::default()
        .container(container)
        .stdin(false)
        .stdout(true)
        .stderr(true);
    let mut attached = match pods.exec(pod, kill_command(signal), &params).await {
        Ok(attached) => attached,
        Err(kube::Error::Api(status)) if status.code == 403 => {
            return Err(Failure::Refused(status.message));
        }
        Err(kube::Error::Api(status)) => {
            return Err(Failure::Failed(format!(
                "{} ({} {})",
                status.message, status.code, status.reason
            )));
        }
        Err(err @ (kube::Error::HyperError(_) | kube::Error::Service(_))) => {
            return Err(Failure::Unreached(err.to_string()));
        }
        Err(err) => return Err(Failure::Failed(err.to_string())),
    };
    let status = attached.take_status();
    let stdout = attached.stdout();
    let stderr = attached.stderr();
    // Both streams are read while the status comes: a full pipe would hold the status back.
    let read = |reader: Option<tokio::io::ReadHalf<tokio::io::SimplexStream>>| async move {
        let mut text = String::new();
        if let Some(mut reader) = reader {
            let mut bytes = Vec::new();
            let _ = reader.read_to_end(&mut bytes).await;
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        text
    };
    let (_, errors, status) = tokio::join!(read(stdout), read(stderr), async {
        match status {
            Some(status) => status.await,
            None => None,
        }
    });
    if let Err(err) = attached.join().await {
        tracing::debug!(pod, %err, "the exec's stream ended with an error");
    }
    exec_result(status.as_ref(), &errors).map_err(Failure::Failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ray_workloads_and_unknown_references_take_no_signal() {
        assert!(takes_signal("pytorchjob/ml/llama", "default"));
        assert!(takes_signal("job/llama", "default"));
        assert!(!takes_signal("rayjob/ml/llama", "default"));
        assert!(!takes_signal("raycluster/ml/llama", "default"));
        assert!(!takes_signal("not a reference", "default"));
    }

    #[test]
    fn only_known_signal_names_are_sent_with_or_without_sig() {
        assert_eq!(signal_name("USR1").ok(), Some("USR1"));
        assert_eq!(signal_name(" sigusr2 ").ok(), Some("USR2"));
        assert_eq!(signal_name("SIGTERM").ok(), Some("TERM"));
        assert_eq!(signal_name("hup").ok(), Some("HUP"));
        for refused in [
            "",
            "10",
            "KILL",
            "SIGSTOP",
            "USR1; rm -rf /",
            "USR1 1",
            "-USR1",
            "SEGV",
        ] {
            let err = signal_name(refused).expect_err(refused);
            assert!(
                matches!(&err, BackendError::Invalid(message) if message.contains("checkpoint_signal")),
                "{refused:?}: {err}"
            );
        }
    }

    #[test]
    fn the_command_is_kill_at_pid_1_as_argv_and_as_kubectl_says_it() {
        assert_eq!(kill_command("USR1"), ["kill", "-s", "USR1", "1"]);
        assert_eq!(
            kubectl_command("ml", "llama-master-0", "pytorch", "USR1"),
            "kubectl exec -n ml llama-master-0 -c pytorch -- kill -s USR1 1"
        );
    }

    fn status(document: Value) -> Status {
        serde_json::from_value(document).unwrap()
    }

    #[test]
    fn the_status_channel_says_whether_kill_succeeded_and_why_not() {
        let success = status(json!({"metadata": {}, "status": "Success"}));
        assert_eq!(exec_result(Some(&success), ""), Ok(()));
        // What the kubelet sends for a command that exited non-zero.
        let exited = status(json!({
            "metadata": {}, "status": "Failure",
            "message": "command terminated with non-zero exit code: error executing command [kill -s USR1 1], exit code 1",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": "1"}]},
        }));
        assert_eq!(
            exec_result(Some(&exited), "kill: (1) - Operation not permitted\n"),
            Err("exited with status 1: kill: (1) - Operation not permitted".to_string())
        );
        let internal = status(json!({
            "metadata": {}, "status": "Failure", "reason": "InternalError",
            "message": "error executing command in container: container not found (\"pytorch\")",
        }));
        let err = exec_result(Some(&internal), "").unwrap_err();
        assert!(
            err.contains("container not found") && err.contains("InternalError"),
            "{err}"
        );
        let err = exec_result(None, "").unwrap_err();
        assert!(err.contains("without an exit status"), "{err}");
    }

    #[test]
    fn the_training_container_is_the_default_one_else_the_operator_s_else_the_first() {
        let pod = |annotations: Value, names: &[&str]| {
            json!({
                "metadata": {"annotations": annotations},
                "spec": {"containers": names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>()},
            })
        };
        let sidecar_first = pod(json!({}), &["istio-proxy", "pytorch"]);
        assert_eq!(
            training_container(WorkloadKind::PyTorchJob, &sidecar_first).as_deref(),
            Some("pytorch")
        );
        assert_eq!(
            training_container(WorkloadKind::Job, &sidecar_first).as_deref(),
            Some("istio-proxy")
        );
        let annotated = pod(
            json!({"kubectl.kubernetes.io/default-container": "trainer"}),
            &["log-shipper", "trainer"],
        );
        assert_eq!(
            training_container(WorkloadKind::Job, &annotated).as_deref(),
            Some("trainer")
        );
        let trainjob = pod(json!({}), &["dataset-initializer", "node"]);
        assert_eq!(
            training_container(WorkloadKind::TrainJob, &trainjob).as_deref(),
            Some("node")
        );
        assert_eq!(
            training_container(WorkloadKind::Job, &pod(json!({}), &[])),
            None
        );
    }
}
