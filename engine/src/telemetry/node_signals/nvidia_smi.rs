//! `nvidia-smi -q`: one status per GPU, and the bus-id inventory that pins kernel lines on GPU indexes.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::*;

/// One GPU of a node as `nvidia-smi -q` reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuStatus {
    /// nvidia-smi index (the order of the GPUs in the report; `Minor Number` for a filtered report).
    pub index: u32,
    /// Normalised PCI bus id.
    pub pci: String,
    pub name: Option<String>,
    pub serial: Option<String>,
    pub temperature_c: Option<f64>,
    pub slowdown_temperature_c: Option<f64>,
    pub shutdown_temperature_c: Option<f64>,
    /// Slowdown reasons reported `Active` (`HW Slowdown`, `HW Thermal Slowdown`,
    /// `HW Power Brake Slowdown`, `SW Thermal Slowdown`).
    pub active_slowdowns: Vec<String>,
    /// Uncorrectable ECC errors since the driver loaded (SRAM + DRAM), when reported.
    pub ecc_uncorrectable_volatile: Option<u64>,
    pub remapped_rows_pending: Option<bool>,
    pub remapped_rows_failure: Option<bool>,
}

impl GpuStatus {
    /// Signals this GPU's state warrants: `Thermal` at or above `thermal_limit_c`
    /// ([`DEFAULT_THERMAL_LIMIT_C`] by default), `ClockSlowdown` for any active hardware or
    /// thermal slowdown, and `EccUncorrectable` for volatile uncorrectable errors or row
    /// remapping that is pending or failed. Only errors and remap failure are fatal: a
    /// pending remap alone asks for a GPU reset, not for the job to die.
    pub fn signals(&self, thermal_limit_c: f64) -> Vec<NodeSignal> {
        let mut signals = Vec::new();
        if let Some(temperature) = self.temperature_c
            && temperature >= thermal_limit_c
        {
            signals.push(self.signal(
                SignalKind::Thermal {
                    temperature_c: Some(temperature),
                },
                false,
                format!("at {temperature} C, limit {thermal_limit_c} C"),
            ));
        }
        if !self.active_slowdowns.is_empty() {
            signals.push(self.signal(
                SignalKind::ClockSlowdown {
                    reasons: self.active_slowdowns.clone(),
                },
                false,
                format!("clocks slowed: {}", self.active_slowdowns.join(", ")),
            ));
        }
        let uncorrectable = self.ecc_uncorrectable_volatile.unwrap_or(0);
        let failure = self.remapped_rows_failure == Some(true);
        let pending = self.remapped_rows_pending == Some(true);
        if uncorrectable > 0 || failure || pending {
            let mut facts = Vec::new();
            if uncorrectable > 0 {
                facts.push(format!("{uncorrectable} volatile uncorrectable ECC errors"));
            }
            if pending {
                facts.push("row remapping pending".to_owned());
            }
            if failure {
                facts.push("row remapping failed".to_owned());
            }
            signals.push(self.signal(
                SignalKind::EccUncorrectable,
                uncorrectable > 0 || failure,
                facts.join(", "),
            ));
        }
        signals
    }

    fn signal(&self, kind: SignalKind, fatal: bool, what: String) -> NodeSignal {
        let text = format!("nvidia-smi: GPU {} ({}) {what}", self.index, self.pci);
        NodeSignal {
            kind,
            pci: Some(self.pci.clone()),
            gpu: Some(self.index),
            host: None,
            time: None,
            fatal,
            text: clip(&text, MAX_TEXT_BYTES).to_owned(),
        }
    }
}

/// A GPU block of `nvidia-smi -q` while it is read.
struct GpuDraft {
    status: GpuStatus,
    minor: Option<u32>,
}

impl GpuDraft {
    fn new(pci: String) -> Self {
        Self {
            status: GpuStatus {
                index: 0,
                pci,
                name: None,
                serial: None,
                temperature_c: None,
                slowdown_temperature_c: None,
                shutdown_temperature_c: None,
                active_slowdowns: Vec::new(),
                ecc_uncorrectable_volatile: None,
                remapped_rows_pending: None,
                remapped_rows_failure: None,
            },
            minor: None,
        }
    }

    /// Takes one `key : value` line, found under `sections` (outermost first).
    fn apply(&mut self, sections: &[(usize, String)], key: &str, value: &str) {
        let section = sections.last().map(|(_, name)| name.as_str());
        let within = |name: &str| sections.iter().any(|(_, s)| s == name);
        let status = &mut self.status;
        match (section, key) {
            (None, "Product Name") => status.name = text_value(value),
            (None, "Serial Number") => status.serial = text_value(value),
            (None, "Minor Number") => self.minor = value.parse().ok(),
            (Some("Clocks Event Reasons" | "Clocks Throttle Reasons"), _)
                if key.contains("Slowdown")
                    && value.eq_ignore_ascii_case("Active")
                    && status.active_slowdowns.len() < 8
                    && !status.active_slowdowns.iter().any(|r| r == key) =>
            {
                status.active_slowdowns.push(key.to_owned());
            }
            (Some("Temperature"), "GPU Current Temp") => {
                status.temperature_c = leading_number(value)
            }
            (Some("Temperature"), "GPU Slowdown Temp") => {
                status.slowdown_temperature_c = leading_number(value);
            }
            (Some("Temperature"), "GPU Shutdown Temp") => {
                status.shutdown_temperature_c = leading_number(value);
            }
            // Ampere and later: `SRAM Uncorrectable`, `DRAM Uncorrectable` (and the split
            // `SRAM Uncorrectable Parity` / `SEC-DED`) right under `Volatile`.
            (Some("Volatile"), _) if within("ECC Errors") && key.contains("Uncorrectable") => {
                add_count(&mut status.ecc_uncorrectable_volatile, value);
            }
            // Older boards: `Volatile` > `Double Bit` > `Total`.
            (Some("Double Bit"), "Total") if within("ECC Errors") && within("Volatile") => {
                add_count(&mut status.ecc_uncorrectable_volatile, value);
            }
            (Some("Remapped Rows"), "Pending") => status.remapped_rows_pending = yes_no(value),
            (Some("Remapped Rows"), "Remapping Failure Occurred") => {
                status.remapped_rows_failure = yes_no(value);
            }
            _ => {}
        }
    }
}

/// Parses `nvidia-smi -q` output into one status per GPU. Missing sections and `N/A`
/// leave fields None; unknown sections are skipped. Indexes follow the order of the
/// `GPU 00000000:3B:00.0` headers, or `Minor Number` when the report lists fewer GPUs
/// than `Attached GPUs` (as `nvidia-smi -q -i 3` does).
pub fn parse_nvidia_smi_q(text: &str) -> Vec<GpuStatus> {
    let mut drafts: Vec<GpuDraft> = Vec::new();
    let mut attached: Option<usize> = None;
    let mut sections: Vec<(usize, String)> = Vec::new();
    for raw in text.lines() {
        let line = clip(raw, MAX_SCAN_BYTES).trim_end();
        let body = line.trim_start();
        if body.is_empty() {
            continue;
        }
        let indent = line.len() - body.len();
        if indent == 0 {
            sections.clear();
            if let Some(pci) = body.strip_prefix("GPU ").and_then(normalize_pci) {
                if drafts.len() >= MAX_GPUS {
                    break;
                }
                drafts.push(GpuDraft::new(pci));
            } else if let Some(("Attached GPUs", value)) = key_value(body) {
                attached = value.parse().ok();
            } else if body.starts_with('=') {
                // A new `NVSMI LOG` header: the GPUs before it belong to an earlier report.
                drafts.clear();
                attached = None;
            }
            continue;
        }
        let Some(draft) = drafts.last_mut() else {
            continue;
        };
        while sections.last().is_some_and(|(level, _)| *level >= indent) {
            sections.pop();
        }
        match key_value(body) {
            Some((key, value)) => draft.apply(&sections, key, value),
            None if sections.len() < MAX_SECTION_DEPTH => sections.push((indent, body.to_owned())),
            None => {}
        }
    }
    let by_order = attached.is_none_or(|count| count == drafts.len());
    let mut minors: Vec<u32> = drafts.iter().filter_map(|d| d.minor).collect();
    minors.sort_unstable();
    minors.dedup();
    let minors_usable = minors.len() == drafts.len();
    drafts
        .into_iter()
        .enumerate()
        .map(|(order, draft)| {
            let mut status = draft.status;
            status.index = match draft.minor {
                Some(minor) if !by_order && minors_usable => minor,
                _ => u32::try_from(order).unwrap_or(u32::MAX),
            };
            status
        })
        .collect()
}

fn key_value(body: &str) -> Option<(&str, &str)> {
    let (key, value) = body.split_once(':')?;
    Some((key.trim(), value.trim()))
}

/// A value nvidia-smi actually knows; None for `N/A`, `[N/A]`, `[Unknown Error]` and the like.
fn text_value(value: &str) -> Option<String> {
    let unknown = value.is_empty()
        || value.starts_with('[')
        || value.eq_ignore_ascii_case("N/A")
        || value.eq_ignore_ascii_case("Not Supported")
        || value.eq_ignore_ascii_case("Unknown Error");
    (!unknown).then(|| clip(value, 256).to_owned())
}

/// `93 C` → 93.0; None for `N/A`.
fn leading_number(value: &str) -> Option<f64> {
    value
        .split_whitespace()
        .next()?
        .parse::<f64>()
        .ok()
        .filter(|n| n.is_finite())
}

fn add_count(total: &mut Option<u64>, value: &str) {
    if let Ok(count) = value.parse::<u64>() {
        *total = Some(total.unwrap_or(0).saturating_add(count));
    }
}

fn yes_no(value: &str) -> Option<bool> {
    if value.eq_ignore_ascii_case("yes") {
        Some(true)
    } else if value.eq_ignore_ascii_case("no") {
        Some(false)
    } else {
        None
    }
}

/// Maps PCI bus ids to GPU indexes on one node, so a kernel line that names only a bus id
/// can be pinned on a GPU (and a DCGM finding that names only an index on a bus id).
#[derive(Debug, Clone, Default)]
pub struct GpuInventory {
    by_pci: HashMap<String, u32>,
    by_index: HashMap<u32, String>,
}

impl GpuInventory {
    /// The inventory `nvidia-smi -q` described.
    pub fn from_statuses(gpus: &[GpuStatus]) -> Self {
        let mut inventory = Self::default();
        for gpu in gpus {
            inventory.insert(gpu.index, &gpu.pci);
        }
        inventory
    }

    /// Records that GPU `index` sits at `pci`; false (and nothing recorded) when `pci` is not an address.
    pub fn insert(&mut self, index: u32, pci: &str) -> bool {
        let Some(pci) = normalize_pci(pci) else {
            return false;
        };
        self.by_pci.insert(pci.clone(), index);
        self.by_index.insert(index, pci);
        true
    }

    /// GPU index at `pci`, in any form [`normalize_pci`] accepts.
    pub fn gpu_of(&self, pci: &str) -> Option<u32> {
        self.by_pci.get(&normalize_pci(pci)?).copied()
    }

    /// Normalised PCI bus id of GPU `index`.
    pub fn pci_of(&self, index: u32) -> Option<&str> {
        self.by_index.get(&index).map(String::as_str)
    }

    /// Fills in the GPU index from the bus id, or the bus id from the index, when the signal lacks one.
    pub fn resolve(&self, signal: &mut NodeSignal) {
        if signal.gpu.is_none() {
            signal.gpu = signal.pci.as_deref().and_then(|pci| self.gpu_of(pci));
        }
        if signal.pci.is_none() {
            signal.pci = signal
                .gpu
                .and_then(|gpu| self.pci_of(gpu))
                .map(str::to_owned);
        }
    }
}
