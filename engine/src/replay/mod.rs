//! Replays a published failure mix on the simulated cluster and compares recovery policies on the
//! same seeded trace: runguard (the real engine, catalog, policy and node ledger on the simulator),
//! a blind requeue on the same nodes, and a person paged. Time is a manual clock jumped from event to
//! event, so weeks replay in minutes. See `docs/replay.md`.

pub mod metrics;
pub mod onsets;
pub mod paging;
mod run;
pub mod trace;

use serde::Serialize;

pub use metrics::{Downtime, FailureRecord, Handler, PolicyResult};
pub use onsets::Onset;
pub use run::{ReplayOptions, replay};
pub use trace::Trace;

/// Who recovers the run after a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// runguard's engine with its node ledger; what it declines goes to a paged person.
    Runguard,
    /// Requeue at once on the same nodes; a crash loop pages a person.
    Blind,
    /// A person is paged for every failure.
    Paged,
}

impl Policy {
    pub const ALL: [Policy; 3] = [Policy::Runguard, Policy::Blind, Policy::Paged];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Runguard => "runguard",
            Self::Blind => "blind",
            Self::Paged => "paged",
        }
    }

    /// The policy of a name as `as_str` writes it.
    pub fn parse(name: &str) -> Option<Policy> {
        Self::ALL.into_iter().find(|policy| policy.as_str() == name)
    }
}

/// What stops a replay.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("cannot read trace {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("trace {origin} does not parse")]
    Parse {
        origin: String,
        #[source]
        source: Box<toml::de::Error>,
    },
    #[error("trace {origin}: {message}")]
    Invalid { origin: String, message: String },
    #[error("replay options: {0}")]
    Options(String),
    #[error("simulated cluster")]
    Sim(#[from] crate::backend::sim::SimError),
    #[error("simulated cluster's answer")]
    Backend(#[from] crate::backend::BackendError),
    #[error("engine")]
    Engine(#[from] crate::engine::EngineError),
    #[error("store")]
    Store(#[from] crate::store::StoreError),
    #[error("catalog")]
    Catalog(#[from] crate::attribute::CatalogError),
}
