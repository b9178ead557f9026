//! Failures as the API server reports them: a `Status` object whose `code`, `reason` and `message`
//! read like the real ones, since clients branch on the reason and show the message to people.

use serde_json::{Value, json};

use super::resources::ResourceType;

/// The user every refused request is attributed to, as RBAC names a service account.
pub const USER: &str = "system:serviceaccount:ml:runguard";

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Value,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: String) -> Self {
        ApiError {
            code,
            reason,
            message,
            details: Value::Null,
        }
    }

    fn about(mut self, resource: &ResourceType, name: &str) -> Self {
        let mut details = json!({"kind": resource.plural});
        if !name.is_empty() {
            details["name"] = json!(name);
        }
        if !resource.group.is_empty() {
            details["group"] = json!(resource.group);
        }
        self.details = details;
        self
    }

    pub fn not_found(resource: &ResourceType, name: &str) -> Self {
        let message = format!("{} \"{name}\" not found", resource.qualified());
        Self::new(404, "NotFound", message).about(resource, name)
    }

    pub fn already_exists(resource: &ResourceType, name: &str) -> Self {
        let message = format!("{} \"{name}\" already exists", resource.qualified());
        Self::new(409, "AlreadyExists", message).about(resource, name)
    }

    pub fn conflict(resource: &ResourceType, name: &str) -> Self {
        let message = format!(
            "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
            resource.qualified()
        );
        Self::new(409, "Conflict", message).about(resource, name)
    }

    /// RBAC's refusal, worded as the authorizer words it.
    pub fn forbidden(
        resource: &ResourceType,
        subresource: Option<&str>,
        verb: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Self {
        let checked = match subresource {
            Some(subresource) => format!("{}/{subresource}", resource.plural),
            None => resource.plural.to_string(),
        };
        let scope = match namespace {
            Some(namespace) => format!("in the namespace \"{namespace}\""),
            None => "at the cluster scope".to_string(),
        };
        let reason = format!(
            "User \"{USER}\" cannot {verb} resource \"{checked}\" in API group \"{}\" {scope}",
            resource.group
        );
        let message = if name.is_empty() {
            format!("{} is forbidden: {reason}", resource.qualified())
        } else {
            format!("{} \"{name}\" is forbidden: {reason}", resource.qualified())
        };
        Self::new(403, "Forbidden", message).about(resource, name)
    }

    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized".to_string())
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message.into())
    }

    pub fn invalid(resource: &ResourceType, name: &str, message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message.into()).about(resource, name)
    }

    /// A path the server has no handler for.
    pub fn no_route() -> Self {
        let mut error = Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource".to_string(),
        );
        error.details = json!({});
        error
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource".to_string(),
        )
    }

    /// A body in a media type the endpoint does not take; `accepted` lists those it does.
    pub fn unsupported_media_type(content_type: &str, accepted: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {accepted}; got {content_type}"
            ),
        )
    }

    /// A watch from a resourceVersion older than the history the server keeps.
    pub fn expired(requested: u64, oldest: u64) -> Self {
        Self::new(
            410,
            "Expired",
            format!("too old resource version: {requested} ({oldest})"),
        )
    }

    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if !self.details.is_null() {
            status["details"] = self.details.clone();
        }
        status
    }
}
