//! The node ledger: every node runguard has seen an incident on, quarantined first, with why, what
//! runguard did to it (its own drain), when it is checked or freed next, and its latest incidents.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};

use runguard_engine::model::NodeState;

use super::View;

/// Incidents shown under each node.
const HISTORY_LINES: usize = 3;

pub fn draw(frame: &mut Frame<'_>, area: Rect, view: &View<'_>) {
    let (_, snapshot, theme, now) = view.parts();
    let mut lines = Vec::new();
    for node in &snapshot.nodes {
        let record = &node.record;
        let style = match record.state {
            NodeState::Quarantined => theme.anomaly(),
            NodeState::Suspect | NodeState::Probation => theme.approval(),
            NodeState::Healthy => theme.muted(),
        };
        let next = match (record.next_check_at, record.probation_until) {
            (Some(at), _) if at > now => {
                format!(" · check in {}", short((at - now).num_seconds()))
            }
            (Some(_), _) => " · check due".to_string(),
            (None, Some(until)) if until > now => {
                format!(" · probation {} more", short((until - now).num_seconds()))
            }
            _ => String::new(),
        };
        lines.push(Line::from(vec![
            Span::styled(format!("{:<14} ", record.node), theme.accent()),
            Span::styled(format!("{:<12}", record.state.as_str()), style),
            Span::raw(format!(
                "score {:>4.1} · {} incidents · since {}{next}",
                node.score,
                node.incident_count,
                record.since.format("%m-%d %H:%M")
            )),
        ]));
        lines.push(Line::raw(format!("  {}", record.reason)));
        if let Some(reason) = &record.drain_reason {
            lines.push(Line::styled(
                format!("  drained by runguard: {reason}"),
                theme.approval(),
            ));
        }
        for incident in node.incidents.iter().take(HISTORY_LINES) {
            lines.push(Line::styled(
                format!("  {}", crate::nodes::incident_line(incident)),
                theme.muted(),
            ));
        }
    }
    if lines.is_empty() {
        lines.push(Line::styled(
            "no node has had an incident yet",
            theme.muted(),
        ));
    }
    let quarantined = snapshot
        .nodes
        .iter()
        .filter(|node| node.record.state == NodeState::Quarantined)
        .count();
    frame.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: false }).block(
            Block::bordered()
                .title(format!(
                    " Nodes · {} in the ledger · {quarantined} quarantined ",
                    snapshot.nodes.len()
                ))
                .border_style(theme.accent()),
        ),
        area,
    );
}

/// `45s`, `12m`, `3h`, `2d`.
fn short(secs: i64) -> String {
    match secs.max(0) {
        s @ 0..60 => format!("{s}s"),
        s @ 60..3600 => format!("{}m", s / 60),
        s @ 3600..86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}
