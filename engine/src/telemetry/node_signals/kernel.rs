//! Hardware signals in kernel-log lines: syslog, journal and dmesg forms.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use regex::Regex;

use super::*;

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
        fatal: crate::telemetry::xid::is_fatal(code),
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
