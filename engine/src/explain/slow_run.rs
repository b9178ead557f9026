//! What `explain` says of a log that shows no failure: healthy, or why the run got slow (the cause
//! the rules over its numbers found: a hot GPU, one slow device, the input pipeline, a slowdown).

use chrono::{DateTime, Utc};

use crate::model::{Attribution, Component, Culprit};

/// A log that shows no failure and no slow run.
pub(super) fn healthy(now: DateTime<Utc>) -> Attribution {
    Attribution {
        id: 0,
        workflow_id: 0,
        attempt_index: 0,
        category: "healthy".to_string(),
        component: Component::None,
        culprit: Culprit::default(),
        confidence: 0.5,
        recoverable: false,
        signature: None,
        explanation: "No failure signature and no exception in the log.".to_string(),
        evidence: Vec::new(),
        time: now,
        remedies: Vec::new(),
    }
}

/// Why a run that did not fail got slow.
pub(super) enum SlowRun {
    /// A GPU ran at its temperature limit.
    Hot,
    /// One device is far slower than its peers.
    SlowDevice,
    /// A GPU sits idle between busy stretches.
    IdleGpu,
    /// Its steps wait on data loading.
    InputBound,
    /// Its steps became several times slower with no data wait to explain it.
    Slowdown,
}

pub(super) fn slow_run(kind: SlowRun, summary: &str, now: DateTime<Utc>) -> Attribution {
    let (category, component, recoverable, explanation) = match kind {
        SlowRun::Hot => (
            "thermal",
            Component::Gpu,
            true,
            "The run did not fail, but a GPU ran at its temperature limit, where it slows its clocks \
             and may fail. Requeueing from the last checkpoint on other nodes restores the pace; the \
             node's cooling (fans, airflow, a blocked heatsink) wants looking at.",
        ),
        SlowRun::IdleGpu => (
            "data_backpressure",
            Component::Data,
            false,
            "The run did not fail, but its GPU sits idle between busy stretches: each step waits for \
             its input (loading, decoding, preprocessing on the CPU) before the GPU can work. More \
             DataLoader workers, prefetching, faster storage or a cached dataset help; a requeue does \
             not.",
        ),
        SlowRun::SlowDevice => (
            "straggler",
            Component::Infrastructure,
            true,
            "The run did not fail, but one device measures far below its peers, and the whole run \
             moves at its pace. Requeueing from the last checkpoint without its node restores the pace; \
             the device wants a health check (clocks, power, temperature, PCIe link).",
        ),
        SlowRun::InputBound => (
            "data_backpressure",
            Component::Data,
            false,
            "The run did not fail, but its GPUs wait on the input pipeline: most of each step goes to \
             loading data. More DataLoader workers, prefetching, faster storage or a cached dataset help; \
             a requeue does not.",
        ),
        SlowRun::Slowdown => (
            "straggler",
            Component::Infrastructure,
            true,
            "The run did not fail, but its steps became several times slower and stayed so, with no data \
             wait to explain it: a node or GPU slowed down (throttling, a failing part, another job on the \
             same GPUs). Requeueing from the last checkpoint without the slow node restores the pace; the \
             per-rank times or the nodes' GPU telemetry name it.",
        ),
    };
    Attribution {
        category: category.to_string(),
        component,
        confidence: 0.45,
        recoverable,
        explanation: explanation.to_string(),
        evidence: vec![summary.to_string()],
        ..healthy(now)
    }
}
