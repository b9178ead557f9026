//! Culprit resolution: which node, rank and GPU a failure belongs to, from the winning signature's own
//! lines first, then from lines that only say where the log was taken, then from the hosts the
//! attempt's errors name most, then from the rank's place in the allocation.

use std::collections::BTreeMap;

use crate::model::Culprit;
use crate::store::EvidenceLine;
use crate::telemetry::pipeline::blamed_host;
use crate::telemetry::record::is_hostname;

use super::Evidence;
use super::catalog::{Catalog, CulpritScope, Reporter, Signature};

/// The lines attribution weighs, with the signatures each matched.
pub(super) struct Weighed<'a> {
    pub evidence: &'a Evidence<'a>,
    pub catalog: &'a Catalog,
    /// For each evidence line, the signatures that match it.
    pub matches: &'a [Vec<usize>],
    /// Every signature that applies, with its lines.
    pub hits: &'a BTreeMap<usize, Vec<usize>>,
}

impl Weighed<'_> {
    /// Whether a host a line names may be blamed: a peer error's host only when it is a node of the
    /// known allocation (either end of a failed connection reports it).
    fn may_blame(&self, index: usize, host: &str) -> bool {
        let reporters = || {
            self.matches[index]
                .iter()
                .map(|&signature| self.catalog.signatures()[signature].spec.reporter)
        };
        if reporters().any(|reporter| reporter == Reporter::EveryRank) {
            return false;
        }
        let either_end = reporters().any(|reporter| reporter == Reporter::EitherEnd);
        !either_end || self.in_allocation(host)
    }

    /// Whether `host` is a node of the job's known allocation.
    fn in_allocation(&self, host: &str) -> bool {
        self.evidence.nodes.iter().any(|node| node == host)
    }

    /// Whether the host of one of `signature`'s own lines may be blamed: its own reporter decides
    /// (an adapter's local fault is its host's, though a generic peer-error signature matches the
    /// line too).
    fn may_blame_for(&self, signature: &Signature, host: &str) -> bool {
        match signature.spec.reporter {
            Reporter::EveryRank => false,
            Reporter::EitherEnd => self.in_allocation(host),
            Reporter::Culprit => true,
        }
    }

    fn node_of_rank(&self, rank: u32) -> Option<String> {
        let per_node = self.evidence.ranks_per_node.max(1);
        self.evidence.nodes.get((rank / per_node) as usize).cloned()
    }
}

/// The culprit of `signature`, whose own lines are `own` (indexes into the evidence).
pub(super) fn resolve(weighed: &Weighed<'_>, signature: &Signature, own: &[usize]) -> Culprit {
    let lines = weighed.evidence.lines;
    let mut culprit = Culprit::default();
    if signature.culprit == CulpritScope::None {
        return culprit;
    }
    let mut hosts: Vec<&str> = Vec::new();
    for &index in own {
        let line = &lines[index];
        let captures = signature.captures(&line.text);
        if let Some(host) = named_by(weighed, signature, index)
            && !hosts.contains(&host)
        {
            hosts.push(host);
        }
        if let Some(captures) = &captures {
            if culprit.gpu.is_none() {
                culprit.gpu = captures.name("gpu").and_then(|m| m.as_str().parse().ok());
            }
            if culprit.rank.is_none() {
                culprit.rank = captures.name("rank").and_then(|m| m.as_str().parse().ok());
            }
        }
        // A peer error is reported by both ends of the connection: the reporting rank is as likely
        // the victim as the cause.
        if culprit.rank.is_none() && signature.spec.reporter == Reporter::Culprit {
            culprit.rank = line.rank;
        }
        if culprit.gpu.is_none() {
            // Node signals carry the GPU their bus id maps to as a `[GPU n]` suffix.
            culprit.gpu = line
                .text
                .rsplit_once("[GPU ")
                .and_then(|(_, rest)| rest.strip_suffix(']'))
                .and_then(|gpu| gpu.parse().ok());
        }
    }
    if signature.culprit == CulpritScope::Node {
        // The failure's own lines come only from hosts that may be its victims, or from containers
        // that name no node: other lines of the same hosts would blame them just the same, and
        // another host's lines would blame the wrong machine.
        let from_victims = hosts.is_empty()
            && own.iter().any(|&index| {
                let text = lines[index].text.as_str();
                kernel_log_host(text)
                    .or_else(|| blamed_host(text))
                    .is_some()
            });
        // The same kind of failure on other hosts (another signature of the category) makes it several.
        for (&other, other_lines) in weighed.hits.iter().filter(|_| !from_victims) {
            let rival = &weighed.catalog.signatures()[other];
            if rival.spec.category != signature.spec.category {
                continue;
            }
            for &index in other_lines {
                if let Some(host) = named_by(weighed, rival, index)
                    && !hosts.contains(&host)
                {
                    hosts.push(host);
                }
            }
        }
        culprit.node = match hosts.as_slice() {
            [host] => Some(host.to_string()),
            // Several hosts report the same failure: none of them is singled out. Those of the
            // allocation stay suspects, for a policy that evicts them all.
            [_, _, ..] => {
                return Culprit {
                    suspects: hosts
                        .iter()
                        .filter(|host| weighed.evidence.nodes.iter().any(|node| node == *host))
                        .map(|host| host.to_string())
                        .collect(),
                    ..Culprit::default()
                };
            }
            [] if from_victims => None,
            [] => match located_node(weighed, culprit.rank) {
                Some((node, rank)) => {
                    culprit.rank = rank.or(culprit.rank);
                    Some(node)
                }
                None => match most_named_hosts(weighed, signature) {
                    Leaders::One(host) => Some(host),
                    // As many lines name each: every one of the allocation is a suspect.
                    Leaders::Tied(hosts) => {
                        culprit.suspects = hosts
                            .into_iter()
                            .filter(|host| weighed.evidence.nodes.contains(host))
                            .collect();
                        None
                    }
                    Leaders::None => None,
                },
            },
        };
    }
    if culprit.node.is_none() {
        culprit.node = culprit.rank.and_then(|rank| weighed.node_of_rank(rank));
    }
    if culprit.node.is_some() {
        culprit.suspects.clear();
    }
    // A rank on another node than the culprit is a victim reporting the failure (every rank's
    // watchdog does): the culprit's rank is one of its own node's, or unknown. A failure every
    // rank reports gives no rank of its own: the first line of the culprit's node does.
    let victim = |rank: u32| {
        weighed
            .node_of_rank(rank)
            .is_some_and(|of_rank| Some(of_rank.as_str()) != culprit.node.as_deref())
    };
    let every_rank = signature.spec.reporter == Reporter::EveryRank;
    if let Some(node) = culprit.node.as_deref()
        && (culprit.rank.is_some_and(victim) || (every_rank && culprit.rank.is_none()))
    {
        culprit.rank = own
            .iter()
            .map(|&index| &lines[index])
            .chain(lines.iter())
            .filter_map(|line| line.rank)
            .find(|rank| weighed.node_of_rank(*rank).as_deref() == Some(node));
    }
    culprit
}

/// The host line `index` names as where `signature`'s failure is, if `signature` may blame it.
fn named_by<'l>(weighed: &Weighed<'l>, signature: &Signature, index: usize) -> Option<&'l str> {
    let text = weighed.evidence.lines[index].text.as_str();
    signature
        .captures(text)
        .and_then(|captures| captures.name("node"))
        .map(|m| m.as_str())
        .or_else(|| kernel_log_host(text))
        .or_else(|| blamed_host(text))
        .filter(|host| names_node(host) && weighed.may_blame_for(signature, host))
}

/// A host name that may name a node: not a container's. Docker names a container's host after the
/// container's id (12 or 64 hex digits), which says nothing of the machine it runs on.
fn names_node(host: &str) -> bool {
    let container_id = matches!(host.len(), 12 | 64)
        && host.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    is_hostname(host) && !container_id
}

/// The one node that lines saying where the log was taken name (a shell prompt, a one-node
/// allocation); none when they name several. A line that names the node of another rank than the
/// failure's (`rank`) says where that rank ran, not where the failure is, unless it is where the
/// failure began (an origin's line: a task killed by a signal).
fn located_node(weighed: &Weighed<'_>, rank: Option<u32>) -> Option<(String, Option<u32>)> {
    let mut found: Option<(&str, Option<u32>)> = None;
    for line in weighed.evidence.lines {
        if let Some((_, node, rank)) =
            weighed
                .catalog
                .located_by(&line.text)
                .filter(|(locator, node, located)| {
                    names_node(node)
                        && (locator.origin
                            || located.is_none()
                            || rank.is_none()
                            || *located == rank)
                })
        {
            match found {
                Some((known, _)) if known != node => return None,
                Some((_, Some(_))) => {}
                _ => found = Some((node, rank)),
            }
        }
    }
    found.map(|(node, rank)| (node.to_string(), rank))
}

/// The hosts named most often by NCCL warnings and srun errors. A peer error's warnings name either
/// end, so for one of those only hosts of the known allocation count.
fn most_named_hosts(weighed: &Weighed<'_>, signature: &Signature) -> Leaders {
    let either_end = signature.spec.reporter == Reporter::EitherEnd;
    leaders(
        weighed
            .evidence
            .lines
            .iter()
            .enumerate()
            .filter_map(|(index, line)| {
                blamed_host(&line.text).filter(|host| {
                    names_node(host)
                        && weighed.may_blame(index, host)
                        && (!either_end || weighed.in_allocation(host))
                })
            }),
    )
}

/// The host named most often by the lines of an attempt nothing explains, when one host leads.
pub(super) fn most_named_in(lines: &[EvidenceLine]) -> Option<String> {
    leading_host(
        lines
            .iter()
            .filter_map(|line| blamed_host(&line.text))
            .filter(|host| names_node(host)),
    )
}

fn leading_host<'h>(hosts: impl Iterator<Item = &'h str>) -> Option<String> {
    match leaders(hosts) {
        Leaders::One(host) => Some(host),
        _ => None,
    }
}

/// Which hosts lines name most often.
enum Leaders {
    None,
    One(String),
    /// Several, as often each, in the order first named.
    Tied(Vec<String>),
}

fn leaders<'h>(hosts: impl Iterator<Item = &'h str>) -> Leaders {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for host in hosts {
        match counts.iter_mut().find(|(name, _)| *name == host) {
            Some((_, count)) => *count += 1,
            None => counts.push((host, 1)),
        }
    }
    let Some(max) = counts.iter().map(|(_, count)| *count).max() else {
        return Leaders::None;
    };
    let mut top: Vec<String> = counts
        .into_iter()
        .filter(|(_, count)| *count == max)
        .map(|(host, _)| host.to_string())
        .collect();
    match top.len() {
        1 => Leaders::One(top.remove(0)),
        _ => Leaders::Tied(top),
    }
}

/// `Jan  5 08:30:12 node-07 kernel: NVRM: ...` or `node-07 kernel: ...` → "node-07".
pub(super) fn kernel_log_host(text: &str) -> Option<&str> {
    let before = &text[..text.find(" kernel:")?];
    before.rsplit(' ').next().filter(|host| !host.is_empty())
}

#[cfg(test)]
mod tests {
    use super::names_node;

    #[test]
    fn a_container_id_names_no_node() {
        assert!(!names_node("e82c50601d13"));
        assert!(!names_node(&"0123456789abcdef".repeat(4)));
        assert!(names_node("node-07"));
        assert!(names_node("gpu20-15"));
        // Hex letters alone, but not a container id's length.
        assert!(names_node("cafe01"));
        // Upper case is not how Docker writes an id.
        assert!(names_node("E82C50601D13"));
    }
}
