//! Node signals: what a node's kernel log, `nvidia-smi -q` and `dcgmi health -c`
//! say about its GPUs, as typed [`NodeSignal`]s that attribution can pin on a
//! node and a GPU.
//!
//! Nearly every kernel line says nothing about GPUs, so [`parse_kernel_line`]
//! first runs one literal multi-substring scan over the line and only parses
//! the few lines it lets through. Every parser here takes outside input: none
//! panics, and each bounds the work it does per line.

use crate::text::clip;

mod dcgmi;
mod kernel;
mod nvidia_smi;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub use dcgmi::parse_dcgmi_health;
pub use kernel::parse_kernel_line;
pub use nvidia_smi::{GpuInventory, GpuStatus, parse_nvidia_smi_q};

/// What a node reported about its hardware.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SignalKind {
    /// An NVIDIA driver Xid event: `NVRM: Xid (PCI:0000:3b:00): 79, ...`.
    Xid { code: u32 },
    /// Uncorrectable GPU memory error: DBE, uncorrectable ECC, row remapping failure.
    EccUncorrectable,
    /// Correctable (single-bit) ECC errors; informational.
    EccCorrectable,
    /// NVLink or NVSwitch (SXid) error outside an Xid line.
    NvlinkError,
    /// A PCIe Advanced Error Reporting event. `severity` is `fatal`,
    /// `non_fatal` or `corrected`; the line keeps the kernel's own words.
    PcieAer { severity: String },
    /// A temperature limit was reached (GPU or host), with the reading when the line gives one.
    Thermal { temperature_c: Option<f64> },
    /// Clocks are held down by hardware or thermal slowdown, named as nvidia-smi names them.
    ClockSlowdown { reasons: Vec<String> },
    /// The GPU is gone: fallen off the bus, "GPU is lost", no device handle, failed init.
    GpuLost,
    /// A `dcgmi health` finding: the system as DCGM names it (`Thermal`, `NVLINK`, `PCIe`, ...)
    /// and its status (`Warning` or `Failure`).
    Health { system: String, status: String },
}

/// One hardware observation on one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSignal {
    /// What was observed.
    pub kind: SignalKind,
    /// Normalised PCI bus id `0000:3b:00.0` (lowercase, 4-digit domain, with function), when the line names one.
    pub pci: Option<String>,
    /// GPU index on the node when known (from the line or through a [`GpuInventory`]).
    pub gpu: Option<u32>,
    /// Host named by the line (syslog hostname field), when present.
    pub host: Option<String>,
    /// When the line says so in UTC terms (RFC 3339 / ISO stamps with an offset). Local-time
    /// stamps (BSD syslog, `dmesg -T`) stay None: the caller frames those lines.
    pub time: Option<DateTime<Utc>>,
    /// Fatal to the job on that GPU or node (a fatal Xid of `data/xid.toml`, GPU lost,
    /// uncorrectable ECC, fatal AER, fatal NVLink/NVSwitch error, thermal shutdown); otherwise a warning.
    pub fatal: bool,
    /// The line (trimmed, at most 1 KiB).
    pub text: String,
}

/// GPU temperature at or above which [`GpuStatus::signals`] reports heat, unless policy says otherwise.
pub const DEFAULT_THERMAL_LIMIT_C: f64 = 92.0;

/// Longest text kept from one line.
const MAX_TEXT_BYTES: usize = 1024;

/// Only this much of a kernel line is looked at; printk lines are at most 1 KiB plus a prefix.
const MAX_SCAN_BYTES: usize = 4096;

/// Bounds on command output, so a runaway input cannot grow what is kept.
const MAX_GPUS: usize = 256;
const MAX_SECTION_DEPTH: usize = 16;
const MAX_HEALTH_FINDINGS: usize = 1024;

/// Normalises a PCI bus id to `0000:3b:00.0`: accepts `PCI:0000:3b:00`, `00000000:3B:00.0`,
/// `0000:3b:00.0` and `3b:00.0`. None when it is not a well-formed address.
pub fn normalize_pci(raw: &str) -> Option<String> {
    let text = raw
        .trim()
        .trim_start_matches('(')
        .trim_end_matches([')', ':']);
    if text.is_empty() || text.len() > 32 {
        return None;
    }
    let text = match text.get(..4) {
        Some(prefix) if prefix.eq_ignore_ascii_case("PCI:") => text.get(4..)?,
        _ => text,
    };
    let (address, function) = match text.rsplit_once('.') {
        Some((address, function)) => (address, Some(function)),
        None => (text, None),
    };
    let mut parts = address.split(':');
    let fields = (parts.next(), parts.next(), parts.next(), parts.next());
    let (domain, bus, device) = match fields {
        (Some(domain), Some(bus), Some(device), None) => (Some(domain), bus, device),
        (Some(bus), Some(device), None, None) if function.is_some() => (None, bus, device),
        _ => return None,
    };
    let domain = match domain {
        Some(domain) => hex_field(domain, 8)?,
        None => 0,
    };
    let bus = hex_field(bus, 2)?;
    let device = hex_field(device, 2)?;
    let function = match function {
        Some(function) => hex_field(function, 1)?,
        None => 0,
    };
    (device <= 0x1f && function <= 7)
        .then(|| format!("{domain:04x}:{bus:02x}:{device:02x}.{function:x}"))
}

fn hex_field(text: &str, max_digits: usize) -> Option<u32> {
    if text.is_empty() || text.len() > max_digits || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(text, 16).ok()
}

#[cfg(test)]
mod tests;
