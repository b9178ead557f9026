//! A node that goes quiet: every rank it runs stops writing while the ranks of the other nodes go on.
//! A node whose slurmd and processes hang (a frozen kernel, a dead NIC under NFS) looks exactly like
//! this long before the scheduler notices: Slurm declares it only after `SlurmdTimeout`.

use std::collections::{HashMap, VecDeque};

use chrono::{DateTime, Utc};

/// Gaps remembered per node to learn how often its ranks write.
const GAPS_KEPT: usize = 8;

/// A node must have been heard this many times, over at least twice the silence threshold, before its
/// silence means anything: many jobs print progress from one rank only, and the other ranks' start-up
/// lines (NCCL's init, a banner) are not a node going quiet when they end.
const MIN_HEARINGS: u32 = 6;

/// Silence must also be this many times the longest recent gap between two hearings of the node.
const GAP_FACTOR: i64 = 4;

#[derive(Debug, Clone, Default)]
struct Heard {
    first: Option<DateTime<Utc>>,
    last: Option<DateTime<Utc>>,
    gaps: VecDeque<i64>,
    hearings: u32,
    /// When each of the node's ranks last wrote.
    ranks: HashMap<u32, DateTime<Utc>>,
}

/// When each node of one attempt was last heard from.
#[derive(Debug, Clone, Default)]
pub struct NodeSilence {
    nodes: HashMap<String, Heard>,
}

/// A node gone quiet: how long it has been silent, and how long the others have not.
#[derive(Debug, Clone, PartialEq)]
pub struct QuietNode {
    pub node: String,
    pub silent_secs: i64,
    pub others_silent_secs: i64,
}

impl NodeSilence {
    /// A read at `at` had lines from `rank`, which runs on `node`.
    pub fn heard(&mut self, node: &str, rank: u32, at: DateTime<Utc>) {
        let heard = self.nodes.entry(node.to_string()).or_default();
        heard.ranks.insert(rank, at);
        if let Some(last) = heard.last {
            let gap = (at - last).num_milliseconds();
            if gap <= 0 {
                return;
            }
            if heard.gaps.len() == GAPS_KEPT {
                heard.gaps.pop_front();
            }
            heard.gaps.push_back(gap);
        }
        heard.first.get_or_insert(at);
        heard.last = Some(at);
        heard.hearings += 1;
    }

    /// Nodes silent for at least `min_silence_secs` (and for several of their usual gaps) while every
    /// rank of some other node was heard within half of that. Every rank, not one: many jobs print
    /// from all ranks while they start and from one rank only afterwards, and that is not a node
    /// going quiet.
    pub fn quiet(&self, now: DateTime<Utc>, min_silence_secs: u64) -> Vec<QuietNode> {
        let min_silence = min_silence_secs as i64 * 1000;
        let silence = |heard: &Heard| heard.last.map(|last| (now - last).num_milliseconds());
        let mut quiet = Vec::new();
        for (node, heard) in &self.nodes {
            let Some(silent) = silence(heard) else {
                continue;
            };
            let usual = heard
                .gaps
                .iter()
                .copied()
                .max()
                .unwrap_or(i64::MAX / GAP_FACTOR);
            let spoke_for = match (heard.first, heard.last) {
                (Some(first), Some(last)) => (last - first).num_milliseconds(),
                _ => 0,
            };
            if heard.hearings < MIN_HEARINGS
                || spoke_for < 2 * min_silence
                || silent < min_silence
                || silent < usual * GAP_FACTOR
            {
                continue;
            }
            // The longest silence among the ranks of the liveliest other node.
            let others = self
                .nodes
                .iter()
                .filter(|(other, _)| *other != node)
                .filter_map(|(_, heard)| {
                    heard
                        .ranks
                        .values()
                        .map(|last| (now - *last).num_milliseconds())
                        .max()
                })
                .min();
            if let Some(others) = others
                && others * 2 <= min_silence
            {
                quiet.push(QuietNode {
                    node: node.clone(),
                    silent_secs: silent / 1000,
                    others_silent_secs: others / 1000,
                });
            }
        }
        quiet.sort_by(|a, b| a.node.cmp(&b.node));
        quiet
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::*;

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::<Utc>::UNIX_EPOCH + TimeDelta::seconds(seconds)
    }

    /// n1 and n2 write every second until n2 stops at `stop`.
    fn two_nodes(stop: i64, until: i64) -> NodeSilence {
        let mut silence = NodeSilence::default();
        for second in 0..=until {
            silence.heard("n1", 0, at(second));
            silence.heard("n1", 1, at(second));
            if second <= stop {
                silence.heard("n2", 2, at(second));
                silence.heard("n2", 3, at(second));
            }
        }
        silence
    }

    #[test]
    fn a_node_whose_ranks_stop_while_the_others_go_on_is_quiet() {
        let silence = two_nodes(40, 60);
        assert_eq!(
            silence.quiet(at(60), 15),
            [QuietNode {
                node: "n2".into(),
                silent_secs: 20,
                others_silent_secs: 0
            }]
        );
        // Not yet at the threshold.
        assert!(two_nodes(40, 50).quiet(at(50), 15).is_empty());
        // Start-up lines only (ten seconds of them) are not a node that went quiet.
        assert!(two_nodes(10, 60).quiet(at(60), 15).is_empty());
    }

    #[test]
    fn ranks_that_printed_while_starting_and_stopped_together_are_not_a_quiet_node() {
        // Every rank prints for a minute while the job starts, then only the last rank (on n2).
        let mut silence = NodeSilence::default();
        for second in 0..=120 {
            for rank in 0..4 {
                if second <= 60 || rank == 3 {
                    silence.heard(if rank < 2 { "n1" } else { "n2" }, rank, at(second));
                }
            }
        }
        assert!(silence.quiet(at(120), 15).is_empty());
    }

    #[test]
    fn every_node_silent_is_a_hang_of_the_job_not_a_quiet_node() {
        let silence = two_nodes(40, 40);
        assert!(silence.quiet(at(90), 15).is_empty());
    }

    #[test]
    fn a_node_heard_rarely_or_slowly_is_not_called_quiet_early() {
        // Heard at start-up only.
        let mut silence = NodeSilence::default();
        silence.heard("n2", 1, at(0));
        for second in 0..=60 {
            silence.heard("n1", 0, at(second));
        }
        assert!(silence.quiet(at(60), 15).is_empty());
        // A node that writes every 10 s is silent for 40 s before it counts.
        let mut silence = NodeSilence::default();
        for second in 0..=100 {
            silence.heard("n1", 0, at(second));
            if second % 10 == 0 && second <= 50 {
                silence.heard("n2", 1, at(second));
            }
        }
        assert!(silence.quiet(at(85), 15).is_empty());
        assert_eq!(silence.quiet(at(90), 15).len(), 1);
    }
}
