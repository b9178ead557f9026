//! Reading a whole file through the pipeline: in bounded steps, each step's lines prepared (rejoined,
//! marked by the candidate scan) on as many threads as asked while one thread digests the steps in
//! file order. The steps, and what each is given, are the same whatever the number of threads, so
//! the digest is too.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError, mpsc};

use crate::telemetry::tail::{Chunk, TailLimits, read_new_lines_reusing};

/// Steps read ahead of the workers, and prepared ahead of the digest.
const QUEUED_STEPS: usize = 4;

/// Reads `path` from its start in steps of at most `limits.max_read_bytes`, hands each step to
/// `prepare` (on `threads` worker threads when more than one) and what it gives to `digest`, in file
/// order, on this thread. A last line without its newline is a step of its own. `digest` may give a
/// step's chunk back for a later read to reuse its memory. Each thread that prepares keeps a state
/// `S` of its own over the steps it is given (what one step teaches that serves the next).
pub fn digest_file<P: Send, S: Default>(
    path: &Path,
    limits: TailLimits,
    threads: usize,
    prepare: &(dyn Fn(Chunk, &mut S) -> P + Sync),
    mut digest: impl FnMut(P) -> Option<Chunk>,
) -> std::io::Result<()> {
    if threads <= 1 {
        let mut state = S::default();
        return read_steps(path, limits, |chunk| {
            ControlFlow::Continue(digest(prepare(chunk, &mut state)).unwrap_or_default())
        });
    }
    std::thread::scope(|scope| {
        // A few steps waiting per queue, each a read of at most a few megabytes.
        let (work_tx, work_rx) = mpsc::sync_channel::<(usize, Chunk)>(QUEUED_STEPS);
        let work_rx = Arc::new(Mutex::new(work_rx));
        let (done_tx, done_rx) = mpsc::sync_channel::<(usize, P)>(QUEUED_STEPS);
        let (spare_tx, spare_rx) = mpsc::channel::<Chunk>();
        for _ in 0..threads {
            let (work_rx, done_tx) = (Arc::clone(&work_rx), done_tx.clone());
            scope.spawn(move || {
                let mut state = S::default();
                loop {
                    let next = work_rx
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .recv();
                    let Ok((index, chunk)) = next else { break };
                    if done_tx.send((index, prepare(chunk, &mut state))).is_err() {
                        break;
                    }
                }
            });
        }
        drop((work_rx, done_tx));
        let reader = scope.spawn(move || {
            let mut index = 0;
            read_steps(path, limits, |chunk| {
                // The workers are gone only when one failed: stop reading.
                if work_tx.send((index, chunk)).is_err() {
                    return ControlFlow::Break(());
                }
                index += 1;
                ControlFlow::Continue(spare_rx.try_recv().unwrap_or_default())
            })
        });
        let mut waiting = BTreeMap::new();
        let mut next = 0;
        for (index, prepared) in done_rx {
            waiting.insert(index, prepared);
            while let Some(prepared) = waiting.remove(&next) {
                if let Some(spare) = digest(prepared) {
                    // The reader may be done: then the chunk is simply dropped.
                    let _ = spare_tx.send(spare);
                }
                next += 1;
            }
        }
        reader
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Reads `path` from its start in bounded steps, each handed to `each`, which gives back a chunk whose
/// memory the next step reuses, or stops the reading.
fn read_steps(
    path: &Path,
    limits: TailLimits,
    mut each: impl FnMut(Chunk) -> ControlFlow<(), Chunk>,
) -> std::io::Result<()> {
    let mut offset = 0;
    let mut identity = None;
    let mut spare = Chunk::default();
    loop {
        let chunk = read_new_lines_reusing(path, offset, identity.as_deref(), limits, spare)?;
        if chunk.spans.is_empty() {
            // A last line without its newline is still a line.
            let rest = read_from(path, offset)?;
            if !rest.is_empty() {
                let text = String::from_utf8_lossy(&rest).into_owned();
                let _ = each(Chunk {
                    spans: vec![(0, text.len())],
                    text,
                    ..Chunk::default()
                });
            }
            return Ok(());
        }
        offset = chunk.next_offset;
        identity = chunk.identity.clone();
        match each(chunk) {
            ControlFlow::Continue(chunk) => spare = chunk,
            ControlFlow::Break(()) => return Ok(()),
        }
    }
}

/// The bytes of `path` from `offset` to its end.
fn read_from(path: &Path, offset: u64) -> std::io::Result<Vec<u8>> {
    let mut file = File::open(path)?;
    file.seek(SeekFrom::Start(offset))?;
    let mut rest = Vec::new();
    file.read_to_end(&mut rest)?;
    Ok(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(text: &str, threads: usize) -> Vec<(Vec<String>, Vec<bool>)> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, text).unwrap();
        let limits = TailLimits {
            max_line_bytes: 64,
            max_read_bytes: 100,
        };
        let prepare = |chunk: Chunk, _: &mut ()| {
            let marks = chunk.lines().map(|line| line.contains("x")).collect();
            (chunk, marks)
        };
        let mut seen = Vec::new();
        digest_file(
            &path,
            limits,
            threads,
            &prepare,
            |(chunk, marks): (Chunk, Vec<bool>)| {
                seen.push((chunk.lines().map(str::to_string).collect(), marks));
                Some(chunk)
            },
        )
        .unwrap();
        seen
    }

    #[test]
    fn every_thread_count_gives_the_same_steps_in_file_order() {
        let mut text = String::new();
        for n in 0..2000 {
            text.push_str(&format!("line {n} {}\n", if n % 7 == 0 { "x" } else { "" }));
        }
        text.push_str("last line without its newline x");
        let one = steps(&text, 1);
        assert!(one.len() > 100);
        let lines: Vec<&String> = one.iter().flat_map(|(lines, _)| lines).collect();
        assert_eq!(lines.len(), 2001);
        assert_eq!(lines[2000], "last line without its newline x");
        for threads in [2, 3, 8] {
            assert_eq!(steps(&text, threads), one, "{threads} threads");
        }
    }
}
