//! Ranks that disagree about one collective. PyTorch's watchdog prints the collective each rank timed
//! out in (`WorkNCCL(SeqNum=7219, OpType=BROADCAST, NumelIn=64, NumelOut=64, ...)`). Two ranks that
//! name the same sequence number of the same process group with another operation or another size
//! were not running the same program: the timeout is the symptom of that divergence. The finding is
//! one derived evidence line, which the catalog reads like any other.
//!
//! Lines that do not print their process group are taken to be of one group. Two groups whose
//! timed-out works have the same sequence number could then be confused; the watchdog prints the
//! group on its lines since PyTorch 2.2, and most jobs time out in one group at a time.
//!
//! Horovod's stall inspector lists each stalled tensor with the ranks ready to reduce it
//! (`HorovodAllreduce_loss_0 [ready ranks: 3]`). A lagging rank leaves every tensor with the same ranks
//! ready; two tensors whose ready ranks have none in common mean each group of ranks submitted a tensor
//! the other never will: the ranks run different programs.
//!
//! PyTorch's desync report (`TORCH_NCCL_DESYNC_DEBUG`) ends with a snapshot of each rank's latest
//! collective in one process group (`#315 started ranks:` then `[0, 1, 2] started ALLREDUCE`). A rank
//! runs its collectives in order, so one that has started #317 is past #315; ranks still in #315 cannot
//! be waiting for the same #315 it finished. Two groups of ranks started at different numbers
//! therefore count their collectives differently: the same divergence. (A rank that only finished an
//! earlier collective, or only scheduled a later one, may simply lag or run ahead.)

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use regex::Regex;

use super::DERIVED_PREFIX;
use crate::store::EvidenceLine;

static WORK: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)(?:, NumelIn=(?P<numel_in>\d+), NumelOut=(?P<numel_out>\d+))?",
    )
    .ok()
});
static GROUP: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"\[PG (?:ID )?(?P<pg>\d+)\b").ok());
static RANK: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"\bRank (?P<rank>\d+)\]").ok());
static READY: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?P<tensor>[\w./:-]+) \[ready ranks: (?P<ranks>\d+(?:, ?\d+)*)\]").ok()
});

static SNAPSHOT_HEADER: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"#(?P<seq>\d+) (?P<state>\w+) ranks:\s*$").ok());
static SNAPSHOT_GROUP: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"\[(?P<ranks>\d+(?:, ?\d+)*)\] (?P<state>\w+) (?P<op>_?[A-Z][A-Z_]*)\s*$").ok()
});

/// A process group (when the line names it) and a sequence number in it: one collective.
type Collective = (Option<u32>, u64);

/// The first rank that named a collective with a given view, and its line.
type View<'l> = (u32, Work, &'l EvidenceLine);

/// One rank's view of one collective.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Work {
    op: String,
    numel: Option<(u64, u64)>,
}

impl Work {
    fn describe(&self) -> String {
        match self.numel {
            Some((numel_in, _)) => format!("{} of {numel_in} elements", self.op),
            None => self.op.clone(),
        }
    }

    /// Whether two views of the same collective cannot both be right. A size printed by one rank only
    /// says nothing.
    fn disagrees_with(&self, other: &Work) -> bool {
        self.op != other.op || matches!((self.numel, other.numel), (Some(a), Some(b)) if a != b)
    }
}

/// The derived line saying which ranks disagree about which collective, when two do.
pub(super) fn disagreement(lines: &[EvidenceLine]) -> Option<EvidenceLine> {
    watchdog_disagreement(lines)
        .or_else(|| stalled_tensors_disagreement(lines))
        .or_else(|| snapshot_disagreement(lines))
}

/// Two ranks' watchdogs naming one collective with another operation or size.
fn watchdog_disagreement(lines: &[EvidenceLine]) -> Option<EvidenceLine> {
    let (work, group, rank) = (WORK.as_ref()?, GROUP.as_ref()?, RANK.as_ref()?);
    let mut seen: BTreeMap<Collective, Vec<View<'_>>> = BTreeMap::new();
    for line in lines {
        let Some(captures) = work.captures(&line.text) else {
            continue;
        };
        let Some(seq) = captures["seq"].parse::<u64>().ok() else {
            continue;
        };
        let Some(reporter) = rank
            .captures(&line.text)
            .and_then(|c| c["rank"].parse::<u32>().ok())
            .or(line.rank)
        else {
            continue;
        };
        let pg = group
            .captures(&line.text)
            .and_then(|c| c["pg"].parse::<u32>().ok());
        let numel = captures
            .name("numel_in")
            .zip(captures.name("numel_out"))
            .and_then(|(i, o)| Some((i.as_str().parse().ok()?, o.as_str().parse().ok()?)));
        let view = Work {
            op: captures["op"].to_string(),
            numel,
        };
        let views = seen.entry((pg, seq)).or_default();
        if let Some((other, theirs, first)) = views
            .iter()
            .find(|(other, theirs, _)| *other != reporter && theirs.disagrees_with(&view))
        {
            return Some(derived(
                line.time.max(first.time),
                format!(
                    "ranks disagree on collective #{seq}: rank {other} runs {}, rank {reporter} runs {}",
                    theirs.describe(),
                    view.describe()
                ),
            ));
        }
        if !views.iter().any(|(_, theirs, _)| *theirs == view) {
            views.push((reporter, view, line));
        }
    }
    None
}

/// Two tensors of Horovod's stall list whose ready ranks have none in common.
fn stalled_tensors_disagreement(lines: &[EvidenceLine]) -> Option<EvidenceLine> {
    let ready = READY.as_ref()?;
    let mut seen: Vec<(String, BTreeSet<u32>, &EvidenceLine)> = Vec::new();
    for line in lines {
        for captures in ready.captures_iter(&line.text) {
            let ranks: BTreeSet<u32> = captures["ranks"]
                .split(',')
                .filter_map(|rank| rank.trim().parse().ok())
                .collect();
            if ranks.is_empty() {
                continue;
            }
            let tensor = captures["tensor"].to_string();
            if let Some((other, theirs, first)) = seen
                .iter()
                .find(|(other, theirs, _)| *other != tensor && theirs.is_disjoint(&ranks))
            {
                return Some(derived(
                    line.time.max(first.time),
                    format!(
                        "ranks disagree on which tensors to reduce: {other} is ready on ranks {}, {tensor} on ranks {}",
                        list(theirs),
                        list(&ranks)
                    ),
                ));
            }
            if !seen.iter().any(|(_, theirs, _)| *theirs == ranks) {
                seen.push((tensor, ranks, line));
            }
        }
    }
    None
}

/// Two groups of ranks of a desync report's snapshot that started collectives of different numbers.
fn snapshot_disagreement(lines: &[EvidenceLine]) -> Option<EvidenceLine> {
    let (header, group) = (SNAPSHOT_HEADER.as_ref()?, SNAPSHOT_GROUP.as_ref()?);
    // The number the snapshot's last header names, while its groups follow.
    let mut current: Option<u64> = None;
    let mut started: Option<(u64, String, String, &EvidenceLine)> = None;
    for line in lines {
        if let Some(captures) = header.captures(&line.text) {
            current = (&captures["state"] == "started")
                .then(|| captures["seq"].parse().ok())
                .flatten();
            continue;
        }
        let Some(captures) = group.captures(&line.text) else {
            continue;
        };
        let Some(seq) = current.filter(|_| &captures["state"] == "started") else {
            continue;
        };
        let (ranks, op) = (captures["ranks"].to_string(), captures["op"].to_string());
        match &started {
            Some((first_seq, first_ranks, first_op, first)) if *first_seq != seq => {
                return Some(derived(
                    line.time.max(first.time),
                    format!(
                        "ranks disagree on the collectives' count: ranks {first_ranks} started {first_op} #{first_seq}, ranks {ranks} started {op} #{seq}"
                    ),
                ));
            }
            Some(_) => {}
            None => started = Some((seq, ranks, op, line)),
        }
    }
    None
}

/// A derived line of no rank, at the time the later of its two lines was written.
fn derived(time: DateTime<Utc>, finding: String) -> EvidenceLine {
    EvidenceLine {
        time,
        rank: None,
        text: format!("{DERIVED_PREFIX}{finding}"),
    }
}

fn list(ranks: &BTreeSet<u32>) -> String {
    ranks
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str) -> EvidenceLine {
        EvidenceLine {
            time: Utc::now(),
            rank: None,
            text: text.to_string(),
        }
    }

    fn watchdog(rank: u32, seq: u64, op: &str, numel: u64) -> EvidenceLine {
        line(&format!(
            "[rank{rank}]:[E918 19:29:24.436955737 ProcessGroupNCCL.cpp:689] [Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel}, NumelOut={numel}, Timeout(ms)=1800000) ran for 1800077 milliseconds before timing out."
        ))
    }

    #[test]
    fn two_ranks_broadcasting_different_sizes_at_one_sequence_number_disagree() {
        let found = disagreement(&[
            watchdog(3, 7219, "BROADCAST", 64),
            watchdog(2, 7219, "BROADCAST", 24_084_544),
        ])
        .unwrap();
        assert_eq!(
            found.text,
            "runguard: ranks disagree on collective #7219: rank 3 runs BROADCAST of 64 elements, rank 2 runs BROADCAST of 24084544 elements"
        );
    }

    #[test]
    fn ranks_timing_out_in_the_same_collective_or_at_other_numbers_agree() {
        // The usual timeout: every rank waits in the same all-reduce.
        let same: Vec<_> = (0..8)
            .map(|rank| watchdog(rank, 1559, "ALLREDUCE", 1024))
            .collect();
        assert_eq!(disagreement(&same), None);
        // Ranks stuck at different sequence numbers: a lagging rank, not two programs.
        assert_eq!(
            disagreement(&[
                watchdog(0, 315, "ALLREDUCE", 1),
                watchdog(7, 183, "BROADCAST", 64),
            ]),
            None
        );
        // One rank's two lines about one work are one view.
        assert_eq!(
            disagreement(&[
                watchdog(1, 9, "ALLGATHER", 8),
                watchdog(1, 9, "ALLGATHER", 8)
            ]),
            None
        );
    }

    #[test]
    fn the_same_number_in_two_named_process_groups_is_two_collectives() {
        let lines = [
            line(
                "[PG ID 1 PG GUID 1 Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=40, OpType=ALLREDUCE, NumelIn=4096, NumelOut=4096, Timeout(ms)=600000)",
            ),
            line(
                "[PG ID 2 PG GUID 2 Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=40, OpType=ALLGATHER, NumelIn=16, NumelOut=128, Timeout(ms)=600000)",
            ),
        ];
        assert_eq!(disagreement(&lines), None);
    }

    #[test]
    fn another_operation_at_the_same_number_disagrees_though_sizes_are_not_printed() {
        let lines = [
            line(
                "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800493 milliseconds before timing out.",
            ),
            line(
                "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=BARRIER, Timeout(ms)=1800000) ran for 1800410 milliseconds before timing out.",
            ),
        ];
        let found = disagreement(&lines).unwrap();
        assert!(
            found
                .text
                .ends_with("rank 0 runs ALLREDUCE, rank 1 runs BARRIER")
        );
    }

    /// The snapshot of a desync report, as tests/fixtures/corpus/field/cases/537-... shows it.
    fn snapshot(groups: &[(&str, &str)]) -> Vec<EvidenceLine> {
        let mut lines = vec![line(
            "[rank0]:[E515 18:36:47.343377708 ProcessGroupNCCL.cpp:1937] Rank 0",
        )];
        for (header, group) in groups {
            lines.push(line(&format!("           {header}")));
            lines.push(line(&format!("             {group}")));
        }
        lines
    }

    #[test]
    fn ranks_started_at_different_numbers_in_a_desync_snapshot_disagree() {
        let found = disagreement(&snapshot(&[
            ("#182 finished ranks:", "[7] finished ALLREDUCE"),
            ("#315 started ranks:", "[0, 1, 2] started ALLREDUCE"),
            (
                "#317 started ranks:",
                "[3, 4, 5, 6] started _ALLGATHER_BASE",
            ),
        ]))
        .unwrap();
        assert_eq!(
            found.text,
            "runguard: ranks disagree on the collectives' count: ranks 0, 1, 2 started ALLREDUCE #315, ranks 3, 4, 5, 6 started _ALLGATHER_BASE #317"
        );
    }

    #[test]
    fn a_rank_that_lags_or_runs_ahead_in_a_desync_snapshot_is_no_disagreement() {
        // One rank finished the collective before the one the others started.
        assert_eq!(
            disagreement(&snapshot(&[
                ("#182 finished ranks:", "[7] finished ALLREDUCE"),
                (
                    "#183 started ranks:",
                    "[0, 1, 2, 3, 4, 5, 6] started ALLREDUCE"
                ),
            ])),
            None
        );
        // One rank only scheduled a later collective: it may have queued it ahead.
        assert_eq!(
            disagreement(&snapshot(&[
                ("#40 started ranks:", "[0, 1] started ALLREDUCE"),
                ("#41 scheduled ranks:", "[2] scheduled ALLREDUCE"),
            ])),
            None
        );
    }

    #[test]
    fn stalled_tensors_ready_on_disjoint_ranks_disagree() {
        let lines = [line(
            "WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more than 60 seconds. Stalled ops: HorovodAllreduce_loss_Mean_0 [ready ranks: 3], HorovodAllreduce_grads_conv1_0 [ready ranks: 2, 0, 1], HorovodAllreduce_grads_conv2_0 [ready ranks: 2, 0, 1], HorovodAllre",
        )];
        let found = disagreement(&lines).unwrap();
        assert_eq!(
            found.text,
            "runguard: ranks disagree on which tensors to reduce: HorovodAllreduce_loss_Mean_0 is ready on ranks 3, HorovodAllreduce_grads_conv1_0 on ranks 0, 1, 2"
        );
    }

    #[test]
    fn stalled_tensors_all_waiting_for_the_same_rank_agree() {
        // A lagging rank: every tensor is ready on the same ranks, whatever order they are listed in.
        let lines = [
            line("allreduce.conv1.weight [ready ranks: 0, 7, 3, 2, 4, 6],"),
            line("allreduce.layer1.0.conv2.weight [ready ranks: 0, 7, 3, 4, 2, 6],"),
            line("allreduce.fc.bias [ready ranks: 0, 7, 3, 4, 2, 6]"),
        ];
        assert_eq!(disagreement(&lines), None);
        // Ready sets that overlap are ranks at different speeds, not different programs.
        let overlapping = [
            line("allreduce.a [ready ranks: 0, 1]"),
            line("allreduce.b [ready ranks: 1, 2]"),
        ];
        assert_eq!(disagreement(&overlapping), None);
    }
}
