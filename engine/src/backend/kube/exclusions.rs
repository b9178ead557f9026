//! Keeping a workload that has not started off nodes (`update_exclusions`): the exclusion is
//! `kubernetes.io/hostname NotIn` in its pod templates' node affinity, merged with what the user wrote
//! and taken back without touching it. How it reaches the pods to come depends on where the workload
//! is:
//!
//! - held suspended (Kueue's `spec.suspend`, a PyTorchJob's `runPolicy.suspend`) as a Job that never
//!   started or as a PyTorchJob: its templates are patched in place (Kubernetes lets a suspended Job
//!   that never started change its scheduling directives; the training operator makes a resumed
//!   PyTorchJob's pods afresh from its templates), and Kueue admits it as it is;
//! - with pods that exist but none of which has started, or not made yet, or of a kind whose
//!   suspended templates do not reach its pods (a JobSet's Jobs already exist; a Ray cluster): a
//!   pod's affinity cannot change, so the workload is re-created with the exclusion (the same restart
//!   count: no attempt ran) — only if nothing of it has run;
//! - anything that has started is not pending: refused, its exclusions change with its restart.

use kube::api::{Patch, PatchParams};
use serde_json::Value;

use super::backend::KubeBackend;
use super::errors::{action_error, api_error};
use super::recreate::{next_incarnation, spec_diff, with_exclusions};
use super::suspend::{merge_patch, suspended, templates_editable_while_suspended};
use super::workload::{PodIndex, WorkloadRef, exclusions_of, pods_of, restart_count, run_evidence};
use crate::backend::{ActionOutcome, BackendError};

/// How the exclusions of a workload that has not started are set.
enum Way {
    /// A merge patch of its templates, suspended as it is.
    Patch(Value),
    /// Re-created with this manifest.
    Recreate(Value),
}

/// (nodes to add, nodes to take away) to go from `current` to exactly `wanted`.
fn difference(current: &[String], wanted: &[String]) -> (Vec<String>, Vec<String>) {
    let mut add: Vec<String> = Vec::new();
    for node in wanted {
        if !current.contains(node) && !add.contains(node) {
            add.push(node.clone());
        }
    }
    let remove = current
        .iter()
        .filter(|node| !wanted.contains(node))
        .cloned()
        .collect();
    (add, remove)
}

fn described(add: &[String], remove: &[String]) -> String {
    let mut parts = Vec::new();
    if !add.is_empty() {
        parts.push(format!("adding {}", add.join(",")));
    }
    if !remove.is_empty() {
        parts.push(format!("taking away {}", remove.join(",")));
    }
    parts.join(" and ")
}

impl KubeBackend {
    /// How the exclusions of `current` (whose pods are `pods`) become exactly `nodes`, with the nodes
    /// added and taken away; an error when it has run.
    fn exclusion_way(
        &self,
        reference: &WorkloadRef,
        current: &Value,
        pods: &[&Value],
        nodes: &[String],
    ) -> Result<(Way, Vec<String>, Vec<String>), BackendError> {
        let (add, remove) = difference(&exclusions_of(reference.kind, current), nodes);
        let jobset = self.jobset_of(reference);
        let next = with_exclusions(reference.kind, current, jobset.as_ref(), &add, &remove);
        if suspended(reference.kind, current)
            && templates_editable_while_suspended(reference.kind, current)
        {
            // Nothing is lost whatever it ran before: its pods are made from the templates when
            // it is resumed. Against the version read, so that a resume meanwhile is not raced.
            let mut patch = merge_patch(current, &next).unwrap_or_else(|| serde_json::json!({}));
            if let Some(version) = current.pointer("/metadata/resourceVersion") {
                patch["metadata"]["resourceVersion"] = version.clone();
            }
            return Ok((Way::Patch(patch), add, remove));
        }
        if let Some(evidence) = run_evidence(reference.kind, current, pods) {
            return Err(BackendError::Invalid(format!(
                "{} is not pending ({evidence}): the nodes it avoids change only when it is \
                 restarted",
                reference.id()
            )));
        }
        // Not a new attempt: nothing of it ran, so it keeps its restart count.
        let manifest = next_incarnation(
            reference.kind,
            &next,
            jobset.as_ref(),
            restart_count(current),
            &[],
            &[],
        );
        Ok((Way::Recreate(manifest), add, remove))
    }

    fn patch_request(reference: &WorkloadRef, patch: &Value) -> String {
        format!(
            "PATCH {} (merge) {patch}",
            reference
                .kind
                .path(&reference.namespace, Some(&reference.name))
        )
    }

    /// Sets the nodes a workload that has not started must avoid to exactly `nodes`.
    pub(super) async fn exclude_from_pending(
        &self,
        job_id: &str,
        nodes: &[String],
    ) -> Result<ActionOutcome, BackendError> {
        let reference = self.reference(job_id)?;
        let marker = self.spec_file(&reference).with_extension("recreating");
        let live = self
            .workload_api(&reference)
            .get_opt(&reference.name)
            .await
            .map_err(api_error)?;
        let current = match live {
            Some(object) => serde_json::to_value(&object)
                .map_err(|err| BackendError::transport("reading the workload", err))?,
            // Deleted by a re-creation of ours cut short before the create: finished from the
            // saved spec. Gone otherwise (its owner deleted it): never brought back.
            None if marker.exists() => self.current_spec(&reference).await?,
            None => {
                return Err(BackendError::NoSuchJob(format!(
                    "{} is gone",
                    reference.id()
                )));
            }
        };
        self.may_touch(&reference, &current)?;
        let pods = self.pods_labelled_for(&current);
        let index = PodIndex::new(&pods);
        let mine = pods_of(reference.kind, &current, &index);
        let (way, add, remove) = self.exclusion_way(&reference, &current, &mine, nodes)?;
        let list = if nodes.is_empty() {
            "no node".to_string()
        } else {
            nodes.join(",")
        };
        if add.is_empty() && remove.is_empty() {
            return Ok(ActionOutcome {
                detail: format!("{} already avoids exactly {list}", reference.id()),
                new_job_id: None,
            });
        }
        let change = described(&add, &remove);
        match way {
            Way::Patch(patch) => {
                let request = Self::patch_request(&reference, &patch);
                self.workload_api(&reference)
                    .patch(
                        &reference.name,
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
                    .map_err(|err| action_error(err, &request))?;
                Ok(ActionOutcome {
                    detail: format!(
                        "{change} in the node affinity of suspended {}'s pod templates (now \
                         avoiding {list}); it starts with them when Kueue admits it",
                        reference.id()
                    ),
                    new_job_id: None,
                })
            }
            Way::Recreate(manifest) => {
                let waiting = if mine.is_empty() {
                    "none of its pods made yet".to_string()
                } else {
                    format!("none of its {} pods started", mine.len())
                };
                // Marked until the create is done: a try cut short after the delete is finished
                // by the next one, from the saved spec.
                if let Some(dir) = marker.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                std::fs::write(&marker, job_id)?;
                self.replace(&reference, manifest, &[]).await?;
                if let Err(err) = std::fs::remove_file(&marker) {
                    tracing::warn!(marker = %marker.display(), %err, "removing a re-creation's mark");
                }
                Ok(ActionOutcome {
                    detail: format!(
                        "re-created pending {} ({waiting}: a pod's affinity cannot change) {change} \
                         (now avoiding {list})",
                        reference.id()
                    ),
                    new_job_id: None,
                })
            }
        }
    }

    /// What [`KubeBackend::exclude_from_pending`] would do, for approvals and the journal.
    pub(super) fn exclusion_command(&self, reference: &WorkloadRef, nodes: &[String]) -> String {
        let Some(current) = self.cached_workload(reference) else {
            return format!(
                "(set the node affinity of {} to avoid {}: not known to the watchers now)",
                reference.id(),
                nodes.join(",")
            );
        };
        let pods = self.pods_labelled_for(&current);
        let index = PodIndex::new(&pods);
        let mine = pods_of(reference.kind, &current, &index);
        match self.exclusion_way(reference, &current, &mine, nodes) {
            Ok((Way::Patch(patch), _, _)) => Self::patch_request(reference, &patch),
            Ok((Way::Recreate(manifest), _, _)) => format!(
                "{} (pending, nothing started: re-created) with the spec changed:\n{}",
                Self::recreate_request(reference),
                spec_diff(&super::recreate::clean(reference.kind, &current), &manifest)
            ),
            Err(err) => format!("(cannot change the exclusions: {err})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| name.to_string()).collect()
    }

    #[test]
    fn the_wanted_list_is_reached_by_adding_and_taking_away_only_what_differs() {
        let current = nodes(&["gpu-node-5"]);
        assert_eq!(
            difference(&current, &nodes(&["gpu-node-5", "gpu-spot-1"])),
            (nodes(&["gpu-spot-1"]), vec![])
        );
        assert_eq!(
            difference(&nodes(&["gpu-node-5", "gpu-spot-1"]), &current),
            (vec![], nodes(&["gpu-spot-1"]))
        );
        assert_eq!(difference(&current, &current), (vec![], vec![]));
        assert_eq!(
            described(&nodes(&["a"]), &nodes(&["b", "c"])),
            "adding a and taking away b,c"
        );
    }
}
