//! The failure-signature catalog: TOML data compiled once into a prefilter and per-signature regexes.

use std::path::{Path, PathBuf};

use aho_corasick::AhoCorasick;
use regex::Regex;
use serde::Deserialize;

mod literals;
mod locator;
mod spec;

pub use locator::Locator;
pub use spec::{LocatorExample, LocatorSpec, SequenceSpec, SignatureSpec, VetoSpec};

use literals::{required_literals, uncovered_by_prefilter, unnamed};
use spec::{Parsed, TaxonomyFile, line_of, parse_file};

use super::scan::{LineScan, Mark, ShapeMemory};
use crate::model::Component;
use crate::telemetry::tail::Chunk;

/// The catalog shipped with runguard.
const BUILTIN: &[(&str, &str)] = &[
    (
        "core.toml",
        include_str!("../../../../data/signatures/core.toml"),
    ),
    (
        "hardware.toml",
        include_str!("../../../../data/signatures/hardware.toml"),
    ),
    (
        "network.toml",
        include_str!("../../../../data/signatures/network.toml"),
    ),
    (
        "memory.toml",
        include_str!("../../../../data/signatures/memory.toml"),
    ),
    (
        "storage.toml",
        include_str!("../../../../data/signatures/storage.toml"),
    ),
    (
        "data.toml",
        include_str!("../../../../data/signatures/data.toml"),
    ),
    (
        "scheduling.toml",
        include_str!("../../../../data/signatures/scheduling.toml"),
    ),
    (
        "ray.toml",
        include_str!("../../../../data/signatures/ray.toml"),
    ),
    (
        "application.toml",
        include_str!("../../../../data/signatures/application.toml"),
    ),
    (
        "broad.toml",
        include_str!("../../../../data/signatures/broad.toml"),
    ),
    (
        "locators.toml",
        include_str!("../../../../data/signatures/locators.toml"),
    ),
];

/// The canonical categories every signature maps to.
const TAXONOMY: &str = include_str!("../../../../data/taxonomy.toml");

/// Where a signature's evidence comes from.
pub const SOURCES: &[&str] = &[
    "app_log",
    "kernel_log",
    "scheduler",
    "kubernetes_event",
    "gpu_status",
];

/// One canonical category.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Category {
    pub id: String,
    pub component: Component,
    /// Whether a plain requeue (possibly excluding the culprit) can help.
    pub requeue: bool,
    /// What a culprit of this category can be.
    pub culprit: CulpritScope,
}

/// What a category's culprit can be: a failure of a node names the node; a failure of the job's own
/// code or data happened on a rank (and the node of that rank), whatever hosts its lines mention; a
/// failure of the scheduler's or of the configuration has no place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CulpritScope {
    Node,
    Rank,
    None,
}

/// Whom a signature's line blames.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reporter {
    /// The host that writes the line is where the failure is.
    #[default]
    Culprit,
    /// The line is written by either end of a failed connection (a peer error): its host is the
    /// culprit only when it is a node of the known allocation, never from a log alone.
    EitherEnd,
    /// Every rank that waited writes the line (a collective's watchdog timeout): its rank and host
    /// are those of a victim, never the culprit's.
    EveryRank,
}

/// Where a signature's context must be found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextScope {
    /// In the same block as a matching line: one traceback, or one error block of one rank and source.
    #[default]
    Block,
    /// Anywhere in the attempt's evidence (a kernel log's OOM kill confirming an application's line).
    Attempt,
}

/// The canonical categories.
pub fn taxonomy() -> Vec<Category> {
    toml::from_str::<TaxonomyFile>(TAXONOMY)
        .map(|file| file.category)
        .unwrap_or_default()
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

/// A sequence ready to use.
#[derive(Debug, Clone)]
pub struct Sequence {
    pub id: String,
    pub window_seconds: u32,
    pattern: Regex,
}

impl Sequence {
    /// Whether `line` is one of the cascade's errors.
    pub fn is_member_line(&self, line: &str) -> bool {
        self.pattern.is_match(line)
    }
}

/// Which of a signature's lines are fatal while the run is running, as written in the catalog:
/// `fatal_while_running = true`, or a list of patterns a line must also match.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum FatalWhileRunning {
    Every(bool),
    Matching(Vec<String>),
}

/// A signature ready to match.
#[derive(Debug, Clone)]
pub struct Signature {
    pub spec: SignatureSpec,
    /// The component (the signature's, else its category's).
    pub component: Component,
    /// Whether a requeue can help (the signature's, else its category's).
    pub recoverable: bool,
    /// What the culprit can be (the category's).
    pub culprit: CulpritScope,
    /// Indexes of the signatures this one outranks.
    pub outranks: Vec<usize>,
    /// The sequence it belongs to.
    pub sequence: Option<Sequence>,
    patterns: Vec<Regex>,
    context: Vec<Regex>,
    /// Lines that say the condition cleared.
    resolved: Vec<Regex>,
    /// Lines that are not its own, whatever its patterns say.
    unless: Vec<Regex>,
    /// Its lines that are fatal while running: none, every one (empty), or those matching one.
    fatal: Option<Vec<Regex>>,
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

    /// Whether the signature can be cleared by a later line at all.
    pub fn has_resolution(&self) -> bool {
        !self.resolved.is_empty()
    }

    /// Whether `line` says the signature's condition cleared.
    pub fn resolves(&self, line: &str) -> bool {
        self.resolved.iter().any(|pattern| pattern.is_match(line))
    }

    /// Whether the signature needs a context at all.
    pub fn has_context(&self) -> bool {
        !self.context.is_empty()
    }

    /// Whether `line`, one of this signature's, means a running collective cannot complete.
    pub fn is_fatal_while_running(&self, line: &str) -> bool {
        self.fatal.as_ref().is_some_and(|patterns| {
            patterns.is_empty() || patterns.iter().any(|pattern| pattern.is_match(line))
        })
    }
}

/// All signatures, with one RegexSet over every pattern so a line that matches nothing costs one scan.
#[derive(Debug, Clone)]
pub struct Catalog {
    signatures: Vec<Signature>,
    locators: Vec<Locator>,
    /// Every pattern of every signature, flat.
    patterns: Vec<Regex>,
    /// For each pattern, the signature it belongs to...
    owner: Vec<usize>,
    /// ...and whether it is one of its `resolved_by` patterns (evidence, but no match of it).
    resolving: Vec<bool>,
    /// The literals the patterns require, searched all at once in a line...
    literals: AhoCorasick,
    /// ...and, for each literal, the patterns that need it.
    literal_patterns: Vec<Vec<usize>>,
    /// Patterns without usable literals: tried on a line the next regex matches.
    unguarded: Vec<usize>,
    /// The patterns without literals as one regex without word boundaries: it matches every line one
    /// of them matches, so a line it does not match (most lines a recogniser's marker brings here)
    /// costs one search instead of one per pattern.
    unguarded_any: Option<Regex>,
    /// Every required literal and the recognisers' markers, plus the patterns that have no usable
    /// literal as one regex: it finds the candidate lines of a read, which the prefilter then confirms
    /// on their message.
    scan: LineScan,
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

    /// The locators, in catalog order.
    pub fn locators(&self) -> &[Locator] {
        &self.locators
    }

    /// Nodes the locators find in `line`.
    pub fn located_node<'l>(&self, line: &'l str) -> Option<&'l str> {
        self.located(line).map(|(node, _)| node)
    }

    /// The node a locator finds in `line`, with the rank it names if any.
    pub fn located<'l>(&self, line: &'l str) -> Option<(&'l str, Option<u32>)> {
        self.located_by(line).map(|(_, node, rank)| (node, rank))
    }

    /// [`Self::located`], with the locator that found the node.
    pub fn located_by<'l>(&self, line: &'l str) -> Option<(&Locator, &'l str, Option<u32>)> {
        self.locators.iter().find_map(|locator| {
            locator
                .locate(line)
                .map(|(node, rank)| (locator, node, rank))
        })
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
                if let Some(new) = &spec.spec {
                    specs.retain(|existing: &Parsed| {
                        existing.spec.as_ref().is_none_or(|old| old.id != new.id)
                    });
                }
                specs.push(spec);
            }
        }
        Self::from_specs(specs, dir)
    }

    fn from_specs(parsed: Vec<Parsed>, origin: &Path) -> Result<Self, CatalogError> {
        let invalid = |message: String| CatalogError::Invalid {
            file: origin.to_path_buf(),
            message,
        };
        let invalid_in = |file: &Path, message: String| CatalogError::Invalid {
            file: file.to_path_buf(),
            message,
        };
        let categories = taxonomy();
        let mut signatures = Vec::new();
        let mut owner = Vec::new();
        let mut resolving = Vec::new();
        let mut ids = std::collections::HashSet::new();
        let mut locators = Vec::new();
        let mut outranked = Vec::new();
        let mut sequences: Vec<Sequence> = Vec::new();
        let mut sequence_refs = Vec::new();
        let mut vetoes: std::collections::HashMap<String, Regex> = std::collections::HashMap::new();
        let mut pending_locators = Vec::new();
        for Parsed {
            spec,
            file,
            text,
            locators: file_locators,
            sequences: file_sequences,
            vetoes: file_vetoes,
        } in parsed
        {
            for veto in file_vetoes {
                let pattern = Regex::new(&veto.pattern)
                    .map_err(|err| invalid_in(&file, format!("veto {}: {err}", veto.id)))?;
                // A site's veto replaces the built-in one of the same id.
                vetoes.insert(veto.id, pattern);
            }
            // Compiled once every file's vetoes are known: a locator may name a veto of another file.
            pending_locators.extend(
                file_locators
                    .into_iter()
                    .map(|locator| (file.clone(), locator)),
            );
            for sequence in file_sequences {
                let pattern = Regex::new(&sequence.pattern)
                    .map_err(|err| invalid_in(&file, format!("sequence {}: {err}", sequence.id)))?;
                sequences.push(Sequence {
                    id: sequence.id,
                    window_seconds: sequence.window_seconds,
                    pattern,
                });
            }
            let Some(spec) = spec else { continue };
            sequence_refs.push((
                spec.sequence.as_ref().map(|name| name.get_ref().clone()),
                file.clone(),
                spec.sequence
                    .as_ref()
                    .map_or(0, |name| line_of(&text, name.span().start)),
            ));
            outranked.push(
                spec.outranks
                    .iter()
                    .map(|id| {
                        (
                            id.get_ref().clone(),
                            file.clone(),
                            line_of(&text, id.span().start),
                        )
                    })
                    .collect::<Vec<_>>(),
            );
            if !ids.insert(spec.id.clone()) {
                return Err(invalid_in(
                    &file,
                    format!("{}: the id is used twice", spec.id),
                ));
            }
            let Some(category) = categories.iter().find(|c| c.id == spec.category) else {
                return Err(invalid_in(
                    &file,
                    format!(
                        "{}: unknown category {:?} (see data/taxonomy.toml)",
                        spec.id, spec.category
                    ),
                ));
            };
            if let Some(source) = spec.sources.iter().find(|s| !SOURCES.contains(&s.as_str())) {
                return Err(invalid_in(
                    &file,
                    format!(
                        "{}: unknown source {source:?} (known: {})",
                        spec.id,
                        SOURCES.join(", ")
                    ),
                ));
            }
            if !(0.0..=1.0).contains(&spec.confidence) {
                return Err(invalid_in(
                    &file,
                    format!("{}: confidence must be within 0..1", spec.id),
                ));
            }
            if spec.patterns.is_empty() {
                return Err(invalid_in(
                    &file,
                    format!("{}: at least one pattern is needed", spec.id),
                ));
            }
            let mut patterns = Vec::new();
            for pattern in &spec.patterns {
                let regex = Regex::new(pattern).map_err(|err| {
                    invalid_in(&file, format!("{}: pattern {pattern:?}: {err}", spec.id))
                })?;
                patterns.push(regex);
                owner.push(signatures.len());
                resolving.push(false);
            }
            let mut resolved = Vec::new();
            for pattern in &spec.resolved_by {
                resolved.push(Regex::new(pattern).map_err(|err| {
                    invalid_in(
                        &file,
                        format!("{}: resolved_by {pattern:?}: {err}", spec.id),
                    )
                })?);
                owner.push(signatures.len());
                resolving.push(true);
            }
            if let Some(pattern) = uncovered_by_prefilter(&spec.prefilter, &spec.patterns) {
                return Err(invalid_in(
                    &file,
                    format!(
                        "{}: a match of {pattern:?} need not contain any prefilter literal {:?}, so the scan would miss it",
                        spec.id, spec.prefilter
                    ),
                ));
            }
            let mut unless = Vec::new();
            for pattern in &spec.unless {
                unless.push(Regex::new(pattern).map_err(|err| {
                    invalid_in(&file, format!("{}: unless {pattern:?}: {err}", spec.id))
                })?);
            }
            let mut context = Vec::new();
            for pattern in &spec.context {
                context.push(Regex::new(pattern).map_err(|err| {
                    invalid_in(&file, format!("{}: context {pattern:?}: {err}", spec.id))
                })?);
            }
            let fatal = match &spec.fatal_while_running {
                None | Some(FatalWhileRunning::Every(false)) => None,
                Some(FatalWhileRunning::Every(true)) => Some(Vec::new()),
                Some(FatalWhileRunning::Matching(patterns)) if patterns.is_empty() => {
                    return Err(invalid_in(
                        &file,
                        format!(
                            "{}: fatal_while_running is true or a list of at least one pattern",
                            spec.id
                        ),
                    ));
                }
                Some(FatalWhileRunning::Matching(patterns)) => Some(
                    patterns
                        .iter()
                        .map(|pattern| {
                            Regex::new(pattern).map_err(|err| {
                                invalid_in(
                                    &file,
                                    format!("{}: fatal_while_running {pattern:?}: {err}", spec.id),
                                )
                            })
                        })
                        .collect::<Result<Vec<_>, _>>()?,
                ),
            };
            signatures.push(Signature {
                component: spec.component.unwrap_or(category.component),
                recoverable: spec.recoverable.unwrap_or(category.requeue),
                culprit: category.culprit,
                outranks: Vec::new(),
                sequence: None,
                spec,
                patterns,
                context,
                resolved,
                unless,
                fatal,
            });
        }
        for (file, locator) in pending_locators {
            let pattern = Regex::new(&locator.pattern)
                .map_err(|err| invalid_in(&file, format!("locator {}: {err}", locator.id)))?;
            if !pattern.capture_names().any(|name| name == Some("node")) {
                return Err(invalid_in(
                    &file,
                    format!("locator {}: the pattern has no `node` capture", locator.id),
                ));
            }
            let unless = locator
                .unless
                .iter()
                .map(|name| {
                    vetoes.get(name).cloned().ok_or_else(|| {
                        invalid_in(
                            &file,
                            format!("locator {}: unknown veto {name:?}", locator.id),
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            // A site's locator replaces the built-in one of the same id.
            locators.retain(|known: &Locator| known.id != locator.id);
            locators.push(Locator {
                id: locator.id,
                examples: locator.examples,
                origin: locator.origin,
                not_located: locator.not_located,
                pattern,
                unless,
            });
        }
        // Cause over symptom is data: every signature or category a signature outranks must exist.
        for (index, targets) in outranked.into_iter().enumerate() {
            for (id, file, line) in targets {
                let unknown = |what: &str| {
                    invalid_in(
                        &file,
                        format!(
                            "line {line}: {} outranks unknown {what} {id:?}",
                            signatures[index].spec.id
                        ),
                    )
                };
                let found: Vec<usize> = match id.strip_prefix("category:") {
                    Some(category) => {
                        if !categories.iter().any(|c| c.id == category) {
                            return Err(unknown("category"));
                        }
                        (0..signatures.len())
                            .filter(|&i| i != index && signatures[i].spec.category == category)
                            .collect()
                    }
                    None => match signatures.iter().position(|s| s.spec.id == id) {
                        Some(target) => vec![target],
                        None => return Err(unknown("signature")),
                    },
                };
                signatures[index].outranks.extend(found);
            }
        }
        // A signature's sequence must be declared, so a misspelt one does not silently stand alone.
        for (index, (name, file, line)) in sequence_refs.into_iter().enumerate() {
            if let Some(name) = name {
                let Some(sequence) = sequences.iter().find(|s: &&Sequence| s.id == name) else {
                    return Err(invalid_in(
                        &file,
                        format!(
                            "line {line}: {} names unknown sequence {name:?}",
                            signatures[index].spec.id
                        ),
                    ));
                };
                signatures[index].sequence = Some(sequence.clone());
            }
        }
        // The whole-read scan looks for literals every match must contain (found by the regex
        // parser, or given as `prefilter`), which a literal searcher finds far faster than the
        // patterns themselves; a pattern without such literals is scanned for as it is. The same scan
        // serves the recognisers' own markers.
        let mut scan: Vec<String> = Vec::new();
        let mut literal_list: Vec<String> = Vec::new();
        let mut literal_patterns: Vec<Vec<usize>> = Vec::new();
        let mut unguarded = Vec::new();
        let mut unguarded_scan: Vec<String> = Vec::new();
        let mut guard = |literal: &str, pattern: usize| match literal_list
            .iter()
            .position(|known| known == literal)
        {
            Some(at) => literal_patterns[at].push(pattern),
            None => {
                literal_list.push(literal.to_string());
                literal_patterns.push(vec![pattern]);
            }
        };
        let mut flat = 0usize;
        for signature in &signatures {
            if !signature.spec.prefilter.is_empty() {
                for offset in 0..signature.spec.patterns.len() {
                    for literal in &signature.spec.prefilter {
                        guard(literal, flat + offset);
                    }
                }
                flat += signature.spec.patterns.len();
            }
            let own = if signature.spec.prefilter.is_empty() {
                &signature.spec.patterns[..]
            } else {
                &[]
            };
            for pattern in own.iter().chain(&signature.spec.resolved_by) {
                let index = flat;
                flat += 1;
                match required_literals(pattern) {
                    Some(literals) => {
                        for literal in &literals {
                            guard(literal, index);
                        }
                    }
                    // Word boundaries are dropped: that only widens the scan, and a Unicode `\b`
                    // would force the slow engine onto the whole read.
                    None => {
                        unguarded.push(index);
                        let widened = format!(
                            "(?:{})",
                            unnamed(pattern.strip_prefix('^').unwrap_or(pattern))
                                .replace("\\b", "")
                                .replace("\\B", "")
                        );
                        unguarded_scan.push(widened.clone());
                        scan.push(widened);
                    }
                }
            }
        }
        // A locator with literals of its own is found by them too (a line it may locate is then
        // confirmed by its pattern); the others join the scanned patterns.
        let mut locator_literals: Vec<String> = Vec::new();
        for locator in &locators {
            let pattern = locator.pattern.as_str();
            match required_literals(pattern) {
                Some(literals) => locator_literals.extend(literals),
                None => scan.push(format!(
                    "(?:{})",
                    unnamed(pattern.strip_prefix('^').unwrap_or(pattern))
                )),
            }
        }
        scan.sort();
        scan.dedup();
        // One pattern, whose `$` still means the end of its line.
        let candidates = scan.join("|");
        let literals = AhoCorasick::new(&literal_list).map_err(|err| invalid(err.to_string()))?;
        let unguarded_any = if unguarded_scan.is_empty() {
            None
        } else {
            let any = super::scan::catalog_wide(&unguarded_scan.join("|"))
                .map_err(|err| invalid(err.to_string()))?;
            Some(any)
        };
        let mut scan_list = literal_list.clone();
        scan_list.extend(locator_literals);
        scan_list.extend(
            crate::telemetry::pipeline::marker_literals()
                .into_iter()
                .map(str::to_string),
        );
        let plain: Vec<String> = crate::telemetry::pipeline::plain_literals()
            .into_iter()
            .map(str::to_string)
            .collect();
        let scan = LineScan::tiered(
            (&scan_list, &candidates),
            (&plain, crate::telemetry::pipeline::plain_pattern()),
        )
        .map_err(|err| invalid(err.to_string()))?;
        let patterns = signatures
            .iter()
            .flat_map(|signature| {
                signature
                    .patterns
                    .iter()
                    .chain(&signature.resolved)
                    .cloned()
            })
            .collect();
        Ok(Self {
            signatures,
            locators,
            patterns,
            owner,
            resolving,
            literals,
            literal_patterns,
            unguarded,
            unguarded_any,
            scan,
        })
    }

    pub fn signatures(&self) -> &[Signature] {
        &self.signatures
    }

    /// The signature of this id.
    pub fn signature(&self, id: &str) -> Option<&Signature> {
        self.signatures
            .iter()
            .find(|signature| signature.spec.id == id)
    }

    /// The whole-read scan's pattern (the patterns without literals), for inspection.
    pub fn scan_pattern(&self) -> &str {
        self.scan.pattern()
    }

    /// What each line of a read needs (see `telemetry::pipeline::Digester::push_chunk`): a
    /// [`Mark::Candidate`] may match a signature or hold a marker of the recognisers or of the digest
    /// (`telemetry::pipeline::marker_literals`) and is confirmed on its message; a [`Mark::Plain`] line
    /// holds none of them but may be something to the recognisers without their markers
    /// (`telemetry::pipeline::plain_literals`); a [`Mark::Quiet`] line is neither.
    pub fn line_marks(&self, chunk: &Chunk) -> Vec<Mark> {
        self.scan.marks(chunk)
    }

    /// [`Self::line_marks`] remembering the shapes of the lines across reads of one log (see
    /// [`crate::attribute::scan::ShapeMemory`]), for reads that follow each other closely.
    pub fn line_marks_remembering(&self, chunk: &Chunk, shapes: &mut ShapeMemory) -> Vec<Mark> {
        self.scan.marks_remembering(chunk, shapes)
    }

    /// Builds what the line scan otherwise builds when a log first needs it (its coarse searches,
    /// see [`crate::attribute::scan`]), once for the process.
    pub fn prepare_scan(&self) {
        self.scan.prepare();
    }

    /// Whether any signature matches `line`, or a locator finds a node in it.
    pub fn is_notable(&self, line: &str) -> bool {
        self.matching_patterns(line).next().is_some() || self.located_node(line).is_some()
    }

    /// The patterns that match `line`: only those whose literal occurs in it are run.
    fn matching_patterns<'l>(&'l self, line: &'l str) -> impl Iterator<Item = usize> + 'l {
        let mut tried = vec![false; self.patterns.len()];
        let guarded: Vec<usize> = self
            .literals
            .find_overlapping_iter(line)
            .flat_map(|found| {
                self.literal_patterns[found.pattern().as_usize()]
                    .iter()
                    .copied()
            })
            .collect();
        let unguarded: &[usize] = match &self.unguarded_any {
            Some(any) if any.is_match(line) => &self.unguarded,
            _ => &[],
        };
        guarded
            .into_iter()
            .chain(unguarded.iter().copied())
            .filter(move |&pattern| !std::mem::replace(&mut tried[pattern], true))
            .filter(move |&pattern| self.patterns[pattern].is_match(line))
    }

    /// The first signature that matches `line` and marks it fatal while the run is running.
    pub fn fatal_while_running(&self, line: &str) -> Option<&Signature> {
        self.matching(line)
            .into_iter()
            .map(|index| &self.signatures[index])
            .find(|signature| signature.is_fatal_while_running(line))
    }

    /// Indexes of the signatures that match `line`.
    pub fn matching(&self, line: &str) -> Vec<usize> {
        let mut hits: Vec<usize> = self
            .matching_patterns(line)
            .filter(|&pattern| !self.resolving[pattern])
            .map(|pattern| self.owner[pattern])
            .collect();
        hits.sort_unstable();
        hits.dedup();
        hits.retain(|&index| {
            self.signatures
                .get(index)
                .is_some_and(|signature| !signature.unless.iter().any(|u| u.is_match(line)))
        });
        hits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIGNATURE: &str = r#"
[[signature]]
id = "ib"
title = "IB completion error"
category = "ib_link"
confidence = 0.7
patterns = ['Got completion with error \d+']
explanation = "x"
"#;

    fn load(extra: &str) -> Result<Catalog, CatalogError> {
        let text = SIGNATURE.replace("explanation", &format!("{extra}\nexplanation"));
        Catalog::from_specs(parse_file(&text, Path::new("t.toml"))?, Path::new("t.toml"))
    }

    #[test]
    fn only_the_marked_lines_of_a_signature_are_fatal_while_running() {
        let every = load("fatal_while_running = true").unwrap();
        assert!(
            every
                .fatal_while_running("Got completion with error 5")
                .is_some()
        );
        let some = load(r"fatal_while_running = ['error 1[23]\b']").unwrap();
        assert!(
            some.fatal_while_running("Got completion with error 12")
                .is_some()
        );
        assert!(
            some.fatal_while_running("Got completion with error 1")
                .is_none()
        );
        let none = load("fatal_while_running = false").unwrap();
        assert!(
            none.fatal_while_running("Got completion with error 12")
                .is_none()
        );
        assert!(
            load("")
                .unwrap()
                .fatal_while_running("Got completion with error 12")
                .is_none()
        );
    }

    #[test]
    fn an_empty_or_broken_fatal_list_fails_the_load_naming_the_signature() {
        let empty = load("fatal_while_running = []").unwrap_err().to_string();
        assert!(empty.contains("ib: fatal_while_running"), "{empty}");
        let broken = load("fatal_while_running = ['(']").unwrap_err().to_string();
        assert!(broken.contains("ib: fatal_while_running"), "{broken}");
    }

    #[test]
    fn a_line_matching_unless_is_not_the_signature_s() {
        let catalog = load(r"unless = ['Warning: ']").unwrap();
        assert_eq!(catalog.matching("Got completion with error 12"), vec![0]);
        assert!(
            catalog
                .matching("x.py:3: UserWarning: Got completion with error 12")
                .is_empty()
        );
        // The line is still evidence: only the match is taken back.
        assert!(catalog.is_notable("x.py:3: UserWarning: Got completion with error 12"));
        let broken = load("unless = ['(']").unwrap_err().to_string();
        assert!(broken.contains("ib: unless"), "{broken}");
    }

    #[test]
    fn the_builtin_catalog_marks_nccl_s_fatal_ib_status_and_not_the_others() {
        let catalog = Catalog::builtin().unwrap();
        let line = |status: u32| {
            format!(
                "node-07:1:2 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.8<52347> with status={status} opcode=0 len=0 vendor err 129 (Recv)"
            )
        };
        for status in [5, 12, 13] {
            assert!(
                catalog.fatal_while_running(&line(status)).is_some(),
                "{status}"
            );
        }
        for status in [1, 4] {
            assert!(
                catalog.fatal_while_running(&line(status)).is_none(),
                "{status}"
            );
        }
        assert!(
            catalog
                .fatal_while_running("NCCL WARN NET/IB : Got async event : GID table change")
                .is_none()
        );
    }

    #[test]
    fn a_prefilter_must_cover_every_pattern_of_its_signature() {
        let prefilter = ["async event".to_string()];
        let covered = [
            r"NET/IB ?: ?Got (?:fatal )?async event ?: port error".to_string(),
            r"Workers killed \(async event\)".to_string(),
        ];
        assert_eq!(uncovered_by_prefilter(&prefilter, &covered), None);
        // NCCL 2.23's wording holds no "async event": the scan would skip its lines.
        let newer = [r"NET/IB ?: ?\S+:\d+ Got async error event: port error".to_string()];
        assert_eq!(
            uncovered_by_prefilter(&prefilter, &newer),
            Some(newer[0].as_str())
        );
        // No prefilter: the scan uses each pattern's own literals.
        assert_eq!(uncovered_by_prefilter(&[], &newer), None);
    }

    const PROMPT: &str = r#"
[[locator]]
id = "prompt"
pattern = '^\w+@(?P<node>[\w-]+):\S*\$'
examples = [{ line = "alice@gpu-3:~$ nvidia-smi", node = "gpu-3" }]
unless = ["remote"]
explanation = "x"
"#;

    const REMOTE: &str = r#"
[[veto]]
id = "remote"
pattern = '\$ ssh\s'
explanation = "x"
"#;

    #[test]
    fn a_locator_s_veto_is_named_once_and_may_live_in_another_file() {
        let mut parsed = parse_file(PROMPT, Path::new("a.toml")).unwrap();
        parsed.extend(parse_file(REMOTE, Path::new("b.toml")).unwrap());
        let catalog = Catalog::from_specs(parsed, Path::new("t")).unwrap();
        assert_eq!(
            catalog.located_node("alice@gpu-3:~$ nvidia-smi"),
            Some("gpu-3")
        );
        assert_eq!(catalog.located_node("alice@gpu-3:~$ ssh gpu-4 dmesg"), None);
        // A later file's veto of the same id replaces the first.
        let mut parsed = parse_file(PROMPT, Path::new("a.toml")).unwrap();
        parsed.extend(parse_file(REMOTE, Path::new("b.toml")).unwrap());
        parsed.extend(parse_file(&REMOTE.replace("ssh", "pdsh"), Path::new("c.toml")).unwrap());
        let catalog = Catalog::from_specs(parsed, Path::new("t")).unwrap();
        assert_eq!(
            catalog.located_node("alice@gpu-3:~$ ssh gpu-4 dmesg"),
            Some("gpu-3")
        );
        assert_eq!(
            catalog.located_node("alice@gpu-3:~$ pdsh -w gpu-4 dmesg"),
            None
        );
    }

    #[test]
    fn a_locator_naming_an_unknown_veto_fails_the_load_naming_both() {
        let parsed = parse_file(PROMPT, Path::new("a.toml")).unwrap();
        let error = Catalog::from_specs(parsed, Path::new("t"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.contains("a.toml"), "{error}");
        assert!(
            error.contains("locator prompt: unknown veto \"remote\""),
            "{error}"
        );
    }
}
