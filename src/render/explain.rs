//! `runguard explain` as text for a terminal.

use std::fmt::Write as _;

use runguard_engine::explain::Explanation;

/// The explanation as text for a terminal.
pub fn render(explanation: &Explanation) -> String {
    let mut out = String::new();
    let a = &explanation.attribution;
    let _ = writeln!(out, "files: {}", explanation.files.join(", "));
    let _ = writeln!(
        out,
        "{} lines; iterations {}..{}; {} checkpoints{}",
        explanation.lines,
        explanation
            .first_iteration
            .map_or("-".into(), |i| i.to_string()),
        explanation
            .last_iteration
            .map_or("-".into(), |i| i.to_string()),
        explanation.checkpoints.len(),
        explanation
            .median_tflops_per_gpu
            .map(|t| format!("; median {t:.1} TFLOP/s/GPU"))
            .unwrap_or_default()
    );
    if !explanation.timeline.is_empty() {
        let _ = writeln!(out, "\ntimeline:");
        for entry in &explanation.timeline {
            let when = entry
                .time
                .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
                .unwrap_or_else(|| "-".into());
            let _ = writeln!(out, "  {when}  {}", entry.what);
        }
    }
    for anomaly in &explanation.anomalies {
        let _ = writeln!(out, "▲ {anomaly}");
    }
    let culprit = [
        a.culprit.node.clone(),
        a.culprit.rank.map(|r| format!("rank {r}")),
        a.culprit.gpu.map(|g| format!("GPU {g}")),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(", ");
    let _ = writeln!(
        out,
        "\nattribution: {} ({}){} — confidence {:.0}%, {}",
        a.category,
        a.component.as_str(),
        if culprit.is_empty() {
            String::new()
        } else {
            format!(" on {culprit}")
        },
        a.confidence * 100.0,
        if a.recoverable {
            "recoverable by requeue"
        } else {
            "not recoverable by requeue"
        }
    );
    if let Some(signature) = &a.signature {
        let _ = writeln!(out, "signature: {signature}");
    }
    let _ = writeln!(out, "{}", a.explanation);
    if !a.evidence.is_empty() {
        let _ = writeln!(out, "evidence:");
        for line in &a.evidence {
            let _ = writeln!(out, "  │ {line}");
        }
    }
    let _ = writeln!(out, "\nrunguard would:");
    for step in &explanation.recovery {
        let _ = writeln!(out, "  → {step}");
    }
    out
}
