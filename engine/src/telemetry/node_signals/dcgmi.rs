//! `dcgmi health -c`: one `Health` signal per entity and system finding.

use std::sync::LazyLock;

use regex::Regex;

use super::*;

/// A `dcgmi health` system finding while its message lines are read.
struct HealthFinding {
    entity: String,
    gpu: Option<u32>,
    system: String,
    status: String,
    message: String,
}

impl HealthFinding {
    fn into_signal(self) -> NodeSignal {
        let text = format!(
            "dcgmi health: {} {} {}: {}",
            self.entity, self.system, self.status, self.message
        );
        NodeSignal {
            fatal: self.status == "Failure",
            kind: SignalKind::Health {
                system: self.system,
                status: self.status,
            },
            pci: None,
            gpu: self.gpu,
            host: None,
            time: None,
            text: clip(text.trim_end(), MAX_TEXT_BYTES).to_owned(),
        }
    }
}

/// Old dcgmi (1.x) puts the system in the message column: `PCIe system: Warning - Detected ...`.
static OLD_HEALTH_FINDING: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^([A-Za-z][A-Za-z ]{0,30}?)(?: system)?: (Warning|Failure)(?: - (.*))?$")
        .expect("constant pattern compiles")
});

/// Parses the table `dcgmi health -c` prints into one `Health` signal per entity and
/// system with a Warning or Failure (messages joined across wrapped lines). Handles the
/// tree layout of DCGM 2.x and later (`-> 3` / `-> Thermal system`) and the older
/// `GPU ID: 3` layout. A healthy report yields nothing.
pub fn parse_dcgmi_health(text: &str) -> Vec<NodeSignal> {
    let mut signals = Vec::new();
    let mut group = String::new();
    let mut entity: Option<(String, Option<u32>)> = None;
    let mut finding: Option<HealthFinding> = None;
    fn flush(finding: &mut Option<HealthFinding>, signals: &mut Vec<NodeSignal>) {
        if let Some(done) = finding.take()
            && signals.len() < MAX_HEALTH_FINDINGS
        {
            signals.push(done.into_signal());
        }
    }
    for raw in text.lines() {
        let Some((left, right)) = table_row(clip(raw, MAX_SCAN_BYTES)) else {
            continue;
        };
        let label = left.trim();
        if label.is_empty() {
            if right.is_empty() {
                continue;
            }
            if let Some(captures) = OLD_HEALTH_FINDING.captures(right)
                && let Some((name, gpu)) = entity.clone()
            {
                flush(&mut finding, &mut signals);
                finding = Some(HealthFinding {
                    entity: name,
                    gpu,
                    system: captures.get(1).map_or("", |m| m.as_str()).to_owned(),
                    status: captures.get(2).map_or("", |m| m.as_str()).to_owned(),
                    message: captures.get(3).map_or("", |m| m.as_str()).to_owned(),
                });
            } else if let Some(open) = finding.as_mut()
                && open.message.len() < MAX_TEXT_BYTES
            {
                if !open.message.is_empty() {
                    open.message.push(' ');
                }
                open.message.push_str(right);
            }
            continue;
        }
        let depth = left.len() - left.trim_start().len();
        if let Some(name) = label.strip_prefix("-> ") {
            let name = name.trim();
            if depth == 0 {
                flush(&mut finding, &mut signals);
                let gpu = if group == "GPU" {
                    name.parse().ok()
                } else {
                    None
                };
                entity = Some((format!("{group} {name}"), gpu));
            } else if let Some(status) = health_status(right)
                && let Some((entity_name, gpu)) = entity.clone()
            {
                flush(&mut finding, &mut signals);
                finding = Some(HealthFinding {
                    entity: entity_name,
                    gpu,
                    system: name.strip_suffix(" system").unwrap_or(name).to_owned(),
                    status: status.to_owned(),
                    message: String::new(),
                });
            }
            continue;
        }
        flush(&mut finding, &mut signals);
        if let Some(id) = label.strip_prefix("GPU ID:") {
            let id = id.trim();
            group = "GPU".to_owned();
            entity = Some((format!("GPU {id}"), id.parse().ok()));
        } else {
            group = clip(label, 64).to_owned();
            entity = None;
        }
    }
    flush(&mut finding, &mut signals);
    signals
}

/// `| left | right |` → (left with its indentation, right trimmed); None for rules and other lines.
fn table_row(line: &str) -> Option<(&str, &str)> {
    let inner = line.trim().strip_prefix('|')?.strip_suffix('|')?;
    let (left, right) = inner.split_once('|').unwrap_or((inner, ""));
    Some((
        left.strip_prefix(' ').unwrap_or(left).trim_end(),
        right.trim(),
    ))
}

fn health_status(value: &str) -> Option<&'static str> {
    match value {
        "Warning" => Some("Warning"),
        "Failure" => Some("Failure"),
        _ => None,
    }
}
