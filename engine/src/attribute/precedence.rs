//! Which matching signature wins, by the catalog's own data: a signature drops out when another
//! matching one `outranks` it (a cause over its symptom), a member of a `sequence` drops out when an
//! earlier member began shortly before it (the first Xid of a cascade over the later ones), and the
//! most confident of the rest wins (then the one with more lines, then the one earlier in the catalog).

use std::collections::{BTreeMap, HashSet};

use chrono::Duration;

use super::Catalog;
use crate::store::EvidenceLine;

/// The winning signature and its lines (evidence indexes, in order), from every signature that matched.
pub(super) fn rank<'h>(
    catalog: &Catalog,
    hits: &'h BTreeMap<usize, Vec<usize>>,
    lines: &[EvidenceLine],
) -> Option<(usize, &'h [usize])> {
    let signatures = catalog.signatures();
    let outranked: HashSet<usize> = hits
        .keys()
        .flat_map(|&index| signatures[index].outranks.iter().copied())
        .filter(|target| hits.contains_key(target))
        .collect();
    let mut dropped = outranked.clone();
    // Of a sequence, only members nothing outranks count as earlier errors.
    for (&index, own) in hits.iter().filter(|(index, _)| !outranked.contains(index)) {
        let Some(sequence) = &signatures[index].sequence else {
            continue;
        };
        // Where a member entered the cascade: its first line that is one of the cascade's errors.
        let entered = |own: &[usize]| {
            own.iter()
                .copied()
                .find(|&line| sequence.is_member_line(&lines[line].text))
        };
        let Some(first) = entered(own) else {
            continue;
        };
        let window = Duration::seconds(i64::from(sequence.window_seconds));
        let follows_an_earlier = hits.iter().any(|(&other, other_own)| {
            other != index
                && !outranked.contains(&other)
                && signatures[other]
                    .sequence
                    .as_ref()
                    .is_some_and(|s| s.id == sequence.id)
                && entered(other_own).is_some_and(|before| {
                    let gap = lines[first].time - lines[before].time;
                    before < first && gap >= Duration::zero() && gap <= window
                })
        });
        if follows_an_earlier {
            dropped.insert(index);
        }
    }
    // Outranking in a circle would leave nothing: then confidence alone decides.
    let any_stays = hits.keys().any(|index| !dropped.contains(index));
    hits.iter()
        .filter(|(index, _)| !any_stays || !dropped.contains(index))
        .max_by(|(a, a_lines), (b, b_lines)| {
            signatures[**a]
                .spec
                .confidence
                .total_cmp(&signatures[**b].spec.confidence)
                .then(a_lines.len().cmp(&b_lines.len()))
                .then(b.cmp(a))
        })
        .map(|(index, own)| (*index, own.as_slice()))
}
