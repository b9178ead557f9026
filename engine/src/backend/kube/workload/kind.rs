//! The kinds of workload runguard watches: where they live in the API and where their pod templates are.

use serde_json::Value;

use super::at;

/// The kinds of workload runguard watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkloadKind {
    /// batch/v1 Job.
    Job,
    /// Kubeflow training operator's PyTorchJob (kubeflow.org/v1).
    PyTorchJob,
    /// KubeRay's RayJob (ray.io/v1).
    RayJob,
    /// A JobSet (jobset.x-k8s.io/v1alpha2): replicated batch Jobs run as one.
    JobSet,
    /// Kubeflow Trainer v2's TrainJob (trainer.kubeflow.org/v1alpha1): a runtime's JobSet with the
    /// job's trainer settings; its pods are its JobSet's.
    TrainJob,
    /// KubeRay's RayCluster (ray.io/v1) run on its own, without a RayJob: watched for its head and GCS.
    RayCluster,
}

impl WorkloadKind {
    pub const ALL: [WorkloadKind; 6] = [
        Self::Job,
        Self::PyTorchJob,
        Self::RayJob,
        Self::JobSet,
        Self::TrainJob,
        Self::RayCluster,
    ];

    /// The name used in job ids and on the command line.
    pub fn short(self) -> &'static str {
        match self {
            Self::Job => "job",
            Self::PyTorchJob => "pytorchjob",
            Self::RayJob => "rayjob",
            Self::JobSet => "jobset",
            Self::TrainJob => "trainjob",
            Self::RayCluster => "raycluster",
        }
    }

    pub fn kind(self) -> &'static str {
        match self {
            Self::Job => "Job",
            Self::PyTorchJob => "PyTorchJob",
            Self::RayJob => "RayJob",
            Self::JobSet => "JobSet",
            Self::TrainJob => "TrainJob",
            Self::RayCluster => "RayCluster",
        }
    }

    pub fn group(self) -> &'static str {
        match self {
            Self::Job => "batch",
            Self::PyTorchJob => "kubeflow.org",
            Self::RayJob | Self::RayCluster => "ray.io",
            Self::JobSet => "jobset.x-k8s.io",
            Self::TrainJob => "trainer.kubeflow.org",
        }
    }

    pub fn version(self) -> &'static str {
        match self {
            Self::JobSet => "v1alpha2",
            Self::TrainJob => "v1alpha1",
            _ => "v1",
        }
    }

    pub fn plural(self) -> &'static str {
        match self {
            Self::Job => "jobs",
            Self::PyTorchJob => "pytorchjobs",
            Self::RayJob => "rayjobs",
            Self::JobSet => "jobsets",
            Self::TrainJob => "trainjobs",
            Self::RayCluster => "rayclusters",
        }
    }

    /// `kind`, its plural, or `plural.group` as kubectl accepts them.
    pub fn parse(name: &str) -> Option<Self> {
        let name = name.to_ascii_lowercase();
        Self::ALL.into_iter().find(|kind| {
            name == kind.short()
                || name == kind.plural()
                || name == format!("{}.{}", kind.short(), kind.group())
                || name == format!("{}.{}", kind.plural(), kind.group())
        })
    }

    /// The REST path of the collection in `namespace`, or of one object.
    pub fn path(self, namespace: &str, name: Option<&str>) -> String {
        let base = format!(
            "/apis/{}/{}/namespaces/{namespace}/{}",
            self.group(),
            self.version(),
            self.plural()
        );
        match name {
            Some(name) => format!("{base}/{name}"),
            None => base,
        }
    }

    /// The pod templates of a workload with their replica counts.
    pub fn templates(self, workload: &Value) -> Vec<(&Value, u32)> {
        let replicas = |spec: &Value| {
            spec.get("replicas")
                .and_then(Value::as_u64)
                .map_or(1, |n| u32::try_from(n).unwrap_or(u32::MAX))
        };
        match self {
            Self::Job => {
                let parallelism = at(workload, "/spec/parallelism")
                    .and_then(Value::as_u64)
                    .map_or(1, |n| u32::try_from(n).unwrap_or(u32::MAX));
                at(workload, "/spec/template")
                    .map(|template| vec![(template, parallelism)])
                    .unwrap_or_default()
            }
            Self::PyTorchJob => ["Master", "Worker"]
                .iter()
                .filter_map(|role| at(workload, &format!("/spec/pytorchReplicaSpecs/{role}")))
                .filter_map(|spec| spec.get("template").map(|t| (t, replicas(spec))))
                .collect(),
            Self::RayJob | Self::RayCluster => {
                let cluster = if self == Self::RayJob {
                    at(workload, "/spec/rayClusterSpec")
                } else {
                    at(workload, "/spec")
                };
                let Some(cluster) = cluster else {
                    return Vec::new();
                };
                let mut templates = Vec::new();
                if let Some(head) = at(cluster, "/headGroupSpec/template") {
                    templates.push((head, 1));
                }
                if let Some(groups) = at(cluster, "/workerGroupSpecs").and_then(Value::as_array) {
                    for group in groups {
                        if let Some(template) = group.get("template") {
                            templates.push((template, replicas(group)));
                        }
                    }
                }
                templates
            }
            // Each replicated job runs `replicas` Jobs of `parallelism` pods.
            Self::JobSet => at(workload, "/spec/replicatedJobs")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|replicated| {
                    let template = at(replicated, "/template/spec/template")?;
                    let parallelism = at(replicated, "/template/spec/parallelism")
                        .and_then(Value::as_u64)
                        .map_or(1, |n| u32::try_from(n).unwrap_or(u32::MAX));
                    Some((template, replicas(replicated).saturating_mul(parallelism)))
                })
                .collect(),
            // Its pod templates are its runtime's, as its JobSet shows them.
            Self::TrainJob => Vec::new(),
        }
    }

    /// The same, to change them (re-creation patches).
    pub fn templates_mut(self, workload: &mut Value) -> Vec<&mut Value> {
        match self {
            Self::Job => workload.pointer_mut("/spec/template").into_iter().collect(),
            Self::PyTorchJob => match workload
                .pointer_mut("/spec/pytorchReplicaSpecs")
                .and_then(Value::as_object_mut)
            {
                Some(specs) => specs
                    .values_mut()
                    .filter_map(|spec| spec.get_mut("template"))
                    .collect(),
                None => Vec::new(),
            },
            Self::RayJob | Self::RayCluster => {
                let pointer = if self == Self::RayJob {
                    "/spec/rayClusterSpec"
                } else {
                    "/spec"
                };
                let Some(cluster) = workload.pointer_mut(pointer).and_then(Value::as_object_mut)
                else {
                    return Vec::new();
                };
                let mut templates = Vec::new();
                for (key, value) in cluster.iter_mut() {
                    match key.as_str() {
                        "headGroupSpec" => templates.extend(value.get_mut("template")),
                        "workerGroupSpecs" => {
                            if let Some(groups) = value.as_array_mut() {
                                templates.extend(
                                    groups.iter_mut().filter_map(|g| g.get_mut("template")),
                                );
                            }
                        }
                        _ => {}
                    }
                }
                templates
            }
            Self::JobSet => workload
                .pointer_mut("/spec/replicatedJobs")
                .and_then(Value::as_array_mut)
                .map(|replicated| {
                    replicated
                        .iter_mut()
                        .filter_map(|job| job.pointer_mut("/template/spec/template"))
                        .collect()
                })
                .unwrap_or_default(),
            Self::TrainJob => Vec::new(),
        }
    }
}
