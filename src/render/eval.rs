//! `runguard eval` as text for a terminal: one line per case, the figures, the table per category, the
//! confusions, and the tally last.

use std::fmt::Write as _;

use runguard_engine::attribute::quality::{CulpritScore, Quality, Score};
use runguard_engine::explain::Evaluation;
use serde::Serialize;

/// What `runguard eval --json` prints: the cases and tally, with the quality beside them.
#[derive(Debug, Serialize)]
pub struct EvalReport<'a> {
    #[serde(flatten)]
    pub evaluation: &'a Evaluation,
    pub quality: &'a Quality,
    /// The headline figures as plain numbers (null when there was nothing to measure).
    pub figures: Figures,
}

/// The headline figures of a quality, as ratios.
#[derive(Debug, Serialize)]
pub struct Figures {
    pub passed: Option<f64>,
    pub category_accuracy: Option<f64>,
    pub component_accuracy: Option<f64>,
    pub recoverable_accuracy: Option<f64>,
    pub culprit_precision: Option<f64>,
    pub culprit_recall: Option<f64>,
}

impl<'a> EvalReport<'a> {
    pub fn new(evaluation: &'a Evaluation, quality: &'a Quality) -> Self {
        Self {
            evaluation,
            quality,
            figures: Figures {
                passed: quality.passed.ratio(),
                category_accuracy: quality.category.ratio(),
                component_accuracy: quality.component.ratio(),
                recoverable_accuracy: quality.recoverable.ratio(),
                culprit_precision: quality.culprit.precision(),
                culprit_recall: quality.culprit.recall(),
            },
        }
    }
}

/// The evaluation as a report; its last line is `N passed, M failed`.
pub fn render_evaluation(evaluation: &Evaluation, quality: &Quality) -> String {
    let mut out = String::new();
    for case in &evaluation.cases {
        let _ = writeln!(
            out,
            "{} {}  expected {}  got {}",
            if case.passed { "PASS" } else { "FAIL" },
            case.file,
            case.expected,
            case.got
        );
    }
    let culprit = &quality.culprit;
    let _ = writeln!(
        out,
        "\naccuracy: category {}, component {}, recoverable {}, culprit {}/{}",
        score(&quality.category),
        score(&quality.component),
        score(&quality.recoverable),
        culprit.true_positives,
        culprit.true_positives + culprit.false_negatives,
    );
    let _ = writeln!(
        out,
        "culprit: precision {}, recall {} ({} right, {} named wrongly or without a label, {} missed)",
        percent(culprit.precision()),
        percent(culprit.recall()),
        culprit.true_positives,
        culprit.false_positives,
        culprit.false_negatives,
    );
    out.push_str(&category_table(quality));
    if !quality.confusions.is_empty() {
        let _ = writeln!(out, "\nconfusions (expected → got):");
        for confusion in &quality.confusions {
            let _ = writeln!(
                out,
                "  {:>3}  {} → {}",
                confusion.count, confusion.expected, confusion.got
            );
        }
    }
    let _ = writeln!(
        out,
        "\n{} passed, {} failed",
        evaluation.passed, evaluation.failed
    );
    out
}

/// One row per labelled category: cases, right on every field, accuracy, culprit precision and recall.
fn category_table(quality: &Quality) -> String {
    let width = quality
        .categories
        .iter()
        .map(|c| c.category.len())
        .chain(["category".len()])
        .max()
        .unwrap_or(8);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{:<width$}  {:>5}  {:>5}  {:>8}  {:>9}  {:>6}",
        "category", "cases", "right", "accuracy", "culprit P", "R"
    );
    for row in &quality.categories {
        let (precision, recall) = culprit_cells(&row.culprit);
        let _ = writeln!(
            out,
            "{:<width$}  {:>5}  {:>5}  {:>8}  {:>9}  {:>6}",
            row.category,
            row.cases.cases,
            row.cases.right,
            percent(row.cases.ratio()),
            precision,
            recall,
        );
    }
    out
}

fn culprit_cells(culprit: &CulpritScore) -> (String, String) {
    (percent(culprit.precision()), percent(culprit.recall()))
}

fn score(score: &Score) -> String {
    format!("{}/{}", score.right, score.cases)
}

fn percent(ratio: Option<f64>) -> String {
    ratio.map_or("-".to_string(), |r| format!("{:.0}%", r * 100.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use runguard_engine::explain::CaseResult;

    fn case(file: &str, expected: &str, got: &str, culprit: Option<&str>) -> CaseResult {
        CaseResult {
            file: file.to_string(),
            passed: expected == got && culprit.is_none(),
            category_ok: expected == got,
            component_ok: true,
            recoverable_ok: true,
            culprit_ok: None,
            expected: expected.to_string(),
            got: got.to_string(),
            expected_category: expected.to_string(),
            got_category: got.to_string(),
            expected_culprit: None,
            got_culprit: culprit.map(str::to_string),
        }
    }

    #[test]
    fn the_report_has_the_figures_the_table_the_confusions_and_ends_with_the_tally() {
        let cases = vec![
            case("a.log", "xid_79", "xid_79", None),
            case("b.log", "thermal", "healthy", None),
            case("c.log", "time_limit", "time_limit", Some("node-3")),
        ];
        let evaluation = Evaluation {
            passed: 1,
            failed: 2,
            cases,
        };
        let quality = Quality::of(&evaluation.cases);
        let text = render_evaluation(&evaluation, &quality);
        assert!(text.starts_with("PASS a.log  expected xid_79  got xid_79\n"));
        assert!(
            text.contains("accuracy: category 2/3, component 3/3, recoverable 3/3, culprit 0/0")
        );
        assert!(text.contains("culprit: precision 0%, recall -"), "{text}");
        let row = |category: &str| -> Vec<String> {
            text.lines()
                .find(|l| l.starts_with(&format!("{category} ")))
                .map(|l| l.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default()
        };
        assert_eq!(
            row("thermal"),
            ["thermal", "1", "0", "0%", "-", "-"],
            "{text}"
        );
        assert_eq!(
            row("time_limit"),
            ["time_limit", "1", "0", "0%", "0%", "-"],
            "{text}"
        );
        assert!(text.contains("    1  thermal → healthy"), "{text}");
        assert_eq!(text.lines().last(), Some("1 passed, 2 failed"));
    }
}
