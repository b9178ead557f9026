//! Following a log file incrementally from a persisted byte offset.
//!
//! Reads are bounded per call, lines are bounded in length, invalid UTF-8 is replaced rather than
//! rejected, and a file that shrank (truncated or replaced) is read again from the start.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// What one read of a log produced: one text buffer and the spans of its lines, so a read of millions
/// of lines costs one allocation, not millions.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Chunk {
    /// The complete lines read, invalid UTF-8 replaced.
    pub text: String,
    /// Byte ranges of the lines in `text`, newline (and a trailing `\r`) removed, cut to the line cap.
    pub spans: Vec<(usize, usize)>,
    /// Offset to persist: just after the last complete line consumed.
    pub next_offset: u64,
    /// Lines cut to the length cap.
    pub truncated_lines: u64,
    /// Lines that held invalid UTF-8.
    pub invalid_utf8_lines: u64,
    /// The file was shorter than the stored offset, so it was read again from the start.
    pub restarted: bool,
    /// The file does not exist (yet).
    pub missing: bool,
    /// The file's identity (device and inode); a different one at the same path means it was rotated.
    pub identity: Option<String>,
    /// The path now holds a different file than the stored identity: it was read from the start.
    pub rotated: bool,
    /// The read stopped at its budget before the file's end: more is there to read now.
    pub more: bool,
    /// The last bytes consumed (at most [`TAIL_BYTES`]), exactly as in the file: with the ones of
    /// earlier reads they tell, later, whether the file still holds what was read.
    pub tail: Vec<u8>,
}

#[cfg(test)]
impl Chunk {
    /// `text` as one read of whole lines, framed as a read frames them.
    pub(crate) fn of_text(text: &str) -> Self {
        let mut spans = Vec::new();
        let mut start = 0;
        for line in text.split_inclusive('\n') {
            let body = line.trim_end_matches('\n').trim_end_matches('\r');
            spans.push((start, start + body.len()));
            start += line.len();
        }
        Self {
            text: text.to_string(),
            spans,
            next_offset: text.len() as u64,
            ..Self::default()
        }
    }
}

/// How many of the last bytes read are kept to recognise a file's content later.
pub const TAIL_BYTES: usize = 32;

/// `earlier` followed by `newer`, cut to the last [`TAIL_BYTES`].
pub fn join_tails(earlier: &[u8], newer: &[u8]) -> Vec<u8> {
    let mut joined = Vec::with_capacity(TAIL_BYTES);
    if newer.len() < TAIL_BYTES {
        joined
            .extend_from_slice(&earlier[earlier.len().saturating_sub(TAIL_BYTES - newer.len())..]);
    }
    joined.extend_from_slice(&newer[newer.len().saturating_sub(TAIL_BYTES)..]);
    joined
}

/// Where a new run of a job begins in the output file its previous run was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continuation {
    /// The byte the new run's lines begin at.
    pub start: u64,
    /// Where the previous run's lines end.
    pub previous_end: u64,
    /// The file was truncated, replaced or removed: the new run writes from its start.
    pub restarted: bool,
    /// The file's identity now, when it exists.
    pub identity: Option<String>,
}

/// How a job's new run shares `path` with its previous run, which was read up to `offset` in the file
/// `identity`, the last bytes read being `tail`. Opened for appending, the file still holds what was
/// read and the new run's lines follow everything there now; truncated (Slurm's default), replaced or
/// gone, the new run starts at byte 0 and the previous run keeps only what it read.
pub fn continuation(
    path: &Path,
    offset: u64,
    identity: Option<&str>,
    tail: &[u8],
) -> std::io::Result<Continuation> {
    let restarted = |identity| Continuation {
        start: 0,
        previous_end: offset,
        restarted: true,
        identity,
    };
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(restarted(None)),
        Err(err) => return Err(err),
    };
    let metadata = file.metadata()?;
    let now = identity_of(&metadata);
    let len = metadata.len();
    if identity.is_some_and(|known| !known.is_empty() && known != now) || len < offset {
        return Ok(restarted(Some(now)));
    }
    let kept = tail.len().min(offset as usize);
    if kept > 0 {
        let mut bytes = vec![0; kept];
        file.seek(SeekFrom::Start(offset - kept as u64))?;
        file.read_exact(&mut bytes)?;
        if bytes != tail[tail.len() - kept..] {
            return Ok(restarted(Some(now)));
        }
    }
    Ok(Continuation {
        start: len,
        previous_end: len,
        restarted: false,
        identity: Some(now),
    })
}

impl Chunk {
    /// The lines, in order.
    pub fn lines(&self) -> impl Iterator<Item = &str> + '_ {
        self.spans
            .iter()
            .map(|&(start, end)| self.text.get(start..end).unwrap_or(""))
    }

    /// What is left of a tick's `budget` after this read from `offset` (from the file's start when it
    /// was read again from there), or None when the tick reads no more of the file: its end was
    /// reached, nothing was consumed, or the budget is spent.
    pub fn budget_left(&self, offset: u64, budget: u64) -> Option<u64> {
        let read_from = if self.restarted || self.rotated {
            0
        } else {
            offset
        };
        let consumed = self.next_offset.saturating_sub(read_from);
        (self.more && consumed > 0 && consumed < budget).then(|| budget - consumed)
    }

    pub fn line_count(&self) -> usize {
        self.spans.len()
    }

    /// Marks the lines in which `pattern` matches, with one search over the whole text (a line is
    /// searched no further after its first match).
    pub fn mark_lines(&self, pattern: &regex::Regex) -> Vec<bool> {
        let mut marks = vec![false; self.line_count()];
        let mut at = 0;
        while at <= self.text.len() {
            let Some(found) = pattern.find_at(&self.text, at) else {
                break;
            };
            let Some(line) = self.line_at(found.start()) else {
                break;
            };
            marks[line] = true;
            let next = self
                .spans
                .get(line + 1)
                .map_or(self.text.len() + 1, |&(start, _)| start);
            at = next.max(found.end()).max(found.start() + 1);
        }
        marks
    }

    /// The index of the line holding byte `offset` of `text`.
    pub fn line_at(&self, offset: usize) -> Option<usize> {
        let index = self.spans.partition_point(|&(start, _)| start <= offset);
        index.checked_sub(1)
    }
}

/// The largest read a follower digests at once; a larger budget is read in steps of it. Every pass
/// over a read (framing, the candidate scan, the recognisers, the digest) then finds its bytes in the
/// core's own cache (L2 is 1 to 2 MiB a core on current servers) instead of in memory, which a
/// machine's other tenants share: a 1 GiB log is ingested about a third faster than in 64 MiB reads.
pub const READ_STEP_BYTES: u64 = 1 << 20;

/// The read step to use for a wanted `step` under a line cap of `max_line_bytes`: a line the cap keeps
/// whole must fit in one step, or it would be cut like a runaway one.
pub fn step_holding_a_line(step: u64, max_line_bytes: usize) -> u64 {
    step.max(max_line_bytes as u64 + 1)
}

/// The limits of one step of a tick's read with `budget` bytes left: at most [`READ_STEP_BYTES`], and
/// enough for a line the cap keeps whole.
pub fn step_limits(budget: u64, max_line_bytes: usize) -> TailLimits {
    TailLimits {
        max_line_bytes,
        max_read_bytes: budget.min(step_holding_a_line(READ_STEP_BYTES, max_line_bytes)),
    }
}

/// Limits of one read.
#[derive(Debug, Clone, Copy)]
pub struct TailLimits {
    pub max_line_bytes: usize,
    pub max_read_bytes: u64,
}

/// Device, inode and birth time, which survive renames and change when a new file takes the path.
fn identity_of(metadata: &std::fs::Metadata) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        // Inode numbers are reused at once after a delete; the birth time (where the file system
        // records one) tells the new file from the old.
        let born = metadata
            .created()
            .ok()
            .and_then(|time| time.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |since| since.as_nanos());
        format!("{}:{}:{born}", metadata.dev(), metadata.ino())
    }
    #[cfg(not(unix))]
    {
        let _ = metadata;
        String::new()
    }
}

/// The last `max` bytes of a file as text, from the first line that starts in them (a line cut by
/// the limit is dropped); invalid UTF-8 is replaced. For views of a log's recent past, not for following.
pub fn read_end(path: &Path, max: u64) -> std::io::Result<String> {
    let mut file = File::open(path)?;
    let start = file.metadata()?.len().saturating_sub(max);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    // Bounded even when the file grows while it is read.
    file.take(max).read_to_end(&mut bytes)?;
    if start > 0 {
        let cut = memchr::memchr(b'\n', &bytes).map_or(bytes.len(), |at| at + 1);
        bytes.drain(..cut);
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Reads the complete lines written to `path` after `offset`; `known` is the identity the offset
/// belongs to (see [`Chunk::identity`]), so a rotated file is read from its start.
///
/// A trailing partial line is left for the next call, unless it is already longer than the line cap, in
/// which case it is consumed as a truncated line (a runaway line must not stall the reader).
pub fn read_new_lines(
    path: &Path,
    offset: u64,
    known: Option<&str>,
    limits: TailLimits,
) -> std::io::Result<Chunk> {
    read_new_lines_reusing(path, offset, known, limits, Chunk::default())
}

/// [`read_new_lines`] that reuses the memory of a chunk the caller is done with, so reading a large
/// file chunk after chunk does not allocate (and fault in) a fresh buffer each time.
pub fn read_new_lines_reusing(
    path: &Path,
    offset: u64,
    known: Option<&str>,
    limits: TailLimits,
    recycled: Chunk,
) -> std::io::Result<Chunk> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Chunk {
                next_offset: offset,
                missing: true,
                identity: known.map(str::to_string),
                ..Chunk::default()
            });
        }
        Err(err) => return Err(err),
    };
    let metadata = file.metadata()?;
    let len = metadata.len();
    let identity = identity_of(&metadata);
    let mut buffer = recycled.text.into_bytes();
    buffer.clear();
    let mut raw_spans = recycled.spans;
    raw_spans.clear();
    let mut chunk = Chunk::default();
    let mut start = offset;
    if known.is_some_and(|known| !known.is_empty() && known != identity) {
        chunk.rotated = true;
        start = 0;
    } else if len < offset {
        chunk.restarted = true;
        start = 0;
    }
    chunk.identity = Some(identity);
    chunk.next_offset = start;
    if len == start {
        return Ok(chunk);
    }
    file.seek(SeekFrom::Start(start))?;
    let budget = (len - start).min(limits.max_read_bytes.max(1));
    // The budget is bounded by the config, so reserving it whole is safe and avoids regrowing.
    buffer.reserve_exact(budget as usize);
    file.take(budget).read_to_end(&mut buffer)?;

    // Find the lines on bytes first; decode once for the whole buffer when it is valid UTF-8.
    // A budget that ends inside the first line (a budget of one line is allowed) cuts that line
    // like a runaway one: left for later, it would be read again and again and never consumed.
    let cut_by_budget = budget < len - start;
    chunk.more = cut_by_budget;
    let mut consumed = 0usize;
    while consumed < buffer.len() {
        let rest = &buffer[consumed..];
        let (len, advance) = match memchr_newline(rest) {
            Some(end) => (end, end + 1),
            None if rest.len() > limits.max_line_bytes || (consumed == 0 && cut_by_budget) => {
                (rest.len(), rest.len())
            }
            None => break,
        };
        let mut end = consumed + len;
        if end > consumed && buffer[end - 1] == b'\r' {
            end -= 1;
        }
        if end - consumed > limits.max_line_bytes {
            chunk.truncated_lines += 1;
            end = consumed + limits.max_line_bytes;
        }
        raw_spans.push((consumed, end));
        consumed += advance;
    }
    buffer.truncate(consumed);
    chunk.tail = buffer[consumed.saturating_sub(TAIL_BYTES)..].to_vec();
    match String::from_utf8(buffer) {
        Ok(text) => {
            // A cut inside a multi-byte character moves back to the character's start. Only the line
            // cap cuts inside a line (newlines and carriage returns are ASCII): without a cut line the
            // spans stand as they are.
            chunk.spans = if chunk.truncated_lines == 0 {
                raw_spans
            } else {
                raw_spans
                    .into_iter()
                    .map(|(start, mut end)| {
                        while end > start && !text.is_char_boundary(end) {
                            end -= 1;
                        }
                        (start, end)
                    })
                    .collect()
            };
            chunk.text = text;
        }
        Err(err) => {
            let bytes = err.into_bytes();
            let mut text = String::with_capacity(bytes.len());
            for (start, end) in raw_spans {
                let line = &bytes[start..end];
                let begin = text.len();
                match std::str::from_utf8(line) {
                    Ok(valid) => text.push_str(valid),
                    Err(bad)
                        if bad.error_len().is_none() && end - start == limits.max_line_bytes =>
                    {
                        // Only the cut split a character: drop its first bytes.
                        text.push_str(&String::from_utf8_lossy(&line[..bad.valid_up_to()]));
                    }
                    Err(_) => {
                        chunk.invalid_utf8_lines += 1;
                        text.push_str(&String::from_utf8_lossy(line));
                    }
                }
                chunk.spans.push((begin, text.len()));
                text.push('\n');
            }
            chunk.text = text;
        }
    }
    chunk.next_offset = start + consumed as u64;
    Ok(chunk)
}

fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', bytes)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    const LIMITS: TailLimits = TailLimits {
        max_line_bytes: 16,
        max_read_bytes: 1024,
    };

    /// The previous run read the whole file; where does the next one start?
    fn read_all(path: &Path) -> Chunk {
        read_new_lines(
            path,
            0,
            None,
            TailLimits {
                max_line_bytes: 1024,
                max_read_bytes: 1 << 20,
            },
        )
        .unwrap()
    }

    #[test]
    fn a_new_run_appending_starts_after_everything_already_there() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("train.out");
        append(&path, b"run 1 iteration 24\nrun 1 iteration 25\n");
        let first = read_all(&path);
        // The previous run's last line came after its last read, then the new run began.
        append(&path, b"run 1 killed\n");
        let at = std::fs::metadata(&path).unwrap().len();
        let next = continuation(
            &path,
            first.next_offset,
            first.identity.as_deref(),
            &first.tail,
        )
        .unwrap();
        assert_eq!(
            (next.start, next.previous_end, next.restarted),
            (at, at, false)
        );
        append(&path, b"run 2 iteration 20\n");
        let second = read_new_lines(
            &path,
            next.start,
            next.identity.as_deref(),
            TailLimits {
                max_line_bytes: 1024,
                max_read_bytes: 1 << 20,
            },
        )
        .unwrap();
        assert_eq!(second.lines().collect::<Vec<_>>(), ["run 2 iteration 20"]);
    }

    #[test]
    fn a_new_run_truncating_starts_at_zero_even_once_it_outgrew_the_old_offset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("train.out");
        append(&path, b"run 1 iteration 1\n");
        let first = read_all(&path);
        // Truncated and already longer than what the first run wrote.
        std::fs::write(
            &path,
            b"run 2 resumed from iteration 0\nrun 2 iteration 1\n",
        )
        .unwrap();
        let next = continuation(
            &path,
            first.next_offset,
            first.identity.as_deref(),
            &first.tail,
        )
        .unwrap();
        assert_eq!(
            (next.start, next.previous_end, next.restarted),
            (0, first.next_offset, true)
        );
        // Shorter than before: truncated too.
        std::fs::write(&path, b"x\n").unwrap();
        let next = continuation(
            &path,
            first.next_offset,
            first.identity.as_deref(),
            &first.tail,
        )
        .unwrap();
        assert!(next.restarted);
        // Gone.
        std::fs::remove_file(&path).unwrap();
        let next = continuation(&path, first.next_offset, None, &first.tail).unwrap();
        assert!(next.restarted && next.identity.is_none());
    }

    #[test]
    fn tails_join_to_the_last_bytes_read() {
        assert_eq!(join_tails(b"abc", b"de"), b"abcde");
        let long = [b'x'; TAIL_BYTES];
        assert_eq!(join_tails(b"abc", &long), long);
        assert_eq!(join_tails(&long, b"yz")[TAIL_BYTES - 2..], *b"yz");
        assert_eq!(join_tails(&long, b"yz").len(), TAIL_BYTES);
    }

    fn append(path: &Path, bytes: &[u8]) {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        file.write_all(bytes).unwrap();
    }

    #[test]
    fn reads_only_complete_lines_and_continues_from_the_offset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        append(&path, b"one\ntwo\nthr");
        let first = read_new_lines(&path, 0, None, LIMITS).unwrap();
        assert_eq!(first.lines().collect::<Vec<_>>(), vec!["one", "two"]);
        assert_eq!(first.next_offset, 8);
        append(&path, b"ee\n");
        let second =
            read_new_lines(&path, first.next_offset, first.identity.as_deref(), LIMITS).unwrap();
        assert_eq!(second.lines().collect::<Vec<_>>(), vec!["three"]);
    }

    #[test]
    fn a_rotated_file_is_read_from_its_start_even_when_it_is_longer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        append(&path, b"old 1\n");
        let first = read_new_lines(&path, 0, None, LIMITS).unwrap();
        std::fs::rename(&path, dir.path().join("a.log.1")).unwrap();
        append(&path, b"new 1\nnew 2\nnew 3\n");
        let next =
            read_new_lines(&path, first.next_offset, first.identity.as_deref(), LIMITS).unwrap();
        assert!(next.rotated);
        assert_eq!(
            next.lines().collect::<Vec<_>>(),
            vec!["new 1", "new 2", "new 3"]
        );
    }

    #[test]
    fn a_deleted_file_keeps_its_offset_until_it_comes_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        append(&path, b"line\n");
        let first = read_new_lines(&path, 0, None, LIMITS).unwrap();
        std::fs::remove_file(&path).unwrap();
        let gone =
            read_new_lines(&path, first.next_offset, first.identity.as_deref(), LIMITS).unwrap();
        assert!(gone.missing);
        assert_eq!(gone.next_offset, first.next_offset);
        append(&path, b"again\n");
        let back =
            read_new_lines(&path, gone.next_offset, gone.identity.as_deref(), LIMITS).unwrap();
        assert_eq!(back.lines().collect::<Vec<_>>(), vec!["again"]);
    }

    #[test]
    fn a_truncated_file_is_read_again_from_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        append(&path, b"first line\nsecond line\n");
        let first = read_new_lines(&path, 0, None, LIMITS).unwrap();
        std::fs::write(&path, b"new\n").unwrap();
        let again =
            read_new_lines(&path, first.next_offset, first.identity.as_deref(), LIMITS).unwrap();
        assert!(again.restarted);
        assert_eq!(again.lines().collect::<Vec<_>>(), vec!["new"]);
    }

    #[test]
    fn long_lines_are_cut_and_counted_and_bad_utf8_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        append(&path, b"0123456789abcdefXYZ\nbad \xff\xfe byte\n");
        let chunk = read_new_lines(&path, 0, None, LIMITS).unwrap();
        let lines: Vec<&str> = chunk.lines().collect();
        assert_eq!(lines[0], "0123456789abcdef");
        assert_eq!(chunk.truncated_lines, 1);
        assert_eq!(chunk.invalid_utf8_lines, 1);
        assert!(lines[1].starts_with("bad \u{fffd}"));
    }

    #[test]
    fn a_runaway_line_without_newline_does_not_stall_the_reader() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        append(&path, &[b'x'; 100]);
        let chunk = read_new_lines(&path, 0, None, LIMITS).unwrap();
        assert_eq!(chunk.line_count(), 1);
        assert_eq!(chunk.next_offset, 100);
    }

    #[test]
    fn a_line_longer_than_a_read_budget_of_one_line_does_not_stall_the_reader() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        append(&path, b"0123456789abcdefghijklmnopqrstuvwxyz\nnext\n");
        let limits = TailLimits {
            max_line_bytes: 16,
            max_read_bytes: 16,
        };
        let (mut offset, mut lines) = (0, Vec::new());
        for _ in 0..10 {
            let chunk = read_new_lines(&path, offset, None, limits).unwrap();
            lines.extend(chunk.lines().map(str::to_string));
            offset = chunk.next_offset;
        }
        assert_eq!(offset, 42);
        assert_eq!(lines[0], "0123456789abcdef");
        assert_eq!(lines.last().map(String::as_str), Some("next"));
    }

    #[test]
    fn a_missing_file_is_reported_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let chunk = read_new_lines(&dir.path().join("late.log"), 0, None, LIMITS).unwrap();
        assert!(chunk.missing);
        assert_eq!(chunk.line_count(), 0);
    }

    #[test]
    fn reads_are_bounded_per_call() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        for _ in 0..100 {
            append(&path, b"0123456789\n");
        }
        let limits = TailLimits {
            max_line_bytes: 64,
            max_read_bytes: 100,
        };
        let chunk = read_new_lines(&path, 0, None, limits).unwrap();
        assert_eq!(chunk.line_count(), 9);
        assert_eq!(chunk.next_offset, 99);
    }
}
