use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::WorkflowId;

/// A language model's account of one failure, kept so that it is shown again without asking the model.
/// It is read by people only: no decision of runguard ever rests on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Narrative {
    pub workflow_id: WorkflowId,
    /// The anomaly (the failure) it tells about.
    pub anomaly_id: i64,
    /// Which model wrote it, and where it was asked (the endpoint reduced to its host).
    pub source: String,
    pub text: String,
    pub created_at: DateTime<Utc>,
}
