//! Kubernetes: batch/v1 Jobs, Kubeflow PyTorchJobs and KubeRay RayJobs, watched through the API server.

pub mod backend;
pub mod logs;
pub mod recreate;
pub mod workload;

pub use crate::config::KubernetesConfig;
pub use backend::KubeBackend;
