//! The user's spec of each workload, saved beside the store so that a re-creation works after the
//! object is gone.

use std::path::PathBuf;

use serde_json::Value;

use super::backend::KubeBackend;
use super::errors::api_error;
use super::recreate::clean;
use super::workload::{WorkloadRef, str_at};
use crate::backend::BackendError;
use crate::sync::lock;

impl KubeBackend {
    pub(super) fn spec_file(&self, reference: &WorkloadRef) -> PathBuf {
        self.data_dir.join("specs").join(format!(
            "{}_{}_{}.json",
            reference.kind.short(),
            reference.namespace,
            reference.name
        ))
    }

    /// Keeps the user's spec of each incarnation, for a re-creation after the object is gone.
    pub(super) async fn save_spec(&self, reference: &WorkloadRef, workload: &Value) {
        // Written once per version of the object, not on every listing.
        let version = str_at(workload, "/metadata/resourceVersion")
            .unwrap_or_default()
            .to_string();
        if lock(&self.saved).get(&reference.id()) == Some(&version) {
            return;
        }
        lock(&self.saved).insert(reference.id(), version);
        let path = self.spec_file(reference);
        let manifest = clean(reference.kind, workload);
        let text = match serde_json::to_string_pretty(&manifest) {
            Ok(text) => text,
            Err(_) => return,
        };
        if tokio::fs::read_to_string(&path).await.ok().as_deref() == Some(text.as_str()) {
            return;
        }
        if let Some(dir) = path.parent() {
            let _ = tokio::fs::create_dir_all(dir).await;
        }
        if let Err(err) = tokio::fs::write(&path, text).await {
            tracing::warn!(path = %path.display(), %err, "saving a workload's spec");
        }
    }

    /// The workload as the API server has it now, else its saved spec.
    pub(super) async fn current_spec(
        &self,
        reference: &WorkloadRef,
    ) -> Result<Value, BackendError> {
        match self.workload_api(reference).get_opt(&reference.name).await {
            Ok(Some(object)) => serde_json::to_value(&object)
                .map_err(|err| BackendError::transport("reading the workload", err)),
            Ok(None) => {
                let path = self.spec_file(reference);
                let text = tokio::fs::read_to_string(&path).await.map_err(|_| {
                    BackendError::NoSuchJob(format!(
                        "{} is gone and its spec was never saved",
                        reference.id()
                    ))
                })?;
                serde_json::from_str(&text).map_err(|err| {
                    BackendError::Invalid(format!("saved spec {}: {err}", path.display()))
                })
            }
            Err(err) => Err(api_error(err)),
        }
    }

    pub(super) fn recreate_request(reference: &WorkloadRef) -> String {
        format!(
            "DELETE {} ; POST {}",
            reference
                .kind
                .path(&reference.namespace, Some(&reference.name)),
            reference.kind.path(&reference.namespace, None)
        )
    }
}
