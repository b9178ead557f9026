//! Properties of the per-attempt log offsets, alone and as the engine's read loop uses them.
//!
//! What the store promises:
//! - an offset set for an attempt (or a shared file) reads back as set, with its file identity, for
//!   every offset a file can have (0 to `i64::MAX`), and survives reopening the store;
//! - an attempt's offset is its own: setting it changes no other attempt's, of this workflow or another,
//!   nor any shared file's; re-saving the attempt keeps it;
//! - nothing read yet is offset 0 with no identity.
//!
//! What following the logs with it promises (tail + store, one log file per attempt):
//! - within one file, the stored offset never goes backwards; it moves back to the start only when the
//!   read says why (the file shrank below it, or another file took its path);
//! - every complete line written to an attempt's log is read exactly once, by that attempt, in order,
//!   across any number of bounded reads and engine restarts;
//! - after a truncation or a rotation the new content is read from its start.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use proptest::prelude::*;

use crate::model::{Attempt, BackendKind, JobSpec, JobState, RecoveryLimits, Workflow, WorkflowId};
use crate::store::Store;
use crate::telemetry::tail::{TailLimits, read_new_lines};

/// Attempts per workflow in these tests.
const ATTEMPTS: u32 = 3;

fn now() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default()
}

fn attempt(workflow_id: WorkflowId, index: u32, log_path: Option<PathBuf>) -> Attempt {
    Attempt {
        workflow_id,
        index,
        job_id: format!("42{index}"),
        restart_count: index,
        nodes: vec!["node-01".into()],
        gpus: 8,
        state: JobState::Running,
        state_raw: "RUNNING".into(),
        reason: None,
        submit_time: None,
        start_time: None,
        end_time: None,
        exit_code: None,
        excluded_nodes: Vec::new(),
        log_path,
        last_log_time: None,
        last_iteration: None,
        last_progress_time: None,
        updated_at: now(),
    }
}

/// A store with two workflows of [`ATTEMPTS`] attempts each; attempt `i` of workflow `w` logs to
/// `log_of(w, i)` when a directory is given.
fn store_with_attempts(store: &mut Store, logs: Option<&Path>) -> Vec<WorkflowId> {
    store
        .write(|db| {
            let mut ids = Vec::new();
            for name in ["pretrain", "finetune"] {
                let workflow = Workflow::enrolled(
                    name,
                    BackendKind::Sim,
                    JobSpec::default(),
                    RecoveryLimits::default(),
                    now(),
                );
                let id = db.insert_workflow(&workflow)?;
                for index in 0..ATTEMPTS {
                    let path = logs.map(|dir| dir.join(format!("{name}-{index}.log")));
                    db.save_attempt(&attempt(id, index, path))?;
                }
                ids.push(id);
            }
            Ok(ids)
        })
        .unwrap()
}

#[derive(Debug, Clone)]
enum Set {
    Attempt {
        workflow: usize,
        index: u32,
        offset: u64,
        identity: Option<String>,
    },
    File {
        path: usize,
        offset: u64,
        identity: Option<String>,
    },
    /// The engine saves the attempt again (its state changed).
    Resave { workflow: usize, index: u32 },
}

fn identity() -> impl Strategy<Value = Option<String>> {
    prop::option::of("[0-9]{1,4}:[0-9]{1,8}:[0-9]{1,12}")
}

fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..10_000, Just(i64::MAX as u64), 0..=i64::MAX as u64]
}

fn set() -> impl Strategy<Value = Set> {
    prop_oneof![
        (0usize..2, 0..ATTEMPTS, offset(), identity()).prop_map(
            |(workflow, index, offset, identity)| Set::Attempt {
                workflow,
                index,
                offset,
                identity
            }
        ),
        (0usize..3, offset(), identity()).prop_map(|(path, offset, identity)| Set::File {
            path,
            offset,
            identity
        }),
        (0usize..2, 0..ATTEMPTS).prop_map(|(workflow, index)| Set::Resave { workflow, index }),
    ]
}

const SHARED: [&str; 3] = [
    "/var/log/kern.log",
    "/var/log/kern.log.1",
    "/nodes/n1/kern.log",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_offset_reads_back_as_set_and_stays_with_its_owner(
        sets in prop::collection::vec(set(), 1..40),
    ) {
        let mut store = Store::open_in_memory().unwrap();
        let ids = store_with_attempts(&mut store, None);
        let mut attempts: HashMap<(usize, u32), (u64, Option<String>)> = HashMap::new();
        let mut files: HashMap<usize, (u64, Option<String>)> = HashMap::new();
        for change in sets {
            store.write(|db| match &change {
                Set::Attempt { workflow, index, offset, identity } => {
                    attempts.insert((*workflow, *index), (*offset, identity.clone()));
                    db.set_log_offset(ids[*workflow], *index, *offset, identity.as_deref())
                }
                Set::File { path, offset, identity } => {
                    files.insert(*path, (*offset, identity.clone()));
                    db.set_file_offset(SHARED[*path], *offset, identity.as_deref())
                }
                Set::Resave { workflow, index } => {
                    db.save_attempt(&attempt(ids[*workflow], *index, None))
                }
            }).unwrap();
            // Every owner still holds exactly what was last set for it, or nothing.
            for (workflow, id) in ids.iter().enumerate() {
                for index in 0..ATTEMPTS {
                    let expected = attempts.get(&(workflow, index)).cloned().unwrap_or((0, None));
                    prop_assert_eq!(store.db().log_offset(*id, index).unwrap(), expected);
                }
            }
            for (path, name) in SHARED.iter().enumerate() {
                let expected = files.get(&path).cloned().unwrap_or((0, None));
                prop_assert_eq!(store.db().file_offset(name).unwrap(), expected);
            }
        }
    }
}

/// One thing that happens to the logs, or to the engine reading them.
#[derive(Debug, Clone)]
enum Event {
    /// Lines appended to an attempt's log; the last one may be left without its newline.
    Append {
        attempt: u32,
        lines: u8,
        partial: bool,
    },
    /// One tick of the engine: every attempt's log read once, within the read budget.
    Tick,
    /// The log is cut short (copytruncate) and the engine reads it before it grows back.
    Truncate { attempt: u32 },
    /// The log is renamed away and a new one takes its path; the engine reads it next.
    Rotate { attempt: u32, lines: u8 },
    /// The engine stops and starts again on the same store.
    Restart,
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => (0..ATTEMPTS, 1u8..12, any::<bool>()).prop_map(|(attempt, lines, partial)| {
            Event::Append { attempt, lines, partial }
        }),
        3 => Just(Event::Tick),
        1 => (0..ATTEMPTS).prop_map(|attempt| Event::Truncate { attempt }),
        1 => (0..ATTEMPTS, 0u8..6).prop_map(|(attempt, lines)| Event::Rotate { attempt, lines }),
        1 => Just(Event::Restart),
    ]
}

/// What one attempt's log holds and what the reader should have taken from it.
#[derive(Debug, Default)]
struct Log {
    /// The bytes of the file now at the path.
    content: Vec<u8>,
    /// Lines the reader took from this file so far.
    read: Vec<String>,
    /// Lines written, to make each one unique.
    written: u32,
    rotations: u32,
}

impl Log {
    /// The complete lines of the file: what a reader that caught up has read.
    fn complete_lines(&self) -> Vec<String> {
        let end = self
            .content
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |at| at + 1);
        String::from_utf8_lossy(&self.content[..end])
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn new_lines(&mut self, attempt: u32, count: u8) -> Vec<u8> {
        let mut bytes = Vec::new();
        for _ in 0..count {
            self.written += 1;
            bytes.extend(format!("attempt {attempt} line {}\n", self.written).into_bytes());
        }
        bytes
    }
}

/// One read of one attempt's log, as the engine's loop does it: resume from the stored offset, store
/// the next one with the file's identity. Returns the lines read and whether the read started over.
fn follow(
    store: &mut Store,
    id: WorkflowId,
    index: u32,
    path: &Path,
    limits: TailLimits,
) -> (Vec<String>, bool) {
    let (offset, identity) = store.db().log_offset(id, index).unwrap();
    let chunk = read_new_lines(path, offset, identity.as_deref(), limits).unwrap();
    let started_over = chunk.restarted || chunk.rotated;
    assert!(
        chunk.next_offset >= offset || started_over,
        "the offset went back from {offset} to {} without a reason",
        chunk.next_offset
    );
    store
        .write(|db| db.set_log_offset(id, index, chunk.next_offset, chunk.identity.as_deref()))
        .unwrap();
    (chunk.lines().map(str::to_string).collect(), started_over)
}

fn write_file(path: &Path, bytes: &[u8], append: bool) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(path)
        .unwrap();
    file.write_all(bytes).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn every_line_of_every_attempt_is_read_once_by_its_attempt(
        events in prop::collection::vec(event(), 1..50),
        read_budget in 64u64..400,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let store_path = dir.path().join("runguard.sqlite");
        let mut store = Store::open(&store_path).unwrap();
        let id = store_with_attempts(&mut store, Some(dir.path()))[0];
        let paths: Vec<PathBuf> = store
            .db()
            .attempts(id)
            .unwrap()
            .into_iter()
            .filter_map(|attempt| attempt.log_path)
            .collect();
        prop_assert_eq!(paths.len(), ATTEMPTS as usize);
        let limits = TailLimits { max_line_bytes: 64, max_read_bytes: read_budget };
        let mut logs: Vec<Log> = (0..ATTEMPTS).map(|_| Log::default()).collect();

        // Reads one attempt's log once and checks what came out against the model.
        // A log is replaced or cut when `changed`: a reader that had seen the old file must notice.
        let read_one = |store: &mut Store, logs: &mut [Log], index: u32, changed: bool| {
            let log = &mut logs[index as usize];
            let before: Vec<(u64, Option<String>)> = (0..ATTEMPTS)
                .map(|other| store.db().log_offset(id, other).unwrap())
                .collect();
            let had_seen_it = before[index as usize].1.is_some();
            let (lines, started_over) = follow(store, id, index, &paths[index as usize], limits);
            if changed {
                log.read.clear();
            }
            if changed && had_seen_it {
                assert!(started_over, "attempt {index}: a cut or replaced log was not noticed");
            }
            assert!(
                lines.iter().all(|line| line.starts_with(&format!("attempt {index} "))),
                "attempt {index} read another attempt's lines: {lines:?}"
            );
            log.read.extend(lines);
            for other in (0..ATTEMPTS).filter(|other| *other != index) {
                assert_eq!(store.db().log_offset(id, other).unwrap(), before[other as usize]);
            }
        };

        for event in events {
            match event {
                Event::Append { attempt, lines, partial } => {
                    let log = &mut logs[attempt as usize];
                    let mut bytes = log.new_lines(attempt, lines);
                    // The last line may still be being written, when no line is open already (an
                    // open line ends with this append's first bytes).
                    if partial && log.content.last().is_none_or(|&b| b == b'\n') {
                        bytes.pop();
                    }
                    write_file(&paths[attempt as usize], &bytes, true);
                    log.content.extend(bytes);
                }
                Event::Tick => {
                    for index in 0..ATTEMPTS {
                        read_one(&mut store, &mut logs, index, false);
                    }
                }
                Event::Truncate { attempt } => {
                    let (offset, _) = store.db().log_offset(id, attempt).unwrap();
                    if offset == 0 {
                        continue;
                    }
                    let log = &mut logs[attempt as usize];
                    // Cut below what was read, so the reader can tell (a file cut and grown back
                    // past the offset between two reads looks like a file that grew), at the end of
                    // a line: a line cut in two and grown on by later appends would outgrow the line
                    // cap, and a line over the cap is cut by design (the tail's own tests cover it),
                    // which this model does not follow.
                    let below = (offset - 1).min(log.content.len() as u64) as usize;
                    let keep = log.content[..below]
                        .iter()
                        .rposition(|&b| b == b'\n')
                        .map_or(0, |at| at + 1);
                    log.content.truncate(keep);
                    write_file(&paths[attempt as usize], &log.content, false);
                    read_one(&mut store, &mut logs, attempt, true);
                }
                Event::Rotate { attempt, lines } => {
                    let path = &paths[attempt as usize];
                    let log = &mut logs[attempt as usize];
                    log.rotations += 1;
                    std::fs::rename(path, path.with_extension(format!("log.{}", log.rotations))).ok();
                    let bytes = log.new_lines(attempt, lines);
                    write_file(path, &bytes, false);
                    log.content = bytes;
                    read_one(&mut store, &mut logs, attempt, true);
                }
                Event::Restart => {
                    drop(store);
                    store = Store::open(&store_path).unwrap();
                }
            }
        }
        // Catch up: tick until a tick moves no offset, then every complete line was read once, in order.
        loop {
            let before: Vec<(u64, Option<String>)> = (0..ATTEMPTS)
                .map(|index| store.db().log_offset(id, index).unwrap())
                .collect();
            for index in 0..ATTEMPTS {
                read_one(&mut store, &mut logs, index, false);
            }
            let after: Vec<(u64, Option<String>)> = (0..ATTEMPTS)
                .map(|index| store.db().log_offset(id, index).unwrap())
                .collect();
            if after == before {
                break;
            }
        }
        for (index, log) in logs.iter().enumerate() {
            // The model stays within what it follows: no line over the cap.
            prop_assert!(log.complete_lines().iter().all(|line| line.len() <= limits.max_line_bytes));
            prop_assert_eq!(&log.read, &log.complete_lines(), "attempt {}", index);
        }
    }
}
