//! The `[kubernetes]` section.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KubernetesConfig {
    /// The kubeconfig file (unset: $KUBECONFIG, else ~/.kube/config; inside a pod, the service
    /// account when there is no kubeconfig).
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (unset: its current context).
    pub context: Option<String>,
    /// Namespaces to watch (empty: every namespace the credentials may list).
    pub namespaces: Vec<String>,
    /// Workloads to watch without the opt-in label, as KIND/NAMESPACE/NAME (`runguard watch` adds more).
    pub watch: Vec<String>,
    /// Where pod logs and node signals are written for the telemetry (unset: `kube/` beside the store).
    pub data_dir: Option<PathBuf>,
    /// How long the first listing may take before the API server counts as unreachable.
    pub sync_timeout_secs: u64,
    /// How long a re-creation waits for the old object to be gone.
    pub recreate_timeout_secs: u64,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        Self {
            kubeconfig: None,
            context: None,
            namespaces: Vec::new(),
            watch: Vec::new(),
            data_dir: None,
            sync_timeout_secs: 30,
            recreate_timeout_secs: 60,
        }
    }
}
