//! What the node says about its GPUs: kernel log lines, `dcgmi health -c` and `nvidia-smi -q`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runguard_engine::telemetry::node_signals::{
    DEFAULT_THERMAL_LIMIT_C, GpuInventory, normalize_pci, parse_dcgmi_health, parse_kernel_line,
    parse_nvidia_smi_q,
};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let gpus = parse_nvidia_smi_q(&text);
    let inventory = GpuInventory::from_statuses(&gpus);
    for gpu in &gpus {
        let _ = gpu.signals(DEFAULT_THERMAL_LIMIT_C);
    }
    for line in text.lines() {
        if let Some(mut signal) = parse_kernel_line(line) {
            inventory.resolve(&mut signal);
        }
        if let Some(pci) = normalize_pci(line) {
            // A normalised bus id is a fixed point.
            assert_eq!(normalize_pci(&pci).as_deref(), Some(pci.as_str()));
        }
    }
    let _ = parse_dcgmi_health(&text);
});
