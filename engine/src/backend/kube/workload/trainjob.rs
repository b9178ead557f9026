//! Kubeflow Trainer v2's TrainJob: the job names a runtime (a JobSet template shared by many jobs)
//! and sets its trainer (image, command, environment, nodes, resources per node) over it. runguard
//! never edits the shared runtime: it changes the trainer settings, and keeps the job off excluded
//! nodes with a runtime patch of its own, merged into the node affinity the JobSet already has.

use serde_json::{Value, json};

use super::{at, str_at};

/// The manager of runguard's entry in `spec.runtimePatches` (each manager owns its entry).
pub const PATCH_MANAGER: &str = "runguard.io/recovery";

/// The trainer as one pod template (`{spec: {containers: [trainer], affinity}}`) and its number of
/// nodes: what the job asks for, with the nodes runguard's patch keeps it off.
pub fn trainer_template(trainjob: &Value) -> (Value, u32) {
    let trainer = at(trainjob, "/spec/trainer").cloned().unwrap_or(json!({}));
    let nodes = trainer
        .get("numNodes")
        .and_then(Value::as_u64)
        .map_or(1, |n| u32::try_from(n).unwrap_or(u32::MAX));
    let mut container = json!({"name": "node"});
    for key in ["image", "command", "args", "env"] {
        if let Some(value) = trainer.get(key) {
            container[key] = value.clone();
        }
    }
    if let Some(resources) = trainer.get("resourcesPerNode") {
        container["resources"] = resources.clone();
    }
    let mut template = json!({"spec": {"containers": [container]}});
    if let Some(affinity) = own_patch(trainjob)
        .and_then(|patch| patch_pod_specs(patch).into_iter().next())
        .and_then(|spec| spec.get("affinity"))
    {
        template["spec"]["affinity"] = affinity.clone();
    }
    (template, nodes)
}

/// runguard's entry of `spec.runtimePatches`, if the job has one.
fn own_patch(trainjob: &Value) -> Option<&Value> {
    at(trainjob, "/spec/runtimePatches")
        .and_then(Value::as_array)?
        .iter()
        .find(|patch| str_at(patch, "/manager") == Some(PATCH_MANAGER))
}

fn patch_pod_specs(patch: &Value) -> Vec<&Value> {
    at(patch, "/trainingRuntimeSpec/template/spec/replicatedJobs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|job| at(job, "/template/spec/template/spec"))
        .collect()
}

/// Keeps the job off `exclude`: runguard's runtime patch sets, on every replicated job, the node
/// affinity the job's pods have now (its JobSet's, which holds the runtime's and the user's patches)
/// with `kubernetes.io/hostname NotIn` the excluded nodes added to each required term. Without its
/// JobSet (already gone) the replicated jobs and affinity of runguard's earlier patch are used.
pub fn exclude_nodes(manifest: &mut Value, jobset: Option<&Value>, exclude: &[String]) {
    update_exclusions(manifest, jobset, exclude, &[]);
}

/// The same, adding `add` to the nodes the job is kept off and taking `remove` away from them (what
/// the runtime itself excludes stays, as the job's pods have it now).
pub fn update_exclusions(
    manifest: &mut Value,
    jobset: Option<&Value>,
    add: &[String],
    remove: &[String],
) {
    if add.is_empty() && remove.is_empty() {
        return;
    }
    // (replicated job, its pods' affinity now).
    let mut targets: Vec<(String, Value)> = jobset
        .and_then(|jobset| at(jobset, "/spec/replicatedJobs"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|job| {
            let name = str_at(job, "/name")?.to_string();
            let affinity = at(job, "/template/spec/template/spec/affinity")
                .cloned()
                .unwrap_or(json!({}));
            Some((name, affinity))
        })
        .collect();
    if targets.is_empty() {
        targets = own_patch(manifest)
            .and_then(|patch| at(patch, "/trainingRuntimeSpec/template/spec/replicatedJobs"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|job| {
                Some((
                    str_at(job, "/name")?.to_string(),
                    at(job, "/template/spec/template/spec/affinity")
                        .cloned()
                        .unwrap_or(json!({})),
                ))
            })
            .collect();
    }
    if targets.is_empty() {
        targets.push((super::pods::TRAINER_REPLICATED_JOB.to_string(), json!({})));
    }
    let replicated_jobs: Vec<Value> = targets
        .into_iter()
        .map(|(name, affinity)| {
            let mut spec = json!({"affinity": affinity});
            super::affinity::update_exclusions(&mut spec, add, remove);
            if spec.get("affinity").is_none() {
                // Nothing left to require: an empty affinity overrides nothing of the runtime's.
                spec["affinity"] = json!({});
            }
            json!({"name": name, "template": {"spec": {"template": {"spec": spec}}}})
        })
        .collect();
    let patch = json!({
        "manager": PATCH_MANAGER,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": replicated_jobs}}},
    });
    let Some(spec) = manifest.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let patches = spec
        .entry("runtimePatches".to_string())
        .or_insert_with(|| json!([]));
    if !patches.is_array() {
        *patches = json!([]);
    }
    if let Some(patches) = patches.as_array_mut() {
        // The server stamps `time`; the user's and other managers' entries stay as they are.
        patches.retain(|entry| str_at(entry, "/manager") != Some(PATCH_MANAGER));
        patches.push(patch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trainjob() -> Value {
        json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "qwen-sft", "namespace": "research"},
            "spec": {
                "runtimeRef": {"name": "torch-distributed"},
                "trainer": {"numNodes": 3, "image": "ghcr.io/acme/sft:3", "command": ["torchrun", "sft.py"],
                            "resourcesPerNode": {"limits": {"nvidia.com/gpu": 8}}},
                "runtimePatches": [{"manager": "platform.acme.io/placement", "trainingRuntimeSpec": {}}],
            },
        })
    }

    fn jobset() -> Value {
        json!({"spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": {"spec": {"affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "cloud.google.com/gke-nodepool", "operator": "In", "values": ["a3-research"]}]},
                    {"matchExpressions": [{"key": "cloud.google.com/gke-nodepool", "operator": "In", "values": ["a3-spare"]}]},
                ]}}}}}}}},
        ]}})
    }

    #[test]
    fn the_trainer_is_one_template_of_num_nodes_replicas() {
        let (template, nodes) = trainer_template(&trainjob());
        assert_eq!(nodes, 3);
        assert_eq!(
            template["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
            8
        );
        assert_eq!(template["spec"]["containers"][0]["command"][0], "torchrun");
    }

    #[test]
    fn exclusions_merge_into_the_jobset_s_affinity_in_a_patch_of_runguard_s_own() {
        let mut manifest = trainjob();
        exclude_nodes(&mut manifest, Some(&jobset()), &["gpu-node-3".to_string()]);
        let patches = manifest["spec"]["runtimePatches"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(patches.len(), 2, "the other manager's patch is kept");
        assert_eq!(patches[0]["manager"], "platform.acme.io/placement");
        let terms = &patches[1]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]
            ["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"];
        // Both of the runtime's terms stay, each with the exclusion.
        assert_eq!(terms.as_array().map(Vec::len), Some(2), "{terms}");
        for term in terms.as_array().into_iter().flatten() {
            let text = term.to_string();
            assert!(text.contains("gke-nodepool"), "{text}");
            assert!(
                text.contains(r#""operator":"NotIn","values":["gpu-node-3"]"#),
                "{text}"
            );
        }
        let (template, _) = trainer_template(&manifest);
        assert_eq!(
            super::super::excluded_nodes(&template),
            ["gpu-node-3"],
            "read back as the job's exclusions"
        );

        // A second exclusion once the JobSet is gone adds to runguard's patch, still one entry.
        exclude_nodes(&mut manifest, None, &["gpu-node-1".to_string()]);
        let patches = manifest["spec"]["runtimePatches"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(patches.len(), 2);
        let (template, _) = trainer_template(&manifest);
        assert_eq!(
            super::super::excluded_nodes(&template),
            ["gpu-node-1", "gpu-node-3"]
        );
    }
}
