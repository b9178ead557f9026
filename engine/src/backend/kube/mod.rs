//! Kubernetes: batch/v1 Jobs, Kubeflow PyTorchJobs and KubeRay RayJobs, watched through the API server.

pub mod backend;
mod drain;
mod errors;
mod exclusions;
mod inventory;
mod json_cache;
pub mod logs;
pub mod recreate;
pub mod signal;
mod specs;
pub mod submit;
mod suspend;
mod watch;
pub mod workload;

pub use crate::config::KubernetesConfig;
pub use backend::KubeBackend;
