//! Attribution: from an attempt's evidence lines to a category, a component, a culprit and a confidence.

mod blocks;
pub mod catalog;
pub mod correlate;
mod culprit;
mod precedence;
pub mod quality;
pub mod rejoin;

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, Utc};

pub use catalog::{Catalog, CatalogError, ContextScope};

use crate::model::{AnomalyKind, Attribution, Component, Culprit, WorkflowId};
use crate::store::EvidenceLine;
pub use crate::telemetry::pipeline::blamed_host;

/// Evidence lines quoted in an attribution.
const QUOTED_LINES: usize = 12;

/// What attribution looks at for one failed or stuck attempt.
#[derive(Debug, Clone)]
pub struct Evidence<'a> {
    pub workflow_id: WorkflowId,
    pub attempt_index: u32,
    /// Why the engine looked: a crash, a hang...
    pub anomaly: AnomalyKind,
    /// Notable lines of the attempt's log and of its nodes' kernel logs, oldest first.
    pub lines: &'a [EvidenceLine],
    /// The attempt's nodes, in rank order.
    pub nodes: &'a [String],
    /// Ranks per node (the task layout), for rank → node.
    pub ranks_per_node: u32,
    pub exit_code: Option<i32>,
    pub now: DateTime<Utc>,
}

/// Attributes one failure. Every signature that matches (with its context inside the same block) is a
/// candidate; a candidate another one outranks drops out, and of a sequence only the first to appear
/// stays; the most confident of the rest wins. The culprit comes from the winner's own lines first.
pub fn attribute(catalog: &Catalog, evidence: &Evidence<'_>) -> Attribution {
    let matches: Vec<Vec<usize>> = evidence
        .lines
        .iter()
        .map(|line| catalog.matching(&line.text))
        .collect();
    let mut hits: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (index, signatures) in matches.iter().enumerate() {
        for &signature in signatures {
            hits.entry(signature).or_default().push(index);
        }
    }
    let blocks = blocks::frame(evidence.lines);
    hits.retain(|&signature, own| {
        context_holds(
            &catalog.signatures()[signature],
            own,
            evidence.lines,
            &blocks,
        )
    });
    let ranked = precedence::rank(catalog, &hits);
    let Some((index, own)) = ranked else {
        return unmatched(evidence);
    };
    let signature = &catalog.signatures()[index];
    let weighed = culprit::Weighed {
        evidence,
        catalog,
        matches: &matches,
        hits: &hits,
    };
    let culprit = culprit::resolve(&weighed, signature, own);
    let mut confidence = signature.spec.confidence;
    if culprit.node.is_none() && signature.recoverable {
        // Without a culprit the requeue may land on the same bad node again.
        confidence *= 0.8;
    }
    let own_lines: Vec<&EvidenceLine> = own.iter().map(|&i| &evidence.lines[i]).collect();
    let quoted = quote_evidence(&own_lines, evidence.lines, culprit.node.as_deref());
    Attribution {
        id: 0,
        workflow_id: evidence.workflow_id,
        attempt_index: evidence.attempt_index,
        category: signature.spec.category.clone(),
        component: signature.component,
        culprit,
        confidence,
        recoverable: signature.recoverable,
        signature: Some(signature.spec.id.clone()),
        explanation: signature.spec.explanation.clone(),
        remedies: signature.spec.actions.clone(),
        evidence: quoted,
        time: evidence.now,
    }
}

/// Whether a signature's context holds for its lines `own`: in the block of one of them, or anywhere
/// when the signature says so.
fn context_holds(
    signature: &catalog::Signature,
    own: &[usize],
    lines: &[EvidenceLine],
    blocks: &[usize],
) -> bool {
    if !signature.has_context() {
        return true;
    }
    match signature.spec.context_scope {
        ContextScope::Attempt => signature.context_holds(lines.iter().map(|l| l.text.as_str())),
        ContextScope::Block => own.iter().any(|&index| {
            signature.context_holds(
                lines
                    .iter()
                    .zip(blocks)
                    .filter(|(_, block)| **block == blocks[index])
                    .map(|(line, _)| line.text.as_str()),
            )
        }),
    }
}

/// No signature matched: a hang or a crash of unknown cause. Both are worth one requeue; the crash-loop
/// rule stops the repeats if the cause is in the job.
fn unmatched(evidence: &Evidence<'_>) -> Attribution {
    let culprit = Culprit {
        node: culprit::most_named_in(evidence.lines),
        ..Culprit::default()
    };
    let (category, explanation) = match evidence.anomaly {
        AnomalyKind::Hang => (
            "hang",
            "The job stopped writing to its log while still running: a rank is stuck (a deadlock, a \
             dead peer, a hung file system). It is requeued from its last checkpoint.",
        ),
        _ => (
            "unknown",
            "The job failed without an error line runguard recognises. It is requeued from its last \
             checkpoint once; if it keeps failing without progress the crash-loop rule stops it.",
        ),
    };
    let mut quoted: Vec<String> = evidence
        .lines
        .iter()
        .rev()
        .take(QUOTED_LINES)
        .map(quote)
        .collect();
    quoted.reverse();
    if let Some(code) = evidence.exit_code {
        quoted.push(format!("exit code {code}"));
    }
    Attribution {
        id: 0,
        workflow_id: evidence.workflow_id,
        attempt_index: evidence.attempt_index,
        category: category.to_string(),
        component: if evidence.anomaly == AnomalyKind::Hang {
            Component::Infrastructure
        } else {
            Component::None
        },
        culprit,
        confidence: 0.3,
        recoverable: true,
        signature: None,
        explanation: explanation.to_string(),
        remedies: Vec::new(),
        evidence: quoted,
        time: evidence.now,
    }
}

/// The lines worth showing, most telling first: those that name the culprit, then the signature's own
/// lines with repeats from other ranks folded (a watchdog line from each of 256 ranks says one thing).
fn quote_evidence(
    matched: &[&EvidenceLine],
    all: &[EvidenceLine],
    culprit: Option<&str>,
) -> Vec<String> {
    let names_culprit = |line: &EvidenceLine| {
        culprit.is_some_and(|node| {
            culprit::kernel_log_host(&line.text) == Some(node)
                || blamed_host(&line.text) == Some(node)
        })
    };
    let mut shapes = HashSet::new();
    let mut quoted = Vec::new();
    let culprit_lines = all
        .iter()
        .filter(|line| names_culprit(line))
        .take(QUOTED_LINES / 3);
    let signature_lines = matched.iter().copied();
    for line in culprit_lines.chain(signature_lines) {
        if quoted.len() >= QUOTED_LINES {
            break;
        }
        if shapes.insert(shape(&line.text)) {
            quoted.push(quote(line));
        }
    }
    quoted
}

/// A line with its numbers blanked, so the same message from many ranks or steps folds into one.
fn shape(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_ascii_digit() { '#' } else { c })
        .collect()
}

fn quote(line: &EvidenceLine) -> String {
    match line.rank {
        Some(rank) => format!("{rank}: {}", line.text),
        None => line.text.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(rank: Option<u32>, text: &str) -> EvidenceLine {
        EvidenceLine {
            time: Utc::now(),
            rank,
            text: text.to_string(),
        }
    }

    fn evidence<'a>(lines: &'a [EvidenceLine], nodes: &'a [String]) -> Evidence<'a> {
        Evidence {
            workflow_id: 1,
            attempt_index: 0,
            anomaly: AnomalyKind::Crash,
            lines,
            nodes,
            ranks_per_node: 8,
            exit_code: Some(1),
            now: Utc::now(),
        }
    }

    fn nodes() -> Vec<String> {
        ["node-01", "node-02", "node-07", "node-08"]
            .map(String::from)
            .to_vec()
    }

    #[test]
    fn the_culprit_s_rank_is_one_of_its_node_s_not_a_victim_s() {
        let catalog = Catalog::builtin().unwrap();
        // Rank 0's watchdog speaks first; the NCCL warning from rank 20 names node-07.
        let lines = [
            line(
                Some(0),
                "[rank0]:[E1122 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for 600050 milliseconds before timing out.",
            ),
            line(
                Some(20),
                "node-07:48213:48890 [4] NCCL WARN NET/IB : Got completion from peer with error 12",
            ),
        ];
        let nodes = nodes();
        let attribution = attribute(&catalog, &evidence(&lines, &nodes));
        assert_eq!(attribution.culprit.node.as_deref(), Some("node-07"));
        assert_eq!(attribution.culprit.rank, Some(20), "{attribution:#?}");
    }

    #[test]
    fn nccl_timeout_is_blamed_on_the_node_its_warnings_name() {
        let catalog = Catalog::builtin().unwrap();
        let lines = [
            line(
                Some(20),
                "node-07:48213:48890 [4] NCCL WARN NET/IB : Got completion from peer with error 12",
            ),
            line(
                Some(3),
                "[rank3]:[E1122 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for 600050 milliseconds before timing out.",
            ),
            line(
                None,
                "srun: error: node-07: tasks 16-23: Exited with exit code 1",
            ),
        ];
        let nodes = nodes();
        let attribution = attribute(&catalog, &evidence(&lines, &nodes));
        assert_eq!(attribution.category, "nccl_timeout");
        assert_eq!(attribution.component, Component::Network);
        assert_eq!(attribution.culprit.node.as_deref(), Some("node-07"));
        assert!(attribution.recoverable);
        assert!(attribution.evidence.iter().any(|l| l.contains("NCCL WARN")));
    }

    #[test]
    fn a_kernel_xid_outranks_the_nccl_errors_it_caused() {
        let catalog = Catalog::builtin().unwrap();
        let lines = [
            line(
                Some(3),
                "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)",
            ),
            line(
                None,
                "Jan  5 08:30:12 node-02 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
            ),
            line(
                None,
                "srun: error: node-07: tasks 16-23: Exited with exit code 1",
            ),
        ];
        let nodes = nodes();
        let attribution = attribute(&catalog, &evidence(&lines, &nodes));
        assert_eq!(attribution.category, "xid_79");
        assert_eq!(attribution.culprit.node.as_deref(), Some("node-02"));
    }

    #[test]
    fn an_application_exception_is_not_recoverable() {
        let catalog = Catalog::builtin().unwrap();
        let lines = [
            line(Some(0), "Traceback (most recent call last):"),
            line(Some(0), "KeyError: 'attention_mask'"),
        ];
        let nodes = nodes();
        let attribution = attribute(&catalog, &evidence(&lines, &nodes));
        assert_eq!(attribution.category, "app_exception");
        assert!(!attribution.recoverable);
    }

    #[test]
    fn a_cuda_oom_is_located_by_its_rank() {
        let catalog = Catalog::builtin().unwrap();
        let lines = [line(
            Some(13),
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        )];
        let nodes = nodes();
        let attribution = attribute(&catalog, &evidence(&lines, &nodes));
        assert_eq!(attribution.category, "cuda_oom");
        assert!(!attribution.recoverable);
        assert_eq!(attribution.culprit.rank, Some(13));
        assert_eq!(attribution.culprit.node.as_deref(), Some("node-02"));
    }

    #[test]
    fn a_silent_hang_is_recoverable_with_low_confidence() {
        let catalog = Catalog::builtin().unwrap();
        let nodes = nodes();
        let mut input = evidence(&[], &nodes);
        input.anomaly = AnomalyKind::Hang;
        let attribution = attribute(&catalog, &input);
        assert_eq!(attribution.category, "hang");
        assert!(attribution.recoverable);
        assert!(attribution.confidence < 0.5);
    }

    #[test]
    fn a_user_file_overrides_a_builtin_signature_by_id() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("mine.toml"),
            r#"[[signature]]
id = "cuda-out-of-memory"
title = "OOM, but we retry"
category = "cuda_oom"
component = "gpu_memory"
recoverable = true
confidence = 0.9
patterns = ['CUDA out of memory']
explanation = "retry"
"#,
        )
        .unwrap();
        let catalog = Catalog::with_overrides(dir.path()).unwrap();
        let lines = [line(
            Some(1),
            "CUDA out of memory. Tried to allocate 2.00 GiB",
        )];
        let nodes = nodes();
        assert!(attribute(&catalog, &evidence(&lines, &nodes)).recoverable);
    }

    #[test]
    fn a_bad_pattern_is_an_error_naming_the_signature() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("bad.toml"),
            "[[signature]]\nid = \"broken\"\ntitle = \"t\"\ncategory = \"c\"\ncomponent = \"gpu\"\nrecoverable = true\nconfidence = 0.5\npatterns = ['(unclosed']\nexplanation = \"e\"\n",
        )
        .unwrap();
        let err = Catalog::with_overrides(dir.path()).unwrap_err().to_string();
        assert!(err.contains("broken"), "{err}");
    }
    #[test]
    fn an_unknown_remedy_kind_or_parameter_fails_the_load_naming_the_file() {
        for (action, word) in [
            ("kind = \"reboot_node\"\ndescription = \"d\"", "reboot_node"),
            (
                "kind = \"config_fix\"\ndescription = \"d\"\nparams = { num_wrokers = 2 }",
                "num_wrokers",
            ),
        ] {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(
                dir.path().join("site.toml"),
                format!(
                    "[[signature]]\nid = \"s\"\ntitle = \"t\"\ncategory = \"cuda_oom\"\ncomponent = \"gpu_memory\"\nrecoverable = false\nconfidence = 0.5\npatterns = ['x']\nexplanation = \"e\"\n\n[[signature.actions]]\n{action}\n"
                ),
            )
            .unwrap();
            let err = Catalog::with_overrides(dir.path()).unwrap_err().to_string();
            assert!(err.contains("site.toml") && err.contains(word), "{err}");
        }
    }
}
