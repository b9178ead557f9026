//! The failure-signature catalog: TOML data compiled once into a prefilter and per-signature regexes.

use std::path::{Path, PathBuf};

use regex::{Regex, RegexSet};
use serde::Deserialize;

use crate::model::Component;
use crate::telemetry::tail::Chunk;

/// The catalog shipped with runguard.
const BUILTIN: &[(&str, &str)] = &[
    ("core.toml", include_str!("../../data/signatures/core.toml")),
    (
        "hardware.toml",
        include_str!("../../data/signatures/hardware.toml"),
    ),
    (
        "network.toml",
        include_str!("../../data/signatures/network.toml"),
    ),
    (
        "memory.toml",
        include_str!("../../data/signatures/memory.toml"),
    ),
    (
        "storage.toml",
        include_str!("../../data/signatures/storage.toml"),
    ),
    ("data.toml", include_str!("../../data/signatures/data.toml")),
    (
        "scheduling.toml",
        include_str!("../../data/signatures/scheduling.toml"),
    ),
    ("ray.toml", include_str!("../../data/signatures/ray.toml")),
    (
        "application.toml",
        include_str!("../../data/signatures/application.toml"),
    ),
];

/// The canonical categories every signature maps to.
const TAXONOMY: &str = include_str!("../../data/taxonomy.toml");

/// Where a signature's evidence comes from.
pub const SOURCES: &[&str] = &[
    "app_log",
    "kernel_log",
    "scheduler",
    "kubernetes_event",
    "gpu_status",
];

/// What a catalog action may ask for; the policy decides which of them run.
pub const ACTION_KINDS: &[&str] = &[
    "requeue",
    "exclude_culprit",
    "drain_node",
    "cordon_node",
    "config_fix",
    "recreate_with_patch",
    "resubmit",
    "resume_previous_checkpoint",
    "cancel",
    "wait",
    "stop",
    "escalate",
];

/// One canonical category.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Category {
    pub id: String,
    pub component: Component,
    /// Whether a plain requeue (possibly excluding the culprit) can help.
    pub requeue: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaxonomyFile {
    category: Vec<Category>,
}

/// The canonical categories.
pub fn taxonomy() -> Vec<Category> {
    toml::from_str::<TaxonomyFile>(TAXONOMY)
        .map(|file| file.category)
        .unwrap_or_default()
}

/// A recovery step a signature recommends, with its parameters.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ActionSpec {
    /// One of [`ACTION_KINDS`].
    pub kind: String,
    /// What to do, for the user (the exact fix for a `config_fix`).
    pub description: String,
    /// Parameters (`num_workers = 2`, `env = { NCCL_SOCKET_IFNAME = "ib0" }`...).
    #[serde(default)]
    pub params: toml::Table,
}

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
    /// A category id of the taxonomy (`data/taxonomy.toml`).
    pub category: String,
    /// Other names of the category that an evaluation accepts.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Defaults to the category's component.
    #[serde(default)]
    pub component: Option<Component>,
    /// Where the evidence comes from: any of [`SOURCES`].
    #[serde(default)]
    pub sources: Vec<String>,
    /// Defaults to whether the category can be fixed by a requeue.
    #[serde(default)]
    pub recoverable: Option<bool>,
    pub confidence: f64,
    /// Regular expressions over one evidence line; named captures `node`, `rank`, `gpu`, `xid` and
    /// `pci` locate the culprit.
    pub patterns: Vec<String>,
    /// Regular expressions at least one of which some other evidence line of the attempt must match
    /// for this signature to apply (a CUDA OOM is the DataLoader's only inside a DataLoader frame).
    #[serde(default)]
    pub context: Vec<String>,
    /// Ordered recovery steps.
    #[serde(default)]
    pub actions: Vec<ActionSpec>,
    /// Literal strings one of which every matching line contains. Only needed when the patterns start
    /// with something no fast scan can look for (such as `^(?:\w+\.)*`): the whole-read scan then looks
    /// for these instead, and the patterns confirm.
    #[serde(default)]
    pub prefilter: Vec<String>,
    pub explanation: String,
}

/// A signature ready to match.
#[derive(Debug, Clone)]
pub struct Signature {
    pub spec: SignatureSpec,
    /// The component (the signature's, else its category's).
    pub component: Component,
    /// Whether a requeue can help (the signature's, else its category's).
    pub recoverable: bool,
    patterns: Vec<Regex>,
    context: Vec<Regex>,
}

impl Signature {
    /// The first pattern of this signature that matches `line`, with its captures.
    pub fn captures<'l>(&self, line: &'l str) -> Option<regex::Captures<'l>> {
        self.patterns
            .iter()
            .find_map(|pattern| pattern.captures(line))
    }

    /// Whether the signature's context holds among `lines` (always, when it has none).
    pub fn context_holds<'l>(&self, mut lines: impl Iterator<Item = &'l str>) -> bool {
        self.context.is_empty()
            || lines.any(|line| self.context.iter().any(|pattern| pattern.is_match(line)))
    }
}

/// All signatures, with one RegexSet over every pattern so a line that matches nothing costs one scan.
#[derive(Debug, Clone)]
pub struct Catalog {
    signatures: Vec<Signature>,
    prefilter: RegexSet,
    /// For each pattern of the prefilter, the signature it belongs to.
    owner: Vec<usize>,
    /// Every pattern in one regex, line anchors dropped, run over a whole read at once: it finds the
    /// candidate lines, which the prefilter then confirms on their message.
    candidates: Regex,
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
        let categories = taxonomy();
        let mut signatures = Vec::new();
        let mut all_patterns = Vec::new();
        let mut owner = Vec::new();
        let mut ids = std::collections::HashSet::new();
        for spec in specs {
            if !ids.insert(spec.id.clone()) {
                return Err(invalid(format!("{}: the id is used twice", spec.id)));
            }
            let Some(category) = categories.iter().find(|c| c.id == spec.category) else {
                return Err(invalid(format!(
                    "{}: unknown category {:?} (see data/taxonomy.toml)",
                    spec.id, spec.category
                )));
            };
            if let Some(source) = spec.sources.iter().find(|s| !SOURCES.contains(&s.as_str())) {
                return Err(invalid(format!(
                    "{}: unknown source {source:?} (known: {})",
                    spec.id,
                    SOURCES.join(", ")
                )));
            }
            if let Some(action) = spec
                .actions
                .iter()
                .find(|a| !ACTION_KINDS.contains(&a.kind.as_str()))
            {
                return Err(invalid(format!(
                    "{}: unknown action {:?} (known: {})",
                    spec.id,
                    action.kind,
                    ACTION_KINDS.join(", ")
                )));
            }
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
            let mut context = Vec::new();
            for pattern in &spec.context {
                context.push(
                    Regex::new(pattern).map_err(|err| {
                        invalid(format!("{}: context {pattern:?}: {err}", spec.id))
                    })?,
                );
            }
            signatures.push(Signature {
                component: spec.component.unwrap_or(category.component),
                recoverable: spec.recoverable.unwrap_or(category.requeue),
                spec,
                patterns,
                context,
            });
        }
        let prefilter = RegexSet::new(&all_patterns).map_err(|err| invalid(err.to_string()))?;
        let combined = signatures
            .iter()
            .flat_map(|signature: &Signature| -> Vec<String> {
                if signature.spec.prefilter.is_empty() {
                    signature
                        .spec
                        .patterns
                        .iter()
                        .map(|pattern| {
                            format!("(?:{})", pattern.strip_prefix('^').unwrap_or(pattern))
                        })
                        .collect()
                } else {
                    signature
                        .spec
                        .prefilter
                        .iter()
                        .map(|literal| regex::escape(literal))
                        .collect()
                }
            })
            .collect::<Vec<_>>()
            .join("|");
        let candidates = regex::RegexBuilder::new(&combined)
            .size_limit(64 << 20)
            .build()
            .map_err(|err| invalid(err.to_string()))?;
        Ok(Self {
            signatures,
            prefilter,
            owner,
            candidates,
        })
    }

    pub fn signatures(&self) -> &[Signature] {
        &self.signatures
    }

    /// Which lines of a read might match a signature: one search over the whole text instead of one per
    /// line. A line marked here is confirmed with [`Catalog::is_notable`] on its message.
    pub fn candidate_lines(&self, chunk: &Chunk) -> Vec<bool> {
        let mut marks = vec![false; chunk.line_count()];
        let mut at = 0;
        while let Some(found) = self.candidates.find_at(&chunk.text, at) {
            let Some(line) = chunk.line_at(found.start()) else {
                break;
            };
            marks[line] = true;
            // One mark per line is enough: go on after this line.
            at = chunk
                .spans
                .get(line + 1)
                .map_or(chunk.text.len(), |&(start, _)| start);
            if at <= found.start() {
                at = found.end().max(found.start() + 1);
            }
            if at > chunk.text.len() {
                break;
            }
        }
        marks
    }

    /// Whether any signature matches `line`.
    pub fn is_notable(&self, line: &str) -> bool {
        self.prefilter.is_match(line)
    }

    /// Indexes of the signatures that match `line`.
    pub fn matching(&self, line: &str) -> Vec<usize> {
        // Nearly every line matches nothing; `is_match` can stop early where `matches` cannot.
        if !self.prefilter.is_match(line) {
            return Vec::new();
        }
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
