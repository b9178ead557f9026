//! The API server's errors as backend errors: 401 is a credential problem, 404 a job that is gone, a
//! 403 on an action is a refusal recorded as what runguard would have done.

use crate::backend::BackendError;

pub(super) fn api_error(err: kube::Error) -> BackendError {
    match err {
        kube::Error::Api(status) if status.code == 401 => {
            BackendError::Credentials(format!("{} (401 Unauthorized)", status.message))
        }
        kube::Error::Api(status) if status.code == 404 => BackendError::NoSuchJob(status.message),
        kube::Error::Api(status) => BackendError::Unavailable(format!(
            "{} ({} {})",
            status.message, status.code, status.reason
        )),
        other => BackendError::transport("Kubernetes API", other),
    }
}

/// An error of an action: a refusal (RBAC) becomes "would have done" with the exact request.
pub(super) fn action_error(err: kube::Error, request: &str) -> BackendError {
    match err {
        kube::Error::Api(status) if status.code == 403 => BackendError::Refused {
            command: request.to_string(),
            message: status.message,
        },
        other => api_error(other),
    }
}
