//! The cluster's nodes for the capacity report: one `sinfo` call listing every node with its
//! partition, state, GPUs (`Gres`) and GPUs in use (`GresUsed`), and the reader of its answer.

use crate::capacity::{NodeListing, NodeRecord, NodeUse};

use super::hostlist;

/// The `sinfo` arguments: one line per node and partition, fields ended by `|` (the reason, which may
/// hold `|` itself, comes last).
pub fn argv() -> Vec<String> {
    [
        "sinfo",
        "--noheader",
        "--Node",
        "--Format=NodeList:|,Partition:|,StateLong:|,Gres:|,GresUsed:|,Reason:|",
    ]
    .map(str::to_string)
    .to_vec()
}

/// Reads the answer of [`argv`]; a line that cannot be read is kept, verbatim, in `unreadable`.
pub fn read(text: &str) -> NodeListing {
    let mut listing = NodeListing::default();
    for line in text.lines().filter(|line| !line.trim().is_empty()) {
        match read_line(line) {
            Some(records) => listing.nodes.extend(records),
            None => listing.unreadable.push(line.to_string()),
        }
    }
    listing
}

fn read_line(line: &str) -> Option<Vec<NodeRecord>> {
    let mut fields = line.splitn(6, '|');
    let names = fields.next()?.trim();
    let partition = fields.next()?.trim().trim_end_matches('*');
    let state = node_use(fields.next()?.trim())?;
    let gpus = gpu_count(fields.next()?.trim())?;
    let used = gpu_count(fields.next()?.trim())?;
    let reason = fields
        .next()
        .map(|rest| rest.trim_end().trim_end_matches('|').trim())
        .filter(|reason| !reason.is_empty() && *reason != "none");
    let nodes = hostlist::expand(names).ok()?;
    if names.is_empty() || nodes.is_empty() {
        return None;
    }
    Some(
        nodes
            .into_iter()
            .map(|node| NodeRecord {
                node,
                partition: (!partition.is_empty()).then(|| partition.to_string()),
                state,
                gpus,
                gpus_allocated: used.min(gpus),
                reason: reason.map(str::to_string),
            })
            .collect(),
    )
}

/// `sinfo`'s long state (`idle`, `mixed`, `allocated`, `drained`, `draining`, `down*`, `idle+drain`,
/// `mixed~`...) in the report's words; `None` for a state that says nothing about use (`unknown`,
/// `future`, `inval`).
fn node_use(state: &str) -> Option<NodeUse> {
    // A trailing `*`: the node does not answer, whatever it was doing.
    if state.contains('*') {
        return Some(NodeUse::Down);
    }
    let state = state.to_ascii_lowercase();
    let words: Vec<&str> = state
        .split('+')
        .map(|word| word.trim_end_matches(|c: char| !c.is_ascii_alphabetic()))
        .collect();
    let any = |prefixes: &[&str]| {
        words
            .iter()
            .any(|word| prefixes.iter().any(|prefix| word.starts_with(prefix)))
    };
    if any(&["down", "fail"]) {
        Some(NodeUse::Down)
    } else if any(&["drain", "maint", "reboot"]) {
        Some(NodeUse::Drained)
    } else if any(&["mix"]) {
        Some(NodeUse::Mixed)
    } else if any(&["alloc", "comp"]) {
        Some(NodeUse::Allocated)
    } else if any(&["idle", "plan", "resv", "reserved"]) {
        Some(NodeUse::Idle)
    } else {
        None
    }
}

/// GPUs in a `Gres`/`GresUsed` value: `gpu:4`, `gpu:a100:4(S:0-1)`, `gpu:a100:2(IDX:0,2),gpu:v100:1`,
/// `(null)` or empty for none. Other resources (`shard`, `mps`) are not GPUs.
fn gpu_count(value: &str) -> Option<u32> {
    if value.is_empty() || value == "(null)" {
        return Some(0);
    }
    let mut total = 0u32;
    for item in top_level_items(value) {
        // `(IDX:0-1)`, `(S:0)`: where, not how many.
        let item = item.split('(').next().unwrap_or_default();
        let mut parts = item.split(':');
        if parts.next() != Some("gpu") {
            continue;
        }
        let count = parts.next_back()?.parse::<u32>().ok()?;
        total = total.checked_add(count)?;
    }
    Some(total)
}

/// `value` split at the commas outside parentheses.
fn top_level_items(value: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (at, c) in value.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&value[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    items.push(&value[start..]);
    items
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn fixture(name: &str) -> String {
        std::fs::read_to_string(format!(
            "{}/../tests/fixtures/slurm/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    }

    #[test]
    fn reads_the_nodes_as_sinfo_printed_them() {
        let listing = read(&fixture("sinfo_22.05_capacity_node_down.txt"));
        assert!(listing.unreadable.is_empty());
        let node = |node: &str, state, allocated, reason: Option<&str>| NodeRecord {
            node: node.to_string(),
            partition: Some("gpu".to_string()),
            state,
            gpus: 4,
            gpus_allocated: allocated,
            reason: reason.map(str::to_string),
        };
        assert_eq!(
            listing.nodes,
            vec![
                node("n1", NodeUse::Mixed, 2, None),
                node("n2", NodeUse::Mixed, 4, None),
                node("n3", NodeUse::Down, 0, Some("Not responding")),
                node("n4", NodeUse::Drained, 0, Some("runguard: gpu | xid 79")),
            ]
        );
        assert_eq!(read(&fixture("sinfo_22.05_capacity.txt")).nodes.len(), 4);
    }

    #[test]
    fn gpu_counts_of_typed_and_indexed_gres() {
        assert_eq!(gpu_count("gpu:a100:4(S:0-1)"), Some(4));
        assert_eq!(gpu_count("gpu:a100:2(IDX:0,2),gpu:v100:1(IDX:3)"), Some(3));
        assert_eq!(gpu_count("gpu:2,shard:8"), Some(2));
        assert_eq!(gpu_count("(null)"), Some(0));
        assert_eq!(gpu_count("gpu:many"), None);
    }

    #[test]
    fn states_with_flags_and_unreadable_lines() {
        assert_eq!(node_use("idle+drain"), Some(NodeUse::Drained));
        assert_eq!(node_use("mixed~"), Some(NodeUse::Mixed));
        assert_eq!(node_use("draining"), Some(NodeUse::Drained));
        assert_eq!(node_use("allocated"), Some(NodeUse::Allocated));
        assert_eq!(node_use("idle*"), Some(NodeUse::Down));
        assert_eq!(node_use("unknown"), None);
        let listing = read(
            "n[1-2]|batch|idle|gpu:8|gpu:0|none|\nn3|batch|future|gpu:8|gpu:0|none|\ngarbage\n",
        );
        assert_eq!(listing.nodes.len(), 2);
        assert_eq!(listing.nodes[1].node, "n2");
        assert_eq!(listing.unreadable.len(), 2);
    }
}
