//! Capacity lost to quarantined nodes: the GPU-hours of the spans runguard kept nodes out of service,
//! within the window.

use std::collections::BTreeMap;

use serde::Serialize;

use super::history::{QuarantineSpan, Window};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LostReport {
    /// Spans that overlap the window.
    pub spans: usize,
    pub node_hours: f64,
    pub gpu_hours: f64,
    /// Nodes by GPU-hours lost, largest first.
    pub by_node: Vec<NodeLoss>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeLoss {
    pub node: String,
    pub spans: usize,
    pub gpu_hours: f64,
}

/// `spans` still open run to the end of the window.
pub fn lost(spans: &[QuarantineSpan], window: &Window) -> LostReport {
    let mut by_node: BTreeMap<&str, (usize, f64)> = BTreeMap::new();
    let mut report = LostReport {
        spans: 0,
        node_hours: 0.0,
        gpu_hours: 0.0,
        by_node: Vec::new(),
    };
    for span in spans {
        let hours = window.overlap_hours(span.from, span.to.unwrap_or(window.to));
        if hours <= 0.0 {
            continue;
        }
        let gpu_hours = hours * f64::from(span.gpus);
        report.spans += 1;
        report.node_hours += hours;
        report.gpu_hours += gpu_hours;
        let entry = by_node.entry(&span.node).or_default();
        entry.0 += 1;
        entry.1 += gpu_hours;
    }
    report.by_node = by_node
        .into_iter()
        .map(|(node, (spans, gpu_hours))| NodeLoss {
            node: node.to_string(),
            spans,
            gpu_hours,
        })
        .collect();
    report
        .by_node
        .sort_by(|a, b| b.gpu_hours.total_cmp(&a.gpu_hours));
    report
}
