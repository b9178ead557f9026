//! The seeded failure trace every policy replays: when each fault sets in, of which cause, on which
//! node and GPU. Faults arrive as a Poisson process at the source's rate per node-hour, over every
//! node of the replayed cluster (spares included), split among the causes by their counts.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::trace::Trace;

/// One fault setting in.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Onset {
    /// Seconds after the replay's start.
    pub at_s: u64,
    /// Index of the cause in the trace.
    pub cause: usize,
    /// The node it strikes (1-based number; `node-NN`).
    pub node: u32,
    pub gpu: u32,
}

/// The faults of `days` on a cluster of `nodes` nodes, ordered by time; the same seed, the same list.
pub fn generate(trace: &Trace, nodes: u32, days: f64, seed: u64) -> Vec<Onset> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x7261_6365_5F6C_6C33);
    let total: u32 = trace.causes.iter().map(|cause| cause.count).sum();
    let horizon_s = days * 86_400.0;
    let rate_per_s = trace.failures_per_node_hour() * f64::from(nodes) / 3600.0;
    let mut onsets = Vec::new();
    if total == 0 || nodes == 0 || rate_per_s <= 0.0 {
        return onsets;
    }
    let mut t = 0.0;
    loop {
        // Exponential gaps: a memoryless arrival of failures.
        let u: f64 = rng.random_range(f64::EPSILON..1.0);
        t += -u.ln() / rate_per_s;
        if t >= horizon_s {
            break;
        }
        let mut pick = rng.random_range(0..total);
        let cause = trace
            .causes
            .iter()
            .position(|cause| {
                if pick < cause.count {
                    true
                } else {
                    pick -= cause.count;
                    false
                }
            })
            .unwrap_or(0);
        onsets.push(Onset {
            at_s: t as u64,
            cause,
            node: rng.random_range(1..=nodes),
            gpu: rng.random_range(0..trace.cluster.gpus_per_node.clamp(1, 8)),
        });
    }
    onsets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_faults_and_the_rate_is_the_sources() {
        let trace = Trace::resolve("llama3-405b").unwrap();
        let a = generate(&trace, 2048, 54.0, 3);
        assert_eq!(a, generate(&trace, 2048, 54.0, 3));
        assert_ne!(a, generate(&trace, 2048, 54.0, 4));
        // 419 expected on the source's 2,048 nodes; a Poisson count stays within 4 sigma.
        assert!(
            (a.len() as f64 - 419.0).abs() < 4.0 * 419f64.sqrt(),
            "{}",
            a.len()
        );
        assert!(a.windows(2).all(|w| w[0].at_s <= w[1].at_s));
        assert!(a.iter().all(|o| (1..=2048).contains(&o.node) && o.gpu < 8));
        // Faulty GPUs are the largest cause (30 %).
        let gpu = a.iter().filter(|o| o.cause == 0).count() as f64 / a.len() as f64;
        assert!((0.2..0.4).contains(&gpu), "{gpu}");
    }
}
