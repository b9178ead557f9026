//! Creating a workload runguard starts itself (a phase of a multiphase workflow) from the phase's
//! manifest: one workload of a kind runguard watches, created as written with runguard's enrolment
//! label, the tag that links it to its workflow, and the phase's environment in every container.

use serde_json::{Value, json};

use super::workload::{ENABLED_LABEL, MAX_RESTARTS_ANNOTATION, WorkloadKind, WorkloadRef, str_at};
use crate::backend::{BackendError, NewJob};
use crate::model::PhaseJob;

/// The annotation that carries the tag of a workload runguard created (see `JobSnapshot::tag`).
pub const TAG_ANNOTATION: &str = "runguard.io/tag";

/// The workload `job` creates, read from its manifest and enrolled, with where it goes.
pub fn manifest(
    job: &NewJob,
    default_namespace: &str,
) -> Result<(WorkloadRef, Value), BackendError> {
    let PhaseJob::Manifest { path } = &job.job else {
        return Err(BackendError::Invalid(format!(
            "{}: Kubernetes creates manifests, not batch scripts",
            job.name
        )));
    };
    let text = std::fs::read_to_string(path).map_err(|err| {
        BackendError::Invalid(format!(
            "cannot read the manifest {}: {err}",
            path.display()
        ))
    })?;
    let mut workload: Value = serde_yaml_ng::from_str(&text)
        .map_err(|err| BackendError::Invalid(format!("the manifest {}: {err}", path.display())))?;
    let invalid = |what: String| BackendError::Invalid(format!("{}: {what}", path.display()));
    let kind_name = str_at(&workload, "/kind").unwrap_or_default();
    let kind = WorkloadKind::parse(kind_name)
        .filter(|kind| kind.kind() == kind_name)
        .ok_or_else(|| {
            invalid(format!(
                "kind {kind_name:?} is not a workload runguard watches (Job, PyTorchJob, RayJob, \
                 JobSet, TrainJob, RayCluster)"
            ))
        })?;
    let api_version = str_at(&workload, "/apiVersion").unwrap_or_default();
    let expected = format!("{}/{}", kind.group(), kind.version());
    if api_version != expected {
        return Err(invalid(format!(
            "apiVersion {api_version:?} of a {kind_name}: runguard speaks {expected}"
        )));
    }
    if str_at(&workload, "/metadata/name").is_none() {
        return Err(invalid(
            "metadata.name is missing (a generated name cannot be found again after a restart)"
                .to_string(),
        ));
    }
    let Some(metadata) = workload.get_mut("metadata").and_then(Value::as_object_mut) else {
        return Err(invalid("metadata is not a mapping".to_string()));
    };
    metadata
        .entry("namespace")
        .or_insert_with(|| json!(default_namespace));
    let labels = metadata.entry("labels").or_insert_with(|| json!({}));
    let Some(labels) = labels.as_object_mut() else {
        return Err(invalid("metadata.labels is not a mapping".to_string()));
    };
    labels.insert(ENABLED_LABEL.to_string(), json!("true"));
    let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
    let Some(annotations) = annotations.as_object_mut() else {
        return Err(invalid("metadata.annotations is not a mapping".to_string()));
    };
    annotations.insert(TAG_ANNOTATION.to_string(), json!(job.tag));
    if let Some(limit) = job.max_requeue_times {
        annotations.insert(
            MAX_RESTARTS_ANNOTATION.to_string(),
            json!(limit.to_string()),
        );
    }
    for template in kind.templates_mut(&mut workload) {
        let Some(containers) = template
            .pointer_mut("/spec/containers")
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for container in containers {
            let Some(container) = container.as_object_mut() else {
                continue;
            };
            let env = container.entry("env").or_insert_with(|| json!([]));
            if let Some(env) = env.as_array_mut() {
                for (name, value) in &job.env {
                    env.retain(|entry| entry.get("name") != Some(&json!(name)));
                    env.push(json!({ "name": name, "value": value }));
                }
            }
        }
    }
    let reference = WorkloadRef::of(kind, &workload)
        .ok_or_else(|| invalid("metadata.name is missing".to_string()))?;
    Ok((reference, workload))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(path: &std::path::Path) -> NewJob {
        NewJob {
            name: "llama.finetune".into(),
            job: PhaseJob::Manifest {
                path: path.to_path_buf(),
            },
            tag: "runguard:workflow=4:attempt=0".into(),
            nodes: None,
            min_nodes: Some(2),
            max_requeue_times: None,
            work_dir: None,
            env: vec![("RUNGUARD_CHECKPOINT_DIR".into(), "/ckpt/finetune".into())],
        }
    }

    #[test]
    fn a_manifest_is_enrolled_tagged_and_given_the_phase_s_environment() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("finetune.yaml");
        std::fs::write(
            &path,
            "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: finetune\n\
             spec:\n  pytorchReplicaSpecs:\n    Master:\n      replicas: 1\n      template:\n\
             \x20       spec:\n          containers:\n          - name: pytorch\n\
             \x20           image: trainer:1\n",
        )
        .unwrap();
        let (reference, workload) = manifest(&job(&path), "ml").unwrap();
        assert_eq!(reference.id(), "pytorchjob/ml/finetune");
        assert_eq!(workload["metadata"]["labels"][ENABLED_LABEL], "true");
        assert_eq!(
            workload["metadata"]["annotations"][TAG_ANNOTATION],
            "runguard:workflow=4:attempt=0"
        );
        let env = &workload["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
            [0]["env"][0];
        assert_eq!(env["name"], "RUNGUARD_CHECKPOINT_DIR");
        assert_eq!(env["value"], "/ckpt/finetune");
    }

    #[test]
    fn a_manifest_runguard_cannot_follow_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.yaml");
        for (text, expected) in [
            (
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\n",
                "not a workload",
            ),
            (
                "apiVersion: batch/v2\nkind: Job\nmetadata:\n  name: x\n",
                "apiVersion",
            ),
            (
                "apiVersion: batch/v1\nkind: Job\nmetadata:\n  generateName: x-\n",
                "metadata.name",
            ),
            ("kind: [\n", "the manifest"),
        ] {
            std::fs::write(&path, text).unwrap();
            let err = manifest(&job(&path), "default").unwrap_err().to_string();
            assert!(err.contains(expected), "{text:?}: {err}");
        }
    }
}
