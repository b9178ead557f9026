//! Hard-wrapped lines rejoined before matching: a terminal or a log collector that cuts lines at a
//! fixed width (padding the rest with spaces, or not) splits one message over several lines, and a
//! signature written for the message would match neither half.
//!
//! Two shapes are recognised within one read:
//! * fixed-width wrapping: several lines of the read have exactly the same long length and none is
//!   longer; a line of that length continues on the next one unless the next one starts a record of
//!   its own (a label, a timestamp, a capitalised word, indentation, or the same first word);
//! * a single cut: a long line that stops in the middle of a sentence (on a letter, or a word and a
//!   space; a number ends records too often) is followed by a line that starts in lower case and is not a record of its own (it lacks
//!   the rank label, timestamp or `Word:` head every record line starts with).
//!
//! A followed log is read in pieces, and a message can be cut where one read ends: [`WrapCarry`]
//! takes from each read what the next needs (the width the log wraps at, its last line when that may
//! go on), and joins the next read's first line to that last line when it is its rest.

use std::borrow::Cow;

use crate::telemetry::tail::Chunk;

/// Shortest width taken for fixed-width wrapping (narrower "wrapping" is a table, not a terminal).
const MIN_WRAP_WIDTH: usize = 60;
/// Shortest line taken for a single cut.
const MIN_CUT_LINE: usize = 120;

/// The read with its hard-wrapped lines joined, or the read itself when none is wrapped.
pub fn rejoin_wrapped(chunk: &Chunk) -> Cow<'_, Chunk> {
    rejoin_wrapped_knowing(chunk, None).0
}

/// [`rejoin_wrapped`] knowing the width an earlier read of the same log was seen to wrap at, which
/// holds in this read unless a line of it is longer: a read of a followed log may hold a single
/// wrapped message, too few lines to show the width on their own. Gives, beside the read, the width
/// the log wraps at as far as this read tells.
pub fn rejoin_wrapped_knowing(
    chunk: &Chunk,
    known: Option<usize>,
) -> (Cow<'_, Chunk>, Option<usize>) {
    let line = |index: usize| {
        chunk
            .spans
            .get(index)
            .and_then(|&(start, end)| chunk.text.get(start..end))
            .unwrap_or_default()
    };
    let (longest, at_longest) = longest_lines(&chunk.spans);
    // A terminal that wraps at a width lets no line past it.
    let known = known.filter(|&width| longest <= width);
    let own = (longest >= MIN_WRAP_WIDTH && at_longest >= 2).then_some(longest);
    let width = own.or(known);
    // A line whose length is not the width continues the next one or not whatever the width: every
    // line is read once without it, and the lines of that length once more with it.
    let (mut cuts, mut cuts_at_width, mut at_width) = (Vec::new(), Vec::new(), 0usize);
    for (index, &(start, end)) in (1..chunk.spans.len()).zip(&chunk.spans) {
        // `continues` needs a line of the width or one of a cut's length before the next: most lines
        // are neither, and are passed by on their span alone.
        let length = end.saturating_sub(start);
        let at = width == Some(length);
        if !at && length < MIN_CUT_LINE {
            continue;
        }
        let (before, after) = (line(index - 1), line(index));
        if let Some(width) = width
            && at
        {
            at_width += 1;
            if continues(before, after, Some(width)) {
                cuts_at_width.push(index);
            }
        }
        if length >= MIN_CUT_LINE && continues(before, after, None) {
            cuts.push(index);
        }
    }
    // A width an earlier read showed needs no more showing.
    let wraps =
        width.filter(|&width| known == Some(width) || wraps_at(cuts_at_width.len(), at_width));
    if let Some(width) = wraps {
        cuts.retain(|&index| {
            chunk
                .spans
                .get(index - 1)
                .is_none_or(|&(start, end)| end.saturating_sub(start) != width)
        });
        cuts.extend(cuts_at_width);
    }
    let wraps = wraps.or(known);
    if cuts.is_empty() {
        return (Cow::Borrowed(chunk), wraps);
    }
    let mut joins_previous = vec![false; chunk.spans.len()];
    for index in cuts {
        if let Some(joins) = joins_previous.get_mut(index) {
            *joins = true;
        }
    }
    let mut text = String::with_capacity(chunk.text.len());
    let mut spans = Vec::with_capacity(chunk.spans.len());
    let mut start = 0;
    for (i, (line, joins_previous)) in chunk.lines().zip(joins_previous).enumerate() {
        if joins_previous {
            push_rest(&mut text, line);
        } else {
            if i > 0 {
                spans.push((start, text.len()));
                text.push('\n');
            }
            start = text.len();
            text.push_str(line);
        }
    }
    if !chunk.spans.is_empty() {
        spans.push((start, text.len()));
    }
    (Cow::Owned(relined(chunk, text, spans)), wraps)
}

/// Appends `rest`, the rest of the cut line `text` ends with. A cut after a space (or padding to the
/// width) was at a word boundary; a cut on a letter split a word, whose halves go back together.
fn push_rest(text: &mut String, rest: &str) {
    if text.ends_with(' ') {
        text.truncate(text.trim_end().len());
        text.push(' ');
        text.push_str(rest.trim_start());
    } else {
        text.push_str(rest);
    }
}

/// `chunk` holding the lines `text` and `spans` instead of its own.
fn relined(chunk: &Chunk, text: String, spans: Vec<(usize, usize)>) -> Chunk {
    Chunk {
        text,
        spans,
        next_offset: chunk.next_offset,
        truncated_lines: chunk.truncated_lines,
        invalid_utf8_lines: chunk.invalid_utf8_lines,
        restarted: chunk.restarted,
        missing: chunk.missing,
        identity: chunk.identity.clone(),
        rotated: chunk.rotated,
        more: chunk.more,
        tail: chunk.tail.clone(),
    }
}

/// What the rejoining of one followed log carries from a read to the next: the width the log was seen
/// to wrap at, and the read's last line when it may go on in the next read.
#[derive(Debug, Default, Clone)]
pub struct WrapCarry {
    width: Option<usize>,
    cut_line: Option<String>,
}

impl WrapCarry {
    /// The next read of the log, rejoined: its own wrapped lines (at the width known from earlier
    /// reads when it shows none), and its first line joined to the last line of the read before when
    /// it is that line's rest. That last line was digested already as it stood; read again whole, it
    /// says what neither half says.
    pub fn rejoin<'a>(&mut self, chunk: &'a Chunk) -> Cow<'a, Chunk> {
        if chunk.restarted || chunk.rotated {
            // Another file at the path, or the file written again: nothing before goes on in it.
            *self = Self::default();
        }
        let (rejoined, width) = rejoin_wrapped_knowing(chunk, self.width);
        self.go_on(rejoined, width).0
    }

    /// Joins the first line of `chunk`, a read already rejoined on its own (and found to wrap at
    /// `width`), to the last line of the read before when it is its rest (true then), and remembers
    /// the read's last line when it may go on in the next.
    pub fn go_on<'a>(
        &mut self,
        chunk: Cow<'a, Chunk>,
        width: Option<usize>,
    ) -> (Cow<'a, Chunk>, bool) {
        let first = (chunk.spans.first())
            .and_then(|&(start, end)| Some((chunk.text.get(start..end)?, end)));
        let joined = match (self.cut_line.take(), first) {
            (Some(mut cut), Some((line, end))) if continues(&cut, line, self.width) => {
                push_rest(&mut cut, line);
                // The joined line takes the first line's place; the others move by the difference.
                let first = (0, cut.len());
                let mut text = cut;
                text.push_str(chunk.text.get(end..).unwrap_or_default());
                let moved = |at: usize| at.saturating_sub(end) + first.1;
                let spans = std::iter::once(first)
                    .chain(
                        chunk
                            .spans
                            .iter()
                            .skip(1)
                            .map(|&(from, to)| (moved(from), moved(to))),
                    )
                    .collect();
                Some(relined(&chunk, text, spans))
            }
            _ => None,
        };
        let is_joined = joined.is_some();
        let chunk = joined.map_or(chunk, Cow::Owned);
        self.width = width;
        // The last span directly: walking the lines to their last would pass over every line of the read.
        self.cut_line = (chunk.spans.last())
            .and_then(|&(start, end)| chunk.text.get(start..end))
            .filter(|line| width == Some(line.len()) || line.len() >= MIN_CUT_LINE)
            .map(str::to_string);
        (chunk, is_joined)
    }
}

/// The longest length of a line of the read, and how many lines have it. Lengths are in bytes, which
/// is the terminal's columns for the ASCII text logs are made of, and keeps this pass over every read
/// cheap.
fn longest_lines(spans: &[(usize, usize)]) -> (usize, usize) {
    let (mut longest, mut at_longest) = (0, 0usize);
    for &(start, end) in spans {
        let length = end.saturating_sub(start);
        if length > longest {
            (longest, at_longest) = (length, 1);
        } else if length == longest {
            at_longest += 1;
        }
    }
    (longest, at_longest)
}

/// Whether the lines at `width` read as a terminal's cuts: at least two of them, and at least a quarter,
/// go on in the next line. Records of one fixed format can share the longest length of a read (progress
/// lines whose numbers keep their widths); a line after one of them that happens to start in lower case
/// (`terminate called after ...`) is its own record, which joining would bury in the progress line.
fn wraps_at(cut: usize, at_width: usize) -> bool {
    cut >= 2 && cut * 4 >= at_width
}

/// Whether `next` is the rest of `line`, cut.
fn continues(line: &str, next: &str, width: Option<usize>) -> bool {
    let length = line.len();
    // Either shape needs one of these; on most lines of a log the lengths alone rule both out.
    let may_continue = width == Some(length)
        || (length >= MIN_CUT_LINE && next.as_bytes().first().is_some_and(u8::is_ascii_lowercase));
    if !may_continue
        || next.trim().is_empty()
        || starts_record(next)
        || head_word_is_a_label(next)
        || same_shape(first_word(next), first_word(line))
    {
        return false;
    }
    if width == Some(length) && !line.trim().is_empty() {
        return true;
    }
    let trimmed = line.trim_end();
    let cut_mid_sentence = trimmed
        .chars()
        .last()
        .is_some_and(|c| c.is_alphabetic() || c == ',')
        && line.len() - trimmed.len() <= 1;
    length >= MIN_CUT_LINE && cut_mid_sentence && next.starts_with(|c: char| c.is_ascii_lowercase())
}

fn first_word(line: &str) -> &str {
    line.split(char::is_whitespace).next().unwrap_or_default()
}

/// Words equal but for their digits (`host:39964:40075` and `host:39964:40049`): the same record head.
fn same_shape(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.chars()
            .zip(b.chars())
            .all(|(x, y)| x == y || (x.is_ascii_digit() && y.is_ascii_digit()))
}

/// Whether a line starts a record of its own: indented (a traceback frame, a continuation the program
/// printed itself), a label or timestamp in brackets or parentheses, a number (a timestamp), or a
/// capitalised word (`Traceback`, `RuntimeError: ...`, `INFO:`).
fn starts_record(line: &str) -> bool {
    line.starts_with(|c: char| {
        c.is_whitespace() || c.is_ascii_digit() || c.is_uppercase() || "[(<{#*>`|".contains(c)
    })
}

/// `error: ...`, `srun: ...`, `key=value`: a lower-case head that is a label, not the rest of a sentence.
fn head_word_is_a_label(line: &str) -> bool {
    let head = first_word(line);
    head.ends_with(':') || head.contains('=') || head.contains("::")
}

/// A log as a terminal 64 columns wide shows it, for the tests of the rejoin and of those who read
/// through it.
#[cfg(test)]
pub(crate) mod wrapped_sample {
    /// A progress line longer than the width, cut inside a word.
    pub(crate) const PROGRESS: &str = "iteration 10 | consumed samples: 640 | elapsed time per iteration (ms): 512.3 | lm loss 2.5";
    /// An error whose halves, cut at the width, say nothing a signature knows.
    pub(crate) const NCCL_ERROR: &str = "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.14.3";

    /// `text` cut into lines of 64 bytes, each ended by a newline.
    pub(crate) fn at_64_columns(text: &str) -> String {
        (text.as_bytes().chunks(64))
            .map(|part| format!("{}\n", String::from_utf8_lossy(part)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::wrapped_sample::{NCCL_ERROR, PROGRESS, at_64_columns};
    use super::*;

    fn chunk(text: &str) -> Chunk {
        Chunk::of_text(text)
    }

    fn rejoined(text: &str) -> Vec<String> {
        let chunk = chunk(text);
        rejoin_wrapped(&chunk).lines().map(str::to_string).collect()
    }

    /// tests/fixtures/corpus/field/cases/064-raylet-oom-kill-terminal-wrapped.log, from
    /// https://github.com/ray-project/ray/issues/59214 (the terminal cut `ray logs` after `ray log`).
    #[test]
    fn a_terminal_wrapped_raylet_message_is_one_line_again() {
        let text = std::fs::read_to_string(
            "../tests/fixtures/corpus/field/cases/064-raylet-oom-kill-terminal-wrapped.log",
        )
        .unwrap();
        let lines = rejoined(&text);
        assert!(
            lines[0].contains("0 Workers crashed due to other reasons at node (ID: 8289f87b"),
            "{lines:#?}"
        );
        assert!(
            lines[0].contains("use `ray logs raylet.out -ip 172.24.0.226`"),
            "{lines:#?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("(raylet) Refer to the documentation")
                    && l.contains("provisioning more memory on this node")),
            "{lines:#?}"
        );
        assert!(lines.iter().all(|l| !l.starts_with("node (ID")));
    }

    /// tests/fixtures/corpus/field/cases/102-horovod-stall-inspector-rank-4-wrapped.log: the message
    /// is cut in the middle of `remainder`, and the rest lacks the `[1,0]<stderr>:` label.
    #[test]
    fn a_horovod_line_cut_mid_word_is_joined_and_its_neighbours_are_not() {
        let text = std::fs::read_to_string(
            "../tests/fixtures/corpus/field/cases/102-horovod-stall-inspector-rank-4-wrapped.log",
        )
        .unwrap();
        let before = text.lines().count();
        let lines = rejoined(&text);
        assert_eq!(lines.len(), before - 1, "{lines:#?}");
        assert!(
            lines
                .iter()
                .any(|l| l.contains("waiting for remainder of ranks for more than 60 seconds")),
            "{lines:#?}"
        );
        assert!(lines.iter().any(|l| l == "[1,0]<stderr>:Stalled ranks:"));
    }

    /// tests/fixtures/corpus/field/cases/059-oom-hard-wrapped-zero3-a100.log: torch's OOM hint cut
    /// after `If `.
    #[test]
    fn a_cuda_oom_message_cut_after_a_word_is_joined_with_one_space() {
        let text = std::fs::read_to_string(
            "../tests/fixtures/corpus/field/cases/059-oom-hard-wrapped-zero3-a100.log",
        )
        .unwrap();
        let lines = rejoined(&text);
        assert!(
            lines[0].contains("reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb"),
            "{lines:#?}"
        );
        assert!(lines.contains(&"GPUs: 2*A100(80G)".to_string()));
    }

    /// tests/fixtures/corpus/field/cases/033-xid-45-caused-by-previous-xid-149-145.log: every kernel
    /// line has the same length, and each is a whole record.
    #[test]
    fn records_of_equal_length_are_not_taken_for_wrapping() {
        let text = std::fs::read_to_string(
            "../tests/fixtures/corpus/field/cases/033-xid-45-caused-by-previous-xid-149-145.log",
        )
        .unwrap();
        let chunk = chunk(&text);
        assert!(matches!(rejoin_wrapped(&chunk), Cow::Borrowed(_)));
    }

    /// tests/fixtures/corpus/field/cases/025-nccl-connect-abort-closed-by-node1.log and
    /// 164-cuda-runtime-error-39-uncorrectable-ecc.log: NCCL records of one host, and a C++ abort after
    /// a line that ends on a number, are records of their own.
    #[test]
    fn nccl_records_of_one_host_and_a_line_ending_on_a_number_are_not_joined() {
        for case in [
            "025-nccl-connect-abort-closed-by-node1.log",
            "164-cuda-runtime-error-39-uncorrectable-ecc.log",
        ] {
            let text =
                std::fs::read_to_string(format!("../tests/fixtures/corpus/field/cases/{case}"))
                    .unwrap();
            let chunk = chunk(&text);
            assert!(matches!(rejoin_wrapped(&chunk), Cow::Borrowed(_)), "{case}");
        }
    }

    /// Progress lines of one format share the read's longest length; the abort after one of them starts
    /// in lower case but is a record of its own, and stays one.
    #[test]
    fn a_lower_case_record_after_progress_lines_of_the_longest_length_stays_its_own() {
        let progress = |iteration: u32| {
            format!(
                " 7: [2026-03-01 12:00:{:02}] iteration {iteration:>8}/    1000 | elapsed time per iteration (ms): 10000.0 | lm loss: 2.0E+00 |",
                iteration % 60
            )
        };
        let mut text: String = (1..=40).map(|n| progress(n) + "\n").collect();
        text.push_str("terminate called after throwing an instance of 'c10::DistBackendError'\n");
        text.push_str(&progress(41));
        text.push('\n');
        assert!(matches!(rejoin_wrapped(&chunk(&text)), Cow::Borrowed(_)));
        // Two such lines are still not enough when they are few of the lines at that length.
        let doubled = text.replace(
            &format!("{}\nterminate", progress(40)),
            &format!(
                "{}\nterminate called\n{}\nterminate",
                progress(40),
                progress(40)
            ),
        );
        assert!(matches!(rejoin_wrapped(&chunk(&doubled)), Cow::Borrowed(_)));
    }

    #[test]
    fn tracebacks_log_records_and_short_lines_are_left_alone() {
        let text = "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n    main()\nRuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n[rank0]: iteration 10/100 | consumed samples: 640 | elapsed time per iteration (ms): 512.3 | learning rate 1.0E-04 | loss\nlr=0.0001 step=10\nepoch 3 loss 0.25\nepoch 4 loss 0.24\n";
        let chunk = chunk(text);
        assert!(matches!(rejoin_wrapped(&chunk), Cow::Borrowed(_)));
    }
    /// The lines of `reads`, each read rejoined after the ones before it.
    fn rejoined_in_reads(reads: &[&str]) -> Vec<Vec<String>> {
        let mut carry = WrapCarry::default();
        reads
            .iter()
            .map(|read| {
                let chunk = chunk(read);
                carry.rejoin(&chunk).lines().map(str::to_string).collect()
            })
            .collect()
    }

    #[test]
    fn a_message_cut_where_a_read_ends_is_read_whole_with_the_next_read() {
        let (progress, error) = (PROGRESS, NCCL_ERROR);
        let wrapped = at_64_columns(error);
        let (head, rest) = wrapped.split_at(65);
        assert!(rest.starts_with("/distributed"), "{rest:?}");
        // The first read shows the width (two progress lines wrapped at it) and ends inside the error.
        let first = format!(
            "{}{}{head}",
            at_64_columns(progress),
            at_64_columns(progress)
        );
        let reads = rejoined_in_reads(&[&first, rest]);
        assert_eq!(reads[0].len(), 3, "{reads:#?}");
        assert_eq!(reads[0][0], progress);
        assert_eq!(reads[1], [error.to_string()]);
        // Written a line a read, once the width is known: the message is still whole at its end.
        let pieces: Vec<String> = wrapped.split_inclusive('\n').map(str::to_string).collect();
        let mut all = vec![first.strip_suffix(head).unwrap_or_default()];
        all.extend(pieces.iter().map(String::as_str));
        let reads = rejoined_in_reads(&all);
        assert_eq!(reads.last().unwrap(), &[error.to_string()], "{reads:#?}");
    }

    #[test]
    fn a_record_of_its_own_after_a_read_ends_stays_its_own() {
        let progress = PROGRESS;
        // The read ends on a line of the width; the next starts a record of its own.
        let head = "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc\n";
        let first = format!(
            "{}{}{head}",
            at_64_columns(progress),
            at_64_columns(progress)
        );
        for next in [
            "Traceback (most recent call last):\n",
            "[rank1]: iteration 11\n",
            "  File \"x.py\"\n",
        ] {
            let reads = rejoined_in_reads(&[&first, next]);
            assert_eq!(reads[1], [next.trim_end().to_string()], "{next}");
        }
        // A file written again from its start goes on from nothing.
        let mut carry = WrapCarry::default();
        carry.rejoin(&chunk(&first));
        let mut again = chunk("/distributed/c10d\n");
        let going_on: Vec<String> = (carry.clone().rejoin(&again).lines())
            .map(str::to_string)
            .collect();
        assert_eq!(
            going_on,
            [head.trim_end().to_string() + "/distributed/c10d"]
        );
        again.restarted = true;
        assert_eq!(
            carry.rejoin(&again).lines().collect::<Vec<_>>(),
            ["/distributed/c10d"]
        );
    }
}
