//! Recording for the capacity report, called by the engine with each listing of the jobs: what the
//! listing showed (waiting and running jobs, their reasons and GPUs) and, at the same pace, the nodes
//! when the backend can list them. At most one record per [`SAMPLE_GAP`], so a month stays small and
//! the scheduler is asked for its nodes no more often than that.

use chrono::{DateTime, TimeDelta, Utc};

use super::history::{Instant, NodeSample, QueueSample};
use crate::backend::{Backend, JobSnapshot};
use crate::model::JobState;
use crate::store::{Store, StoreError};

/// Least time between two recorded listings.
pub const SAMPLE_GAP: TimeDelta = TimeDelta::minutes(5);

/// The longest a record stands for: after a gap in the engine's running (stopped, or the scheduler
/// not answering) the time before is not counted as what the next listing saw.
pub const SAMPLE_REACH: TimeDelta = TimeDelta::minutes(10);

/// How long listings are kept: half a year of planning, at most a few hundred megabytes on a cluster
/// of a thousand nodes.
pub const RETENTION: TimeDelta = TimeDelta::days(183);

/// The longest the nodes' listing may take; without an answer by then this record has no nodes.
const NODE_LISTING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Records `snapshots` (and the backend's nodes) when the last record is at least [`SAMPLE_GAP`] old.
pub async fn sample(
    store: &mut Store,
    backend: &dyn Backend,
    snapshots: &[JobSnapshot],
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let last = store.db().last_job_listing()?;
    if last.is_some_and(|last| now - last < SAMPLE_GAP) {
        return Ok(());
    }
    let instant = Instant {
        time: now,
        seconds: span_seconds(last, now),
    };
    let jobs: Vec<QueueSample> = snapshots
        .iter()
        .filter_map(|snapshot| queue_sample(snapshot, now))
        .collect();
    let listing = tokio::time::timeout(NODE_LISTING_TIMEOUT, backend.node_inventory())
        .await
        .unwrap_or_else(|_| {
            Err(crate::backend::BackendError::Unavailable(format!(
                "no answer within {} s",
                NODE_LISTING_TIMEOUT.as_secs()
            )))
        });
    let nodes = match listing {
        Ok(Some(listing)) => {
            if let Some(first) = listing.unreadable.first() {
                // A node whose line could not be read is left out of this record, never guessed at.
                store.db().count_warning(
                    "capacity_nodes",
                    &format!(
                        "{} line{} of the node listing could not be read (left out), e.g. {first:?}",
                        listing.unreadable.len(),
                        if listing.unreadable.len() == 1 { "" } else { "s" }
                    ),
                    now,
                )?;
            }
            let seconds = span_seconds(store.db().last_node_listing()?, now);
            listing
                .nodes
                .into_iter()
                .map(|record| record.at(now, seconds))
                .collect()
        }
        Ok(None) => Vec::new(),
        Err(err) => {
            store.db().count_warning(
                "capacity_nodes",
                &format!("listing the nodes: {err}"),
                now,
            )?;
            Vec::new()
        }
    };
    store.write(|db| {
        db.record_job_listing(&instant, jobs.iter())?;
        db.record_node_listing(&nodes)?;
        // Old listings go a day's worth at a time, so that one record never waits on a large delete.
        if db
            .first_job_listing()?
            .is_some_and(|first| first < now - RETENTION - TimeDelta::days(1))
        {
            db.forget_listings_before(now - RETENTION)?;
        }
        Ok(())
    })
}

/// The seconds a record at `now` stands for: back to the previous one, at most [`SAMPLE_REACH`].
fn span_seconds(last: Option<DateTime<Utc>>, now: DateTime<Utc>) -> f64 {
    let span = last.map_or(SAMPLE_GAP, |last| {
        (now - last).clamp(TimeDelta::zero(), SAMPLE_REACH)
    });
    span.num_milliseconds() as f64 / 1000.0
}

/// A waiting or running job as the report counts it; other states ask for no GPUs.
fn queue_sample(snapshot: &JobSnapshot, now: DateTime<Utc>) -> Option<QueueSample> {
    let pending = match snapshot.state {
        JobState::Pending => true,
        JobState::Running | JobState::Completing => false,
        _ => return None,
    };
    Some(QueueSample {
        time: now,
        job_id: snapshot.job_id.clone(),
        partition: snapshot.spec.partition.clone(),
        pending,
        reason: snapshot.reason.clone().filter(|_| pending),
        gpus: snapshot.gpus,
    })
}

/// The nodes as the backend listed them, and the lines of its answer it could not read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeListing {
    pub nodes: Vec<NodeRecord>,
    pub unreadable: Vec<String>,
}

/// A node as the backend lists it, before it is given a time.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRecord {
    pub node: String,
    pub partition: Option<String>,
    pub state: super::NodeUse,
    pub gpus: u32,
    pub gpus_allocated: u32,
    /// Why it is out of service, in the scheduler's words.
    pub reason: Option<String>,
}

impl NodeRecord {
    fn at(self, time: DateTime<Utc>, seconds: f64) -> NodeSample {
        NodeSample {
            time,
            seconds,
            node: self.node,
            partition: self.partition,
            state: self.state,
            gpus: self.gpus,
            gpus_allocated: self.gpus_allocated,
            reason: self.reason,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_record_stands_for_the_time_since_the_last_one_within_reach() {
        let now = DateTime::parse_from_rfc3339("2026-03-02T09:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(span_seconds(None, now), 300.0);
        assert_eq!(span_seconds(Some(now - TimeDelta::minutes(7)), now), 420.0);
        assert_eq!(span_seconds(Some(now - TimeDelta::hours(3)), now), 600.0);
    }
}
