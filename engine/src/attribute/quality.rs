//! How good attribution is on a labelled corpus: accuracy per field, culprit precision and recall, a
//! score per category and the confusions, computed from the cases of an evaluation.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::explain::CaseResult;

/// Right answers out of the cases asked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Score {
    pub right: usize,
    pub cases: usize,
}

impl Score {
    /// The share right; `None` when there was nothing to score.
    pub fn ratio(&self) -> Option<f64> {
        (self.cases > 0).then(|| self.right as f64 / self.cases as f64)
    }
}

/// Culprit naming: a node named where the label has none, or the wrong node, is a false positive; a
/// labelled culprit not named (or named wrong) is a false negative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CulpritScore {
    pub true_positives: usize,
    pub false_positives: usize,
    pub false_negatives: usize,
}

impl CulpritScore {
    fn add(&mut self, case: &CaseResult) {
        let right = case.culprit_ok == Some(true);
        let named = right || case.got_culprit.is_some();
        if right {
            self.true_positives += 1;
        } else {
            if named {
                self.false_positives += 1;
            }
            if case.expected_culprit.is_some() {
                self.false_negatives += 1;
            }
        }
    }

    /// Of the culprits named, the share right; `None` when none was named.
    pub fn precision(&self) -> Option<f64> {
        let named = self.true_positives + self.false_positives;
        (named > 0).then(|| self.true_positives as f64 / named as f64)
    }

    /// Of the labelled culprits, the share named; `None` when no case has one.
    pub fn recall(&self) -> Option<f64> {
        let labelled = self.true_positives + self.false_negatives;
        (labelled > 0).then(|| self.true_positives as f64 / labelled as f64)
    }
}

/// The cases of one labelled category.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CategoryScore {
    pub category: String,
    /// Cases labelled with this category, and those right on every field.
    pub cases: Score,
    pub culprit: CulpritScore,
}

/// One kind of mistake: cases labelled `expected` attributed to `got`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Confusion {
    pub expected: String,
    pub got: String,
    pub count: usize,
}

/// The quality of an evaluation.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Quality {
    /// Cases right on every field.
    pub passed: Score,
    pub category: Score,
    pub component: Score,
    pub recoverable: Score,
    pub culprit: CulpritScore,
    /// By labelled category, in name order.
    pub categories: Vec<CategoryScore>,
    /// Category mistakes, most frequent first.
    pub confusions: Vec<Confusion>,
}

impl Quality {
    /// Scores every case.
    pub fn of(cases: &[CaseResult]) -> Self {
        let tally = |right: &dyn Fn(&CaseResult) -> bool| Score {
            right: cases.iter().filter(|c| right(c)).count(),
            cases: cases.len(),
        };
        let mut culprit = CulpritScore::default();
        let mut categories: BTreeMap<&str, CategoryScore> = BTreeMap::new();
        let mut confusions: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        for case in cases {
            culprit.add(case);
            let category = categories
                .entry(case.expected_category.as_str())
                .or_insert_with(|| CategoryScore {
                    category: case.expected_category.clone(),
                    ..CategoryScore::default()
                });
            category.cases.cases += 1;
            category.cases.right += usize::from(case.passed);
            category.culprit.add(case);
            if !case.category_ok {
                *confusions
                    .entry((&case.expected_category, &case.got_category))
                    .or_default() += 1;
            }
        }
        let mut confusions: Vec<Confusion> = confusions
            .into_iter()
            .map(|((expected, got), count)| Confusion {
                expected: expected.to_string(),
                got: got.to_string(),
                count,
            })
            .collect();
        // Stable: equal counts stay in name order.
        confusions.sort_by_key(|confusion| std::cmp::Reverse(confusion.count));
        Self {
            passed: tally(&|c| c.passed),
            category: tally(&|c| c.category_ok),
            component: tally(&|c| c.component_ok),
            recoverable: tally(&|c| c.recoverable_ok),
            culprit,
            categories: categories.into_values().collect(),
            confusions,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(expected: &str, got: &str, culprit: (Option<&str>, Option<&str>)) -> CaseResult {
        let (expected_culprit, got_culprit) = culprit;
        let category_ok = expected == got;
        let culprit_ok = expected_culprit.map(|want| Some(want) == got_culprit);
        CaseResult {
            file: format!("{expected}.log"),
            passed: category_ok && culprit_ok.unwrap_or(true),
            category_ok,
            component_ok: category_ok,
            recoverable_ok: true,
            culprit_ok,
            expected: expected.to_string(),
            got: got.to_string(),
            expected_category: expected.to_string(),
            got_category: got.to_string(),
            expected_culprit: expected_culprit.map(str::to_string),
            got_culprit: got_culprit.map(str::to_string),
        }
    }

    #[test]
    fn a_culprit_named_without_a_label_or_wrong_is_a_false_positive_and_a_missed_one_a_false_negative()
     {
        let quality = Quality::of(&[
            case("xid_79", "xid_79", (Some("node-1"), Some("node-1"))),
            case("xid_79", "xid_79", (Some("node-2"), Some("node-9"))),
            case("node_failure", "node_failure", (Some("node-3"), None)),
            case("time_limit", "time_limit", (None, Some("node-4"))),
            case("app_exception", "app_exception", (None, None)),
        ]);
        assert_eq!(
            quality.culprit,
            CulpritScore {
                true_positives: 1,
                false_positives: 2,
                false_negatives: 2,
            }
        );
        assert_eq!(quality.culprit.precision(), Some(1.0 / 3.0));
        assert_eq!(quality.culprit.recall(), Some(1.0 / 3.0));
        let xid = quality
            .categories
            .iter()
            .find(|c| c.category == "xid_79")
            .unwrap();
        assert_eq!(xid.cases, Score { right: 1, cases: 2 });
        assert_eq!(xid.culprit.precision(), Some(0.5));
    }

    #[test]
    fn confusions_count_each_mistake_most_frequent_first() {
        let quality = Quality::of(&[
            case("nccl_timeout", "xid_79", (None, None)),
            case("thermal", "healthy", (None, None)),
            case("thermal", "healthy", (None, None)),
            case("thermal", "thermal", (None, None)),
        ]);
        assert_eq!(
            quality.confusions,
            vec![
                Confusion {
                    expected: "thermal".into(),
                    got: "healthy".into(),
                    count: 2
                },
                Confusion {
                    expected: "nccl_timeout".into(),
                    got: "xid_79".into(),
                    count: 1
                },
            ]
        );
        assert_eq!(quality.category, Score { right: 1, cases: 4 });
        assert_eq!(quality.culprit.precision(), None);
    }
}
