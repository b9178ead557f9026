//! Attribution: from an attempt's evidence lines to a category, a component, a culprit and a confidence.

pub(crate) mod blocks;
pub mod catalog;
mod collectives;
pub mod correlate;
mod culprit;
mod precedence;
pub mod quality;
pub mod rejoin;
mod resolution;
pub mod scan;

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, Utc};

pub use catalog::{Catalog, CatalogError, ContextScope};

use crate::model::{AnomalyKind, Attribution, Component, Culprit, WorkflowId};
use crate::store::EvidenceLine;
pub use crate::telemetry::pipeline::blamed_host;

/// What a line derived from several lines of the log starts with (ranks that disagree, an `ibstat`
/// port section read whole), so it is never taken for a line of the log.
pub const DERIVED_PREFIX: &str = "runguard: ";

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
    attribute_showing(catalog, evidence).0
}

/// [`attribute`], and whether a signature that fails a run alone applies to the evidence (its context
/// holds, no later line cleared it), whichever signature then explains the failure: a log that shows
/// no failure but conditions a run lives with (a disk nearly full, a process seen in D state) shows
/// none.
pub fn attribute_showing(catalog: &Catalog, evidence: &Evidence<'_>) -> (Attribution, bool) {
    with_derived_lines(evidence, |evidence| attribute_lines(catalog, evidence))
}

/// `then` of the evidence with what its lines say together (ranks that disagree about one
/// collective) read as one more line.
fn with_derived_lines<T>(evidence: &Evidence<'_>, then: impl FnOnce(&Evidence<'_>) -> T) -> T {
    match collectives::disagreement(evidence.lines) {
        Some(derived) => {
            let mut lines = evidence.lines.to_vec();
            lines.push(derived);
            then(&Evidence {
                lines: &lines,
                ..evidence.clone()
            })
        }
        None => then(evidence),
    }
}

/// The signatures each evidence line matches, and every signature that applies with its lines: its
/// context inside the same block, and not cleared by a later line.
fn applying(
    catalog: &Catalog,
    evidence: &Evidence<'_>,
) -> (Vec<Vec<usize>>, BTreeMap<usize, Vec<usize>>) {
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
    // A condition a later line says cleared (a retry that then succeeded) is no failure.
    hits.retain(|&signature, own| {
        !resolution::cleared(&catalog.signatures()[signature], own, evidence.lines)
    });
    (matches, hits)
}

fn attribute_lines(catalog: &Catalog, evidence: &Evidence<'_>) -> (Attribution, bool) {
    let (matches, hits) = applying(catalog, evidence);
    let shows_failure = hits
        .keys()
        .any(|&signature| catalog.signatures()[signature].spec.fails_alone);
    let ranked = precedence::rank(catalog, &hits, evidence.lines);
    let Some((index, own)) = ranked else {
        return (unmatched(evidence), shows_failure);
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
    let attribution = Attribution {
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
    };
    (attribution, shows_failure)
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
    fn a_timeout_every_rank_reports_after_ib_errors_on_both_nodes_has_suspects_not_a_culprit() {
        let catalog = Catalog::builtin().unwrap();
        let ib = |node: &str| {
            format!(
                "{node}:4242:4243 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.9<1234> with status=12 opcode=0 len=0 vendor err 129 (Recv)"
            )
        };
        let watchdog = |rank: u32| {
            format!(
                "[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=15, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600050 milliseconds before timing out."
            )
        };
        let lines = [
            line(Some(0), &ib("n1")),
            line(Some(1), &ib("n2")),
            line(Some(0), &watchdog(0)),
            line(None, "srun: error: n1: task 0: Exited with exit code 1"),
            line(Some(1), &watchdog(1)),
            line(None, "srun: error: n2: task 1: Exited with exit code 1"),
        ];
        let nodes = ["n1", "n2"].map(String::from).to_vec();
        let mut evidence = evidence(&lines, &nodes);
        evidence.ranks_per_node = 1;
        let attribution = attribute(&catalog, &evidence);
        assert_eq!(attribution.category, "nccl_timeout");
        // Rank 0's watchdog speaks first, but every rank's does: no culprit.
        assert_eq!(attribution.culprit.node, None, "{attribution:#?}");
        assert_eq!(attribution.culprit.rank, None);
        assert_eq!(attribution.culprit.suspects, ["n1", "n2"]);
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

    fn at(seconds: i64, rank: Option<u32>, text: &str) -> EvidenceLine {
        let start = DateTime::parse_from_rfc3339("2026-01-05T09:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        EvidenceLine {
            time: start + chrono::Duration::seconds(seconds),
            rank,
            text: text.to_string(),
        }
    }

    #[test]
    fn srun_retries_a_created_step_ends_are_no_failure_and_those_nothing_ends_are() {
        let catalog = Catalog::builtin().unwrap();
        let nodes = nodes();
        let retry = "srun: Job 4201 step creation temporarily disabled, retrying (Requested nodes are busy)";
        let waiting = [at(0, None, retry), at(30, None, retry)];
        let attribution = attribute(&catalog, &evidence(&waiting, &nodes));
        assert_eq!(attribution.category, "capacity_pending", "{attribution:#?}");

        let created = [
            at(0, None, retry),
            at(30, None, retry),
            at(31, None, "srun: Step created for StepId=4201.1"),
        ];
        let attribution = attribute(&catalog, &evidence(&created, &nodes));
        assert_ne!(attribution.category, "capacity_pending", "{attribution:#?}");
        // The step created is evidence the scan keeps, though no signature matches it.
        assert!(catalog.is_notable("srun: Step created for StepId=4201.1"));
        assert!(
            catalog
                .matching("srun: Step created for StepId=4201.1")
                .is_empty()
        );

        // A retry after the step was created waits again.
        let again = [
            at(0, None, retry),
            at(31, None, "srun: Step created for StepId=4201.1"),
            at(60, None, retry),
        ];
        let attribution = attribute(&catalog, &evidence(&again, &nodes));
        assert_eq!(attribution.category, "capacity_pending", "{attribution:#?}");
    }

    #[test]
    fn a_dataloader_frame_in_another_rank_s_traceback_does_not_make_an_oom_the_dataloader_s() {
        let catalog = Catalog::builtin().unwrap();
        let nodes = nodes();
        let dataloader_frame = "  File \"/usr/lib/python3/site-packages/torch/utils/data/_utils/fetch.py\", line 52, in fetch";
        // Rank 0 fails in its input pipeline on a bad record; rank 1 runs out of GPU memory in the model.
        let apart = [
            at(0, Some(0), "Traceback (most recent call last):"),
            at(0, Some(1), "Traceback (most recent call last):"),
            at(0, Some(0), dataloader_frame),
            at(0, Some(1), "  File \"/w/model.py\", line 88, in forward"),
            at(0, Some(0), "KeyError: 'label'"),
            at(
                0,
                Some(1),
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
            ),
        ];
        let attribution = attribute(&catalog, &evidence(&apart, &nodes));
        assert_eq!(attribution.category, "cuda_oom", "{attribution:#?}");
        assert_eq!(attribution.culprit.rank, Some(1));

        // The same frame in the OOM's own traceback is its context.
        let together = [
            at(0, Some(1), "Traceback (most recent call last):"),
            at(0, Some(1), dataloader_frame),
            at(
                0,
                Some(1),
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
            ),
        ];
        let attribution = attribute(&catalog, &evidence(&together, &nodes));
        assert_eq!(attribution.category, "dataloader_oom", "{attribution:#?}");
    }

    #[test]
    fn a_context_of_an_earlier_traceback_of_the_same_rank_does_not_count() {
        let catalog = Catalog::builtin().unwrap();
        let nodes = nodes();
        let lines = [
            at(0, Some(2), "Traceback (most recent call last):"),
            at(
                0,
                Some(2),
                "  File \"/opt/conda/lib/python3.10/site-packages/torch/serialization.py\", line 1025, in load",
            ),
            at(
                0,
                Some(2),
                "FileNotFoundError: [Errno 2] No such file or directory: 'ckpt/latest'",
            ),
            at(30, Some(2), "Traceback (most recent call last):"),
            at(
                30,
                Some(2),
                "  File \"/w/train.py\", line 200, in train_step",
            ),
            at(
                30,
                Some(2),
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.",
            ),
        ];
        let attribution = attribute(&catalog, &evidence(&lines, &nodes));
        assert_ne!(
            attribution.signature.as_deref(),
            Some("mem-cuda-oom-loading-checkpoint"),
            "{attribution:#?}"
        );
        assert_eq!(attribution.category, "cuda_oom");
    }

    #[test]
    fn an_xid_outranks_the_more_confident_nccl_watchdog_timeout_it_caused() {
        let catalog = Catalog::builtin().unwrap();
        let xid = catalog.signature("hw-xid-13-31-gpu-exception").unwrap();
        let watchdog = catalog.signature("nccl-collective-timeout").unwrap();
        assert!(xid.spec.confidence < watchdog.spec.confidence);
        let lines = [
            at(
                0,
                None,
                "Jan  5 08:30:12 node-02 kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=1234, name=python, Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0): Out Of Range Address",
            ),
            at(
                600,
                Some(3),
                "[rank3]:[E1122 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for 600050 milliseconds before timing out.",
            ),
        ];
        let nodes = nodes();
        let attribution = attribute(&catalog, &evidence(&lines, &nodes));
        assert_eq!(attribution.category, "gpu_fault", "{attribution:#?}");
        assert_eq!(attribution.culprit.node.as_deref(), Some("node-02"));
    }

    #[test]
    fn the_first_xid_of_a_cascade_wins_and_an_xid_days_later_is_another_incident() {
        let catalog = Catalog::builtin().unwrap();
        let nodes = nodes();
        let xid = |seconds, code: &str| {
            at(
                seconds,
                None,
                &format!(
                    "node-07 kernel: NVRM: Xid (PCI:0000:0a:00): {code}, pid='<unknown>', name=<unknown>"
                ),
            )
        };
        // Xid 31 (an MMU fault) tears the channels down: the GSP timeout (Xid 62) follows 40 s later.
        let cascade = [xid(0, "31"), xid(40, "62"), xid(41, "45")];
        let attribution = attribute(&catalog, &evidence(&cascade, &nodes));
        assert_eq!(
            attribution.signature.as_deref(),
            Some("hw-xid-13-31-gpu-exception"),
            "{attribution:#?}"
        );
        assert_eq!(attribution.culprit.node.as_deref(), Some("node-07"));
        // Days apart, the Xid 94 is its own failure and the more confident one wins.
        let apart = [xid(0, "43"), xid(4 * 86_400, "94")];
        let attribution = attribute(&catalog, &evidence(&apart, &nodes));
        assert_eq!(attribution.category, "gpu_ecc", "{attribution:#?}");
    }

    #[test]
    fn an_ecc_count_from_nvidia_smi_is_no_xid_of_the_cascade_that_follows() {
        let catalog = Catalog::builtin().unwrap();
        let nodes = nodes();
        let lines = [
            at(
                0,
                None,
                "node-02 gpu status: nvidia-smi: GPU 2 (0000:3a:00.0) 1 volatile uncorrectable ECC errors, row remapping pending",
            ),
            at(
                40,
                None,
                "2026-01-05T08:00:40+00:00 node-02 kernel: NVRM: Xid (PCI:0000:3a:00): 79, pid=4242, name=python, GPU has fallen off the bus. [GPU 2]",
            ),
        ];
        let attribution = attribute(&catalog, &evidence(&lines, &nodes));
        assert_eq!(attribution.category, "xid_79", "{attribution:#?}");
        assert_eq!(attribution.culprit.gpu, Some(2));
    }

    fn load_error(toml: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("site.toml"), toml).unwrap();
        Catalog::with_overrides(dir.path()).unwrap_err().to_string()
    }

    #[test]
    fn an_unknown_outranked_signature_category_or_sequence_fails_the_load_naming_file_and_line() {
        let head = "[[signature]]\nid = \"s\"\ntitle = \"t\"\ncategory = \"gpu_fault\"\nconfidence = 0.5\npatterns = ['x']\nexplanation = \"e\"\n";
        for (field, word) in [
            (
                "outranks = [\"nccl-collective-timeout\", \"nccl-colective-timeout\"]",
                "nccl-colective-timeout",
            ),
            ("outranks = [\"category:nccl_timeot\"]", "nccl_timeot"),
            ("sequence = \"xids\"", "xids"),
        ] {
            let err = load_error(&format!("{head}{field}\n"));
            assert!(
                err.contains("site.toml") && err.contains("line 8") && err.contains(word),
                "{err}"
            );
        }
    }

    #[test]
    fn a_user_signature_outranking_a_category_wins_over_its_more_confident_signatures() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("site.toml"),
            "[[signature]]\nid = \"site-fabric-alarm\"\ntitle = \"t\"\ncategory = \"ib_link\"\nconfidence = 0.3\npatterns = ['FABRIC ALARM on (?P<node>[\\w-]+)']\noutranks = [\"category:nccl_timeout\"]\nexplanation = \"e\"\n",
        )
        .unwrap();
        let catalog = Catalog::with_overrides(dir.path()).unwrap();
        let lines = [
            at(0, None, "FABRIC ALARM on node-08"),
            at(
                600,
                Some(3),
                "[rank3]:[E1122 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for 600050 milliseconds before timing out.",
            ),
        ];
        let nodes = nodes();
        let attribution = attribute(&catalog, &evidence(&lines, &nodes));
        assert_eq!(attribution.signature.as_deref(), Some("site-fabric-alarm"));
        assert_eq!(attribution.culprit.node.as_deref(), Some("node-08"));
    }

    #[test]
    fn a_shell_prompt_locates_an_xid_pasted_from_dmesg() {
        let catalog = Catalog::builtin().unwrap();
        let lines = [
            at(0, None, "root@node4:~# dmesg -T |grep NVRM"),
            at(
                0,
                None,
                "[Fri Aug  9 13:32:56 2024] NVRM: Xid (PCI:0000:00:08): 94, pid='<unknown>', name=<unknown>, Contained: SM (0x1). RST: No, D-RST: No",
            ),
        ];
        let attribution = attribute(&catalog, &evidence(&lines, &[]));
        assert_eq!(attribution.category, "gpu_ecc");
        assert_eq!(attribution.culprit.node.as_deref(), Some("node4"));
    }

    #[test]
    fn an_mpi_abort_locates_the_failure_of_its_own_rank_only() {
        let catalog = Catalog::builtin().unwrap();
        let abort = |rank: u32, node: &str| {
            format!(
                "MPICH ERROR [Rank {rank}] [job id 57638547.0] [Fri Aug 28 22:45:13 2026] [{node}] - Abort(1) (rank {rank} in comm 432): application called MPI_Abort(comm=0xC4000001, 1) - process {rank}"
            )
        };
        let error = "cudaSetDevice(cuda_device_id) error( cudaErrorDevicesUnavailable): CUDA-capable device(s) is/are busy or unavailable";
        let own = [
            line(Some(2047), error),
            line(Some(2047), &abort(2047, "nid004069")),
        ];
        let attribution = attribute(&catalog, &evidence(&own, &[]));
        assert_eq!(attribution.category, "gpu_fault");
        assert_eq!(attribution.culprit.node.as_deref(), Some("nid004069"));
        assert_eq!(attribution.culprit.rank, Some(2047));
        // Another rank's abort says where that rank ran, not where the failing one did.
        let other = [
            line(Some(2047), error),
            line(Some(12), &abort(12, "nid000033")),
        ];
        let attribution = attribute(&catalog, &evidence(&other, &[]));
        assert_eq!(attribution.culprit.node, None, "{attribution:#?}");
        assert_eq!(attribution.culprit.rank, Some(2047));
    }

    #[test]
    fn a_login_node_s_prompt_before_a_launcher_or_a_cluster_query_locates_nothing() {
        let catalog = Catalog::builtin().unwrap();
        let xid = "[Fri Aug  9 13:32:56 2024] NVRM: Xid (PCI:0000:00:08): 94, pid='<unknown>', name=<unknown>, Contained: SM (0x1). RST: No, D-RST: No";
        // What srun, ssh or sinfo print is other hosts' output, not the login node's.
        for prompt in [
            "[alice@login01 ~]$ srun -N 2 --gpus-per-node=8 python train.py",
            "alice@login01:~$ ssh gpu-17 dmesg -T",
            "alice@login01 ~ % sudo /usr/bin/sinfo -R",
        ] {
            let lines = [at(0, None, prompt), at(0, None, xid)];
            let attribution = attribute(&catalog, &evidence(&lines, &[]));
            assert_eq!(attribution.category, "gpu_ecc");
            assert_eq!(attribution.culprit.node, None, "{prompt}");
        }
        // A command naming one of those words further on is still run on the prompt's host.
        assert_eq!(
            catalog.located_node("root@node4:~# dmesg -T | grep -v ssh"),
            Some("node4")
        );
    }

    #[test]
    fn several_hosts_with_the_same_failure_name_no_culprit() {
        let catalog = Catalog::builtin().unwrap();
        let lines = [
            at(
                0,
                None,
                "H100-2:19989:20082 [1] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer fe80::966d:ae03:8b:df78%ib0<53249> with error 4, opcode 32564, len 32564, vendor err 81 (Send)",
            ),
            at(
                0,
                None,
                "H100-1:9821:9920 [1] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer fe80::966d:ae03:8b:df50%ib0<44413> with error 4, opcode 32613, len 32613, vendor err 81 (Send)",
            ),
        ];
        let allocation = ["H100-1", "H100-2"].map(String::from).to_vec();
        let attribution = attribute(&catalog, &evidence(&lines, &allocation));
        assert_eq!(attribution.category, "ib_link");
        assert_eq!(attribution.culprit.node, None, "{attribution:#?}");
        // Both stay suspects, for a policy that evicts them all; a host outside the allocation never.
        assert_eq!(attribution.culprit.suspects, ["H100-2", "H100-1"]);
        let outside = attribute(&catalog, &evidence(&lines, &["H100-1".to_string()]));
        assert_eq!(
            outside.culprit.suspects,
            Vec::<String>::new(),
            "{outside:#?}"
        );
    }

    #[test]
    fn a_peer_error_in_a_log_alone_blames_no_host_but_a_node_of_the_allocation_it_does() {
        let catalog = Catalog::builtin().unwrap();
        let lines = [at(
            0,
            None,
            "kp-ddp-worker-0:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer 10.216.210.236<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv)",
        )];
        let attribution = attribute(&catalog, &evidence(&lines, &[]));
        assert_eq!(attribution.category, "ib_link");
        assert_eq!(attribution.culprit.node, None, "{attribution:#?}");
        let allocation = ["kp-ddp-worker-0", "kp-ddp-worker-1"]
            .map(String::from)
            .to_vec();
        let attribution = attribute(&catalog, &evidence(&lines, &allocation));
        assert_eq!(attribution.culprit.node.as_deref(), Some("kp-ddp-worker-0"));
    }

    #[test]
    fn a_local_adapter_fault_is_its_host_s_though_a_peer_error_signature_matches_it_too() {
        let catalog = Catalog::builtin().unwrap();
        let lines = [at(
            0,
            Some(12),
            "gpu-node-4:815:864 [0] transport/net_ib.cu:80 NCCL WARN NET/IB : Got async event : local catastrophic error",
        )];
        let attribution = attribute(&catalog, &evidence(&lines, &[]));
        assert_eq!(attribution.category, "ib_link");
        assert_eq!(attribution.culprit.node.as_deref(), Some("gpu-node-4"));
    }

    #[test]
    fn a_prompt_inside_a_deployment_s_pod_names_the_pod_not_a_node() {
        let catalog = Catalog::builtin().unwrap();
        assert_eq!(
            catalog.located_node(
                "(base) tom@fragrant-fragment-9255-6f94d7cb65-cc8qj:~/code$ python train.py"
            ),
            None
        );
        // A node whose name merely ends in numbers is still one.
        assert_eq!(
            catalog.located_node("root@gpu-node-20240117-48213:~# dmesg"),
            Some("gpu-node-20240117-48213")
        );
    }

    #[test]
    fn ranks_timing_out_in_one_collective_of_different_sizes_diverged() {
        let catalog = Catalog::builtin().unwrap();
        let watchdog = |rank: u32, numel: u64| {
            at(
                0,
                Some(rank),
                &format!(
                    "[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7219, OpType=BROADCAST, NumelIn={numel}, NumelOut={numel}, Timeout(ms)=1800000) ran for 1800077 milliseconds before timing out."
                ),
            )
        };
        let attribution = attribute(
            &catalog,
            &evidence(&[watchdog(3, 64), watchdog(2, 64)], &[]),
        );
        assert_eq!(attribution.category, "nccl_timeout");
        let attribution = attribute(
            &catalog,
            &evidence(&[watchdog(3, 64), watchdog(2, 24_084_544)], &[]),
        );
        assert_eq!(attribution.category, "rank_divergence");
        assert!(!attribution.recoverable);
        assert!(
            attribution
                .evidence
                .iter()
                .any(|line| line.contains("rank 3 runs BROADCAST of 64 elements")),
            "{:?}",
            attribution.evidence
        );
    }

    #[test]
    fn an_oom_in_a_torchscript_backward_op_is_the_activations_alone_or_inside_a_python_traceback() {
        let catalog = Catalog::builtin().unwrap();
        let torchscript = [
            "Traceback of TorchScript (most recent call last):",
            "  File \"<string>\", line 61, in <backward op>",
            "            def backward(grad_output):",
            "                grad_self = torch._gelu_backward(grad_output, self)",
            "RuntimeError: CUDA out of memory. Tried to allocate 6.00 GiB (GPU 0; 39.59 GiB total capacity; 31.02 GiB already allocated)",
        ];
        let python = [
            "Traceback (most recent call last):",
            "  File \"train.py\", line 88, in <module>",
            "    loss = model(batch)",
            "RuntimeError: The following operation failed in the TorchScript interpreter.",
        ];
        for lines in [
            torchscript.to_vec(),
            python.iter().chain(&torchscript).copied().collect(),
        ] {
            let lines: Vec<_> = lines.iter().map(|text| at(0, Some(0), text)).collect();
            let attribution = attribute(&catalog, &evidence(&lines, &[]));
            assert_eq!(attribution.category, "activation_oom", "{lines:?}");
        }
    }

    #[test]
    fn a_redacted_host_prefix_names_no_culprit() {
        let catalog = Catalog::builtin().unwrap();
        let lines = [at(
            0,
            None,
            "...-48:34050:34121 [0] transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : port error",
        )];
        let attribution = attribute(&catalog, &evidence(&lines, &[]));
        assert_eq!(attribution.category, "ib_link");
        assert_eq!(attribution.culprit.node, None);
    }

    #[test]
    fn a_peer_error_blames_no_host_that_only_other_warnings_name_outside_the_allocation() {
        let catalog = Catalog::builtin().unwrap();
        // The peer error's own line has no host prefix NCCL's parser knows; the warning after it does.
        let lines = [
            at(
                0,
                None,
                "NCCL WARN Call to recv failed : Connection reset by peer",
            ),
            at(
                0,
                None,
                "worker-3:15:91 [3] transport.cc:153 NCCL WARN transport.cc:153 -> 2 [Proxy thread error]",
            ),
        ];
        let attribution = attribute(&catalog, &evidence(&lines, &[]));
        assert_eq!(attribution.category, "nccl_error", "{attribution:#?}");
        assert_eq!(attribution.culprit.node, None, "{attribution:#?}");
        let allocation = ["worker-3", "worker-4"].map(String::from).to_vec();
        let attribution = attribute(&catalog, &evidence(&lines, &allocation));
        assert_eq!(attribution.culprit.node.as_deref(), Some("worker-3"));
    }

    #[test]
    fn a_time_limit_has_no_culprit_even_where_its_lines_name_a_node() {
        let catalog = Catalog::builtin().unwrap();
        let lines = [
            at(
                0,
                None,
                "slurmstepd: error: *** STEP 32233190.0 ON nid01934 CANCELLED AT 2020-07-03T02:59:56 DUE TO TIME LIMIT ***",
            ),
            at(0, None, "srun: error: nid01934: tasks 2,4-5,7: Terminated"),
        ];
        let attribution = attribute(&catalog, &evidence(&lines, &[]));
        assert_eq!(attribution.category, "time_limit");
        assert_eq!(attribution.culprit, Culprit::default());
    }
}
