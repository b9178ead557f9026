//! The catalog's data files as written: signatures, locators, cascades and vetoes, read from TOML
//! with the line each item starts on.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{CatalogError, Category, ContextScope, FatalWhileRunning, Reporter};
use crate::model::{Component, Remedy};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TaxonomyFile {
    pub(super) category: Vec<Category>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CatalogFile {
    #[serde(default)]
    signature: Vec<SignatureSpec>,
    #[serde(default)]
    locator: Vec<LocatorSpec>,
    #[serde(default)]
    sequence: Vec<SequenceSpec>,
    #[serde(default)]
    veto: Vec<VetoSpec>,
}

/// A named condition that cancels a locator's line, written once and named by the locators it
/// applies to.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VetoSpec {
    pub id: String,
    /// A regular expression over the locator's line.
    pub pattern: String,
    pub explanation: String,
}

/// Errors that come in cascades, where the first is the cause of the rest, as written in the catalog.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SequenceSpec {
    pub id: String,
    /// A regular expression the lines of the cascade match (`NVRM: Xid`): a member signature's other
    /// lines (an ECC count from `nvidia-smi`) are no part of the sequence.
    pub pattern: String,
    /// How long after the first error a later one still belongs to its cascade.
    pub window_seconds: u32,
    pub explanation: String,
}

/// A line that names the node a log was taken on without being an error itself (a shell prompt, the
/// scheduler's allocation of a one-node job): it locates the culprit when the failure's lines do not.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocatorSpec {
    pub id: String,
    /// A regular expression over one line with a named capture `node` (and optionally `rank`).
    pub pattern: String,
    /// Real lines with the node each must locate.
    pub examples: Vec<LocatorExample>,
    pub explanation: String,
    /// The line is itself part of a failure (a task killed), naming where it began; other locators'
    /// lines are no failure by themselves.
    #[serde(default)]
    pub origin: bool,
    /// Ids of the vetoes (`[[veto]]`) that cancel the line: a prompt whose command asks the scheduler
    /// about the cluster or runs on other hosts is followed by output that is not its host's.
    #[serde(default)]
    pub unless: Vec<String>,
    /// Real lines of the locator's kind that it must not locate (tests/signatures.rs checks them).
    #[serde(default)]
    pub not_located: Vec<String>,
}

/// A line a locator must locate, with its node.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocatorExample {
    pub line: String,
    pub node: String,
    /// The rank the line names too, when the locator captures one.
    #[serde(default)]
    pub rank: Option<u32>,
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
    /// Regular expressions at least one of which another evidence line must match for this signature
    /// to apply (a CUDA OOM is the DataLoader's only inside a DataLoader frame)...
    #[serde(default)]
    pub context: Vec<String>,
    /// ...within the same block as a matching line (default), or anywhere in the attempt.
    #[serde(default)]
    pub context_scope: ContextScope,
    /// Whom the host writing a matching line is (default: the culprit).
    #[serde(default)]
    pub reporter: Reporter,
    /// Signatures (ids, or `category:<id>` for every signature of a category) this one's cause
    /// outranks when both match, whatever their confidence: the cause over the symptoms it brings (an
    /// Xid over the NCCL timeouts that follow it).
    #[serde(default)]
    pub outranks: Vec<toml::Spanned<String>>,
    /// A sequence (a `[[sequence]]` of the catalog) the signature belongs to: of several signatures of
    /// one sequence that match within its window, the one seen first wins, as later errors of a
    /// cascade are consequences of the first (an Xid 31 before the Xid 45 of its torn-down channels).
    #[serde(default)]
    pub sequence: Option<toml::Spanned<String>>,
    /// Ordered recovery steps.
    #[serde(default)]
    pub actions: Vec<Remedy>,
    /// Literal strings one of which every matching line contains. Only needed when the patterns start
    /// with something no fast scan can look for (such as `^(?:\w+\.)*`): the whole-read scan then looks
    /// for these instead, and the patterns confirm.
    #[serde(default)]
    pub prefilter: Vec<String>,
    /// Regular expressions over a later evidence line that says the condition cleared (srun's step
    /// created after its retries): a signature whose lines are all followed by one does not apply.
    #[serde(default)]
    pub resolved_by: Vec<String>,
    /// Regular expressions over the same line: a line that matches one of them is not this
    /// signature's, whatever its patterns say (a Python warning is no error, whatever its words).
    #[serde(default)]
    pub unless: Vec<String>,
    /// Whether a running attempt that prints a matching line cannot complete its collective (the
    /// engine fails it once progress stopped after the line, without waiting for the silence bound):
    /// every matching line, or only those matching one of the given patterns too (the fatal status
    /// codes of an error that also has harmless ones).
    #[serde(default)]
    pub fatal_while_running: Option<FatalWhileRunning>,
    /// False for a condition the run can live with (a disk nearly full, a warning it survives): it
    /// explains a failure the run shows otherwise (an exception raised, an exit, a stall) but does not
    /// make a log that shows none a failed run.
    #[serde(default = "yes")]
    pub fails_alone: bool,
    pub explanation: String,
}

fn yes() -> bool {
    true
}

/// One signature of a file (or, once per file, its locators), with where it was written.
pub(super) struct Parsed {
    pub(super) spec: Option<SignatureSpec>,
    pub(super) file: PathBuf,
    /// The file's text, for the line numbers of errors.
    pub(super) text: std::sync::Arc<str>,
    pub(super) locators: Vec<LocatorSpec>,
    pub(super) sequences: Vec<SequenceSpec>,
    pub(super) vetoes: Vec<VetoSpec>,
}

pub(super) fn parse_file(text: &str, file: &Path) -> Result<Vec<Parsed>, CatalogError> {
    let parsed = toml::from_str::<CatalogFile>(text).map_err(|err| CatalogError::Invalid {
        file: file.to_path_buf(),
        message: err.to_string(),
    })?;
    let shared: std::sync::Arc<str> = text.into();
    let mut out = vec![Parsed {
        spec: None,
        file: file.to_path_buf(),
        text: shared.clone(),
        locators: parsed.locator,
        sequences: parsed.sequence,
        vetoes: parsed.veto,
    }];
    out.extend(parsed.signature.into_iter().map(|spec| Parsed {
        spec: Some(spec),
        file: file.to_path_buf(),
        text: shared.clone(),
        locators: Vec::new(),
        sequences: Vec::new(),
        vetoes: Vec::new(),
    }));
    Ok(out)
}

/// The 1-based line of a byte offset.
pub(super) fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset)
        .map_or(0, |before| before.matches('\n').count())
        + 1
}
