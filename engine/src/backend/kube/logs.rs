//! Pod logs followed through the API into one unified log per attempt, `RANK: line` as `srun -l`
//! writes them, so the same telemetry reads Kubernetes and Slurm runs. A dropped stream is resumed
//! from the last timestamp without repeating a line, also across engine restarts (each follower keeps
//! its position beside the log).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::LogParams;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

use super::workload::EvidenceLine;
use crate::sync::lock;

/// How long a follower waits before reconnecting a stream that ended while the container runs.
const RECONNECT_WAIT: Duration = Duration::from_secs(1);
/// A pause in a stream this long writes the lines that came before it.
const FLUSH_PAUSE: Duration = Duration::from_millis(200);
/// Positions are written at most this often while lines flow.
const POSITION_EVERY: Duration = Duration::from_secs(1);

/// Where a follower is in its container's log: the last timestamp written and how many lines with
/// exactly that timestamp were written (a resumed stream starts at that second again).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    pub last: Option<String>,
    pub seen_at_last: u32,
}

impl Position {
    /// Whether a line stamped `stamp` (RFC 3339 with nanoseconds, as the kubelet writes it) is new;
    /// counts it when it is.
    pub fn admit(&mut self, stamp: &str, seen_now: &mut u32) -> bool {
        // RFC3339Nano drops trailing zeros, so stamps are compared as times, not as text.
        let order =
            self.last
                .as_deref()
                .map(|last| match (parse_stamp(stamp), parse_stamp(last)) {
                    (Some(stamp), Some(last)) => stamp.cmp(&last),
                    _ => stamp.cmp(last),
                });
        match order {
            Some(std::cmp::Ordering::Less) => false,
            Some(std::cmp::Ordering::Equal) => {
                *seen_now += 1;
                if *seen_now <= self.seen_at_last {
                    return false;
                }
                self.seen_at_last = *seen_now;
                true
            }
            _ => {
                self.last = Some(stamp.to_string());
                self.seen_at_last = 1;
                *seen_now = 1;
                true
            }
        }
    }
}

fn parse_stamp(stamp: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::parse_from_rfc3339(stamp)
        .ok()
        .map(|time| time.with_timezone(&chrono::Utc))
}

/// Splits the kubelet's `TIMESTAMP line` (with `timestamps=true`).
pub fn split_stamp(line: &str) -> (Option<&str>, &str) {
    match line.split_once(' ') {
        Some((stamp, rest))
            if stamp.len() >= 20
                && stamp.as_bytes().get(4) == Some(&b'-')
                && stamp.contains('T') =>
        {
            (Some(stamp), rest)
        }
        _ => (None, line),
    }
}

/// One container to follow.
#[derive(Debug, Clone)]
pub struct Follow {
    pub namespace: String,
    pub pod: String,
    pub pod_uid: String,
    pub container: String,
    pub rank: u32,
    pub log: PathBuf,
}

/// The unified logs and their followers.
#[derive(Default)]
pub struct LogHub {
    files: Mutex<HashMap<PathBuf, std::fs::File>>,
    followers: Mutex<HashMap<String, tokio::task::JoinHandle<()>>>,
    written: Mutex<HashMap<PathBuf, HashSet<String>>>,
}

impl Drop for LogHub {
    fn drop(&mut self) {
        for (_, task) in lock(&self.followers).drain() {
            task.abort();
        }
    }
}

impl LogHub {
    /// Appends whole lines to a unified log. The file stays open: a thousand containers writing a
    /// line a second would otherwise cost a thousand opens a second. A small append to a local file
    /// takes microseconds, so it is written here rather than handed to a blocking thread.
    pub async fn append(&self, path: &Path, lines: &[String]) -> std::io::Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let mut text = String::new();
        for line in lines {
            text.push_str(line);
            text.push('\n');
        }
        let mut files = lock(&self.files);
        if !files.contains_key(path) {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?;
            files.insert(path.to_path_buf(), file);
        }
        match files.get_mut(path) {
            Some(file) => std::io::Write::write_all(file, text.as_bytes()),
            None => Ok(()),
        }
    }

    /// Writes the evidence lines not written to `path` before (kept beside it, so a restart does not
    /// write them again).
    pub async fn write_evidence(&self, path: &Path, lines: &[EvidenceLine]) -> std::io::Result<()> {
        let keys_file = sidecar(path, "evidence");
        let fresh: Vec<EvidenceLine> = {
            let mut written = lock(&self.written);
            let known = written.entry(path.to_path_buf()).or_insert_with(|| {
                std::fs::read_to_string(&keys_file)
                    .unwrap_or_default()
                    .lines()
                    .map(str::to_string)
                    .collect()
            });
            lines
                .iter()
                .filter(|line| known.insert(line.key.clone()))
                .cloned()
                .collect()
        };
        if fresh.is_empty() {
            return Ok(());
        }
        self.append(
            path,
            &fresh
                .iter()
                .map(|line| line.text.clone())
                .collect::<Vec<_>>(),
        )
        .await?;
        let mut keys = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&keys_file)
            .await?;
        let mut text = String::new();
        for line in &fresh {
            text.push_str(&line.key);
            text.push('\n');
        }
        keys.write_all(text.as_bytes()).await?;
        // tokio writes a file in the background: what is not flushed may be lost with the handle.
        keys.flush().await
    }

    /// Follows `follow`'s container unless a follower already does.
    pub fn ensure_followed(self: &Arc<Self>, pods: Api<Pod>, follow: Follow) {
        let key = format!("{}/{}", follow.pod_uid, follow.container);
        let mut followers = lock(&self.followers);
        if followers.get(&key).is_some_and(|task| !task.is_finished()) {
            return;
        }
        let hub = Arc::clone(self);
        followers.insert(
            key,
            tokio::spawn(async move { hub.follow(pods, follow).await }),
        );
    }

    /// Whether a container of one of these pods is still being followed.
    pub fn streaming(&self, pod_uids: &[&str]) -> bool {
        lock(&self.followers).iter().any(|(key, task)| {
            !task.is_finished()
                && pod_uids.iter().any(|uid| {
                    key.strip_prefix(uid)
                        .is_some_and(|rest| rest.starts_with('/'))
                })
        })
    }

    /// How many containers are followed now.
    pub fn following(&self) -> usize {
        lock(&self.followers)
            .values()
            .filter(|task| !task.is_finished())
            .count()
    }

    async fn follow(self: Arc<Self>, pods: Api<Pod>, follow: Follow) {
        let position_file = sidecar(
            &follow.log,
            &format!("{}.{}.position", follow.pod, follow.container),
        );
        let mut position: Position = std::fs::read_to_string(&position_file)
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default();
        loop {
            let mut params = LogParams {
                container: Some(follow.container.clone()),
                follow: true,
                timestamps: true,
                ..LogParams::default()
            };
            // The client sends sinceTime rounded to the nearest second, which may be after lines
            // not read yet: asked from the start of that second, the lines read again are skipped.
            if let Some(last) = position.last.as_deref().and_then(parse_stamp) {
                let second = last.format("%Y-%m-%dT%H:%M:%SZ").to_string();
                params.since_time = second.parse().ok();
            }
            match pods.log_stream(&follow.pod, &params).await {
                Ok(stream) => {
                    let mut lines = stream.lines();
                    let mut batch = Vec::new();
                    let mut seen_now = 0;
                    let mut saved_at = tokio::time::Instant::now();
                    loop {
                        // Lines arrive one by one; a pause flushes what has come. With nothing to
                        // flush there is no pause to wait for: thousands of quiet followers set no
                        // timer at all.
                        let next = if batch.is_empty() {
                            Ok(lines.next().await)
                        } else {
                            tokio::time::timeout(FLUSH_PAUSE, lines.next()).await
                        };
                        let line = match next {
                            Ok(Some(Ok(line))) => Some(line),
                            Ok(Some(Err(err))) => {
                                tracing::debug!(pod = %follow.pod, %err, "log stream broke");
                                None
                            }
                            Ok(None) => None,
                            Err(_) => {
                                self.flush(
                                    &follow,
                                    &mut batch,
                                    &position,
                                    &position_file,
                                    &mut saved_at,
                                    true,
                                )
                                .await;
                                continue;
                            }
                        };
                        let Some(line) = line else {
                            break;
                        };
                        let (stamp, text) = split_stamp(&line);
                        if let Some(stamp) = stamp
                            && !position.admit(stamp, &mut seen_now)
                        {
                            continue;
                        }
                        batch.push(format!("{}: {text}", follow.rank));
                        if batch.len() >= 256 {
                            self.flush(
                                &follow,
                                &mut batch,
                                &position,
                                &position_file,
                                &mut saved_at,
                                false,
                            )
                            .await;
                        }
                    }
                    self.flush(
                        &follow,
                        &mut batch,
                        &position,
                        &position_file,
                        &mut saved_at,
                        true,
                    )
                    .await;
                }
                Err(kube::Error::Api(status)) if status.code == 404 => return,
                Err(err) => tracing::debug!(pod = %follow.pod, %err, "opening the log stream"),
            }
            // The stream ended: the container finished, or the connection dropped.
            match pods.get_opt(&follow.pod).await {
                Ok(None) => return,
                Ok(Some(pod)) => {
                    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
                    if uid != follow.pod_uid || container_finished(&pod, &follow.container) {
                        return;
                    }
                }
                Err(_) => {}
            }
            tokio::time::sleep(RECONNECT_WAIT).await;
        }
    }

    async fn flush(
        &self,
        follow: &Follow,
        batch: &mut Vec<String>,
        position: &Position,
        position_file: &Path,
        saved_at: &mut tokio::time::Instant,
        force: bool,
    ) {
        if batch.is_empty() {
            return;
        }
        if let Err(err) = self.append(&follow.log, batch).await {
            tracing::warn!(log = %follow.log.display(), %err, "writing a pod's log");
            return;
        }
        batch.clear();
        if force || saved_at.elapsed() >= POSITION_EVERY {
            // Written here, as the lines are (see `append`): handed to a blocking thread, ten thousand
            // followers writing once a second kept the whole pool of blocking threads busy.
            if let Ok(text) = serde_json::to_string(position) {
                let _ = std::fs::write(position_file, text);
            }
            *saved_at = tokio::time::Instant::now();
        }
    }
}

fn container_finished(pod: &Pod, container: &str) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return true;
    }
    status
        .container_statuses
        .iter()
        .flatten()
        .filter(|status| status.name == container)
        .any(|status| {
            status
                .state
                .as_ref()
                .is_some_and(|state| state.terminated.is_some())
        })
}

/// A file kept beside a unified log.
fn sidecar(log: &Path, what: &str) -> PathBuf {
    let mut name = log
        .file_name()
        .map(|name| name.to_os_string())
        .unwrap_or_default();
    name.push(format!(".{what}"));
    log.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_stream_repeats_no_line_even_within_the_same_second() {
        let mut position = Position::default();
        let mut seen = 0;
        let first = [
            "2026-01-05T08:00:00.100000000Z",
            "2026-01-05T08:00:00.100000000Z",
            "2026-01-05T08:00:01.000000000Z",
        ];
        assert!(first.iter().all(|stamp| position.admit(stamp, &mut seen)));
        // The stream is reopened with sinceTime at the last second: the old lines come again.
        let mut seen = 0;
        let again = [
            ("2026-01-05T08:00:00.100000000Z", false),
            ("2026-01-05T08:00:01.000000000Z", false),
            ("2026-01-05T08:00:01.000000000Z", true),
            ("2026-01-05T08:00:02.000000000Z", true),
        ];
        for (stamp, new) in again {
            assert_eq!(position.admit(stamp, &mut seen), new, "{stamp}");
        }
    }

    #[test]
    fn stamps_without_trailing_zeros_are_ordered_as_times() {
        let mut position = Position::default();
        let mut seen = 0;
        assert!(position.admit("2026-01-05T08:00:00.5Z", &mut seen));
        let mut seen = 0;
        // Later, though "00Z" sorts after "00.5Z" as text... and earlier, though it sorts before.
        assert!(position.admit("2026-01-05T08:00:01Z", &mut seen));
        assert!(!position.admit("2026-01-05T08:00:00.999Z", &mut seen));
    }

    #[test]
    fn the_kubelet_timestamp_is_split_off() {
        assert_eq!(
            split_stamp("2026-01-05T08:00:00.123456789Z iteration 10 | loss 2.3"),
            (
                Some("2026-01-05T08:00:00.123456789Z"),
                "iteration 10 | loss 2.3"
            )
        );
        assert_eq!(split_stamp("no stamp here"), (None, "no stamp here"));
    }

    #[tokio::test]
    async fn evidence_is_written_once_even_after_a_restart() {
        let dir = tempfile::tempdir().unwrap_or_else(|err| unreachable!("{err}"));
        let log = dir.path().join("restart-0.log");
        let line = |key: &str| EvidenceLine {
            key: key.to_string(),
            text: format!("kubernetes: Warning OOMKilled pod/{key}: x"),
        };
        let hub = LogHub::default();
        hub.write_evidence(&log, &[line("a"), line("b")])
            .await
            .unwrap_or_default();
        hub.write_evidence(&log, &[line("a")])
            .await
            .unwrap_or_default();
        let restarted = LogHub::default();
        restarted
            .write_evidence(&log, &[line("b"), line("c")])
            .await
            .unwrap_or_default();
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(text.lines().count(), 3, "{text}");
    }
}
