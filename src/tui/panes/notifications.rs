//! The alert history, the current user's by default (`A` shows every user's).

use super::View;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};

use runguard_engine::model::Severity;

pub fn draw(frame: &mut Frame<'_>, area: Rect, view: &View<'_>) {
    let (app, snapshot, theme, _) = view.parts();
    let owner = |workflow_id: Option<i64>| {
        workflow_id
            .and_then(|id| snapshot.detail(id))
            .map(|detail| detail.workflow.spec.user.clone())
    };
    let mut lines = Vec::new();
    let mut shown = 0;
    for notification in &snapshot.notifications {
        let user = owner(notification.workflow_id);
        if !app.all_users
            && user
                .as_deref()
                .is_some_and(|u| !u.is_empty() && u != app.user)
        {
            continue;
        }
        shown += 1;
        let style = match notification.severity {
            Severity::Critical => theme.anomaly(),
            Severity::Warning => theme.approval(),
            Severity::Info => theme.muted(),
        };
        lines.push(Line::from(vec![
            Span::styled(
                notification.time.format("%m-%d %H:%M:%S ").to_string(),
                theme.muted(),
            ),
            Span::styled(format!("{:<8} ", notification.severity.as_str()), style),
            Span::styled(notification.title.clone(), theme.accent()),
        ]));
        lines.push(Line::raw(format!("  {}", notification.body)));
    }
    if lines.is_empty() {
        lines.push(Line::styled("no notifications", theme.muted()));
    }
    let scope = if app.all_users {
        "all users".to_string()
    } else {
        format!("user {}", app.user)
    };
    frame.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: false }).block(
            Block::bordered()
                .title(format!(" Notifications · {shown} · {scope} (A: toggle) "))
                .border_style(theme.accent()),
        ),
        area,
    );
}
