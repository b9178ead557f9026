//! Prometheus metrics of the headless engine, served over HTTP at `/metrics` (loopback by default).
//!
//! Every scrape reads the store: the numbers are the same after a restart, and the engine's loop
//! carries no counters of its own.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use crate::model::{ActionState, AnomalyKind, WorkflowStatus};
use crate::recover::Policy;
use crate::report::{WorkflowHistory, downtime};
use crate::store::{Db, DeliveryState, Store, StoreError};

/// Detection-to-action latency buckets, in seconds: a tick is about a second, an approval minutes.
const LATENCY_BUCKETS: [f64; 12] = [
    0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];

/// The content type of the OpenMetrics text format Prometheus scrapes.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Why the endpoint could not start or a scrape failed.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("cannot listen on {address}: {source}")]
    Listen {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("encoding the metrics: {0}")]
    Encode(#[from] std::fmt::Error),
}

type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect()
}

/// The whole exposition, read from the store as it is at `now`.
pub fn render(db: &Db<'_>, now: DateTime<Utc>, policy: &Policy) -> Result<String, MetricsError> {
    let mut registry = Registry::with_prefix("runguard");

    let workflows = db.workflows()?;
    let by_status = Family::<Labels, Gauge>::default();
    for status in [
        WorkflowStatus::Pending,
        WorkflowStatus::Enabled,
        WorkflowStatus::Recovering,
        WorkflowStatus::Completed,
        WorkflowStatus::CredentialError,
    ] {
        let count = workflows.iter().filter(|w| w.status == status).count();
        by_status
            .get_or_create(&labels(&[("status", status.as_str())]))
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }
    registry.register("workflows", "Workflows by status", by_status);

    let attempts = db.all_attempts()?;
    let attempts_total = Counter::<u64>::default();
    attempts_total.inc_by(attempts.len() as u64);
    registry.register("attempts", "Attempts of all workflows", attempts_total);

    let anomalies = db.all_anomalies()?;
    let anomalies_by_kind = Family::<Labels, Counter>::default();
    for anomaly in &anomalies {
        anomalies_by_kind
            .get_or_create(&labels(&[("kind", anomaly.kind.as_str())]))
            .inc();
    }
    registry.register("anomalies", "Anomalies raised, by kind", anomalies_by_kind);

    // Requeues by the category of the failure they recovered from.
    let attributions = db.all_attributions()?;
    let category_of: HashMap<(i64, u32), &str> = attributions
        .iter()
        .map(|a| ((a.workflow_id, a.attempt_index), a.category.as_str()))
        .collect();
    let failure_time: HashMap<(i64, u32), DateTime<Utc>> = anomalies
        .iter()
        .filter(|a| {
            matches!(
                a.kind,
                AnomalyKind::Crash | AnomalyKind::Hang | AnomalyKind::CrashLoop
            )
        })
        .map(|a| ((a.workflow_id, a.attempt_index), a.time))
        .collect();
    let requeues = Family::<Labels, Counter>::default();
    let latency = Histogram::new(LATENCY_BUCKETS);
    let actions = db.all_actions()?;
    let mut actions_by_state: BTreeMap<(String, String), u64> = BTreeMap::new();
    for action in &actions {
        *actions_by_state
            .entry((
                action.kind.as_str().to_string(),
                action.state.as_str().to_string(),
            ))
            .or_default() += 1;
        if action.state != ActionState::Done {
            continue;
        }
        let key = (action.workflow_id, action.attempt_index);
        if action.kind.restarts_the_run() {
            requeues
                .get_or_create(&labels(&[(
                    "category",
                    category_of.get(&key).copied().unwrap_or("unknown"),
                )]))
                .inc();
        }
        if let Some(detected) = failure_time.get(&key) {
            let seconds = (action.updated_at - *detected).num_milliseconds() as f64 / 1000.0;
            latency.observe(seconds.max(0.0));
        }
    }
    registry.register(
        "requeues",
        "Requeues and resubmissions done, by the category of the failure",
        requeues,
    );
    registry.register(
        "detection_to_action_seconds",
        "From a failure's detection to its recovery action having run",
        latency,
    );
    let actions_family = Family::<Labels, Gauge>::default();
    for ((kind, state), count) in actions_by_state {
        actions_family
            .get_or_create(&labels(&[("kind", &kind), ("state", &state)]))
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }
    registry.register("actions", "Actions by kind and state", actions_family);

    let goodput = Family::<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    for workflow in &workflows {
        let Some(history) = WorkflowHistory::load(db, policy, workflow.id)? else {
            continue;
        };
        if let Some(ratio) = downtime::goodput(&history, now).map(|g| g.ratio()) {
            goodput
                .get_or_create(&labels(&[
                    ("workflow", &workflow.id.to_string()),
                    ("name", &workflow.name),
                ]))
                .set(ratio);
        }
    }
    registry.register(
        "goodput_ratio",
        "Share of a workflow's time spent on work that was kept (not lost to failures and recoveries)",
        goodput,
    );

    let deliveries = Family::<Labels, Gauge>::default();
    let failures = Family::<Labels, Counter>::default();
    for (channel, state, count) in db.delivery_counts()? {
        deliveries
            .get_or_create(&labels(&[("channel", &channel), ("state", state.as_str())]))
            .set(i64::try_from(count).unwrap_or(i64::MAX));
        if state == DeliveryState::Failed {
            failures
                .get_or_create(&labels(&[("channel", &channel)]))
                .inc_by(count);
        }
    }
    registry.register(
        "alert_deliveries",
        "Alert deliveries by channel and state (pending, delivered, failed, dropped)",
        deliveries,
    );
    registry.register(
        "alert_delivery_failures",
        "Alert deliveries given up, by channel",
        failures,
    );

    let mut out = String::new();
    encode(&mut out, &registry)?;
    Ok(out)
}

/// Serves `/metrics` on `address` until `stop` turns true. The listener is bound before this
/// returns, so a bad address is an error at start.
pub async fn serve(
    address: SocketAddr,
    store_path: PathBuf,
    policy: Policy,
    stop: watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>, MetricsError> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| MetricsError::Listen { address, source })?;
    tracing::info!(%address, "metrics at http://{address}/metrics");
    Ok(tokio::spawn(accept_loop(
        listener, store_path, policy, stop,
    )))
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    store_path: PathBuf,
    policy: Policy,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|stopped| *stopped) => return,
        };
        let (stream, _) = match accepted {
            Ok(connection) => connection,
            Err(err) => {
                tracing::warn!(%err, "metrics: accepting a connection");
                continue;
            }
        };
        let store_path = store_path.clone();
        let policy = policy.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let store_path = store_path.clone();
                let policy = policy.clone();
                async move { Ok::<_, Infallible>(respond(&request, &store_path, policy).await) }
            });
            if let Err(err) = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%err, "metrics: connection ended");
            }
        });
    }
}

async fn respond(
    request: &Request<Incoming>,
    store_path: &Path,
    policy: Policy,
) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, content_type: &str, body: String| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        if let Ok(value) = content_type.parse() {
            response
                .headers_mut()
                .insert(hyper::header::CONTENT_TYPE, value);
        }
        response
    };
    if request.method() != Method::GET || request.uri().path() != "/metrics" {
        return reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            "runguard serves GET /metrics\n".to_string(),
        );
    }
    // SQLite reads block: off the async threads.
    let path = store_path.to_path_buf();
    let rendered = tokio::task::spawn_blocking(move || {
        let store = Store::open(&path)?;
        render(&store.db(), Utc::now(), &policy)
    })
    .await;
    match rendered {
        Ok(Ok(body)) => reply(StatusCode::OK, CONTENT_TYPE, body),
        Ok(Err(err)) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            format!("{err}\n"),
        ),
        Err(err) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            format!("{err}\n"),
        ),
    }
}
