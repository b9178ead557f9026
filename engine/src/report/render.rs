//! The report as plain text (the terminal and the cockpit) and as Markdown (a ticket, a post-mortem
//! document). JSON is the report serialised as it is.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use super::downtime::GapKind;
use super::{
    ActionReport, AttributionReport, DowntimeReport, FailureReport, NARRATIVE_LABEL,
    NarrativeStatus, Report,
};
use crate::model::Culprit;

fn when(time: DateTime<Utc>) -> String {
    time.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// `HH:MM:SS`, with days in front when there are some.
fn clock(seconds: i64) -> String {
    let seconds = seconds.max(0);
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    let hms = format!(
        "{:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    );
    if days > 0 {
        format!("{days}d {hms}")
    } else {
        hms
    }
}

/// Free text on one line: a list item or a table cell must not be broken by the text's own newlines.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn culprit(culprit: &Culprit) -> String {
    let parts: Vec<String> = [
        culprit.node.clone(),
        culprit.rank.map(|rank| format!("rank {rank}")),
        culprit.gpu.map(|gpu| format!("GPU {gpu}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if parts.is_empty() {
        "unknown".to_string()
    } else {
        parts.join(", ")
    }
}

fn attribution_line(attribution: &AttributionReport) -> String {
    format!(
        "{} ({}), culprit {}, confidence {:.0}%, {}",
        attribution.category,
        attribution.component.as_str(),
        culprit(&attribution.culprit),
        attribution.confidence * 100.0,
        if attribution.recoverable {
            "recoverable by requeue"
        } else {
            "not recoverable by requeue"
        }
    )
}

fn failure_heading(index: usize, total: usize, failure: &FailureReport) -> String {
    format!(
        "Failure {} of {total}: {} of attempt {}{} at {}",
        index + 1,
        failure.kind.as_str(),
        failure.attempt,
        failure
            .job_id
            .as_ref()
            .map(|job| format!(" (job {job})"))
            .unwrap_or_default(),
        when(failure.time)
    )
}

fn attempt_line(failure: &FailureReport) -> String {
    let mut parts = Vec::new();
    if let Some(state) = &failure.state {
        parts.push(state.clone());
    }
    if let Some(code) = failure.exit_code {
        parts.push(format!("exit code {code}"));
    }
    if !failure.nodes.is_empty() {
        parts.push(format!("on {}", failure.nodes.join(",")));
    }
    parts.join(", ")
}

fn action_line(action: &ActionReport) -> String {
    let mut line = format!(
        "action {} {}: {}",
        action.id,
        action.kind.as_str(),
        action.state.as_str()
    );
    if let Some(because) = &action.not_taken_because {
        let _ = write!(line, ", {because}");
    }
    line
}

fn lost_work(downtime: &DowntimeReport) -> String {
    format!(
        "{} iterations after {}, {} s of running",
        downtime.lost_iterations,
        downtime.resumed_from.map_or_else(
            || "the start (no checkpoint before the failure)".to_string(),
            |iteration| format!("the checkpoint of iteration {iteration}")
        ),
        downtime.lost_seconds
    )
}

fn gap_seconds(downtime: &DowntimeReport, kind: GapKind) -> String {
    match downtime.gap(kind) {
        None => "-".to_string(),
        Some(gap) if gap.ongoing => format!("{} s, still running", gap.seconds),
        Some(gap) => format!("{} s", gap.seconds),
    }
}

/// How long the way back took, to where it got.
fn downtime_line(downtime: &DowntimeReport, failed: u32) -> String {
    let total = downtime.total_seconds;
    let since = when(downtime.failed_at);
    if downtime.gaps.iter().any(|gap| gap.ongoing) {
        return format!("{total} s so far since the failure at {since}, still recovering");
    }
    match downtime.next_attempt {
        Some(next) if downtime.gap(GapKind::CheckpointLoad).is_some() => format!(
            "{total} s from the failure at {since} to training again (attempt {failed} → {next})"
        ),
        Some(next) => format!(
            "{total} s from the failure at {since} to attempt {next}, which reported no progress"
        ),
        None => format!("{total} s measured after the failure at {since}; no attempt followed"),
    }
}

/// The report as text for a terminal.
pub fn text(report: &Report) -> String {
    let mut out = String::new();
    let w = &report.workflow;
    let _ = writeln!(
        out,
        "Recovery report: workflow {} {} ({})",
        w.id, w.name, w.backend
    );
    let _ = writeln!(out, "  jobs:      {}", w.job_ids.join(", "));
    let _ = writeln!(
        out,
        "  status:    {}{}",
        w.status.as_str(),
        match (&w.reason, w.succeeded) {
            (Some(reason), _) => format!(" — {}", one_line(reason)),
            (None, true) => " — the run succeeded".to_string(),
            (None, false) => String::new(),
        }
    );
    let _ = writeln!(
        out,
        "  requeues:  {} of {}",
        w.requeues_used, w.requeue_limit
    );
    match &w.goodput {
        Some(g) => {
            let _ = writeln!(
                out,
                "  goodput:   {:.1}% (useful {} of {} wall; running {}, {} recomputed)",
                g.ratio * 100.0,
                clock(g.useful_seconds),
                clock(g.wall_seconds),
                clock(g.running_seconds),
                clock(g.lost_seconds)
            );
        }
        None => {
            let _ = writeln!(out, "  goodput:   - (no attempt has started)");
        }
    }
    if let Some(advice) = &w.checkpoint_advice {
        for line in advice_lines(advice) {
            let _ = writeln!(out, "  {line}");
        }
    }
    let _ = writeln!(out, "  generated: {}", when(report.generated_at));
    if let Some(phases) = &report.phases {
        let _ = writeln!(
            out,
            "\nPhases of {} ({}{})",
            phases.name,
            phases.state.as_str(),
            phases
                .reason
                .as_deref()
                .map(|reason| format!(": {}", one_line(reason)))
                .unwrap_or_default()
        );
        for line in super::phases::lines(phases, "  ") {
            let _ = writeln!(out, "{line}");
        }
    }
    if report.failures.is_empty() {
        let _ = writeln!(out, "\nNo failure recorded.");
    }
    let total = report.failures.len();
    for (index, failure) in report.failures.iter().enumerate() {
        out.push('\n');
        text_failure(&mut out, index, total, failure);
    }
    if !report.warnings.is_empty() {
        let _ = writeln!(out, "\nWarnings (the run went on)");
        for warning in &report.warnings {
            let _ = writeln!(
                out,
                "  ▲ {} attempt {} {}: {}",
                when(warning.time),
                warning.attempt,
                warning.kind.as_str(),
                one_line(&warning.summary)
            );
        }
    }
    out
}

fn text_failure(out: &mut String, index: usize, total: usize, failure: &FailureReport) {
    let _ = writeln!(out, "{}", failure_heading(index, total, failure));
    let _ = writeln!(out, "  what failed: {}", one_line(&failure.summary));
    let attempt = attempt_line(failure);
    if !attempt.is_empty() {
        let _ = writeln!(out, "  attempt:     {attempt}");
    }
    if failure.evidence.is_empty() {
        let _ = writeln!(out, "  evidence:    none kept");
    } else {
        let _ = writeln!(out, "  evidence:");
        for line in &failure.evidence {
            let _ = writeln!(out, "    │ {line}");
        }
    }
    match &failure.attribution {
        None => {
            let _ = writeln!(out, "  attribution: none");
        }
        Some(attribution) => {
            let _ = writeln!(out, "  attribution: {}", attribution_line(attribution));
            if let Some(signature) = &attribution.signature {
                let _ = writeln!(out, "    signature: {signature}");
            }
            let _ = writeln!(out, "    {}", one_line(&attribution.explanation));
            let matched: Vec<&String> = attribution
                .evidence
                .iter()
                .filter(|line| !failure.evidence.contains(line))
                .collect();
            if !matched.is_empty() {
                let _ = writeln!(out, "    matched lines:");
                for line in matched {
                    let _ = writeln!(out, "    │ {line}");
                }
            }
            for step in &attribution.recommended {
                let _ = writeln!(out, "    recommended: {}", one_line(step));
            }
        }
    }
    if let Some(reason) = &failure.crash_loop {
        let _ = writeln!(out, "  recovery stopped: {}", one_line(reason));
    }
    text_actions(out, "actions taken", &failure.actions_taken, "none");
    text_actions(
        out,
        "would have done (not permitted or never approved)",
        &failure.actions_not_taken,
        "nothing",
    );
    match &failure.downtime {
        None => {
            let _ = writeln!(out, "  downtime:    not measured (the attempt is not over)");
        }
        Some(downtime) => {
            let _ = writeln!(
                out,
                "  downtime:    {}",
                downtime_line(downtime, failure.attempt)
            );
            for kind in GapKind::ALL {
                let _ = writeln!(
                    out,
                    "    {:<16} {}",
                    kind.name(),
                    gap_seconds(downtime, kind)
                );
            }
            let _ = writeln!(out, "    {:<16} {}", "lost work", lost_work(downtime));
        }
    }
    match &failure.narrative {
        None => {}
        Some(NarrativeStatus::Written { text, source, .. }) => {
            let _ = writeln!(out, "  {NARRATIVE_LABEL}, by {source}:");
            for line in text.lines() {
                let _ = writeln!(out, "    {line}");
            }
        }
        Some(NarrativeStatus::Unavailable { reason }) => {
            let _ = writeln!(out, "  narrative unavailable: {}", one_line(reason));
        }
    }
}

fn text_actions(out: &mut String, title: &str, actions: &[ActionReport], none: &str) {
    if actions.is_empty() {
        let _ = writeln!(out, "  {title}: {none}");
        return;
    }
    let _ = writeln!(out, "  {title}:");
    for action in actions {
        let _ = writeln!(out, "    - {}", action_line(action));
        let _ = writeln!(out, "        why:     {}", one_line(&action.why));
        if let Some(command) = &action.command {
            let _ = writeln!(out, "        command: {command}");
        }
        if let Some(result) = &action.result {
            let _ = writeln!(out, "        result:  {}", one_line(result));
        }
    }
}

/// A code span that holds `text` whatever backticks it contains.
fn code_span(text: &str) -> String {
    let text = one_line(text);
    let longest = longest_backtick_run(&text);
    let ticks = "`".repeat(longest + 1);
    // A span that starts or ends with a backtick needs a space to keep it apart from the fence.
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{ticks}{pad}{text}{pad}{ticks}")
}

fn longest_backtick_run(text: &str) -> usize {
    text.split(|c| c != '`').map(str::len).max().unwrap_or(0)
}

/// Lines as a fenced code block whose fence no line can close.
fn code_block(out: &mut String, lines: &[String]) {
    let longest = lines
        .iter()
        .map(|line| longest_backtick_run(line))
        .max()
        .unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    let _ = writeln!(out, "{fence}text");
    for line in lines {
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out, "{fence}\n");
}

/// Text for a table cell: on one line, its pipes escaped.
fn cell(text: &str) -> String {
    one_line(text).replace('|', "\\|")
}

/// The report as Markdown.
pub fn markdown(report: &Report) -> String {
    let mut out = String::new();
    let w = &report.workflow;
    let _ = writeln!(
        out,
        "# Recovery report: {} (workflow {})\n",
        cell(&w.name),
        w.id
    );
    let _ = writeln!(out, "| | |\n|---|---|");
    let _ = writeln!(out, "| backend | {} |", cell(&w.backend));
    let _ = writeln!(out, "| jobs | {} |", cell(&w.job_ids.join(", ")));
    let _ = writeln!(
        out,
        "| status | {}{} |",
        w.status.as_str(),
        match (&w.reason, w.succeeded) {
            (Some(reason), _) => format!(" — {}", cell(reason)),
            (None, true) => " — the run succeeded".to_string(),
            (None, false) => String::new(),
        }
    );
    let _ = writeln!(
        out,
        "| requeues | {} of {} |",
        w.requeues_used, w.requeue_limit
    );
    let _ = writeln!(
        out,
        "| goodput | {} |",
        match &w.goodput {
            Some(g) => format!(
                "{:.1}% (useful {} of {} wall; running {}, {} recomputed)",
                g.ratio * 100.0,
                clock(g.useful_seconds),
                clock(g.wall_seconds),
                clock(g.running_seconds),
                clock(g.lost_seconds)
            ),
            None => "- (no attempt has started)".to_string(),
        }
    );
    let _ = writeln!(out, "| generated | {} |\n", when(report.generated_at));
    if let Some(phases) = &report.phases {
        let _ = writeln!(
            out,
            "## Phases of {} ({})\n",
            phases.name,
            phases.state.as_str()
        );
        for line in super::phases::lines(phases, "- ") {
            let _ = writeln!(out, "{line}");
        }
        out.push('\n');
    }
    if report.failures.is_empty() {
        let _ = writeln!(out, "No failure recorded.\n");
    }
    let total = report.failures.len();
    for (index, failure) in report.failures.iter().enumerate() {
        markdown_failure(&mut out, index, total, failure);
    }
    if !report.warnings.is_empty() {
        let _ = writeln!(out, "## Warnings (the run went on)\n");
        for warning in &report.warnings {
            let _ = writeln!(
                out,
                "- {} attempt {} **{}**: {}",
                when(warning.time),
                warning.attempt,
                warning.kind.as_str(),
                one_line(&warning.summary)
            );
        }
        out.push('\n');
    }
    out
}

fn markdown_failure(out: &mut String, index: usize, total: usize, failure: &FailureReport) {
    let _ = writeln!(out, "## {}\n", failure_heading(index, total, failure));
    let _ = writeln!(out, "- **what failed:** {}", one_line(&failure.summary));
    let attempt = attempt_line(failure);
    if !attempt.is_empty() {
        let _ = writeln!(out, "- **attempt:** {attempt}");
    }
    if let Some(reason) = &failure.crash_loop {
        let _ = writeln!(out, "- **recovery stopped:** {}", one_line(reason));
    }
    out.push('\n');
    let _ = writeln!(out, "### Evidence\n");
    if failure.evidence.is_empty() {
        let _ = writeln!(out, "None kept.\n");
    } else {
        code_block(out, &failure.evidence);
    }
    let _ = writeln!(out, "### Attribution\n");
    match &failure.attribution {
        None => {
            let _ = writeln!(out, "None.\n");
        }
        Some(attribution) => {
            let _ = writeln!(out, "**{}**\n", attribution_line(attribution));
            if let Some(signature) = &attribution.signature {
                let _ = writeln!(out, "Signature: {}\n", code_span(signature));
            }
            let _ = writeln!(out, "{}\n", one_line(&attribution.explanation));
            let matched: Vec<String> = attribution
                .evidence
                .iter()
                .filter(|line| !failure.evidence.contains(line))
                .cloned()
                .collect();
            if !matched.is_empty() {
                let _ = writeln!(out, "Matched lines:\n");
                code_block(out, &matched);
            }
            for step in &attribution.recommended {
                let _ = writeln!(out, "- recommended: {}", one_line(step));
            }
            if !attribution.recommended.is_empty() {
                out.push('\n');
            }
        }
    }
    markdown_actions(out, "Actions taken", &failure.actions_taken, "None.");
    markdown_actions(
        out,
        "Would have done (not permitted or never approved)",
        &failure.actions_not_taken,
        "Nothing.",
    );
    let _ = writeln!(out, "### Downtime\n");
    match &failure.downtime {
        None => {
            let _ = writeln!(out, "Not measured: the attempt is not over.\n");
        }
        Some(downtime) => {
            let _ = writeln!(out, "{}.\n", downtime_line(downtime, failure.attempt));
            let _ = writeln!(out, "| gap | seconds |\n|---|---:|");
            for kind in GapKind::ALL {
                let _ = writeln!(out, "| {} | {} |", kind.name(), gap_seconds(downtime, kind));
            }
            let _ = writeln!(out, "| **total** | {} s |\n", downtime.total_seconds);
            let _ = writeln!(out, "Lost work: {}.\n", lost_work(downtime));
        }
    }
    match &failure.narrative {
        None => {}
        Some(NarrativeStatus::Written { text, source, .. }) => {
            let _ = writeln!(out, "### {NARRATIVE_LABEL}\n");
            let _ = writeln!(out, "Written by {}.\n", cell(source));
            for line in text.lines() {
                let _ = writeln!(out, "> {line}");
            }
            out.push('\n');
        }
        Some(NarrativeStatus::Unavailable { reason }) => {
            let _ = writeln!(out, "_narrative unavailable: {}_\n", one_line(reason));
        }
    }
}

fn markdown_actions(out: &mut String, title: &str, actions: &[ActionReport], none: &str) {
    let _ = writeln!(out, "### {title}\n");
    if actions.is_empty() {
        let _ = writeln!(out, "{none}\n");
        return;
    }
    for action in actions {
        let _ = writeln!(out, "- **{}**", action_line(action));
        let _ = writeln!(out, "  - why: {}", one_line(&action.why));
        if let Some(command) = &action.command {
            let _ = writeln!(out, "  - command: {}", code_span(command));
        }
        if let Some(result) = &action.result {
            let _ = writeln!(out, "  - result: {}", one_line(result));
        }
    }
    out.push('\n');
}

/// The checkpoint advisor's figures in two lines: what the run does now and what the advisor
/// suggests, with the training time ratio of each.
pub fn advice_lines(advice: &super::advisor::Advice) -> [String; 2] {
    let seconds = |secs: f64| clock(secs.round() as i64);
    [
        format!(
            "checkpoints: every {}, a save costs {} ({} measured); MTBF {} ({})",
            seconds(advice.interval_secs),
            seconds(advice.save_cost_secs),
            advice.saves_measured,
            seconds(advice.mtbf_secs),
            advice.mtbf_basis
        ),
        format!(
            "advice:      every {} (Young–Daly √(2·C·MTBF)): training {:.1}% of the time, {:.1}% now",
            seconds(advice.advised_interval_secs),
            advice.ratio_advised * 100.0,
            advice.ratio_now * 100.0
        ),
    ]
}
