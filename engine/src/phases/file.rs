//! The workflow file (`runguard submit workflow.toml`): a name and an ordered `[[phase]]` list, read
//! strictly — an unknown key, a missing script or an empty list is an error that says what to fix.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::model::{BackendKind, PhaseJob, PhaseSpec};

/// A workflow file that cannot be used, with what to fix.
#[derive(Debug, thiserror::Error)]
pub enum WorkflowFileError {
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a valid workflow file")]
    Syntax {
        path: PathBuf,
        #[source]
        source: Box<toml::de::Error>,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// The options runguard sets on every submission itself: a phase may not set them.
const RESERVED_SBATCH_OPTIONS: [&str; 4] = ["--comment", "--job-name", "--parsable", "-J"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    name: String,
    #[serde(default)]
    phase: Vec<RawPhase>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPhase {
    name: String,
    sbatch: Option<PathBuf>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    sbatch_args: Vec<String>,
    manifest: Option<PathBuf>,
    nodes: Option<u32>,
    min_nodes: Option<u32>,
    max_failures: Option<u32>,
    checkpoint_dir: Option<PathBuf>,
    work_dir: Option<PathBuf>,
}

/// A validated workflow file: its name and its phases in order, every path absolute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowFile {
    pub name: String,
    pub phases: Vec<PhaseSpec>,
}

impl WorkflowFile {
    /// Reads and validates `path` for `backend`; relative paths in it are relative to its directory.
    pub fn load(path: &Path, backend: BackendKind) -> Result<Self, WorkflowFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| WorkflowFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let base = std::path::absolute(path)
            .ok()
            .and_then(|file| file.parent().map(Path::to_path_buf))
            .unwrap_or_default();
        Self::parse(&text, &base, backend).map_err(|err| match err {
            ParseError::Syntax(source) => WorkflowFileError::Syntax {
                path: path.to_path_buf(),
                source: Box::new(source),
            },
            ParseError::Invalid(message) => WorkflowFileError::Invalid {
                path: path.to_path_buf(),
                message,
            },
        })
    }

    /// Parses and validates the text of a workflow file whose relative paths are under `base`.
    fn parse(text: &str, base: &Path, backend: BackendKind) -> Result<Self, ParseError> {
        let raw: RawFile = toml::from_str(text).map_err(ParseError::Syntax)?;
        let invalid = |message: String| Err(ParseError::Invalid(message));
        if raw.name.trim().is_empty() {
            return invalid("`name` is empty: give the workflow a name".to_string());
        }
        if raw.phase.is_empty() {
            return invalid(
                "no phases: add at least one [[phase]] with a name and `sbatch` or `manifest`"
                    .to_string(),
            );
        }
        let mut seen = HashSet::new();
        let mut phases = Vec::with_capacity(raw.phase.len());
        for (index, phase) in raw.phase.into_iter().enumerate() {
            let number = index + 1;
            let name = phase.name.trim().to_string();
            if name.is_empty() {
                return invalid(format!("phase {number} has an empty `name`"));
            }
            if !seen.insert(name.clone()) {
                return invalid(format!("two phases are named {name:?}: names must differ"));
            }
            let resolve = |path: &Path| base.join(path);
            let job = match (phase.sbatch, phase.manifest) {
                (Some(_), Some(_)) => {
                    return invalid(format!(
                        "phase {name:?} has both `sbatch` and `manifest`: keep one"
                    ));
                }
                (None, None) => {
                    return invalid(format!(
                        "phase {name:?} has neither `sbatch` (a batch script) nor `manifest` \
                         (a Kubernetes manifest)"
                    ));
                }
                (Some(script), None) => {
                    if backend == BackendKind::Kubernetes {
                        return invalid(format!(
                            "phase {name:?} is a batch script but the backend is kubernetes: \
                             use `manifest`"
                        ));
                    }
                    for option in &phase.sbatch_args {
                        if !option.starts_with('-') {
                            return invalid(format!(
                                "phase {name:?}: sbatch_args entry {option:?} is not an option \
                                 (write `--partition=gpu`, one option per entry); arguments of \
                                 the script go in `args`"
                            ));
                        }
                        let key = option.split('=').next().unwrap_or(option);
                        if RESERVED_SBATCH_OPTIONS.contains(&key) {
                            return invalid(format!(
                                "phase {name:?}: sbatch_args may not set {key} (runguard sets it \
                                 to enrol the job)"
                            ));
                        }
                    }
                    let script = resolve(&script);
                    if !script.is_file() {
                        return invalid(format!(
                            "phase {name:?}: batch script {} does not exist",
                            script.display()
                        ));
                    }
                    PhaseJob::Batch {
                        script,
                        args: phase.args,
                        sbatch_args: phase.sbatch_args,
                    }
                }
                (None, Some(manifest)) => {
                    if backend != BackendKind::Kubernetes {
                        return invalid(format!(
                            "phase {name:?} is a Kubernetes manifest but the backend is \
                             {backend}: use `sbatch`"
                        ));
                    }
                    if !phase.args.is_empty() || !phase.sbatch_args.is_empty() {
                        return invalid(format!(
                            "phase {name:?}: `args` and `sbatch_args` are for batch scripts, \
                             not manifests"
                        ));
                    }
                    let path = resolve(&manifest);
                    if !path.is_file() {
                        return invalid(format!(
                            "phase {name:?}: manifest {} does not exist",
                            path.display()
                        ));
                    }
                    PhaseJob::Manifest { path }
                }
            };
            if phase.nodes == Some(0) {
                return invalid(format!("phase {name:?}: `nodes` must be at least 1"));
            }
            match (phase.min_nodes, phase.nodes) {
                (Some(0), _) => {
                    return invalid(format!("phase {name:?}: `min_nodes` must be at least 1"));
                }
                (Some(min), Some(nodes)) if min > nodes => {
                    return invalid(format!(
                        "phase {name:?}: `min_nodes` ({min}) is more than `nodes` ({nodes})"
                    ));
                }
                (Some(_), None) if matches!(job, PhaseJob::Batch { .. }) => {
                    return invalid(format!(
                        "phase {name:?}: `min_nodes` needs `nodes` (the most it runs on), so \
                         that the job may start on any count between them"
                    ));
                }
                _ => {}
            }
            phases.push(PhaseSpec {
                name,
                job,
                nodes: phase.nodes,
                min_nodes: phase.min_nodes,
                max_failures: phase.max_failures,
                checkpoint_dir: phase.checkpoint_dir.as_deref().map(resolve),
                work_dir: phase.work_dir.as_deref().map(resolve),
            });
        }
        Ok(Self {
            name: raw.name.trim().to_string(),
            phases,
        })
    }
}

enum ParseError {
    Syntax(toml::de::Error),
    Invalid(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(files: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for file in files {
            std::fs::write(dir.path().join(file), "#!/bin/bash\n").unwrap();
        }
        dir
    }

    fn error(text: &str, dir: &Path, backend: BackendKind) -> String {
        match WorkflowFile::parse(text, dir, backend) {
            Ok(file) => panic!("accepted: {file:?}"),
            Err(ParseError::Syntax(err)) => err.to_string(),
            Err(ParseError::Invalid(message)) => message,
        }
    }

    #[test]
    fn three_phases_are_read_in_order_with_paths_under_the_file() {
        let dir = dir_with(&["pretrain.sbatch", "finetune.sbatch", "eval.sbatch"]);
        let text = r#"
            name = "llama"
            [[phase]]
            name = "pretrain"
            sbatch = "pretrain.sbatch"
            args = ["--lr", "3e-4"]
            sbatch_args = ["--partition=gpu"]
            nodes = 4
            min_nodes = 2
            max_failures = 3
            checkpoint_dir = "ckpt/pretrain"
            [[phase]]
            name = "finetune"
            sbatch = "finetune.sbatch"
            [[phase]]
            name = "eval"
            sbatch = "eval.sbatch"
        "#;
        let file = WorkflowFile::parse(text, dir.path(), BackendKind::Slurm)
            .unwrap_or_else(|_| panic!("rejected"));
        assert_eq!(file.name, "llama");
        let names: Vec<_> = file.phases.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["pretrain", "finetune", "eval"]);
        let first = &file.phases[0];
        assert_eq!(
            first.job,
            PhaseJob::Batch {
                script: dir.path().join("pretrain.sbatch"),
                args: vec!["--lr".into(), "3e-4".into()],
                sbatch_args: vec!["--partition=gpu".into()],
            }
        );
        assert_eq!(first.min_nodes, Some(2));
        assert_eq!(first.max_failures, Some(3));
        assert_eq!(first.checkpoint_dir, Some(dir.path().join("ckpt/pretrain")));
    }

    #[test]
    fn mistakes_are_named_for_the_user() {
        let dir = dir_with(&["a.sbatch", "m.yaml"]);
        let slurm = BackendKind::Slurm;
        let cases = [
            ("name = \"w\"\n", "no phases"),
            (
                "name = \"w\"\n[[phase]]\nname = \"a\"\nsbatch = \"missing.sbatch\"\n",
                "does not exist",
            ),
            (
                "name = \"w\"\n[[phase]]\nname = \"a\"\nsbatch = \"a.sbatch\"\nretries = 3\n",
                "unknown field `retries`",
            ),
            ("name = \"w\"\n[[phase]]\nname = \"a\"\n", "neither"),
            (
                "name = \"w\"\n[[phase]]\nname = \"a\"\nsbatch = \"a.sbatch\"\n\
                 [[phase]]\nname = \"a\"\nsbatch = \"a.sbatch\"\n",
                "two phases are named",
            ),
            (
                "name = \"w\"\n[[phase]]\nname = \"a\"\nsbatch = \"a.sbatch\"\n\
                 sbatch_args = [\"--comment=x\"]\n",
                "may not set --comment",
            ),
            (
                "name = \"w\"\n[[phase]]\nname = \"a\"\nsbatch = \"a.sbatch\"\nmin_nodes = 2\n",
                "needs `nodes`",
            ),
            (
                "name = \"w\"\n[[phase]]\nname = \"a\"\nsbatch = \"a.sbatch\"\nnodes = 1\nmin_nodes = 2\n",
                "more than `nodes`",
            ),
            (
                "name = \"w\"\n[[phase]]\nname = \"a\"\nmanifest = \"m.yaml\"\n",
                "use `sbatch`",
            ),
            ("name = \"\"\n[[phase]]\nname = \"a\"\n", "`name` is empty"),
        ];
        for (text, expected) in cases {
            let message = error(text, dir.path(), slurm);
            assert!(message.contains(expected), "{text:?}: {message}");
        }
        let message = error(
            "name = \"w\"\n[[phase]]\nname = \"a\"\nsbatch = \"a.sbatch\"\n",
            dir.path(),
            BackendKind::Kubernetes,
        );
        assert!(message.contains("use `manifest`"), "{message}");
    }

    #[test]
    fn the_example_in_the_repository_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/workflow/workflow.toml");
        let file = WorkflowFile::load(&path, BackendKind::Slurm).unwrap();
        let names: Vec<_> = file.phases.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["pretrain", "long-context", "finetune", "eval"]);
        assert_eq!(file.phases[0].min_nodes, Some(12));
    }

    #[test]
    fn a_manifest_phase_is_read_for_kubernetes() {
        let dir = dir_with(&["train.yaml"]);
        let file = WorkflowFile::parse(
            "name = \"w\"\n[[phase]]\nname = \"train\"\nmanifest = \"train.yaml\"\nmin_nodes = 1\n",
            dir.path(),
            BackendKind::Kubernetes,
        )
        .unwrap_or_else(|_| panic!("rejected"));
        assert_eq!(
            file.phases[0].job,
            PhaseJob::Manifest {
                path: dir.path().join("train.yaml")
            }
        );
    }
}
