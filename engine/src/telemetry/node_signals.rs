//! Node signals: what a node's kernel log, `nvidia-smi -q` and `dcgmi health -c`
//! say about its GPUs, as typed [`NodeSignal`]s that attribution can pin on a
//! node and a GPU.
//!
//! Nearly every kernel line says nothing about GPUs, so [`parse_kernel_line`]
//! first runs one literal multi-substring scan over the line and only parses
//! the few lines it lets through. Every parser here takes outside input: none
//! panics, and each bounds the work it does per line.

use std::collections::HashMap;
use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use regex::Regex;
use serde::{Deserialize, Serialize};

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

/// Substrings at least one of which every line we recognise contains (case as written).
const MARKERS: &[&str] = &[
    "Xid",
    "ECC",
    "orrectable",
    "ouble bit",
    "ouble-bit",
    "ingle bit",
    "ingle-bit",
    "DBE",
    "SBE",
    "emap",
    "NVLink",
    "NvLink",
    "Nvlink",
    "nvlink",
    "NVLINK",
    "AER:",
    "PCIe Bus Error",
    "emperature",
    "hermal",
    "hrottl",
    "lowdown",
    "ower Brake",
    "ower brake",
    "GPU is lost",
    "fallen off the bus",
    "device handle for GPU",
    "nitAdapter failed",
    "init_adapter failed",
];

/// All markers as one literal alternation: the regex crate runs it as a single
/// multi-substring scan, so a quiet line costs one pass.
static PREFILTER: LazyLock<Regex> = LazyLock::new(|| {
    let alternation = MARKERS
        .iter()
        .map(|marker| regex::escape(marker))
        .collect::<Vec<_>>()
        .join("|");
    Regex::new(&alternation).expect("escaped literals always compile")
});

/// `2025-11-22T15:03:27.118842+00:00 host ident[pid]: ` or `Nov 22 14:21:44 host ident: `.
static SYSLOG_HEADER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^(?:(?P<iso>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?)|[A-Z][a-z]{2} {1,2}\d{1,2} \d\d:\d\d:\d\d(?:\.\d{1,9})?)\s+(?P<host>[A-Za-z0-9][A-Za-z0-9._-]{0,252})\s+[A-Za-z0-9_./-]{1,64}(?:\[\d{1,10}\])?:\s*",
    )
    .expect("constant pattern compiles")
});

/// `host kernel: ` with the timestamp already framed off.
static BARE_KERNEL_HEADER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?P<host>[A-Za-z0-9][A-Za-z0-9._-]{0,252}) kernel:\s*")
        .expect("constant pattern compiles")
});

/// dmesg stamps: `[ 1214.552301] `, `[Sat Nov 22 17:12:09 2025] `, and `dmesg -x`'s `kern  :warn  : `.
static DMESG_STAMP: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^(?:kern\s*:\s*[a-z]{1,8}\s*:\s*)?\[(?:\s*\d{1,12}\.\d{1,9}|[A-Z][a-z]{2} [A-Z][a-z]{2} {1,2}\d{1,2} \d\d:\d\d:\d\d \d{4})\]\s*",
    )
    .expect("constant pattern compiles")
});

/// `Xid (PCI:0000:3b:00): 79` and the older `Xid (0000:3b:00): 79`.
static XID: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\bXid \(([^()]{1,40})\):?\s*(\d{1,6})\b").expect("constant pattern compiles")
});

/// NVSwitch event with its severity: `SXid (PCI:0000:86:00.0): 20034, Fatal, Link 44 ...`.
static SXID: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\bSXid \(([^()]{1,40})\):?\s*\d{1,6},\s*(Fatal|Non-fatal|Nonfatal)\b")
        .expect("constant pattern compiles")
});

/// A PCI address with its domain somewhere in a line (function optional).
static PCI_IN_TEXT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:^|[^0-9A-Fa-f])([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)")
        .expect("constant pattern compiles")
});

/// The device an AER root port heard from: `error received: 0000:3b:00.0`,
/// `error message received from 0000:3b:00.0`.
static AER_SOURCE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"received(?: from|:)\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])")
        .expect("constant pattern compiles")
});

/// `GPU 3`, `GPU 6's`, `GPU #2` — but not `GPU 0000:3b:00.0` or `GPU0000:3B:00.0`.
static GPU_INDEX: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\bGPU ?#?(\d{1,3})\b(?:[^:\w]|:\s|$)").expect("constant pattern compiles")
});

static ECC_UNCORRECTABLE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i:\buncorrectable\s+(?:ECC|memory)\s+errors?|\bdouble[\s-]bit\s+(?:ECC\s+)?errors?|\brow\s+remap\w*\s+fail|\bremapping\s+failed)|\(DBE\)|\bDBEs?\b",
    )
    .expect("constant pattern compiles")
});

static ECC_CORRECTABLE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i:\bcorrectable\s+ECC\s+errors?|\bsingle[\s-]bit\s+(?:ECC\s+)?errors?)|\bSBEs?\b",
    )
    .expect("constant pattern compiles")
});

static NVLINK_WORD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)\bnv_?link").expect("constant pattern compiles"));

static TROUBLE_WORD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:errors?|fault|fatal|fail(?:ed|ure)?|down|timeout|timed out)\b")
        .expect("constant pattern compiles")
});

/// `HW Slowdown`, `HW Thermal Slowdown`, `HW Power Brake Slowdown`, `SW Thermal Slowdown`,
/// with spaces or underscores, any case.
static SLOWDOWN_REASON: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(hw|sw)[ _](?:(thermal)[ _]|(power)[ _]brake[ _])?slowdown\b")
        .expect("constant pattern compiles")
});

static POWER_BRAKE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)\bpower[ _]brake\b").expect("constant pattern compiles"));

/// `(105 C)`, `93 °C`, `93C`, `93.5 degrees C`.
static TEMPERATURE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:^|[^\w.])(-?\d{1,3}(?:\.\d{1,2})?)\s?(?:°\s?C\b|C\b|degrees?\b)")
        .expect("constant pattern compiles")
});

/// Phrases (matched in lower case) that report heat.
const THERMAL_PHRASES: &[&str] = &[
    "temperature above threshold",
    "critical temperature reached",
    "thermal throttl",
    "thermal violation",
    "slowdown temperature",
    "shutdown temperature",
    "over temperature",
    "over-temperature",
    "overtemperature",
];

/// Phrases that say the GPU is gone.
const GPU_LOST_PHRASES: &[&str] = &[
    "GPU is lost",
    "fallen off the bus",
    "Unable to determine the device handle for GPU",
    "RmInitAdapter failed",
    "rm_init_adapter failed",
];

/// Recognises a hardware signal in one kernel-log line: syslog, journal and dmesg forms,
/// with or without the `host kernel:` prefix and timestamps. None for every other line.
pub fn parse_kernel_line(line: &str) -> Option<NodeSignal> {
    let line = clip(line, MAX_SCAN_BYTES).trim();
    if line.is_empty() || !PREFILTER.is_match(line) {
        return None;
    }
    let framed = frame(line);
    let found = classify(framed.message)?;
    // A bus id is the GPU's address on the node; an index in the same line may be the
    // driver's or a process's own numbering (`GPU0 GSP`), so it counts only without one.
    let gpu = if found.pci.is_none() {
        gpu_index_named(framed.message)
    } else {
        None
    };
    Some(NodeSignal {
        kind: found.kind,
        pci: found.pci,
        gpu,
        host: framed.host.map(str::to_owned),
        time: framed.time,
        fatal: found.fatal,
        text: clip(line, MAX_TEXT_BYTES).to_owned(),
    })
}

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

/// The parts of a line that say where and when, split from what it says.
struct Framed<'a> {
    host: Option<&'a str>,
    time: Option<DateTime<Utc>>,
    message: &'a str,
}

fn frame(line: &str) -> Framed<'_> {
    let mut host = None;
    let mut time = None;
    let mut message = line;
    if let Some(captures) = SYSLOG_HEADER.captures(line) {
        host = captures.name("host").map(|m| m.as_str());
        time = captures.name("iso").and_then(|m| utc_stamp(m.as_str()));
        message = captures
            .get(0)
            .and_then(|m| line.get(m.end()..))
            .unwrap_or_default();
    } else if let Some(captures) = BARE_KERNEL_HEADER.captures(line) {
        host = captures.name("host").map(|m| m.as_str());
        message = captures
            .get(0)
            .and_then(|m| line.get(m.end()..))
            .unwrap_or_default();
    }
    if let Some(stamp) = DMESG_STAMP.find(message) {
        message = message.get(stamp.end()..).unwrap_or_default();
    }
    Framed {
        host,
        time,
        message,
    }
}

/// An ISO 8601 stamp that names its offset, in UTC; None without an offset.
fn utc_stamp(stamp: &str) -> Option<DateTime<Utc>> {
    let normalised: String = stamp
        .char_indices()
        .map(|(i, c)| match (i, c) {
            (10, ' ') => 'T',
            (_, ',') => '.',
            _ => c,
        })
        .collect();
    DateTime::parse_from_rfc3339(&normalised)
        .or_else(|_| DateTime::parse_from_str(&normalised, "%Y-%m-%dT%H:%M:%S%.f%z"))
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// What a message says, before it is placed on a node.
struct Classified {
    kind: SignalKind,
    fatal: bool,
    pci: Option<String>,
}

fn classify(message: &str) -> Option<Classified> {
    if message.contains("SXid") {
        // NVSwitch events; their detail lines (`Severity 1 Engine instance ...`, `Data {...}`)
        // repeat the event and say nothing new.
        return nvswitch(message);
    }
    xid(message)
        .or_else(|| gpu_lost(message))
        .or_else(|| pcie_aer(message))
        .or_else(|| ecc(message))
        .or_else(|| nvlink(message))
        .or_else(|| clock_slowdown(message))
        .or_else(|| thermal(message))
}

fn xid(message: &str) -> Option<Classified> {
    let captures = XID.captures(message)?;
    let code: u32 = captures.get(2)?.as_str().parse().ok()?;
    Some(Classified {
        kind: SignalKind::Xid { code },
        fatal: super::xid::is_fatal(code),
        pci: captures.get(1).and_then(|m| normalize_pci(m.as_str())),
    })
}

fn nvswitch(message: &str) -> Option<Classified> {
    let captures = SXID.captures(message)?;
    Some(Classified {
        kind: SignalKind::NvlinkError,
        fatal: captures.get(2).is_some_and(|m| m.as_str() == "Fatal"),
        pci: captures.get(1).and_then(|m| normalize_pci(m.as_str())),
    })
}

fn gpu_lost(message: &str) -> Option<Classified> {
    GPU_LOST_PHRASES
        .iter()
        .any(|phrase| message.contains(phrase))
        .then(|| Classified {
            kind: SignalKind::GpuLost,
            fatal: true,
            pci: first_pci(message),
        })
}

fn pcie_aer(message: &str) -> Option<Classified> {
    // The words that carry the severity: `AER: Uncorrected (Fatal) error received: ...`,
    // `AER: Correctable error message received from ...` or
    // `[AER: ]PCIe Bus Error: severity=Corrected, type=Physical Layer, ...`.
    let summary = message.find("AER:").and_then(|at| {
        let rest = message.get(at..)?;
        let end = rest
            .find(" error received")
            .or_else(|| rest.find(" error message received"))?;
        rest.get(..end)
    });
    let detail = || {
        let at = message.find("PCIe Bus Error: severity=")?;
        message.get(at..)?.split(',').next()
    };
    let severity_words = summary.or_else(detail)?;
    let severity = if severity_words.contains("Non-Fatal") || severity_words.contains("Nonfatal") {
        "non_fatal"
    } else if severity_words.contains("Fatal") {
        "fatal"
    } else if severity_words.contains("Correct") {
        "corrected"
    } else {
        return None;
    };
    let source = AER_SOURCE
        .captures(message)
        .and_then(|c| c.get(1))
        .and_then(|m| normalize_pci(m.as_str()));
    Some(Classified {
        kind: SignalKind::PcieAer {
            severity: severity.to_owned(),
        },
        fatal: severity == "fatal",
        pci: source.or_else(|| first_pci(message)),
    })
}

fn ecc(message: &str) -> Option<Classified> {
    let kind = if ECC_UNCORRECTABLE.is_match(message) {
        SignalKind::EccUncorrectable
    } else if ECC_CORRECTABLE.is_match(message) {
        SignalKind::EccCorrectable
    } else {
        return None;
    };
    Some(Classified {
        fatal: kind == SignalKind::EccUncorrectable,
        kind,
        pci: first_pci(message),
    })
}

fn nvlink(message: &str) -> Option<Classified> {
    if !(NVLINK_WORD.is_match(message) && TROUBLE_WORD.is_match(message)) {
        return None;
    }
    Some(Classified {
        kind: SignalKind::NvlinkError,
        fatal: says_fatal(message),
        pci: first_pci(message),
    })
}

fn clock_slowdown(message: &str) -> Option<Classified> {
    if message.contains("Not Active") || message.contains("not active") {
        return None;
    }
    let mut reasons: Vec<String> = Vec::new();
    for captures in SLOWDOWN_REASON.captures_iter(message).take(8) {
        let side = captures
            .get(1)
            .map_or("HW", |m| m.as_str())
            .to_ascii_uppercase();
        let middle = if captures.get(2).is_some() {
            "Thermal "
        } else if captures.get(3).is_some() {
            "Power Brake "
        } else {
            ""
        };
        let reason = format!("{side} {middle}Slowdown");
        if !reasons.contains(&reason) {
            reasons.push(reason);
        }
    }
    if reasons.is_empty() && POWER_BRAKE.is_match(message) {
        reasons.push("HW Power Brake Slowdown".to_owned());
    }
    (!reasons.is_empty()).then(|| Classified {
        kind: SignalKind::ClockSlowdown { reasons },
        fatal: false,
        pci: first_pci(message),
    })
}

fn thermal(message: &str) -> Option<Classified> {
    let lower = message.to_ascii_lowercase();
    if !THERMAL_PHRASES.iter().any(|phrase| lower.contains(phrase)) {
        return None;
    }
    let temperature_c = TEMPERATURE
        .captures(message)
        .and_then(|c| c.get(1))
        .and_then(|m| m.as_str().parse::<f64>().ok())
        .filter(|t| t.is_finite());
    Some(Classified {
        kind: SignalKind::Thermal { temperature_c },
        // A thermal shutdown takes the whole node down.
        fatal: lower.contains("shutting down") || lower.contains("critical temperature"),
        pci: first_pci(message),
    })
}

/// True when the text calls something fatal and not "non-fatal".
fn says_fatal(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.contains("fatal")
        && !(lower.contains("non-fatal")
            || lower.contains("nonfatal")
            || lower.contains("non fatal"))
}

fn first_pci(text: &str) -> Option<String> {
    PCI_IN_TEXT
        .captures_iter(text)
        .take(8)
        .find_map(|c| c.get(1).and_then(|m| normalize_pci(m.as_str())))
}

fn gpu_index_named(text: &str) -> Option<u32> {
    GPU_INDEX
        .captures(text)
        .and_then(|c| c.get(1))
        .and_then(|m| m.as_str().parse().ok())
}

/// The longest prefix of `text` that fits in `max` bytes and ends on a character boundary.
fn clip(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.get(..end).unwrap_or_default()
}

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

#[cfg(test)]
mod tests {
    use super::*;

    const KERN_XID: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/node/kern_xid.log"
    ));
    const KERN_MISC: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/node/kern_misc.log"
    ));
    const NVIDIA_SMI_Q: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/node/nvidia_smi_q_8gpu.txt"
    ));
    const DCGMI_HEALTH: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/node/dcgmi_health.txt"
    ));

    fn signals_of(log: &str) -> Vec<NodeSignal> {
        log.lines().filter_map(parse_kernel_line).collect()
    }

    fn pci(text: &str) -> Option<String> {
        Some(text.to_owned())
    }

    fn utc(text: &str) -> Option<DateTime<Utc>> {
        DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }

    fn inventory() -> GpuInventory {
        GpuInventory::from_statuses(&parse_nvidia_smi_q(NVIDIA_SMI_Q))
    }

    #[test]
    fn xid_fixture_yields_each_xid_with_its_bus_id_and_severity() {
        let found: Vec<(u32, Option<String>, bool)> = signals_of(KERN_XID)
            .into_iter()
            .map(|s| match s.kind {
                SignalKind::Xid { code } => (code, s.pci, s.fatal),
                other => panic!("expected only Xid signals, got {other:?}"),
            })
            .collect();
        let expected = vec![
            (79, pci("0000:3a:00.0"), true),
            (48, pci("0000:9a:00.0"), true),
            (63, pci("0000:9a:00.0"), true),
            (64, pci("0000:5d:00.0"), true),
            (74, pci("0000:db:00.0"), true),
            (94, pci("0000:18:00.0"), true),
            (95, pci("0000:ba:00.0"), true),
            (13, pci("0000:2a:00.0"), false),
            (13, pci("0000:2a:00.0"), false),
            (31, pci("0000:ab:00.0"), false),
            (43, pci("0000:ab:00.0"), false),
            (79, pci("0000:18:00.0"), true),
        ];
        assert_eq!(found, expected);
    }

    #[test]
    fn xid_lines_keep_the_syslog_host_and_utc_time_where_the_prefix_gives_them() {
        let signals = signals_of(KERN_XID);
        let hosts: Vec<Option<&str>> = signals.iter().map(|s| s.host.as_deref()).collect();
        let n7 = Some("node-07");
        assert_eq!(
            hosts,
            vec![n7, n7, n7, n7, n7, None, None, None, None, n7, n7, n7]
        );
        // BSD syslog and dmesg stamps are local time: left to the caller.
        assert_eq!(signals[0].time, None);
        assert_eq!(signals[1].time, utc("2025-11-22T15:03:27.118842Z"));
        assert_eq!(signals[3].time, utc("2025-11-22T16:40:02Z"));
        assert_eq!(signals[5].time, None);
        assert!(
            signals[0]
                .text
                .starts_with("Nov 22 14:21:44 node-07 kernel:")
        );
        assert!(signals[0].text.ends_with("GPU has fallen off the bus."));
    }

    #[test]
    fn inventory_from_nvidia_smi_pins_kernel_xids_on_gpu_indexes() {
        let inventory = inventory();
        let gpus: Vec<Option<u32>> = signals_of(KERN_XID)
            .into_iter()
            .map(|mut s| {
                inventory.resolve(&mut s);
                s.gpu
            })
            .collect();
        let expected = [2, 4, 4, 3, 7, 0, 6, 1, 1, 5, 5, 0].map(Some).to_vec();
        assert_eq!(gpus, expected);
    }

    #[test]
    fn misc_fixture_yields_ecc_nvlink_aer_thermal_and_lost_gpu_signals() {
        let found: Vec<(SignalKind, Option<String>, Option<u32>, bool)> = signals_of(KERN_MISC)
            .into_iter()
            .map(|s| (s.kind, s.pci, s.gpu, s.fatal))
            .collect();
        let aer = |severity: &str| SignalKind::PcieAer {
            severity: severity.to_owned(),
        };
        let thermal = |t: Option<f64>| SignalKind::Thermal { temperature_c: t };
        let expected = vec![
            (SignalKind::EccUncorrectable, None, Some(4), true),
            (SignalKind::EccUncorrectable, None, None, true),
            (SignalKind::EccCorrectable, None, Some(1), false),
            (SignalKind::NvlinkError, pci("0000:86:00.0"), None, true),
            (SignalKind::NvlinkError, pci("0000:05:00.0"), None, false),
            (SignalKind::NvlinkError, None, Some(6), false),
            (aer("corrected"), pci("0000:18:00.0"), None, false),
            (aer("corrected"), pci("0000:18:00.0"), None, false),
            (aer("fatal"), pci("0000:ba:00.0"), None, true),
            (aer("fatal"), pci("0000:ba:00.0"), None, true),
            (aer("non_fatal"), pci("0000:5d:00.0"), None, false),
            (thermal(None), None, None, false),
            (thermal(None), None, None, false),
            (thermal(None), None, Some(5), false),
            (
                SignalKind::ClockSlowdown {
                    reasons: vec!["HW Slowdown".to_owned(), "HW Thermal Slowdown".to_owned()],
                },
                None,
                Some(5),
                false,
            ),
            (SignalKind::GpuLost, pci("0000:3a:00.0"), None, true),
            (SignalKind::GpuLost, pci("0000:3a:00.0"), None, true),
            (SignalKind::GpuLost, pci("0000:3a:00.0"), None, true),
            (SignalKind::GpuLost, pci("0000:db:00.0"), None, true),
            (thermal(Some(105.0)), None, None, true),
        ];
        assert_eq!(found, expected);
    }

    #[test]
    fn aer_from_a_newer_kernel_carries_its_journal_time() {
        let line = KERN_MISC
            .lines()
            .find(|l| l.contains("error message received from"))
            .expect("fixture has a kernel 6.x AER line");
        let signal = parse_kernel_line(line).expect("recognised");
        assert_eq!(signal.time, utc("2025-11-23T06:20:17.441208Z"));
        assert_eq!(signal.host.as_deref(), Some("node-07"));
    }

    #[test]
    fn noise_that_shares_words_with_signals_yields_nothing() {
        let noise = [
            "Nov 23 02:10:04 node-07 kernel: [    3.118820] pcieport 0000:00:01.0: AER: enabled with IRQ 28",
            "Nov 23 02:10:04 node-07 kernel: [    4.901230] nvidia-nvlink: Nvlink Core is being initialized, major device number 508",
            "Nov 23 02:10:31 node-07 kernel: [   31.006512] EDAC skx: ECC is enabled.",
            "Nov 23 03:30:00 node-07 node-health[7781]: ECC mode for all GPUs: Enabled",
            "2025-11-23T06:33:02.100211+00:00 node-07 kernel: CPU23: Core temperature/speed normal",
            "nvidia-nvswitch2: SXid (PCI:0000:86:00.0): 20034, Severity 1 Engine instance 44 Sub-engine instance 00",
            "nvidia 0000:18:00.0:    [ 0] RxErr                  (First)",
            "        HW Thermal Slowdown           : Not Active",
            "NVRM: GPU at PCI:0000:3a:00: GPU-2c8d4e6f-0a13-4f7b-9d2e-3b4c5d6e7f82",
            "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024",
        ];
        for line in noise {
            assert_eq!(parse_kernel_line(line), None, "{line}");
        }
        let kept = |log: &str| {
            log.lines()
                .filter(|l| parse_kernel_line(l).is_some())
                .count()
        };
        assert_eq!(kept(KERN_XID), 12, "of {} lines", KERN_XID.lines().count());
        assert_eq!(
            kept(KERN_MISC),
            20,
            "of {} lines",
            KERN_MISC.lines().count()
        );
    }

    #[test]
    fn other_kernel_and_tool_phrasings_are_recognised() {
        let aer = parse_kernel_line(
            "pcieport 0000:00:1c.5: AER: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, (Requester ID)",
        )
        .expect("AER detail line with the AER: prefix");
        assert_eq!(
            aer.kind,
            SignalKind::PcieAer {
                severity: "non_fatal".to_owned()
            }
        );
        assert_eq!(aer.pci.as_deref(), Some("0000:00:1c.5"));

        let slowdown =
            parse_kernel_line("GPU 3: clocks_event_reasons.hw_power_brake_slowdown active")
                .expect("power brake");
        assert_eq!(slowdown.gpu, Some(3));
        assert_eq!(
            slowdown.kind,
            SignalKind::ClockSlowdown {
                reasons: vec!["HW Power Brake Slowdown".to_owned()]
            }
        );

        let dmesg_x = parse_kernel_line(
            "kern  :err   : [ 1214.552301] NVRM: Xid (PCI:0000:3b:00): 119, pid=1, name=python, Timeout after 6s of waiting for RPC response from GPU0 GSP!",
        )
        .expect("dmesg -x");
        assert_eq!(dmesg_x.kind, SignalKind::Xid { code: 119 });
        assert!(dmesg_x.fatal);
        assert_eq!(dmesg_x.gpu, None, "GSP's GPU0 is not the node's GPU index");
        assert_eq!(dmesg_x.pci.as_deref(), Some("0000:3b:00.0"));

        let hot = parse_kernel_line("GPU 7 over temperature: 96 °C").expect("hot GPU");
        assert_eq!(
            hot.kind,
            SignalKind::Thermal {
                temperature_c: Some(96.0)
            }
        );
        assert_eq!(hot.gpu, Some(7));
    }

    #[test]
    fn garbage_binary_and_huge_lines_yield_nothing() {
        let binary =
            String::from_utf8_lossy(&[0x00, 0xff, 0xfe, b'X', b'i', b'd', 0x1b, b'(', 0x80])
                .into_owned();
        let huge = "x".repeat(1 << 20);
        let huge_markers = "Xid (".repeat(200_000);
        let late_xid = format!(
            "{} NVRM: Xid (PCI:0000:3a:00): 79, GPU has fallen off the bus.",
            "y".repeat(8192)
        );
        let multibyte = "é".repeat(5000);
        for line in [
            "",
            "   ",
            "\u{0}\u{0}\u{0}",
            binary.as_str(),
            huge.as_str(),
            huge_markers.as_str(),
            late_xid.as_str(),
            multibyte.as_str(),
            "Xid",
            "NVRM: Xid (PCI:zz:zz): x",
            "AER: Corrected",
            "PCIe Bus Error: severity=",
            "temperature",
        ] {
            assert_eq!(parse_kernel_line(line), None, "{:.80}", line);
        }
    }

    #[test]
    fn a_long_signal_line_is_kept_to_one_kibibyte() {
        let line = format!(
            "NVRM: Xid (PCI:0000:3a:00): 79, pid=1, name=python, GPU has fallen off the bus. {}",
            "é".repeat(2000)
        );
        let signal = parse_kernel_line(&line).expect("recognised");
        assert!(signal.text.len() <= MAX_TEXT_BYTES);
        assert_eq!(signal.kind, SignalKind::Xid { code: 79 });
    }

    #[test]
    fn random_lines_built_from_signal_fragments_give_well_formed_signals() {
        const FRAGMENTS: &[&str] = &[
            "NVRM: ",
            "Xid ",
            "(PCI:",
            "0000:",
            "3a:",
            "00",
            ".0",
            ")",
            ": ",
            "79",
            ", ",
            "SXid ",
            "Fatal",
            "AER: ",
            "Uncorrected (Fatal)",
            " error received: ",
            "ECC ",
            "uncorrectable ",
            "GPU ",
            "5",
            "'s ",
            "NvLink ",
            "down ",
            "HW Thermal Slowdown ",
            "temperature above threshold",
            "(105 C)",
            "é",
            "\u{0}",
            "[ 12.5] ",
            "Nov 22 14:21:44 ",
            "node-07 kernel: ",
            "|",
            "-> ",
            "2025-11-22T15:03:27+0000 ",
            "fallen off the bus",
            "\t",
            ":",
        ];
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |bound: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            usize::try_from(state % bound as u64).unwrap_or(0)
        };
        let mut recognised = 0;
        for _ in 0..20_000 {
            let pieces = 1 + next(12);
            let line: String = (0..pieces)
                .map(|_| FRAGMENTS[next(FRAGMENTS.len())])
                .collect();
            if let Some(signal) = parse_kernel_line(&line) {
                recognised += 1;
                assert!(signal.text.len() <= MAX_TEXT_BYTES);
                if let Some(pci) = &signal.pci {
                    assert_eq!(normalize_pci(pci).as_ref(), Some(pci), "{line}");
                }
            }
            // Every line also goes through the command-output parsers.
            for status in parse_nvidia_smi_q(&line) {
                assert_eq!(normalize_pci(&status.pci).as_ref(), Some(&status.pci));
            }
            assert!(
                parse_dcgmi_health(&line)
                    .iter()
                    .all(|s| s.text.len() <= MAX_TEXT_BYTES)
            );
        }
        assert!(
            recognised > 100,
            "the fragments should form some signals, got {recognised}"
        );
    }

    #[test]
    fn pci_ids_normalise_to_lowercase_domain_bus_device_function() {
        for raw in [
            "PCI:0000:3b:00",
            "00000000:3B:00.0",
            "0000:3b:00.0",
            "3b:00.0",
            "(PCI:0000:3B:00)",
            " 0000:3b:00.0: ",
        ] {
            assert_eq!(normalize_pci(raw).as_deref(), Some("0000:3b:00.0"), "{raw}");
        }
        assert_eq!(
            normalize_pci("0001:c1:1f.7").as_deref(),
            Some("0001:c1:1f.7")
        );
        assert_eq!(
            normalize_pci("00010000:01:00.0").as_deref(),
            Some("10000:01:00.0")
        );
        for bad in [
            "",
            "3b:00",
            "0000:3b:20.0",
            "0000:3b:00.8",
            "zz:00.0",
            "0000:3b:00:00.0",
            "000000000:3b:00.0",
            "0000:3b:00.",
            "PCI:",
            "1.2.3",
            "::.",
        ] {
            assert_eq!(normalize_pci(bad), None, "{bad}");
        }
    }

    #[test]
    fn nvidia_smi_report_of_eight_h100s_lists_each_gpu_in_order() {
        let gpus = parse_nvidia_smi_q(NVIDIA_SMI_Q);
        let ids: Vec<(u32, &str)> = gpus.iter().map(|g| (g.index, g.pci.as_str())).collect();
        assert_eq!(
            ids,
            vec![
                (0, "0000:18:00.0"),
                (1, "0000:2a:00.0"),
                (2, "0000:3a:00.0"),
                (3, "0000:5d:00.0"),
                (4, "0000:9a:00.0"),
                (5, "0000:ab:00.0"),
                (6, "0000:ba:00.0"),
                (7, "0000:db:00.0"),
            ]
        );
        let hot = &gpus[5];
        assert_eq!(hot.name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(hot.serial.as_deref(), Some("1654923011455"));
        assert_eq!(hot.temperature_c, Some(93.0));
        assert_eq!(hot.slowdown_temperature_c, Some(92.0));
        assert_eq!(hot.shutdown_temperature_c, Some(95.0));
        assert_eq!(
            hot.active_slowdowns,
            vec!["HW Slowdown", "HW Thermal Slowdown"]
        );
        assert_eq!(hot.ecc_uncorrectable_volatile, Some(0));
        let remapped = &gpus[2];
        assert_eq!(remapped.remapped_rows_pending, Some(true));
        assert_eq!(remapped.remapped_rows_failure, Some(false));
        assert_eq!(remapped.ecc_uncorrectable_volatile, Some(1));
        assert!(remapped.active_slowdowns.is_empty());
        assert_eq!(gpus[0].temperature_c, Some(41.0));
        assert_eq!(gpus[0].remapped_rows_pending, Some(false));
    }

    #[test]
    fn only_the_hot_gpu_and_the_gpu_with_remapped_rows_raise_signals() {
        let signals: Vec<NodeSignal> = parse_nvidia_smi_q(NVIDIA_SMI_Q)
            .iter()
            .flat_map(|g| g.signals(DEFAULT_THERMAL_LIMIT_C))
            .collect();
        let found: Vec<(Option<u32>, SignalKind, bool)> = signals
            .iter()
            .map(|s| (s.gpu, s.kind.clone(), s.fatal))
            .collect();
        assert_eq!(
            found,
            vec![
                (Some(2), SignalKind::EccUncorrectable, true),
                (
                    Some(5),
                    SignalKind::Thermal {
                        temperature_c: Some(93.0)
                    },
                    false
                ),
                (
                    Some(5),
                    SignalKind::ClockSlowdown {
                        reasons: vec!["HW Slowdown".to_owned(), "HW Thermal Slowdown".to_owned()]
                    },
                    false
                ),
            ]
        );
        assert_eq!(signals[1].pci.as_deref(), Some("0000:ab:00.0"));
        assert!(
            signals[0].text.contains("row remapping pending"),
            "{}",
            signals[0].text
        );
    }

    #[test]
    fn a_higher_thermal_limit_leaves_only_the_slowdown() {
        let gpus = parse_nvidia_smi_q(NVIDIA_SMI_Q);
        let kinds: Vec<SignalKind> = gpus[5].signals(95.0).into_iter().map(|s| s.kind).collect();
        assert!(
            matches!(kinds.as_slice(), [SignalKind::ClockSlowdown { .. }]),
            "{kinds:?}"
        );
    }

    #[test]
    fn a_pending_remap_without_errors_is_a_warning() {
        let mut gpu = parse_nvidia_smi_q(NVIDIA_SMI_Q).swap_remove(2);
        gpu.ecc_uncorrectable_volatile = Some(0);
        let signals = gpu.signals(DEFAULT_THERMAL_LIMIT_C);
        assert_eq!(signals.len(), 1);
        assert_eq!(signals[0].kind, SignalKind::EccUncorrectable);
        assert!(!signals[0].fatal);
    }

    #[test]
    fn nvidia_smi_for_one_gpu_takes_its_index_from_the_minor_number() {
        let report = "\
==============NVSMI LOG==============

Attached GPUs                             : 8
GPU 00000000:5D:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    Serial Number                         : [N/A]
    Minor Number                          : 3
    Clocks Throttle Reasons
        HW Slowdown                       : Not Active
        SW Thermal Slowdown               : Active
    Temperature
        GPU Current Temp                  : N/A
        GPU Shutdown Temp                 : 92 C
    ECC Errors
        Volatile
            Single Bit
                Total                     : 4
            Double Bit
                Device Memory             : 2
                Total                     : 2
";
        let gpus = parse_nvidia_smi_q(report);
        assert_eq!(gpus.len(), 1);
        let gpu = &gpus[0];
        assert_eq!((gpu.index, gpu.pci.as_str()), (3, "0000:5d:00.0"));
        assert_eq!(gpu.serial, None);
        assert_eq!(gpu.temperature_c, None);
        assert_eq!(gpu.shutdown_temperature_c, Some(92.0));
        assert_eq!(gpu.active_slowdowns, vec!["SW Thermal Slowdown"]);
        assert_eq!(gpu.ecc_uncorrectable_volatile, Some(2));
        assert_eq!(gpu.remapped_rows_pending, None);
    }

    #[test]
    fn nvidia_smi_garbage_and_missing_sections_give_empty_or_partial_statuses() {
        assert!(parse_nvidia_smi_q("").is_empty());
        assert!(parse_nvidia_smi_q("No devices were found").is_empty());
        assert!(
            parse_nvidia_smi_q("    Temperature\n        GPU Current Temp : 99 C\n").is_empty()
        );
        let gpus = parse_nvidia_smi_q(
            "GPU 00000000:18:00.0\r\nGPU 0000:2A:00.0\r\n    Product Name : x\r\n",
        );
        let ids: Vec<(u32, &str)> = gpus.iter().map(|g| (g.index, g.pci.as_str())).collect();
        assert_eq!(ids, vec![(0, "0000:18:00.0"), (1, "0000:2a:00.0")]);
        assert_eq!(gpus[1].name.as_deref(), Some("x"));
        assert!(
            gpus.iter()
                .all(|g| g.signals(DEFAULT_THERMAL_LIMIT_C).is_empty())
        );
    }

    #[test]
    fn dcgmi_health_yields_one_signal_per_failing_system_on_its_gpu() {
        let signals = parse_dcgmi_health(DCGMI_HEALTH);
        let found: Vec<(SignalKind, Option<u32>, bool)> = signals
            .iter()
            .map(|s| (s.kind.clone(), s.gpu, s.fatal))
            .collect();
        let health = |system: &str, status: &str| SignalKind::Health {
            system: system.to_owned(),
            status: status.to_owned(),
        };
        assert_eq!(
            found,
            vec![
                (health("Thermal", "Warning"), Some(5), false),
                (health("NVLINK", "Failure"), Some(7), true),
            ]
        );
        assert_eq!(
            signals[0].text,
            "dcgmi health: GPU 5 Thermal Warning: Detected clock throttling due to thermal violation in GPU 5."
        );
        assert!(
            signals[1]
                .text
                .ends_with("NvLink errors on GPU 7's NVLink (should be 0), GPU 7's NvLink link 3 is currently down"),
            "{}",
            signals[1].text
        );
        let mut nvlink = signals[1].clone();
        inventory().resolve(&mut nvlink);
        assert_eq!(nvlink.pci.as_deref(), Some("0000:db:00.0"));
    }

    #[test]
    fn dcgmi_health_reads_the_old_layout_and_ignores_a_healthy_report() {
        let old = "\
Health Monitor Report
+----------------------------------------------------------------------------+
| Group 1          | Overall Health: Warning                                 |
+==================+=========================================================+
| GPU ID: 0        | Warning                                                 |
|                  | PCIe system: Warning - Detected more than 8 PCIe        |
|                  | replays per minute for GPU 0 : 13                       |
+------------------+---------------------------------------------------------+
";
        let signals = parse_dcgmi_health(old);
        assert_eq!(signals.len(), 1);
        assert_eq!(
            signals[0].kind,
            SignalKind::Health {
                system: "PCIe".to_owned(),
                status: "Warning".to_owned()
            }
        );
        assert_eq!(signals[0].gpu, Some(0));
        assert!(
            signals[0]
                .text
                .ends_with("replays per minute for GPU 0 : 13")
        );

        let healthy = "\
+---------------------------+----------------------------------------------------------+
| Health Monitor Report                                                                |
+===========================+==========================================================+
| Overall Health            | Healthy                                                  |
+---------------------------+----------------------------------------------------------+
";
        assert!(parse_dcgmi_health(healthy).is_empty());
        assert!(
            parse_dcgmi_health("Error: Health watches not enabled. Please enable watches.")
                .is_empty()
        );
    }

    #[test]
    fn node_signals_round_trip_through_json() {
        let signal = signals_of(KERN_MISC)
            .into_iter()
            .find(|s| matches!(s.kind, SignalKind::PcieAer { .. }))
            .expect("fixture has AER lines");
        let json = serde_json::to_string(&signal).expect("serialises");
        assert!(json.contains(r#""type":"pcie_aer""#), "{json}");
        let back: NodeSignal = serde_json::from_str(&json).expect("deserialises");
        assert_eq!(back, signal);
    }
}
