//! Numbers tools print about the hardware and the input pipeline, one line at a time, for rules that
//! read them together (a GPU at its temperature limit, a data loader that stalls, one GPU much slower
//! than its peers):
//!
//! | tool | example |
//! | --- | --- |
//! | `nvidia-smi -q` | `GPU Current Temp : 56 C`, `GPU Max Operating Temp : 57 C`, `GPU T.Limit Temp : 4 C` |
//! | `nvidia-smi` | `\| 30%   83C    P2   250W / 300W \|  9000MiB / 16130MiB \|     97%      Default \|` |
//! | `rocm-smi` | `  0   6863   94.0c    195.0W   1528Mhz  945Mhz   40.0%    auto      0%       N/A` |
//! | gpu-burn | `... errors: 0 - 0   temps: 56 C - 73 C` |
//! | data loaders | `data: 53577ms`, `load_data_time: 19.6173`, Caffe's `Prefetch batch: 6511 ms.` |
//! | per-GPU benchmarks | `GEMM [I] (ADAPTER#0)  Ending with 6698.44 GFlops` |

use std::sync::LazyLock;

use regex::Regex;

/// One number a line reports.
#[derive(Debug, Clone, PartialEq)]
pub enum Reading {
    /// A GPU's temperature now (°C).
    GpuTemp(f64),
    /// A GPU whose temperature reads `N/A`: the limits its report states next are not those of the
    /// GPU read before it.
    GpuTempUnread,
    /// The temperature at which the GPU just reported slows down (`Slowdown Temp`, `Max Operating
    /// Temp`).
    GpuTempLimit(f64),
    /// How far below its slowdown limit the GPU just reported is (`T.Limit Temp`; 0 or less is at it).
    GpuTempMargin(f64),
    /// How busy a GPU was (percent), the GPU told apart by its memory (`5484MiB / 16130MiB`): a
    /// grepped `nvidia-smi -l` prints no index, and a training process's memory holds steady.
    GpuUtil { device: String, percent: f64 },
    /// How long a batch waited for the input pipeline (seconds).
    DataWait(f64),
    /// One device's throughput in a per-device report.
    DeviceThroughput {
        device: String,
        value: f64,
        unit: &'static str,
    },
}

// The literals of each kind of line: [`parse`] reads a kind only in a line that holds one of its
// literals, so what it finds never depends on a line being marked for another reason.
const SMI_QUERY_MARKERS: &[&str] = &["Temp "];
const GPU_BURN_MARKERS: &[&str] = &["temps:"];
const SMI_TABLE_MARKERS: &[&str] = &["MiB /"];
const ROCM_SMI_MARKERS: &[&str] = &["Mhz"];
const DATA_WAIT_MARKERS: &[&str] = &["data: ", "data_time:", "data_load_time:", "Prefetch batch:"];
// Not `TFLOP/s`: Megatron's progress lines say it of every GPU at once, on every step.
const THROUGHPUT_MARKERS: &[&str] = &["GFlops", "GFLOPS", "Gflop/s", "TFLOPS"];

/// Literals one of which every line [`parse`] reads holds.
pub fn markers() -> impl Iterator<Item = &'static str> {
    [
        SMI_QUERY_MARKERS,
        GPU_BURN_MARKERS,
        SMI_TABLE_MARKERS,
        ROCM_SMI_MARKERS,
        DATA_WAIT_MARKERS,
        THROUGHPUT_MARKERS,
    ]
    .into_iter()
    .flatten()
    .copied()
}

impl Reading {
    /// How long a batch waited for data, for a data wait.
    pub fn data_wait(&self) -> Option<f64> {
        match self {
            Self::DataWait(secs) => Some(*secs),
            _ => None,
        }
    }
}

static SMI_QUERY: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"^\s*GPU (Current|Slowdown|Max Operating|T\.Limit) Temp\s*:\s*(?:(-?\d+(?:\.\d+)?) C\b|N/A\s*$)",
    )
    .ok()
});
static SMI_TABLE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"^\|\s*(?:\d+%|N/A)\s+(\d+)C\s+P\d+\s[^|]*\|\s*(\d+MiB\s*/\s*\d+MiB)\s*\|\s*(\d+)%")
        .ok()
});
static ROCM_SMI: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"^\s*\d+\s+(?:[0-9a-fA-Fx]+\s+)?(\d+(?:\.\d+)?)(?:c|°C)\s+\d+(?:\.\d+)?W\s").ok()
});
static GPU_BURN: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"(\d+) C\b").ok());
static DATA_WAIT: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"(?:^|[\s,|(\[])(?:(data|Prefetch batch):\s*(\d+(?:\.\d+)?)\s*(ms|s)\b|(load_data_time|data_load_time):\s*(\d+(?:\.\d+)?))",
    )
    .ok()
});
static DEVICE_THROUGHPUT: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(ADAPTER ?#|GPU ?#?|device ?#?|cuda:)(\d+)\b\D*?(\d+(?:\.\d+)?)\s*(GFlops|Gflop/s|TFLOPS)",
    )
    .ok()
});

/// The readings a line's message reports; empty for almost every line.
pub fn parse(message: &str) -> Vec<Reading> {
    let mut found = Vec::new();
    let captures = |pattern: &LazyLock<Option<Regex>>| {
        pattern.as_ref().and_then(|regex| regex.captures(message))
    };
    let number = |text: &str| text.parse::<f64>().ok().filter(|value| value.is_finite());
    let holds = |markers: &[&str]| markers.iter().any(|marker| message.contains(marker));
    if holds(SMI_QUERY_MARKERS) {
        if let Some(c) = captures(&SMI_QUERY) {
            match (&c[1], c.get(2).and_then(|value| number(value.as_str()))) {
                ("Current", Some(value)) => found.push(Reading::GpuTemp(value)),
                ("Current", None) => found.push(Reading::GpuTempUnread),
                ("T.Limit", Some(value)) => found.push(Reading::GpuTempMargin(value)),
                (_, Some(value)) => found.push(Reading::GpuTempLimit(value)),
                (_, None) => {}
            }
        }
        return found;
    }
    if let Some(at) = GPU_BURN_MARKERS
        .iter()
        .find_map(|marker| message.find(marker))
    {
        if let Some(regex) = GPU_BURN.as_ref() {
            found.extend(
                regex
                    .captures_iter(&message[at..])
                    .filter_map(|c| number(&c[1]))
                    .map(Reading::GpuTemp),
            );
        }
        return found;
    }
    if holds(SMI_TABLE_MARKERS) {
        if let Some(c) = captures(&SMI_TABLE) {
            found.extend(number(&c[1]).map(Reading::GpuTemp));
            found.extend(number(&c[3]).map(|percent| Reading::GpuUtil {
                device: c[2].split_whitespace().collect::<Vec<_>>().join(" "),
                percent,
            }));
        }
        return found;
    }
    if holds(ROCM_SMI_MARKERS) {
        if let Some(value) = captures(&ROCM_SMI).and_then(|c| number(&c[1])) {
            found.push(Reading::GpuTemp(value));
        }
        return found;
    }
    if holds(DATA_WAIT_MARKERS)
        && let Some(c) = captures(&DATA_WAIT)
    {
        let (value, unit) = match (c.get(2), c.get(3), c.get(5)) {
            (Some(value), Some(unit), _) => (number(value.as_str()), unit.as_str()),
            (_, _, Some(value)) => (number(value.as_str()), "s"),
            _ => (None, "s"),
        };
        if let Some(value) = value {
            found.push(Reading::DataWait(if unit == "ms" {
                value / 1000.0
            } else {
                value
            }));
        }
        return found;
    }
    if holds(THROUGHPUT_MARKERS)
        && let Some(c) = captures(&DEVICE_THROUGHPUT)
        && let Some(value) = number(&c[3])
    {
        let unit = match c[4].to_ascii_lowercase().as_str() {
            "gflops" | "gflop/s" => "GFLOP/s",
            _ => "TFLOP/s",
        };
        let kind = c[1]
            .trim()
            .trim_end_matches('#')
            .trim()
            .to_ascii_uppercase();
        found.push(Reading::DeviceThroughput {
            device: format!("{kind} {}", &c[2]),
            value,
            unit,
        });
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(message: &str) -> Option<Reading> {
        let mut readings = parse(message);
        assert!(readings.len() <= 1, "{message}: {readings:?}");
        readings.pop()
    }

    #[test]
    fn reads_gpu_temperatures_as_each_tool_prints_them() {
        let query = [
            (
                "GPU Current Temp                  : 56 C",
                Some(Reading::GpuTemp(56.0)),
            ),
            (
                "GPU Max Operating Temp            : 57 C",
                Some(Reading::GpuTempLimit(57.0)),
            ),
            (
                "GPU Slowdown Temp                 : 97 C",
                Some(Reading::GpuTempLimit(97.0)),
            ),
            (
                "GPU T.Limit Temp                  : 50 C",
                Some(Reading::GpuTempMargin(50.0)),
            ),
            // Margins of other limits, and memory, are no GPU reading.
            ("GPU Slowdown T.Limit Temp         : -2 C", None),
            ("Memory Current Temp               : 44 C", None),
            (
                "GPU Current Temp                  : N/A",
                Some(Reading::GpuTempUnread),
            ),
            ("GPU Slowdown Temp                 : N/A", None),
        ];
        for (line, reading) in query {
            assert_eq!(one(&format!("        {line}")), reading, "{line}");
        }
        assert_eq!(
            parse(
                "| N/A   44C    P0    72W / 300W |   5484MiB / 16130MiB |      0%      Default |"
            ),
            vec![
                Reading::GpuTemp(44.0),
                Reading::GpuUtil {
                    device: "5484MiB / 16130MiB".into(),
                    percent: 0.0
                }
            ]
        );
        assert_eq!(
            parse(
                "| 30%   83C    P2   250W / 300W |   9000MiB / 16130MiB |     97%      Default |"
            )
            .first(),
            Some(&Reading::GpuTemp(83.0))
        );
        assert_eq!(
            one(
                "  0   6863   94.0c    195.0W   1528Mhz  945Mhz   40.0%    auto      0%       N/A      "
            ),
            Some(Reading::GpuTemp(94.0))
        );
        assert_eq!(
            parse(
                "80.0%  proc'd: 19366 (6981 Gflop/s) - 18648 (6485 Gflop/s)   errors: 0 - 0   temps: 63 C - 83 C "
            ),
            vec![Reading::GpuTemp(63.0), Reading::GpuTemp(83.0)]
        );
    }

    #[test]
    fn reads_how_long_a_batch_waited_for_data() {
        assert_eq!(
            one("data: 53577ms, mem: 24269M"),
            Some(Reading::DataWait(53.577))
        );
        assert_eq!(
            one(
                "I1207 14:36:55.350520 17490 annotated_data_layer.cpp:305] Prefetch batch: 6511 ms."
            ),
            Some(Reading::DataWait(6.511))
        );
        assert_eq!(
            one("load_data_time: 19.6173, train_step_time: 0.686 "),
            Some(Reading::DataWait(19.6173))
        );
        assert_eq!(one("data_load_time: 2.5"), Some(Reading::DataWait(2.5)));
        // A bare number after `data:` says no unit; other keys ending in `data` are other things.
        assert_eq!(
            one("step: 10  iter:  0.5503  data: 0.0031  lr: 1.35e-06"),
            None
        );
        assert_eq!(one("metadata: 12 ms"), None);
    }

    #[test]
    fn reads_one_device_s_throughput_in_a_per_device_report() {
        assert_eq!(
            one("GEMM [I] (ADAPTER#0)  Ending with 6698.442948608 GFlops"),
            Some(Reading::DeviceThroughput {
                device: "ADAPTER 0".into(),
                value: 6698.442948608,
                unit: "GFLOP/s"
            })
        );
        assert_eq!(
            one("[GPU 3] matmul: 312.5 TFLOPS"),
            Some(Reading::DeviceThroughput {
                device: "GPU 3".into(),
                value: 312.5,
                unit: "TFLOP/s"
            })
        );
        // A throughput that names no device is no peer's.
        assert_eq!(one("iteration 100 | 152.3 TFLOPS per GPU"), None);
    }
}
