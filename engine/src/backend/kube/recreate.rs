//! The manifest of a re-created workload: the user's spec without what the server set, away from the
//! excluded nodes, with the catalog's fix applied, and counted as the next attempt. Shown in approvals
//! as a diff of the spec before it runs.

use serde_json::{Value, json};

use super::workload::affinity::update_exclusions;
use super::workload::{RESTART_ANNOTATION, WorkloadKind, trainjob};
use crate::model::SpecChange;

/// What a restart did, for the journal: `head`, the exclusions and changes it carried, what follows
/// it (`then`), and the pods force-deleted off a lost node.
pub(super) fn restart_outcome(
    mut detail: String,
    exclude: &[String],
    changes: &[SpecChange],
    then: Option<&str>,
    stuck: &[String],
) -> crate::backend::ActionOutcome {
    if !exclude.is_empty() {
        detail.push_str(&format!(", excluding {}", exclude.join(",")));
    }
    if !changes.is_empty() {
        let described: Vec<String> = changes.iter().map(SpecChange::describe).collect();
        detail.push_str(&format!(", with {}", described.join(", ")));
    }
    if let Some(then) = then {
        detail.push_str(&format!("; {then}"));
    }
    if !stuck.is_empty() {
        detail.push_str(&format!(
            "; force-deleted {} stuck on a lost node",
            stuck.join(",")
        ));
    }
    crate::backend::ActionOutcome {
        detail,
        new_job_id: None,
    }
}

/// Metadata the server owns: a create with them is refused or meaningless.
const SERVER_METADATA: [&str; 8] = [
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// Labels the Job controller adds to its own template (a create carrying them is refused).
const JOB_CONTROLLER_LABELS: [&str; 4] = [
    "controller-uid",
    "batch.kubernetes.io/controller-uid",
    "job-name",
    "batch.kubernetes.io/job-name",
];

/// The workload as the user wrote it: server-set metadata, status and controller-generated
/// selectors removed.
pub fn clean(kind: WorkloadKind, workload: &Value) -> Value {
    let mut manifest = workload.clone();
    if let Some(object) = manifest.as_object_mut() {
        object.remove("status");
    }
    if let Some(metadata) = manifest.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in SERVER_METADATA {
            metadata.remove(key);
        }
        if let Some(annotations) = metadata
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
        }
    }
    if kind == WorkloadKind::Job {
        // The Job controller generated the selector and these labels for the old uid.
        if let Some(spec) = manifest.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("selector");
            if let Some(labels) = spec
                .get_mut("template")
                .and_then(|t| t.get_mut("metadata"))
                .and_then(|m| m.get_mut("labels"))
                .and_then(Value::as_object_mut)
            {
                for key in JOB_CONTROLLER_LABELS {
                    labels.remove(key);
                }
            }
        }
    }
    manifest
}

/// The array under `key` of an object, made one when missing; `None` when `value` is no object.
fn array<'a>(value: &'a mut Value, key: &str) -> Option<&'a mut Vec<Value>> {
    let slot = value
        .as_object_mut()?
        .entry(key.to_string())
        .or_insert_with(|| json!([]));
    if !slot.is_array() {
        *slot = json!([]);
    }
    slot.as_array_mut()
}

/// Walks down `path` from an object, making each step an object where it is not one.
fn ensure<'a>(value: &'a mut Value, path: &[&str]) -> Option<&'a mut Value> {
    let mut current = value;
    for key in path {
        let next = current
            .as_object_mut()?
            .entry(key.to_string())
            .or_insert_with(|| json!({}));
        if !next.is_object() {
            *next = json!({});
        }
        current = next;
    }
    Some(current)
}

fn containers(template: &mut Value) -> Vec<&mut Value> {
    template
        .pointer_mut("/spec/containers")
        .and_then(Value::as_array_mut)
        .map(|list| list.iter_mut().collect())
        .unwrap_or_default()
}

fn set_env(container: &mut Value, name: &str, value: &str) {
    let Some(env) = array(container, "env") else {
        return;
    };
    match env
        .iter_mut()
        .find(|var| var.get("name").and_then(Value::as_str) == Some(name))
    {
        Some(var) => *var = json!({"name": name, "value": value}),
        None => env.push(json!({"name": name, "value": value})),
    }
}

/// Replaces the value of the first argument named like one of `flags` (`--flag N` or `--flag=N`);
/// returns whether one was found.
fn replace_flag(container: &mut Value, flags: &[&str], new_value: impl Fn(&str) -> String) -> bool {
    for key in ["args", "command"] {
        let Some(words) = container.get_mut(key).and_then(Value::as_array_mut) else {
            continue;
        };
        let mut index = 0;
        while index < words.len() {
            let word = words[index].as_str().unwrap_or_default().to_string();
            for flag in flags {
                if let Some(value) = word.strip_prefix(&format!("{flag}=")) {
                    words[index] = json!(format!("{flag}={}", new_value(value)));
                    return true;
                }
                if word == *flag && index + 1 < words.len() {
                    let value = words[index + 1].as_str().unwrap_or_default().to_string();
                    words[index + 1] = json!(new_value(&value));
                    return true;
                }
            }
            index += 1;
        }
    }
    false
}

fn apply_to_template(template: &mut Value, change: &SpecChange) {
    match change {
        SpecChange::Env { name, value } => {
            for container in containers(template) {
                set_env(container, name, value);
            }
        }
        SpecChange::DataLoaderWorkers { .. } | SpecChange::HalveMicroBatch => {
            for container in containers(template) {
                let found = replace_flag(container, change.flags(), |value| {
                    change.new_flag_value(value)
                });
                if !found && let Some((name, value)) = change.environment() {
                    set_env(container, &name, &value);
                }
            }
        }
        SpecChange::SharedMemory { size_limit } => {
            let Some(spec) = template.get_mut("spec") else {
                return;
            };
            let Some(volumes) = array(spec, "volumes") else {
                return;
            };
            volumes.retain(|volume| volume.get("name").and_then(Value::as_str) != Some("dshm"));
            volumes.push(json!({
                "name": "dshm",
                "emptyDir": {"medium": "Memory", "sizeLimit": size_limit},
            }));
            for container in containers(template) {
                let Some(mounts) = array(container, "volumeMounts") else {
                    continue;
                };
                mounts.retain(|mount| {
                    mount.get("mountPath").and_then(Value::as_str) != Some("/dev/shm")
                });
                mounts.push(json!({"name": "dshm", "mountPath": "/dev/shm"}));
            }
        }
        SpecChange::Toleration {
            key,
            operator,
            value,
            effect,
        } => {
            let Some(spec) = template.get_mut("spec") else {
                return;
            };
            let mut toleration = json!({"key": key, "operator": operator});
            if let Some(value) = value {
                toleration["value"] = json!(value);
            }
            if let Some(effect) = effect {
                toleration["effect"] = json!(effect);
            }
            let Some(tolerations) = array(spec, "tolerations") else {
                return;
            };
            if !tolerations.contains(&toleration) {
                tolerations.push(toleration);
            }
        }
        SpecChange::RayGcsFaultTolerance => {}
    }
}

/// The manifest to create: `current` cleaned, counted as restart `restart`, away from `exclude`, with
/// `changes` applied to every pod template. A TrainJob's pods are its JobSet's (`jobset`, when it is
/// still there): their affinity is where its exclusions are merged in.
pub fn next_incarnation(
    kind: WorkloadKind,
    current: &Value,
    jobset: Option<&Value>,
    restart: u32,
    exclude: &[String],
    changes: &[SpecChange],
) -> Value {
    let mut manifest = clean(kind, current);
    if let Some(annotations) =
        ensure(&mut manifest, &["metadata", "annotations"]).and_then(Value::as_object_mut)
    {
        annotations.insert(RESTART_ANNOTATION.to_string(), json!(restart.to_string()));
        if matches!(kind, WorkloadKind::RayJob | WorkloadKind::RayCluster)
            && changes.contains(&SpecChange::RayGcsFaultTolerance)
        {
            annotations.insert("ray.io/ft-enabled".to_string(), json!("true"));
        }
    }
    if kind == WorkloadKind::RayJob && changes.contains(&SpecChange::RayGcsFaultTolerance) {
        // KubeRay reads the annotation on the RayCluster it creates from this spec.
        if let Some(cluster) = manifest.pointer_mut("/spec/rayClusterSpec")
            && let Some(annotations) =
                ensure(cluster, &["metadata", "annotations"]).and_then(Value::as_object_mut)
        {
            annotations.insert("ray.io/ft-enabled".to_string(), json!("true"));
        }
    }
    for template in kind.templates_mut(&mut manifest) {
        exclude_nodes_in(template, exclude);
        for change in changes {
            apply_to_template(template, change);
        }
    }
    if kind == WorkloadKind::TrainJob {
        trainjob::exclude_nodes(&mut manifest, jobset, exclude);
        apply_to_trainer(&mut manifest, changes);
    }
    manifest
}

/// A TrainJob's changes go to its trainer, which sets the training container over the runtime's.
fn apply_to_trainer(manifest: &mut Value, changes: &[SpecChange]) {
    if changes.is_empty() {
        return;
    }
    let Some(trainer) = ensure(manifest, &["spec", "trainer"]) else {
        return;
    };
    // The trainer has a container's image, command, args and env: changed as one.
    let mut template = json!({"spec": {"containers": [trainer.clone()]}});
    for change in changes {
        apply_to_template(&mut template, change);
    }
    if let Some(changed) = template.pointer("/spec/containers/0") {
        *trainer = changed.clone();
    }
}

/// Adds `kubernetes.io/hostname NotIn exclude` to every required node-selector term of a pod template
/// (terms are ORed, so each must carry it).
fn exclude_nodes_in(template: &mut Value, exclude: &[String]) {
    update_exclusions_in(template, exclude, &[]);
}

/// Adds `add` to and takes `remove` from the nodes a pod template excludes ([`update_exclusions`]).
fn update_exclusions_in(template: &mut Value, add: &[String], remove: &[String]) {
    if add.is_empty() && remove.is_empty() || !template.is_object() {
        return;
    }
    if let Some(spec) = ensure(template, &["spec"]) {
        update_exclusions(spec, add, remove);
    }
}

/// `current` with `add` added to and `remove` taken from the nodes every pod template of it excludes
/// (a TrainJob's in runguard's runtime patch, over its JobSet's affinity): nothing else changes, so
/// that it can be compared with `current` for a merge patch or made the next manifest.
pub fn with_exclusions(
    kind: WorkloadKind,
    current: &Value,
    jobset: Option<&Value>,
    add: &[String],
    remove: &[String],
) -> Value {
    let mut changed = current.clone();
    for template in kind.templates_mut(&mut changed) {
        update_exclusions_in(template, add, remove);
    }
    if kind == WorkloadKind::TrainJob {
        trainjob::update_exclusions(&mut changed, jobset, add, remove);
    }
    changed
}

/// A line diff of the two manifests' specs (and annotations), as `-`/`+` lines with a little context.
pub fn spec_diff(before: &Value, after: &Value) -> String {
    let view = |manifest: &Value| {
        let shown = json!({
            "metadata": {"annotations": manifest.pointer("/metadata/annotations").cloned().unwrap_or(Value::Null)},
            "spec": manifest.get("spec").cloned().unwrap_or(Value::Null),
        });
        serde_json::to_string_pretty(&shown).unwrap_or_default()
    };
    let old = view(before);
    let new = view(after);
    let old: Vec<&str> = old.lines().collect();
    let new: Vec<&str> = new.lines().collect();
    // Longest common subsequence over lines: manifests are a few hundred lines at most.
    let (n, m) = (old.len(), new.len());
    let mut table = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            table[i][j] = if old[i] == new[j] {
                table[i + 1][j + 1] + 1
            } else {
                table[i + 1][j].max(table[i][j + 1])
            };
        }
    }
    let mut lines: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && old[i] == new[j] {
            lines.push((' ', old[i]));
            i += 1;
            j += 1;
        } else if j < m && (i == n || table[i][j + 1] >= table[i + 1][j]) {
            lines.push(('+', new[j]));
            j += 1;
        } else {
            lines.push(('-', old[i]));
            i += 1;
        }
    }
    const CONTEXT: usize = 2;
    let changed: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, (mark, _))| *mark != ' ')
        .map(|(index, _)| index)
        .collect();
    let mut out = String::new();
    let mut last_shown: Option<usize> = None;
    for (index, (mark, text)) in lines.iter().enumerate() {
        let near = changed
            .iter()
            .any(|c| index + CONTEXT >= *c && index <= c + CONTEXT);
        if !near {
            continue;
        }
        if last_shown.is_some_and(|last| index > last + 1) {
            out.push_str("  ...\n");
        }
        out.push_str(&format!("{mark} {text}\n"));
        last_shown = Some(index);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pytorchjob() -> Value {
        json!({
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {
                "name": "llama",
                "namespace": "ml",
                "uid": "1234",
                "resourceVersion": "77",
                "creationTimestamp": "2026-01-05T08:00:00Z",
                "managedFields": [{"manager": "kubectl"}],
                "labels": {"runguard.io/enabled": "true"},
            },
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": {"containers": [{
                    "name": "pytorch", "image": "train:1",
                    "args": ["--num-workers", "8", "--micro-batch-size=4"],
                }]}}},
                "Worker": {"replicas": 3, "template": {"spec": {
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["H100"]},
                        ]}],
                    }}},
                    "containers": [{"name": "pytorch", "image": "train:1", "env": [{"name": "NCCL_DEBUG", "value": "WARN"}]}],
                }}},
            }},
            "status": {"conditions": [{"type": "Failed", "status": "True"}]},
        })
    }

    #[test]
    fn the_next_incarnation_drops_server_fields_and_counts_the_restart() {
        let next = next_incarnation(WorkloadKind::PyTorchJob, &pytorchjob(), None, 2, &[], &[]);
        assert!(next.get("status").is_none());
        let metadata = &next["metadata"];
        for key in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
        ] {
            assert!(metadata.get(key).is_none(), "{key}");
        }
        assert_eq!(metadata["annotations"][RESTART_ANNOTATION], "2");
        assert_eq!(metadata["labels"]["runguard.io/enabled"], "true");
    }

    #[test]
    fn every_template_excludes_the_nodes_keeping_its_own_terms() {
        let exclude = vec!["n2".to_string(), "n5".to_string()];
        let next = next_incarnation(
            WorkloadKind::PyTorchJob,
            &pytorchjob(),
            None,
            1,
            &exclude,
            &[],
        );
        for role in ["Master", "Worker"] {
            let template = &next["spec"]["pytorchReplicaSpecs"][role]["template"];
            assert_eq!(
                super::super::workload::excluded_nodes(template),
                exclude,
                "{role}: {template:#}"
            );
        }
        let worker_terms = &next["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["affinity"]
            ["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchExpressions"];
        assert_eq!(
            worker_terms.as_array().map(Vec::len),
            Some(2),
            "{worker_terms:#}"
        );
        // Excluding again adds nothing twice.
        let again = next_incarnation(WorkloadKind::PyTorchJob, &next, None, 2, &exclude, &[]);
        let values = &again["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["affinity"]
            ["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchExpressions"][0]["values"];
        assert_eq!(values, &json!(["n2", "n5"]));
    }

    #[test]
    fn the_catalog_fixes_change_args_env_volumes_and_tolerations() {
        let changes = vec![
            SpecChange::DataLoaderWorkers { workers: 2 },
            SpecChange::HalveMicroBatch,
            SpecChange::SharedMemory {
                size_limit: "16Gi".to_string(),
            },
            SpecChange::Env {
                name: "NCCL_DEBUG".to_string(),
                value: "INFO".to_string(),
            },
            SpecChange::Toleration {
                key: "nvidia.com/gpu".to_string(),
                operator: "Exists".to_string(),
                value: None,
                effect: Some("NoSchedule".to_string()),
            },
        ];
        let next = next_incarnation(
            WorkloadKind::PyTorchJob,
            &pytorchjob(),
            None,
            1,
            &[],
            &changes,
        );
        let master = &next["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"];
        assert_eq!(
            master["containers"][0]["args"],
            json!(["--num-workers", "2", "--micro-batch-size=2"])
        );
        assert_eq!(
            master["volumes"],
            json!([{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}])
        );
        assert_eq!(
            master["containers"][0]["volumeMounts"],
            json!([{"name": "dshm", "mountPath": "/dev/shm"}])
        );
        let worker = &next["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"];
        // Without the argument, the worker count goes in the environment; an existing var is replaced.
        let env = &worker["containers"][0]["env"];
        assert!(env.as_array().is_some_and(|env| {
            env.contains(&json!({"name": "DATALOADER_NUM_WORKERS", "value": "2"}))
        }));
        assert!(
            env.as_array()
                .is_some_and(|env| env.contains(&json!({"name": "NCCL_DEBUG", "value": "INFO"})))
        );
        assert_eq!(
            worker["tolerations"],
            json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
        );
    }

    #[test]
    fn a_job_loses_its_controller_selector_and_labels() {
        let job = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "eval", "namespace": "ml", "uid": "u1"},
            "spec": {
                "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u1"}},
                "template": {"metadata": {"labels": {
                    "batch.kubernetes.io/controller-uid": "u1", "controller-uid": "u1",
                    "job-name": "eval", "batch.kubernetes.io/job-name": "eval", "team": "a",
                }}, "spec": {"containers": [{"name": "main"}]}},
            },
        });
        let next = next_incarnation(WorkloadKind::Job, &job, None, 1, &[], &[]);
        assert!(next["spec"].get("selector").is_none());
        assert_eq!(
            next["spec"]["template"]["metadata"]["labels"],
            json!({"team": "a"})
        );
    }

    #[test]
    fn ray_gcs_fault_tolerance_is_an_annotation_on_the_cluster() {
        let ray = json!({
            "apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": "tune", "namespace": "ml"},
            "spec": {"rayClusterSpec": {"headGroupSpec": {"template": {"spec": {"containers": [{"name": "ray-head"}]}}}}},
        });
        let next = next_incarnation(
            WorkloadKind::RayJob,
            &ray,
            None,
            1,
            &[],
            &[SpecChange::RayGcsFaultTolerance],
        );
        assert_eq!(
            next["spec"]["rayClusterSpec"]["metadata"]["annotations"]["ray.io/ft-enabled"],
            "true"
        );
    }

    #[test]
    fn the_diff_shows_only_what_changes() {
        let before = pytorchjob();
        let after = next_incarnation(
            WorkloadKind::PyTorchJob,
            &before,
            None,
            1,
            &["n2".to_string()],
            &[SpecChange::DataLoaderWorkers { workers: 2 }],
        );
        let diff = spec_diff(&before, &after);
        assert!(diff.contains("+ ") && diff.contains("- "), "{diff}");
        assert!(diff.contains("\"n2\""), "{diff}");
        assert!(diff.contains("-") && diff.contains("\"8\""), "{diff}");
        assert!(diff.contains(RESTART_ANNOTATION), "{diff}");
        assert!(
            !diff.contains("train:1"),
            "unchanged lines far from a change stay out: {diff}"
        );
    }

    #[test]
    fn a_jobset_is_kept_off_the_excluded_nodes_in_every_replicated_job_within_its_own_affinity() {
        let jobset = json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "sweep", "namespace": "ml", "uid": "u1", "resourceVersion": "9",
                         "labels": {"kueue.x-k8s.io/queue-name": "research"}},
            "spec": {"replicatedJobs": [
                {"name": "driver", "replicas": 1, "template": {"spec": {"template": {"spec": {
                    "containers": [{"name": "driver", "image": "sweep:1"}]}}}}},
                {"name": "workers", "replicas": 4, "template": {"spec": {"parallelism": 2, "template": {"spec": {
                    "containers": [{"name": "w", "image": "sweep:1", "args": ["--num_workers=8"]}],
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "cloud.google.com/gke-nodepool", "operator": "In", "values": ["a3"]}]}]}}},
                }}}}},
            ]},
            "status": {"restarts": 0},
        });
        let next = next_incarnation(
            WorkloadKind::JobSet,
            &jobset,
            None,
            1,
            &["gpu-node-3".to_string()],
            &[SpecChange::DataLoaderWorkers { workers: 4 }],
        );
        assert!(next.get("status").is_none());
        assert_eq!(
            next["metadata"]["labels"]["kueue.x-k8s.io/queue-name"],
            "research"
        );
        for job in next["spec"]["replicatedJobs"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let spec = &job["template"]["spec"]["template"]["spec"];
            let terms =
                spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                    ["nodeSelectorTerms"]
                    .to_string();
            assert!(
                terms.contains(
                    r#"{"key":"kubernetes.io/hostname","operator":"NotIn","values":["gpu-node-3"]}"#
                ),
                "{}: {terms}",
                job["name"]
            );
        }
        let workers = &next["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"];
        let terms = workers["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"]
            .to_string();
        assert!(
            terms.contains("gke-nodepool"),
            "the user's term is kept: {terms}"
        );
        assert_eq!(workers["containers"][0]["args"][0], "--num_workers=4");
        assert_eq!(
            WorkloadKind::JobSet
                .templates(&next)
                .iter()
                .map(|(_, n)| n)
                .sum::<u32>(),
            9
        );
    }
}
