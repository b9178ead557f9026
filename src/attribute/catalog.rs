//! The failure-signature catalog: TOML data compiled once into a prefilter and per-signature regexes.

use std::path::{Path, PathBuf};

use regex::{Regex, RegexSet};
use serde::Deserialize;

use crate::model::Component;

/// The catalog shipped with runguard.
const BUILTIN: &[(&str, &str)] = &[("core.toml", include_str!("../../data/signatures/core.toml"))];

/// A catalog file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("signature file {file}: {message}")]
    Invalid { file: PathBuf, message: String },
    #[error("cannot read signature file {file}: {source}")]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    #[serde(default)]
    signature: Vec<SignatureSpec>,
}

/// One signature as written in the data file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignatureSpec {
    pub id: String,
    pub title: String,
    pub category: String,
    pub component: Component,
    #[serde(default)]
    pub sources: Vec<String>,
    pub recoverable: bool,
    pub confidence: f64,
    pub patterns: Vec<String>,
    pub explanation: String,
}

/// A signature ready to match.
#[derive(Debug, Clone)]
pub struct Signature {
    pub spec: SignatureSpec,
    patterns: Vec<Regex>,
}

impl Signature {
    /// The first pattern of this signature that matches `line`, with its captures.
    pub fn captures<'l>(&self, line: &'l str) -> Option<regex::Captures<'l>> {
        self.patterns
            .iter()
            .find_map(|pattern| pattern.captures(line))
    }
}

/// All signatures, with one RegexSet over every pattern so a line that matches nothing costs one scan.
#[derive(Debug, Clone)]
pub struct Catalog {
    signatures: Vec<Signature>,
    prefilter: RegexSet,
    /// For each pattern of the prefilter, the signature it belongs to.
    owner: Vec<usize>,
}

impl Catalog {
    /// The built-in catalog.
    pub fn builtin() -> Result<Self, CatalogError> {
        let mut specs = Vec::new();
        for (name, text) in BUILTIN {
            specs.extend(parse_file(text, Path::new(name))?);
        }
        Self::from_specs(specs, Path::new("built-in catalog"))
    }

    /// The built-in catalog, overridden and extended by the `*.toml` files of `dir` (same id replaces).
    pub fn with_overrides(dir: &Path) -> Result<Self, CatalogError> {
        let mut specs = Vec::new();
        for (name, text) in BUILTIN {
            specs.extend(parse_file(text, Path::new(name))?);
        }
        let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
            Ok(entries) => entries
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
                .collect(),
            Err(_) => Vec::new(),
        };
        files.sort();
        for file in files {
            let text = std::fs::read_to_string(&file).map_err(|source| CatalogError::Read {
                file: file.clone(),
                source,
            })?;
            for spec in parse_file(&text, &file)? {
                specs.retain(|existing: &SignatureSpec| existing.id != spec.id);
                specs.push(spec);
            }
        }
        Self::from_specs(specs, dir)
    }

    fn from_specs(specs: Vec<SignatureSpec>, origin: &Path) -> Result<Self, CatalogError> {
        let invalid = |message: String| CatalogError::Invalid {
            file: origin.to_path_buf(),
            message,
        };
        let mut signatures = Vec::new();
        let mut all_patterns = Vec::new();
        let mut owner = Vec::new();
        for spec in specs {
            if !(0.0..=1.0).contains(&spec.confidence) {
                return Err(invalid(format!(
                    "{}: confidence must be within 0..1",
                    spec.id
                )));
            }
            if spec.patterns.is_empty() {
                return Err(invalid(format!(
                    "{}: at least one pattern is needed",
                    spec.id
                )));
            }
            let mut patterns = Vec::new();
            for pattern in &spec.patterns {
                let regex = Regex::new(pattern)
                    .map_err(|err| invalid(format!("{}: pattern {pattern:?}: {err}", spec.id)))?;
                patterns.push(regex);
                all_patterns.push(pattern.clone());
                owner.push(signatures.len());
            }
            signatures.push(Signature { spec, patterns });
        }
        let prefilter = RegexSet::new(&all_patterns).map_err(|err| invalid(err.to_string()))?;
        Ok(Self {
            signatures,
            prefilter,
            owner,
        })
    }

    pub fn signatures(&self) -> &[Signature] {
        &self.signatures
    }

    /// Indexes of the signatures that match `line`.
    pub fn matching(&self, line: &str) -> Vec<usize> {
        let mut hits: Vec<usize> = self
            .prefilter
            .matches(line)
            .into_iter()
            .map(|pattern| self.owner[pattern])
            .collect();
        hits.dedup();
        hits
    }
}

fn parse_file(text: &str, file: &Path) -> Result<Vec<SignatureSpec>, CatalogError> {
    toml::from_str::<CatalogFile>(text)
        .map(|parsed| parsed.signature)
        .map_err(|err| CatalogError::Invalid {
            file: file.to_path_buf(),
            message: err.to_string(),
        })
}
