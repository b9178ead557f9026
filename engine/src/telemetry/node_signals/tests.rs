//! Tests of the node signal parsers on real-shaped fixtures.

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

    let slowdown = parse_kernel_line("GPU 3: clocks_event_reasons.hw_power_brake_slowdown active")
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
    let binary = String::from_utf8_lossy(&[0x00, 0xff, 0xfe, b'X', b'i', b'd', 0x1b, b'(', 0x80])
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
    assert!(parse_nvidia_smi_q("    Temperature\n        GPU Current Temp : 99 C\n").is_empty());
    let gpus =
        parse_nvidia_smi_q("GPU 00000000:18:00.0\r\nGPU 0000:2A:00.0\r\n    Product Name : x\r\n");
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
        signals[1].text.ends_with(
            "NvLink errors on GPU 7's NVLink (should be 0), GPU 7's NvLink link 3 is currently down"
        ),
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
        parse_dcgmi_health("Error: Health watches not enabled. Please enable watches.").is_empty()
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
