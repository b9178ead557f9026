//! Which OpenAPI version to speak to a slurmrestd: each Slurm release serves a window of versions
//! (22.05: v0.0.36..v0.0.38; 24.11: v0.0.40..v0.0.42; 25.05: v0.0.40..v0.0.43) under
//! `/slurm/v0.0.N/`, and every release serves its whole specification at `GET /openapi/v3`, whose
//! `paths` name them. runguard takes the newest one it speaks.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::Value;

/// An OpenAPI version of slurmrestd's `/slurm/` paths: v0.0.N.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApiVersion(u32);

impl ApiVersion {
    /// 22.05's (openapi/v0.0.38): job updates take sbatch's option names and a job's environment is an
    /// object.
    pub const V38: ApiVersion = ApiVersion(38);
    /// 23.11's first data_parser version: requests take the job description's field names.
    pub const V40: ApiVersion = ApiVersion(40);
    /// 24.11's newest: a cancel answers each job's outcome in `status`.
    pub const V42: ApiVersion = ApiVersion(42);
    /// The oldest and newest versions whose requests and answers runguard knows.
    pub const OLDEST: ApiVersion = ApiVersion(38);
    pub const NEWEST: ApiVersion = ApiVersion(43);

    /// `v0.0.42` (or `0.0.42`).
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let minor = text
            .strip_prefix("v0.0.")
            .or_else(|| text.strip_prefix("0.0."))?;
        if minor.is_empty() || !minor.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        minor.parse().ok().map(Self)
    }

    /// Whether runguard speaks this version.
    pub fn known(self) -> bool {
        (Self::OLDEST..=Self::NEWEST).contains(&self)
    }

    /// Every version runguard speaks, newest first: the order to probe in.
    pub fn known_newest_first() -> impl Iterator<Item = ApiVersion> {
        (Self::OLDEST.0..=Self::NEWEST.0).rev().map(Self)
    }

    /// The newest version of `offered` that runguard speaks.
    pub fn choose(offered: &BTreeSet<ApiVersion>) -> Option<ApiVersion> {
        offered
            .iter()
            .rev()
            .copied()
            .find(|version| version.known())
    }
}

impl fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v0.0.{}", self.0)
    }
}

/// The versions of `/slurm/v0.0.N/...` paths an OpenAPI specification lists (`GET /openapi/v3`);
/// `None` when the document is not such a specification.
pub fn offered_in_spec(spec: &Value) -> Option<BTreeSet<ApiVersion>> {
    let paths = spec.get("paths")?.as_object()?;
    Some(
        paths
            .keys()
            .filter_map(|path| {
                let rest = path.strip_prefix("/slurm/")?;
                ApiVersion::parse(rest.split('/').next()?)
            })
            .collect(),
    )
}

/// A list of versions for a message: `v0.0.40, v0.0.41, v0.0.42`, or `none`.
pub fn list(versions: &BTreeSet<ApiVersion>) -> String {
    if versions.is_empty() {
        return "none".to_string();
    }
    versions
        .iter()
        .map(ApiVersion::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn versions_are_read_and_ordered_by_their_last_number() {
        assert_eq!(ApiVersion::parse("v0.0.42"), Some(ApiVersion(42)));
        assert_eq!(ApiVersion::parse("0.0.38"), Some(ApiVersion::V38));
        assert_eq!(ApiVersion::parse("v0.0."), None);
        assert_eq!(ApiVersion::parse("v0.0.4x"), None);
        assert_eq!(ApiVersion::parse("dbv0.0.38"), None);
        assert!(ApiVersion(39) < ApiVersion(40));
        assert!(!ApiVersion(37).known() && !ApiVersion(44).known());
        assert_eq!(ApiVersion(43).to_string(), "v0.0.43");
    }

    #[test]
    fn the_newest_offered_version_runguard_speaks_is_chosen() {
        let offered = |minors: &[u32]| minors.iter().map(|m| ApiVersion(*m)).collect();
        // 22.05 with every plugin loaded.
        assert_eq!(
            ApiVersion::choose(&offered(&[36, 37, 38])),
            Some(ApiVersion::V38)
        );
        assert_eq!(
            ApiVersion::choose(&offered(&[40, 41, 42])),
            Some(ApiVersion(42))
        );
        // A release newer than runguard: the newest it still shares with runguard.
        assert_eq!(
            ApiVersion::choose(&offered(&[42, 43, 44, 45])),
            Some(ApiVersion(43))
        );
        assert_eq!(ApiVersion::choose(&offered(&[36, 37])), None);
    }

    #[test]
    fn the_specification_names_the_versions_in_its_paths() {
        // The shape of 24.11.5's `GET /openapi/v3` (measured: 47 paths, all under these three).
        let spec = json!({
            "openapi": "3.0.2",
            "info": {"version": "Slurm-24.11.5&openapi/slurmctld"},
            "paths": {
                "/slurm/v0.0.40/ping/": {}, "/slurm/v0.0.40/jobs/": {},
                "/slurm/v0.0.41/job/{job_id}": {}, "/slurm/v0.0.42/ping/": {},
                "/slurmdb/v0.0.42/jobs/": {}, "/openapi/v3": {}
            }
        });
        assert_eq!(
            offered_in_spec(&spec).map(|versions| list(&versions)),
            Some("v0.0.40, v0.0.41, v0.0.42".to_string())
        );
        assert_eq!(offered_in_spec(&json!({"meta": {}})), None);
    }
}
