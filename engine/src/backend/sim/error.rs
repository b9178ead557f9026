//! What can go wrong when opening, loading or persisting the simulated cluster.

use std::path::PathBuf;

use crate::backend::BackendError;

/// An error of the simulated cluster; every message says which file (and line) is at fault.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The name is neither a built-in scenario nor a readable file.
    #[error(
        "unknown scenario `{name}`: not a built-in scenario ({builtins}) and no file of that name"
    )]
    UnknownScenario { name: String, builtins: String },
    /// A scenario file is not valid TOML or does not fit the scenario schema.
    #[error("invalid scenario {origin}, line {line}, column {column}: {message}")]
    ScenarioSyntax {
        origin: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// A scenario parsed but makes no sense (e.g. a checkpoint interval of 0).
    #[error("invalid scenario {origin}: {message}")]
    ScenarioInvalid { origin: String, message: String },
    /// The scenario does not fit the simulated cluster it was opened with.
    #[error("scenario `{scenario}` does not fit a cluster of {nodes} nodes: {message}")]
    ClusterTooSmall {
        scenario: String,
        nodes: u32,
        message: String,
    },
    /// The persisted state of the sim cannot be read back.
    #[error(
        "unreadable sim state {path}: {message}; reset the sim (`runguard demo --reset`) or delete its directory"
    )]
    State { path: PathBuf, message: String },
    /// A file of the sim could not be read or written.
    #[error("sim file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The speed of the simulated timeline is not a positive number.
    #[error(
        "invalid sim speed {0}: must be a positive, finite number of simulated seconds per second"
    )]
    Speed(f64),
}

impl SimError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}

impl From<SimError> for BackendError {
    fn from(err: SimError) -> Self {
        match err {
            SimError::Io { path, source } => BackendError::Io(std::io::Error::new(
                source.kind(),
                format!("{}: {source}", path.display()),
            )),
            other => BackendError::Unavailable(other.to_string()),
        }
    }
}
