//! The Prometheus endpoint of the headless engine, scraped over real HTTP after a simulated recovery.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{CliSandbox, WATCHDOG_ENDS_THE_JOB, free_port, terminate};

const DEADLINE: Duration = Duration::from_secs(120);

/// One HTTP/1.1 GET; the status line and the body.
fn get(port: u16, path: &str) -> Option<(String, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

/// The value of the sample named exactly `series` (name and labels as printed).
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let (name, value) = line.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok())?
    })
}

#[test]
fn the_metrics_endpoint_counts_the_recovery_of_a_simulated_failure() {
    let sandbox = CliSandbox::default();
    let port = free_port();
    sandbox.write_config(&format!(
        "{}\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n\n\
         [[alerts.channels]]\nname = \"log\"\nkind = \"command\"\nargv = [\"true\"]\n\n{WATCHDOG_ENDS_THE_JOB}",
        sandbox.sim_section("nccl-timeout", Some(1500))
    ));
    let mut engine = sandbox.spawn_quiet(&["run", "--auto"]);
    let start = Instant::now();
    let mut metrics = String::new();
    // Until the recovery is over and its alerts are out.
    while start.elapsed() < DEADLINE {
        if let Some((status, body)) = get(port, "/metrics") {
            assert!(status.contains("200"), "{status}");
            metrics = body;
            let done = sample(&metrics, "runguard_workflows{status=\"completed\"}") == Some(1.0)
                && sample(
                    &metrics,
                    "runguard_alert_deliveries{channel=\"log\",state=\"pending\"}",
                )
                .is_none();
            if done {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let not_found = get(port, "/elsewhere");
    terminate(&mut engine);

    assert_eq!(
        sample(&metrics, "runguard_workflows{status=\"completed\"}"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "runguard_workflows{status=\"recovering\"}"),
        Some(0.0)
    );
    assert_eq!(
        sample(&metrics, "runguard_attempts_total"),
        Some(2.0),
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            "runguard_requeues_total{category=\"nccl_timeout\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
    assert!(sample(&metrics, "runguard_anomalies_total{kind=\"crash\"}").is_some_and(|n| n >= 1.0));
    assert_eq!(
        sample(&metrics, "runguard_detection_to_action_seconds_count"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            "runguard_actions{kind=\"drain_node\",state=\"proposed\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
    // The alerts of the recovery went out on the command channel; none was given up.
    let delivered = sample(
        &metrics,
        "runguard_alert_deliveries{channel=\"log\",state=\"delivered\"}",
    )
    .unwrap_or_default();
    assert!(delivered >= 4.0, "{metrics}");
    assert!(
        sample(
            &metrics,
            "runguard_alert_delivery_failures_total{channel=\"log\"}"
        )
        .is_none()
    );
    let goodput = sample(
        &metrics,
        "runguard_goodput_ratio{workflow=\"1\",name=\"llama3-8b-pretrain\"}",
    );
    assert!(goodput.is_some_and(|g| g > 0.0 && g < 1.0), "{metrics}");
    assert!(metrics.trim_end().ends_with("# EOF"), "{metrics}");
    assert!(not_found.is_some_and(|(status, _)| status.contains("404")));

    // The same numbers as `status` tells.
    let output = sandbox.run(&["status", "--json"]);
    let status: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(status["workflows"][0]["requeues_used"], 1);
}
