//! Restarting a Kueue-queued workload in place: a JobSet or TrainJob that has not ended is suspended
//! (with its new spec, in one merge patch: JobSet accepts pod-template changes on a workload being
//! suspended) instead of being deleted and created again. Suspending stops its pods; Kueue queues it
//! again and resumes it once it admits it: the job keeps its name, its queue and Kueue's accounting,
//! and never starts outside Kueue's admission.
//!
//! Only what JobSet carries to its existing Jobs on a resume can change this way: labels,
//! annotations, node selector, tolerations and scheduling gates (its controller's `resumeJob`). A
//! node exclusion (node affinity) or a container change would be lost, so those re-create the
//! workload.

use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

use super::backend::KubeBackend;
use super::errors::action_error;
use super::recreate::restart_outcome;
use super::workload::{WorkloadKind, WorkloadRef, at, exclusions_of};
use crate::backend::{ActionOutcome, BackendError};
use crate::model::SpecChange;

/// The label Kueue queues a workload by.
pub const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";

/// The merge patch that restarts `current` in place as `next` (its next incarnation, away from
/// `exclude` with `changes`), when it can be: a JobSet or TrainJob in a Kueue queue whose run has not
/// ended (an ended JobSet does not run again when resumed), restarted without a node it does not
/// already avoid and with no change but tolerations.
pub fn in_place_patch(
    kind: WorkloadKind,
    current: &Value,
    next: &Value,
    exclude: &[String],
    changes: &[SpecChange],
) -> Option<Value> {
    let avoided = exclusions_of(kind, current);
    let carried = exclude.iter().all(|node| avoided.contains(node))
        && changes
            .iter()
            .all(|change| matches!(change, SpecChange::Toleration { .. }));
    if !carried {
        return None;
    }
    let queued = at(current, "/metadata/labels")
        .and_then(|labels| labels.get(QUEUE_LABEL))
        .and_then(Value::as_str)
        .is_some_and(|queue| !queue.is_empty());
    let ended = at(current, "/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|condition| {
            matches!(
                condition.get("type").and_then(Value::as_str),
                Some("Completed" | "Complete" | "Failed")
            ) && condition.get("status").and_then(Value::as_str) == Some("True")
        });
    if !queued || ended {
        return None;
    }
    // Only what a re-creation changes: the restart annotation and where the pods are specified.
    let fields: &[&str] = match kind {
        WorkloadKind::JobSet => &["replicatedJobs"],
        WorkloadKind::TrainJob => &["trainer", "runtimePatches"],
        _ => return None,
    };
    let mut spec = json!({"suspend": true});
    for field in fields {
        if let Some(value) = at(next, &format!("/spec/{field}")) {
            spec[*field] = value.clone();
        }
    }
    Some(json!({
        "metadata": {"annotations": at(next, "/metadata/annotations").cloned().unwrap_or(json!({}))},
        "spec": spec,
    }))
}

/// Whether the workload is held suspended (Kueue's `spec.suspend: true`, a PyTorchJob's
/// `spec.runPolicy.suspend`): its pods are gone or going, and come back when it is resumed.
pub fn suspended(kind: WorkloadKind, workload: &Value) -> bool {
    let pointer = match kind {
        WorkloadKind::PyTorchJob => "/spec/runPolicy/suspend",
        _ => "/spec/suspend",
    };
    at(workload, pointer).and_then(Value::as_bool) == Some(true)
}

/// Whether a suspended workload's pod templates may be changed in place and reach the pods it makes
/// once resumed: a Job's when it never started (Kubernetes lets the scheduling directives of a
/// suspended Job without a start time change, which is what Kueue relies on; one resumed before keeps
/// its template) and a PyTorchJob's (the training operator makes its pods afresh from the templates
/// on resume). A JobSet's Jobs exist while it is suspended, and its resume carries no node affinity
/// to them; a TrainJob's pods are its JobSet's; a Ray cluster is re-created from its own spec.
pub fn templates_editable_while_suspended(kind: WorkloadKind, workload: &Value) -> bool {
    match kind {
        WorkloadKind::Job => at(workload, "/status/startTime").is_none(),
        WorkloadKind::PyTorchJob => true,
        _ => false,
    }
}

/// The JSON merge patch (RFC 7386) that turns `current` into `next`: the keys whose values differ
/// (objects compared key by key, anything else, arrays included, replaced whole) and the keys `next`
/// no longer has, as null.
pub fn merge_patch(current: &Value, next: &Value) -> Option<Value> {
    match (current, next) {
        (Value::Object(before), Value::Object(after)) => {
            let mut patch = serde_json::Map::new();
            for (key, value) in after {
                match before.get(key) {
                    Some(old) => {
                        if let Some(inner) = merge_patch(old, value) {
                            patch.insert(key.clone(), inner);
                        }
                    }
                    None => {
                        patch.insert(key.clone(), value.clone());
                    }
                }
            }
            for key in before.keys().filter(|key| !after.contains_key(*key)) {
                patch.insert(key.clone(), Value::Null);
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        _ if current == next => None,
        // A null in a merge patch deletes: a value that is null itself cannot be set by one.
        _ => Some(next.clone()),
    }
}

impl KubeBackend {
    /// The request of an in-place restart, for approvals and refusals.
    pub(super) fn in_place_request(reference: &WorkloadRef, patch: &Value) -> String {
        format!(
            "PATCH {} (merge) {patch}",
            reference
                .kind
                .path(&reference.namespace, Some(&reference.name))
        )
    }

    /// Suspends the workload with its new spec and force-deletes its pods `stuck` on a lost node;
    /// Kueue admits and resumes it.
    pub(super) async fn restart_in_place(
        &self,
        reference: &WorkloadRef,
        patch: &Value,
        stuck: &[String],
        restart: u32,
        exclude: &[String],
        changes: &[SpecChange],
    ) -> Result<ActionOutcome, BackendError> {
        let request = Self::in_place_request(reference, patch);
        self.workload_api(reference)
            .patch(
                &reference.name,
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
            .map_err(|err| action_error(err, &request))?;
        let pod_api: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(self.client.clone(), &reference.namespace);
        for pod in stuck {
            let force = DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::background()
            };
            if let Err(err) = pod_api.delete(pod, &force).await {
                tracing::warn!(pod, %err, "deleting a pod stuck on a lost node");
            }
        }
        Ok(restart_outcome(
            format!(
                "suspended {} with its spec for restart {restart}",
                reference.id()
            ),
            exclude,
            changes,
            Some("Kueue admits it again and resumes it"),
            stuck,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobset(labels: Value, conditions: Value) -> Value {
        json!({
            "metadata": {"name": "sweep", "labels": labels},
            "spec": {"replicatedJobs": [{"name": "workers"}], "network": {"enableDNSHostnames": true}},
            "status": {"conditions": conditions},
        })
    }

    #[test]
    fn only_a_queued_workload_that_has_not_ended_restarts_in_place() {
        let in_place =
            |kind, current: &Value, next: &Value| in_place_patch(kind, current, next, &[], &[]);
        let next = json!({
            "metadata": {"annotations": {"runguard.io/restart-count": "1"}},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2}], "network": {}},
        });
        let queued = jobset(json!({QUEUE_LABEL: "research"}), json!([]));
        let patch = in_place(WorkloadKind::JobSet, &queued, &next)
            .unwrap_or_else(|| panic!("a queued running JobSet restarts in place"));
        assert_eq!(
            patch,
            json!({
                "metadata": {"annotations": {"runguard.io/restart-count": "1"}},
                "spec": {"suspend": true, "replicatedJobs": [{"name": "workers", "replicas": 2}]},
            }),
            "only the restart and the templates: the rest is the user's"
        );
        let unqueued = jobset(json!({}), json!([]));
        assert_eq!(in_place(WorkloadKind::JobSet, &unqueued, &next), None);
        let failed = jobset(
            json!({QUEUE_LABEL: "research"}),
            json!([{"type": "Failed", "status": "True"}]),
        );
        assert_eq!(in_place(WorkloadKind::JobSet, &failed, &next), None);
        assert_eq!(
            in_place(WorkloadKind::PyTorchJob, &queued, &next),
            None,
            "a PyTorchJob is re-created"
        );
    }

    #[test]
    fn a_merge_patch_carries_only_what_changed_and_nulls_what_went() {
        let current = json!({
            "metadata": {"name": "eval", "resourceVersion": "7"},
            "spec": {"suspend": true, "template": {"spec": {
                "containers": [{"name": "main"}],
                "affinity": {"nodeAffinity": {"x": 1}, "podAffinity": {"y": 2}},
            }}},
        });
        let mut next = current.clone();
        next["spec"]["template"]["spec"]["affinity"]["nodeAffinity"] = json!({"x": 1, "z": [3]});
        if let Some(affinity) = next["spec"]["template"]["spec"]["affinity"].as_object_mut() {
            affinity.remove("podAffinity");
        }
        assert_eq!(
            merge_patch(&current, &next),
            Some(json!({"spec": {"template": {"spec": {"affinity": {
                "nodeAffinity": {"z": [3]}, "podAffinity": null}}}}}))
        );
        assert_eq!(merge_patch(&current, &current), None);
    }

    #[test]
    fn suspension_is_read_where_each_kind_keeps_it() {
        assert!(suspended(
            WorkloadKind::Job,
            &json!({"spec": {"suspend": true}})
        ));
        assert!(!suspended(
            WorkloadKind::Job,
            &json!({"spec": {"suspend": false}})
        ));
        assert!(suspended(
            WorkloadKind::PyTorchJob,
            &json!({"spec": {"runPolicy": {"suspend": true}}})
        ));
        assert!(!suspended(
            WorkloadKind::PyTorchJob,
            &json!({"spec": {"suspend": true}})
        ));
        assert!(suspended(
            WorkloadKind::JobSet,
            &json!({"spec": {"suspend": true}})
        ));
    }

    #[test]
    fn only_templates_that_reach_the_pods_on_resume_are_edited_in_place() {
        let never_started = json!({"spec": {"suspend": true}, "status": {}});
        let resumed_before =
            json!({"spec": {"suspend": true}, "status": {"startTime": "2026-01-05T08:00:00Z"}});
        assert!(templates_editable_while_suspended(
            WorkloadKind::Job,
            &never_started
        ));
        assert!(
            !templates_editable_while_suspended(WorkloadKind::Job, &resumed_before),
            "Kubernetes keeps the template of a Job that started"
        );
        assert!(templates_editable_while_suspended(
            WorkloadKind::PyTorchJob,
            &resumed_before
        ));
        for kind in [
            WorkloadKind::JobSet,
            WorkloadKind::TrainJob,
            WorkloadKind::RayJob,
        ] {
            assert!(
                !templates_editable_while_suspended(kind, &never_started),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn what_a_resume_would_not_carry_to_the_jobs_re_creates_the_workload() {
        let queued = jobset(json!({QUEUE_LABEL: "research"}), json!([]));
        let next = json!({"metadata": {}, "spec": {"replicatedJobs": []}});
        let toleration = SpecChange::Toleration {
            key: "nvidia.com/gpu".into(),
            operator: "Exists".into(),
            value: None,
            effect: Some("NoSchedule".into()),
        };
        assert!(
            in_place_patch(WorkloadKind::JobSet, &queued, &next, &[], &[toleration]).is_some(),
            "a toleration reaches the Jobs on resume"
        );
        assert_eq!(
            in_place_patch(
                WorkloadKind::JobSet,
                &queued,
                &next,
                &["gpu-node-3".into()],
                &[]
            ),
            None,
            "node affinity does not"
        );
        assert_eq!(
            in_place_patch(
                WorkloadKind::JobSet,
                &queued,
                &next,
                &[],
                &[SpecChange::DataLoaderWorkers { workers: 4 }]
            ),
            None,
            "nor does a container's"
        );
    }
}
