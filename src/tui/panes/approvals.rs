//! Proposed actions waiting for a human: why, the evidence, the exact command, whether the whitelist
//! permits it; `a` approves, `x` rejects. Below, the latest results.

use super::View;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, List, ListItem, ListState, Paragraph, Wrap};

use runguard_engine::model::ActionState;

pub fn draw(frame: &mut Frame<'_>, area: Rect, view: &View<'_>) {
    let (app, snapshot, theme, _) = view.parts();
    let [list_area, focus_area, results_area] = Layout::vertical([
        Constraint::Percentage(40),
        Constraint::Percentage(35),
        Constraint::Percentage(25),
    ])
    .areas(area);
    let items: Vec<ListItem<'_>> = snapshot
        .approvals
        .iter()
        .map(|approval| {
            let action = &approval.action;
            ListItem::new(Line::from(vec![
                Span::styled(format!("#{:<4}", action.id), theme.approval()),
                Span::styled(format!("{:<11}", action.kind.as_str()), theme.accent()),
                Span::raw(format!("{}: {}", approval.workflow, action.why)),
            ]))
        })
        .collect();
    let empty = items.is_empty();
    let mut state = ListState::default();
    if !empty {
        state.select(Some(app.approval_cursor.min(snapshot.approvals.len() - 1)));
    }
    frame.render_stateful_widget(
        List::new(items)
            .block(
                Block::bordered()
                    .title(format!(
                        " Waiting for approval · {} ",
                        snapshot.approvals.len()
                    ))
                    .border_style(theme.accent()),
            )
            .highlight_style(theme.selected()),
        list_area,
        &mut state,
    );
    let focus = if empty {
        vec![Line::styled("nothing waits for approval", theme.muted())]
    } else {
        let approval = &snapshot.approvals[app.approval_cursor.min(snapshot.approvals.len() - 1)];
        let action = &approval.action;
        let mut lines = vec![
            Line::from(vec![
                Span::styled("why      ", theme.muted()),
                Span::raw(action.why.clone()),
            ]),
            Line::from(vec![
                Span::styled("command  ", theme.muted()),
                Span::styled(
                    action.command.clone().unwrap_or_else(|| "-".into()),
                    theme.accent(),
                ),
            ]),
            Line::from(vec![
                Span::styled("whitelist ", theme.muted()),
                if action.permitted {
                    Span::raw("permits it (the engine runs without --auto: it asks first)")
                } else {
                    Span::styled(
                        "does not permit it: it runs only if you approve",
                        theme.approval(),
                    )
                },
            ]),
            Line::styled("evidence", theme.muted()),
        ];
        for line in &approval.evidence {
            lines.push(Line::from(vec![
                Span::styled("│ ", theme.muted()),
                Span::raw(line.clone()),
            ]));
        }
        lines.push(Line::styled("a approve · x reject", theme.approval()));
        lines
    };
    frame.render_widget(
        Paragraph::new(focus).wrap(Wrap { trim: false }).block(
            Block::bordered()
                .title(" Proposed action ")
                .border_style(theme.muted()),
        ),
        focus_area,
    );
    let results: Vec<Line<'_>> = snapshot
        .recent_actions
        .iter()
        .map(|action| {
            let style = match action.state {
                ActionState::Done => theme.state(runguard_engine::model::JobState::Running),
                _ => theme.state(runguard_engine::model::JobState::Failed),
            };
            Line::from(vec![
                Span::styled(format!("#{:<4}", action.id), theme.muted()),
                Span::styled(format!("{:<9}", action.state.as_str()), style),
                Span::raw(format!(
                    "{} {}",
                    action.kind.as_str(),
                    action.result.clone().unwrap_or_default()
                )),
            ])
        })
        .collect();
    frame.render_widget(
        Paragraph::new(results).block(
            Block::bordered()
                .title(" Results ")
                .border_style(theme.muted()),
        ),
        results_area,
    );
}
