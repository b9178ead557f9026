//! Details of the focused attempt: basic, hardware, performance and recovery information, anomalies and
//! the attribution with its evidence lines.

use super::View;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};
use runguard_engine::model::BackendKind;

use super::{format_duration, format_time};
use crate::tui::app::duration_of;

pub fn draw(frame: &mut Frame<'_>, area: Rect, view: &View<'_>) {
    let (app, snapshot, theme, now) = view.parts();
    let Some(row) = app.focused(snapshot, now) else {
        frame.render_widget(
            Paragraph::new("no attempt to show").block(Block::bordered().title(" Details ")),
            area,
        );
        return;
    };
    let Some(detail) = snapshot.detail(row.workflow_id) else {
        return;
    };
    let attempt = &row.attempt;
    let workflow = &detail.workflow;
    let label = |name: &str| Span::styled(format!("{name:<14}"), theme.muted());
    let field = |name: &str, value: String| Line::from(vec![label(name), Span::raw(value)]);
    let list = |nodes: &[String]| {
        if nodes.is_empty() {
            "-".to_string()
        } else {
            nodes.join(",")
        }
    };
    let last_throughput = detail
        .throughput
        .iter()
        .rev()
        .find(|s| s.attempt_index == attempt.index);
    let failures = workflow.failures_since_checkpoint;
    let kubernetes = workflow.backend == BackendKind::Kubernetes;

    let mut left = vec![
        Line::styled("Basic", theme.accent()),
        field(
            "job",
            format!("{} (attempt {})", attempt.job_id, attempt.index),
        ),
        field(
            if kubernetes { "workload" } else { "name" },
            match attempt.job_id.split_once('/') {
                Some((kind, _)) if kubernetes => format!("{} ({kind})", workflow.name),
                _ => workflow.name.clone(),
            },
        ),
        field("user", workflow.spec.user.clone()),
        Line::from(vec![
            label("state"),
            Span::styled(attempt.state_raw.clone(), theme.state(attempt.state)),
        ]),
        field(
            "reason",
            attempt.reason.clone().unwrap_or_else(|| "-".into()),
        ),
        field(
            "command",
            workflow.spec.command.clone().unwrap_or_else(|| "-".into()),
        ),
        field(
            "log",
            attempt
                .log_path
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "-".into()),
        ),
        field(
            "cluster",
            workflow.spec.cluster.clone().unwrap_or_else(|| "-".into()),
        ),
        // A Kubernetes workload's partition is its namespace.
        field(
            if kubernetes { "namespace" } else { "partition" },
            workflow
                .spec
                .partition
                .clone()
                .unwrap_or_else(|| "-".into()),
        ),
        field(
            "reservation",
            workflow
                .spec
                .reservation
                .clone()
                .unwrap_or_else(|| "-".into()),
        ),
        field(
            "dependency",
            workflow
                .spec
                .dependency
                .clone()
                .unwrap_or_else(|| "-".into()),
        ),
        Line::raw(""),
        Line::styled("Hardware", theme.accent()),
        if kubernetes {
            // One node entry per pod, in rank order: how many pods each node runs.
            let mut per_node: Vec<(&str, usize)> = Vec::new();
            for node in &attempt.nodes {
                match per_node.iter_mut().find(|(name, _)| name == node) {
                    Some((_, pods)) => *pods += 1,
                    None => per_node.push((node, 1)),
                }
            }
            field(
                "pods",
                format!(
                    "{} of {} replicas ({})",
                    attempt.nodes.len(),
                    workflow.spec.nodes,
                    per_node
                        .iter()
                        .map(|(node, pods)| format!("{node} ×{pods}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        } else {
            field(
                "nodes",
                format!("{} ({})", attempt.nodes.len(), list(&attempt.nodes)),
            )
        },
        field("gpus", attempt.gpus.to_string()),
        field(
            "cpus",
            match workflow.spec.cpus {
                0 => "-".to_string(),
                cpus => cpus.to_string(),
            },
        ),
        field(
            "memory",
            workflow.spec.memory.clone().unwrap_or_else(|| "-".into()),
        ),
        field("included", list(&workflow.spec.included_nodes)),
        field("excluded", list(&attempt.excluded_nodes)),
        Line::raw(""),
        Line::styled("Performance", theme.accent()),
        field("submitted", format_time(attempt.submit_time, false, now)),
        field("started", format_time(attempt.start_time, false, now)),
        field("ended", format_time(attempt.end_time, false, now)),
        field(
            "duration",
            duration_of(row, now)
                .map(|d| format_duration(d, true))
                .unwrap_or_else(|| "-".into()),
        ),
        field(
            "last update",
            format_time(Some(attempt.updated_at), true, now),
        ),
        field(
            "throughput",
            last_throughput
                .map(|s| {
                    format!(
                        "{:.1} TFLOP/s/GPU at iteration {}",
                        s.tflops_per_gpu, s.iteration
                    )
                })
                .unwrap_or_else(|| "-".into()),
        ),
        field(
            "checkpoints",
            format!(
                "{} this attempt, last {}",
                row.checkpoints,
                format_time(row.last_checkpoint, false, now)
            ),
        ),
    ];
    left.push(Line::raw(""));
    left.push(Line::styled("Recovery", theme.accent()));
    left.push(field("backend", workflow.backend.to_string()));
    left.push(Line::from(vec![
        label("workflow"),
        Span::styled(workflow.status.as_str(), theme.status(workflow.status)),
        Span::raw(
            workflow
                .status_reason
                .as_deref()
                .map(|r| format!(" — {r}"))
                .unwrap_or_default(),
        ),
    ]));
    left.push(field(
        "resume mode",
        workflow
            .limits
            .auto_resume_mode
            .clone()
            .unwrap_or_else(|| "requeue".into()),
    ));
    left.push(field(
        "requeues",
        format!("{} of {}", workflow.requeues_used, detail.requeue_limit),
    ));
    left.push(field("since ckpt", format!("{failures} failed attempts")));
    if let Some(advice) = runguard_engine::report::advisor::of_history(detail, now) {
        let minutes = |secs: f64| format!("{:.1} min", secs / 60.0);
        left.push(field(
            "ckpt every",
            format!(
                "{} now, save {:.0} s, MTBF {:.1} h",
                minutes(advice.interval_secs),
                advice.save_cost_secs,
                advice.mtbf_secs / 3600.0
            ),
        ));
        left.push(field(
            "advised",
            format!(
                "{} (Young–Daly): training {:.1}% vs {:.1}% now",
                minutes(advice.advised_interval_secs),
                advice.ratio_advised * 100.0,
                advice.ratio_now * 100.0
            ),
        ));
    }

    left.extend(phase_lines(snapshot, workflow.id, theme));

    let mut right = vec![Line::styled("Anomalies", theme.accent())];
    let anomalies: Vec<_> = detail
        .anomalies
        .iter()
        .filter(|a| a.attempt_index == attempt.index)
        .collect();
    if anomalies.is_empty() {
        right.push(Line::styled("none", theme.muted()));
    }
    for anomaly in anomalies {
        right.push(Line::from(vec![
            Span::styled("▲ ", theme.anomaly()),
            Span::styled(format!("{} ", anomaly.kind.as_str()), theme.anomaly()),
            Span::styled(anomaly.time.format("%H:%M:%S ").to_string(), theme.muted()),
            Span::raw(anomaly.summary.clone()),
        ]));
    }
    right.push(Line::raw(""));
    right.push(Line::styled("Attribution", theme.accent()));
    match detail
        .attributions
        .iter()
        .rev()
        .find(|a| a.attempt_index == attempt.index)
    {
        None => right.push(Line::styled("none", theme.muted())),
        Some(attribution) => {
            right.push(Line::from(vec![
                Span::styled(attribution.category.clone(), theme.anomaly()),
                Span::raw(format!(
                    " ({}) on {} — {:.0}%, {}",
                    attribution.component.as_str(),
                    attribution
                        .culprit
                        .node
                        .as_deref()
                        .unwrap_or("an unknown node"),
                    attribution.confidence * 100.0,
                    if attribution.recoverable {
                        "recoverable by requeue"
                    } else {
                        "not recoverable by requeue"
                    }
                )),
            ]));
            right.push(Line::raw(attribution.explanation.clone()));
            right.push(Line::styled("evidence:", theme.muted()));
            for line in &attribution.evidence {
                right.push(Line::from(vec![
                    Span::styled("│ ", theme.muted()),
                    Span::raw(line.clone()),
                ]));
            }
        }
    }
    let [left_area, right_area] =
        Layout::horizontal([Constraint::Percentage(45), Constraint::Percentage(55)]).areas(area);
    frame.render_widget(
        Paragraph::new(left).wrap(Wrap { trim: false }).block(
            Block::bordered()
                .title(format!(" {} · attempt {} ", workflow.name, attempt.index))
                .border_style(theme.accent()),
        ),
        left_area,
    );
    frame.render_widget(
        Paragraph::new(right).wrap(Wrap { trim: false }).block(
            Block::bordered()
                .title(" Anomalies & attribution ")
                .border_style(theme.muted()),
        ),
        right_area,
    );
}

/// The phases of the multiphase workflow the focused run belongs to, this one marked, with each
/// phase's attempts; nothing for a run that is not a phase.
fn phase_lines(
    snapshot: &crate::tui::snapshot::Snapshot,
    workflow_id: runguard_engine::model::WorkflowId,
    theme: &crate::tui::theme::Theme,
) -> Vec<Line<'static>> {
    let Some(multiphase) = snapshot.phases.iter().find(|view| {
        view.phases
            .iter()
            .any(|phase| phase.workflow_id == Some(workflow_id))
    }) else {
        return Vec::new();
    };
    let mut lines = vec![
        Line::raw(""),
        Line::styled(
            format!(
                "Phases of {} ({})",
                multiphase.multiphase.name,
                multiphase.multiphase.state.as_str()
            ),
            theme.accent(),
        ),
    ];
    for phase in &multiphase.phases {
        let this = phase.workflow_id == Some(workflow_id);
        let jobs = if phase.job_ids.is_empty() {
            String::new()
        } else {
            format!(
                " job {} · {} attempt{}",
                phase.job_ids.join(","),
                phase.attempts,
                if phase.attempts == 1 { "" } else { "s" }
            )
        };
        let reason = phase
            .reason
            .as_deref()
            .map(|reason| format!(" — {reason}"))
            .unwrap_or_default();
        lines.push(Line::from(vec![
            Span::styled(
                format!(
                    "{}{}. {:<12}",
                    if this { "▸" } else { " " },
                    phase.index + 1,
                    phase.name
                ),
                if this { theme.selected() } else { theme.text() },
            ),
            Span::styled(format!("{:<10}", phase.state.as_str()), theme.muted()),
            Span::raw(format!("{jobs}{reason}")),
        ]));
    }
    lines
}

#[cfg(all(test, feature = "sim"))]
mod tests {
    use runguard_engine::config::Config;
    use runguard_engine::model::{BackendKind, PhaseJob, PhaseSpec, PhaseState};
    use runguard_engine::phases::{WorkflowFile, record};
    use runguard_engine::recover::Policy;

    use crate::tui::app::{App, Pane, UiAction};
    use crate::tui::snapshot::Snapshot;
    use crate::tui::tests::{failed_and_proposed, render};

    fn phase(name: &str) -> PhaseSpec {
        PhaseSpec {
            name: name.into(),
            job: PhaseJob::Batch {
                script: format!("/w/{name}.sbatch").into(),
                args: vec![],
                sbatch_args: vec![],
            },
            nodes: None,
            min_nodes: None,
            max_failures: None,
            checkpoint_dir: None,
            work_dir: None,
        }
    }

    #[test]
    fn the_details_of_a_phase_s_run_list_every_phase_with_its_attempts() {
        let (_dir, mut store, now) = failed_and_proposed();
        store
            .write(|db| {
                let file = WorkflowFile {
                    name: "llama".into(),
                    phases: vec![phase("pretrain"), phase("eval")],
                };
                let id = record::store_multiphase(db, &file, BackendKind::Sim, None, now)?;
                let mut first = db.phases(id)?.remove(0);
                first.state = PhaseState::Running;
                first.workflow_id = Some(1);
                db.update_phase(&first)
            })
            .unwrap();
        let policy = Policy::from_config(&Config::default().recovery, true);
        let snapshot = Snapshot::load(&store.db(), &policy, Some(1)).unwrap();
        let mut app = App::new("alice".into(), true);
        app.update(UiAction::Enter, &snapshot, now);
        assert_eq!(app.pane, Pane::Details);
        let text = render(&app, &snapshot, now, 160, 60);
        for expected in [
            "Phases of llama (running)",
            "▸1. pretrain",
            "running",
            "job 4201 · 1 attempt",
            "2. eval",
            "waiting",
        ] {
            assert!(text.contains(expected), "{expected:?} missing:\n{text}");
        }
    }
}
