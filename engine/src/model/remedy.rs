//! The recovery steps a catalog signature recommends, typed: an unknown kind or parameter is an error
//! when the catalog loads, not a remedy silently ignored at the moment it is needed.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

use super::SpecChange;

/// A recovery step a signature recommends; the policy decides which run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Remedy {
    pub kind: RemedyKind,
    /// What to do, for the user (the exact fix for a `config_fix`).
    pub description: String,
    /// Parameters, as the catalog gives them (a stored `null` reads as none).
    #[serde(default, deserialize_with = "null_as_default")]
    pub params: RemedyParams,
}

/// What a remedy asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RemedyKind {
    /// Requeue from the last checkpoint (`exclude_culprit` to leave the culprit node out).
    Requeue,
    /// Requeue without the culprit node.
    ExcludeCulprit,
    /// Take the culprit node out of scheduling.
    DrainNode,
    /// Kubernetes: cordon the culprit node.
    CordonNode,
    /// A change to the job's configuration that a person makes (or a backend applies, see
    /// [`RemedyParams::spec_changes`]) before it runs again.
    ConfigFix,
    /// Re-create the workload with the parameters' spec changes.
    RecreateWithPatch,
    /// Submit the job again as a new job.
    Resubmit,
    /// Resume from the checkpoint before the newest one.
    ResumePreviousCheckpoint,
    Cancel,
    /// Wait (`seconds`) and look again.
    Wait,
    /// Stop recovering.
    Stop,
    /// Hand the problem to a person.
    Escalate,
}

impl RemedyKind {
    /// The name the catalog and the store use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requeue => "requeue",
            Self::ExcludeCulprit => "exclude_culprit",
            Self::DrainNode => "drain_node",
            Self::CordonNode => "cordon_node",
            Self::ConfigFix => "config_fix",
            Self::RecreateWithPatch => "recreate_with_patch",
            Self::Resubmit => "resubmit",
            Self::ResumePreviousCheckpoint => "resume_previous_checkpoint",
            Self::Cancel => "cancel",
            Self::Wait => "wait",
            Self::Stop => "stop",
            Self::Escalate => "escalate",
        }
    }
}

impl fmt::Display for RemedyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A remedy's parameters. The first group is what a backend that re-creates workloads can apply to a
/// spec; the rest is advice shown with the fix (a person applies it to code or a launcher).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RemedyParams {
    // Spec changes.
    /// DataLoader worker processes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_workers: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub micro_batch_size: Option<MicroBatch>,
    /// A memory-backed /dev/shm of this size (`16Gi`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shm_size: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub ray_gcs_fault_tolerance: bool,
    /// The pod-spec fragment the spec changes amount to, for the reader.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<serde_json::Value>,

    // Recovery.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub exclude_culprit: bool,
    /// At most this many times for the same failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_times: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds: Option<u64>,

    // Advice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefetch_factor: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persistent_workers: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pin_memory: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mmap: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gradient_checkpointing: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gradient_accumulation_steps: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bf16: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lr_scale: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clip_grad: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gradient_clip_val: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zero_stage: Option<u32>,
    /// Megatron-LM command-line arguments to add.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub megatron_args: Option<String>,
    /// sbatch options to add.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sbatch: Option<String>,
    /// srun options to add.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub srun_flags: Option<String>,
    /// DeepSpeed options to add.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deepspeed: Option<String>,
    /// The numeric precision to train in (`fp16`, `bf16`, `fp32`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub precision: Option<String>,
    /// An inference engine's maximum sequence length (`half`, or a number of tokens).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<String>,
    /// `torch.load(weights_only=...)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weights_only: Option<bool>,
    /// The spec field a person changes (`resources.requests.memory`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub ulimit: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub save_total_limit: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint_dir: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub map_location: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_store_memory: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub find_unused_parameters: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set_device: Option<String>,
    /// A data format to validate (`parquet`, `jsonl`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub validate: Option<String>,
    /// A condition on the data to check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ignore_index: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skip_corrupt_samples: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pil_load_truncated_images: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoding_errors: Option<String>,
    /// A WebDataset-style error handler.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handler: Option<String>,
}

/// How the micro-batch changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MicroBatch {
    Half,
}

/// A taint to tolerate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Toleration {
    pub key: String,
    #[serde(default = "exists")]
    pub operator: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<String>,
}

fn exists() -> String {
    "Exists".to_string()
}

impl RemedyParams {
    /// The spec changes a backend that re-creates workloads can make from these parameters.
    pub fn spec_changes(&self) -> Vec<SpecChange> {
        let mut changes = Vec::new();
        if let Some(workers) = self.num_workers {
            changes.push(SpecChange::DataLoaderWorkers { workers });
        }
        if self.micro_batch_size == Some(MicroBatch::Half) {
            changes.push(SpecChange::HalveMicroBatch);
        }
        if let Some(size) = &self.shm_size {
            changes.push(SpecChange::SharedMemory {
                size_limit: size.clone(),
            });
        }
        for (name, value) in &self.env {
            // A value written for a shell ($USER, $((...))) means nothing in a pod spec.
            if !value.contains('$') {
                changes.push(SpecChange::Env {
                    name: name.clone(),
                    value: value.clone(),
                });
            }
        }
        for toleration in &self.tolerations {
            changes.push(SpecChange::Toleration {
                key: toleration.key.clone(),
                operator: toleration.operator.clone(),
                value: toleration.value.clone(),
                effect: toleration.effect.clone(),
            });
        }
        if self.ray_gcs_fault_tolerance {
            changes.push(SpecChange::RayGcsFaultTolerance);
        }
        changes
    }
}

fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_parameter_is_an_error_naming_it() {
        let err = toml::from_str::<RemedyParams>("num_wrokers = 2").unwrap_err();
        assert!(err.to_string().contains("num_wrokers"), "{err}");
    }

    #[test]
    fn an_unknown_kind_is_an_error() {
        let err = serde_json::from_str::<Remedy>(
            r#"{"kind": "reboot_node", "description": "", "params": {}}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("reboot_node"), "{err}");
    }

    #[test]
    fn a_stored_remedy_without_parameters_reads_as_none() {
        let remedy: Remedy =
            serde_json::from_str(r#"{"kind": "stop", "description": "x", "params": null}"#)
                .unwrap();
        assert_eq!(remedy.params, RemedyParams::default());
    }

    #[test]
    fn spec_changes_leave_out_shell_values_and_keep_the_rest_in_order() {
        let params: RemedyParams = toml::from_str(
            r#"
            num_workers = 2
            micro_batch_size = "half"
            env = { NCCL_SOCKET_IFNAME = "ib0", TMPDIR = "/scratch/$USER" }
            tolerations = [{ key = "nvidia.com/gpu", effect = "NoSchedule" }]
            "#,
        )
        .unwrap();
        assert_eq!(
            params.spec_changes(),
            vec![
                SpecChange::DataLoaderWorkers { workers: 2 },
                SpecChange::HalveMicroBatch,
                SpecChange::Env {
                    name: "NCCL_SOCKET_IFNAME".into(),
                    value: "ib0".into()
                },
                SpecChange::Toleration {
                    key: "nvidia.com/gpu".into(),
                    operator: "Exists".into(),
                    value: None,
                    effect: Some("NoSchedule".into())
                },
            ]
        );
    }
}
