//! Which matching signature wins, by the catalog's own data: a signature drops out when another
//! matching one `outranks` it (a cause over its symptom), of a `sequence` only the one seen first stays
//! (the first Xid of a cascade over the later ones), and the most confident of the rest wins (then the
//! one with more lines, then the one earlier in the catalog).

use std::collections::{BTreeMap, HashSet};

use super::Catalog;

/// The winning signature and its lines (evidence indexes, in order), from every signature that matched.
pub(super) fn rank<'h>(
    catalog: &Catalog,
    hits: &'h BTreeMap<usize, Vec<usize>>,
) -> Option<(usize, &'h [usize])> {
    let signatures = catalog.signatures();
    let outranked: HashSet<usize> = hits
        .keys()
        .flat_map(|&index| signatures[index].outranks.iter().copied())
        .filter(|target| hits.contains_key(target))
        .collect();
    let mut first_of_sequence: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for (&index, own) in hits {
        if outranked.contains(&index) {
            continue;
        }
        if let (Some(sequence), Some(&first)) =
            (signatures[index].spec.sequence.as_deref(), own.first())
        {
            let entry = first_of_sequence.entry(sequence).or_insert((first, index));
            if first < entry.0 {
                *entry = (first, index);
            }
        }
    }
    let stays = |index: usize| {
        !outranked.contains(&index)
            && signatures[index]
                .spec
                .sequence
                .as_deref()
                .is_none_or(|sequence| {
                    first_of_sequence.get(sequence).map(|(_, i)| *i) == Some(index)
                })
    };
    // Outranking in a circle would leave nothing: then confidence alone decides.
    let any_stays = hits.keys().any(|&index| stays(index));
    hits.iter()
        .filter(|(index, _)| !any_stays || stays(**index))
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
