//! Framing of one raw log line: the `srun -l` rank label, a torch `[rankN]:`
//! label and a leading timestamp are split off, so recognisers only see the
//! message and the caller can order lines from many ranks in time.
//!
//! Timestamps recognised at the start of the message (after the labels):
//!
//! | form | example | year |
//! | --- | --- | --- |
//! | bracketed ISO (Megatron, DeepSpeed) | `[2024-07-30 14:21:44]`, `[2024-07-30 14:21:44,250]` | own |
//! | ISO-8601, `T` or space, any zone | `2024-07-30T14:21:44.123+02:00`, `2024-07-30 14:21:44,123` | own |
//! | Go / slash dates | `2024/07/30 14:21:44` | own |
//! | syslog | `Nov 22 14:21:44`, `Nov  2 04:05:06.123` | supplied |
//! | `dmesg -T` | `[Sun Nov 22 14:21:44 2026]` | own |
//! | glog / torch c10 | `I1122 06:24:44.903881 123 f.cc:1]`, `[E626 06:24:44.903881913 F.cpp:616]` | supplied |
//! | NeMo | `[NeMo I 2024-07-30 14:21:44 exp_manager:396]` | own |
//! | after a level | `[INFO] 2024-07-30 14:21:44 ...`, `WARNING 2024-07-30T14:21:44Z ...` | own |
//!
//! A stamp that leads the message is cut from it. A stamp inside a level header
//! (glog, NeMo, after a level) is read but the message is left whole, because
//! the severity and source location in that header are what recognisers match.
//! Stamps without a zone are taken as UTC.
//!
//! This runs on every line of every log, so it is a hand-written byte parser
//! that looks at the first few bytes only and never allocates.

use chrono::{DateTime, Datelike, FixedOffset, NaiveDate, NaiveDateTime, TimeZone, Utc};

/// One log line with its rank prefix and timestamp split off.
#[derive(Debug, Clone, PartialEq)]
pub struct FramedLine<'a> {
    /// Rank from the `srun -l` label, else from a torch `[rankN]:` label.
    pub rank: Option<u32>,
    /// When the line says it was written; None when it carries no full date and time.
    pub timestamp: Option<DateTime<Utc>>,
    /// The rest after the labels and, if it led the message, the timestamp.
    pub message: &'a str,
}

/// Frames a line; year-less stamps (syslog, glog) get the current UTC year.
pub fn frame(line: &str) -> FramedLine<'_> {
    // The clock is only read when a year-less stamp is actually found.
    frame_impl(line, || Utc::now().year())
}

/// Frames a line; year-less stamps (syslog, glog) get `default_year`, so replaying an
/// old log does not date its lines to today's year.
pub fn frame_with_year(line: &str, default_year: i32) -> FramedLine<'_> {
    frame_impl(line, || default_year)
}

/// The last bracketed stamp seen and its value: consecutive lines of a log mostly share their stamp
/// (`[2024-07-30 14:21:44]`), and reusing it saves parsing the same date again on every line.
#[derive(Debug, Clone, Default)]
pub struct StampCache {
    raw: String,
    time: Option<DateTime<Utc>>,
}

/// [`frame_with_year`] that reuses the previous line's bracketed stamp when this line has the same one.
pub fn frame_cached<'l>(
    line: &'l str,
    default_year: i32,
    cache: &mut StampCache,
) -> FramedLine<'l> {
    let (srun_rank, rest) = split_srun_label(strip_quote(trim_newline(line)));
    let (torch_rank, rest) = split_torch_label(rest);
    let body = trim_start(rest);
    if let Some(time) = cache.time
        && !cache.raw.is_empty()
        && body.starts_with(cache.raw.as_str())
    {
        return FramedLine {
            rank: srun_rank.or(torch_rank),
            timestamp: Some(time),
            message: trim_start(body.get(cache.raw.len()..).unwrap_or_default()),
        };
    }
    let framed = frame_impl(line, || default_year);
    // Only a closed bracketed stamp is cached: its `]` proves the next line's prefix is the whole stamp.
    if let Some(time) = framed.timestamp
        && body.starts_with('[')
        && let Some(cut) = body.find(']')
        && framed.message.len() < body.len()
        && body[cut + 1..].trim_start() == framed.message
    {
        cache.raw.clear();
        cache.raw.push_str(&body[..=cut]);
        cache.time = Some(time);
    }
    framed
}

/// The rank [`frame`] finds in a line, its timestamp read only where it can matter: the labels before
/// the stamp decide, and only Open MPI's tag can follow a stamp (then the line holds its `]<`).
pub fn rank_of(line: &str, default_year: i32) -> Option<u32> {
    // Most lines of a log under `srun -l` start with the label itself: read it before any trimming.
    if let (Some(rank), _) = split_srun_label(line) {
        return Some(rank);
    }
    // As `split_labels`, but each label that names a rank ends the search: the ones after it cannot
    // change the rank (this runs on every quiet line of a log).
    let (srun_rank, rest) = split_srun_label(strip_quote(trim_newline(line)));
    if srun_rank.is_some() {
        return srun_rank;
    }
    let (torch_rank, rest) = split_torch_label(rest);
    if torch_rank.is_some() {
        return torch_rank;
    }
    let (mpi_rank, rest) = split_mpi_tag(rest);
    mpi_rank.or_else(|| {
        rest.contains("]<")
            .then(|| frame_impl(line, || default_year).rank)
            .flatten()
    })
}

/// The labels before a line's stamp split off (quote marks and a trailing newline too): the rank of
/// the srun label, else of a torch label, else of an Open MPI tag, and the rest.
fn split_labels(line: &str) -> (Option<u32>, &str) {
    let (srun_rank, rest) = split_srun_label(strip_quote(trim_newline(line)));
    let (torch_rank, rest) = split_torch_label(rest);
    let (mpi_rank, rest) = split_mpi_tag(rest);
    (srun_rank.or(torch_rank).or(mpi_rank), rest)
}

/// ASCII whitespace as `char::is_whitespace` has it (vertical tab included).
pub(super) fn is_ascii_space(byte: u8) -> bool {
    matches!(byte, b'\t'..=b'\r' | b' ')
}

/// `str::trim_start`, passing ASCII whitespace byte by byte: characters are decoded only when a
/// non-ASCII one follows it.
pub(super) fn trim_start(text: &str) -> &str {
    let bytes = text.as_bytes();
    let mut start = 0;
    while bytes.get(start).is_some_and(|&byte| is_ascii_space(byte)) {
        start += 1;
    }
    // Only ASCII bytes were passed: `start` is a character boundary.
    let rest = text.get(start..).unwrap_or_default();
    match rest.as_bytes().first() {
        Some(&byte) if !byte.is_ascii() => rest.trim_start(),
        _ => rest,
    }
}

/// `str::trim`, passing ASCII whitespace byte by byte at both ends: characters are decoded only at an
/// end where a non-ASCII one stands.
pub(super) fn trim(text: &str) -> &str {
    let rest = trim_start(text);
    let bytes = rest.as_bytes();
    let mut end = bytes.len();
    while end > 0 && bytes.get(end - 1).is_some_and(|&byte| is_ascii_space(byte)) {
        end -= 1;
    }
    let rest = rest.get(..end).unwrap_or_default();
    match rest.as_bytes().last() {
        Some(&byte) if !byte.is_ascii() => rest.trim_end(),
        _ => rest,
    }
}

/// `line` without its trailing newlines and carriage returns.
fn trim_newline(line: &str) -> &str {
    let bytes = line.as_bytes();
    let mut end = bytes.len();
    while end > 0 && matches!(bytes[end - 1], b'\n' | b'\r') {
        end -= 1;
    }
    // Only ASCII bytes were cut, so `end` is a character boundary.
    line.get(..end).unwrap_or(line)
}

/// `line` without the Markdown quote marks (`> `, nested `> > `) a log quoted in an issue or a mail
/// carries on every line: the log's own line follows them, its traceback indentation kept.
fn strip_quote(line: &str) -> &str {
    let mut rest = line;
    while rest.as_bytes().first() == Some(&b'>') {
        match rest.as_bytes().get(1) {
            Some(b' ') => rest = rest.get(2..).unwrap_or_default(),
            None => return "",
            _ => break,
        }
    }
    rest
}

fn frame_impl(line: &str, year: impl Fn() -> i32 + Copy) -> FramedLine<'_> {
    let (rank, rest) = split_labels(line);
    let body = trim_start(rest);
    match leading_timestamp(body.as_bytes(), year) {
        Some((timestamp, Stamp::Leading(len))) => {
            let message = trim_start(body.get(len..).unwrap_or_default());
            // Open MPI's --timestamp-output writes its stamp and a colon before its tag.
            let tagged = message.strip_prefix(':').map_or(message, trim_start);
            let (after_stamp, tagged) = split_mpi_tag(tagged);
            FramedLine {
                rank: rank.or(after_stamp),
                timestamp: Some(timestamp),
                message: if after_stamp.is_some() {
                    tagged
                } else {
                    message
                },
            }
        }
        // A stamp inside a level header stays in the message, whose
        // severity letter and source location the recognisers read.
        Some((timestamp, Stamp::InHeader)) => FramedLine {
            rank,
            timestamp: Some(timestamp),
            message: rest,
        },
        // Without a timestamp the leading whitespace is kept: it carries
        // the indentation of traceback frames and Megatron's own output.
        None => FramedLine {
            rank,
            timestamp: None,
            message: strip_group_gutter(rest),
        },
    }
}

/// A line of an exception group's report (Python 3.11+) without its gutter: CPython indents each
/// nested group by two spaces and draws its left edge as `| ` (`+ ` on the header), so the traceback
/// inside reads as any other once the gutter is cut: `  | FileNotFoundError: shard 3 missing`. Tables
/// drawn from the first column (nvidia-smi's, Markdown's) keep theirs.
fn strip_group_gutter(text: &str) -> &str {
    let bytes = text.as_bytes();
    let indent = bytes.iter().take_while(|&&b| b == b' ').count();
    if indent < 2 {
        return text;
    }
    match bytes.get(indent..indent + 2) {
        Some(b"| ") => text.get(indent + 2..).unwrap_or(text),
        Some(b"+ ") if text[indent + 2..].starts_with("Exception Group Traceback") => {
            text.get(indent + 2..).unwrap_or(text)
        }
        _ => text,
    }
}

/// Where a found timestamp sits, which decides whether it leaves the message.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stamp {
    /// The stamp (and its brackets) are the first `usize` bytes; they are cut off.
    Leading(usize),
    /// The stamp is part of a level header (`[E1122 06:24:44.9 File.cpp:616]`,
    /// `[NeMo I 2024-...]`, `[INFO] 2024-...`); the message is kept whole.
    InHeader,
}

/// Splits `"  12: msg"` into rank 12 and `"msg"`. A label whose number does not
/// fit a u32 is still removed, as it has the label's shape, but yields no rank.
fn split_srun_label(line: &str) -> (Option<u32>, &str) {
    let bytes = line.as_bytes();
    let mut digits_start = 0;
    while bytes.get(digits_start) == Some(&b' ') {
        digits_start += 1;
    }
    // The digits are read as they are passed (rather than through `str::parse`, which checks for a
    // sign and for other radixes on every line); a number past a u32 leaves no rank.
    let mut colon = digits_start;
    let mut rank = Some(0u32);
    while let Some(&digit) = bytes.get(colon)
        && digit.is_ascii_digit()
    {
        rank = rank.and_then(|rank| rank.checked_mul(10)?.checked_add(u32::from(digit - b'0')));
        colon += 1;
    }
    if colon == digits_start || bytes.get(colon) != Some(&b':') {
        return (None, line);
    }
    let rest_start = match bytes.get(colon + 1) {
        None => colon + 1,
        Some(b' ') => colon + 2,
        Some(_) => return (None, line),
    };
    (rank, line.get(rest_start..).unwrap_or_default())
}

/// Splits Open MPI's `--tag-output` label, `[1,12]<stdout>:` (job, rank, stream), into rank 12 and
/// the rest.
fn split_mpi_tag(line: &str) -> (Option<u32>, &str) {
    let bytes = line.as_bytes();
    if bytes.first() != Some(&b'[') || !bytes.get(1).is_some_and(u8::is_ascii_digit) {
        return (None, line);
    }
    let digits = |from: usize| {
        bytes
            .get(from..)
            .map_or(0, |b| b.iter().take_while(|b| b.is_ascii_digit()).count())
    };
    let job = digits(1);
    if bytes.get(1 + job) != Some(&b',') {
        return (None, line);
    }
    let rank_start = 2 + job;
    let rank_len = digits(rank_start);
    let stream_start = rank_start + rank_len + 2;
    if rank_len == 0 || bytes.get(rank_start + rank_len..stream_start) != Some(b"]<") {
        return (None, line);
    }
    let stream = bytes.get(stream_start..).map_or(0, |b| {
        b.iter().take_while(|b| b.is_ascii_lowercase()).count()
    });
    let after = stream_start + stream;
    if stream == 0 || bytes.get(after..after + 2) != Some(b">:") {
        return (None, line);
    }
    let rank = line
        .get(rank_start..rank_start + rank_len)
        .and_then(|r| r.parse().ok());
    let rest = line.get(after + 2..).unwrap_or_default();
    (rank, rest.strip_prefix(' ').unwrap_or(rest))
}

/// Splits torch's `[rank3]:` label (and torchrun's `[default3]:` tee label,
/// whose number is only a local rank and so is not reported).
fn split_torch_label(line: &str) -> (Option<u32>, &str) {
    let (is_global, after_name) = if let Some(rest) = line.strip_prefix("[rank") {
        (true, rest)
    } else if let Some(rest) = line.strip_prefix("[default") {
        (false, rest)
    } else {
        return (None, line);
    };
    let digits_len = after_name.bytes().take_while(u8::is_ascii_digit).count();
    let Some(rest) = after_name
        .get(digits_len..)
        .and_then(|r| r.strip_prefix("]:"))
    else {
        return (None, line);
    };
    if digits_len == 0 {
        return (None, line);
    }
    let rank = if is_global {
        after_name.get(..digits_len).and_then(|d| d.parse().ok())
    } else {
        None
    };
    (rank, rest.strip_prefix(' ').unwrap_or(rest))
}

/// Finds a timestamp at the start of `bytes`: leading, or inside a level
/// header. Only the first byte or two pick which forms are tried.
fn leading_timestamp(
    bytes: &[u8],
    year: impl Fn() -> i32 + Copy,
) -> Option<(DateTime<Utc>, Stamp)> {
    let leading =
        |found: Option<(DateTime<Utc>, usize)>| found.map(|(t, n)| (t, Stamp::Leading(n)));
    let in_header = |found: Option<DateTime<Utc>>| found.map(|t| (t, Stamp::InHeader));
    match (bytes.first()?, bytes.get(1)) {
        (b'[', Some(b'0'..=b'9')) => leading(bracketed_iso(bytes)),
        (b'[', Some(b'A'..=b'Z')) => leading(dmesg(bytes))
            .or_else(|| in_header(glog(bytes, year)))
            .or_else(|| in_header(nemo(bytes)))
            .or_else(|| in_header(after_level(bytes))),
        (b'0'..=b'9', _) => leading(bare_iso(bytes)),
        (b'A'..=b'Z', _) => leading(syslog(bytes, year))
            .or_else(|| in_header(glog(bytes, year)))
            .or_else(|| in_header(after_level(bytes))),
        _ => None,
    }
}

/// `[2024-07-30 14:21:44]`, `[2024-07-30 14:21:44.123]`, `[2024-07-30 14:21:44,123]`.
fn bracketed_iso(bytes: &[u8]) -> Option<(DateTime<Utc>, usize)> {
    let mut cursor = Cursor::new(bytes);
    cursor.eat(b'[')?;
    let timestamp = cursor.iso_datetime()?;
    cursor.eat(b']')?;
    Some((timestamp, cursor.pos))
}

/// `2024-07-30T14:21:44Z`, `2024-07-30T14:21:44.123456+02:00`, `2024-07-30 14:21:44,123`,
/// Go's `2024/07/30 14:21:44`.
fn bare_iso(bytes: &[u8]) -> Option<(DateTime<Utc>, usize)> {
    let mut cursor = Cursor::new(bytes);
    let timestamp = cursor.iso_datetime()?;
    // A stamp glued to more letters or digits is some other token.
    if cursor.peek().is_some_and(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    Some((timestamp, cursor.pos))
}

/// Kernel `dmesg -T`: `[Sun Nov 22 14:21:44 2026]`.
fn dmesg(bytes: &[u8]) -> Option<(DateTime<Utc>, usize)> {
    let mut cursor = Cursor::new(bytes);
    cursor.eat(b'[')?;
    cursor.weekday()?;
    cursor.eat(b' ')?;
    let month = cursor.month()?;
    cursor.eat(b' ')?;
    let day = cursor.day_of_month()?;
    cursor.eat(b' ')?;
    let (hour, minute, second) = cursor.clock()?;
    cursor.eat(b' ')?;
    let year = cursor.number(4)?;
    cursor.eat(b']')?;
    let date = NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, month, day)?;
    let naive = date.and_hms_opt(hour, minute, second)?;
    Some((naive.and_utc(), cursor.pos))
}

/// Syslog `Nov 22 14:21:44` (also `Nov  2 ...` and `Nov 22 14:21:44.123`), which has no year.
fn syslog(bytes: &[u8], year: impl Fn() -> i32) -> Option<(DateTime<Utc>, usize)> {
    let mut cursor = Cursor::new(bytes);
    let month = cursor.month()?;
    cursor.eat(b' ')?;
    let day = cursor.day_of_month()?;
    cursor.eat(b' ')?;
    let (hour, minute, second) = cursor.clock()?;
    let nanos = cursor.fraction();
    if cursor.peek().is_some_and(|b| b != b' ') {
        return None;
    }
    let date = NaiveDate::from_ymd_opt(year(), month, day)?;
    let naive = date.and_hms_nano_opt(hour, minute, second, nanos)?;
    Some((naive.and_utc(), cursor.pos))
}

/// A glog header, as C++ code (NCCL, c10d, gRPC) writes it: `I1122 06:24:44.903881 12345 file.cc:12]`,
/// or torch's bracketed `[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616]`, whose month is
/// not zero-padded. The stamp has no year, so `year` supplies it; the time is taken as UTC.
fn glog(bytes: &[u8], year: impl Fn() -> i32) -> Option<DateTime<Utc>> {
    let mut cursor = Cursor::new(bytes);
    let bracketed = cursor.eat(b'[').is_some();
    match cursor.peek()? {
        b'I' | b'W' | b'E' | b'F' => cursor.pos += 1,
        _ => return None,
    }
    let (month, day) = match cursor.digits_ahead() {
        4 => (cursor.number(2)?, cursor.number(2)?),
        3 => (cursor.number(1)?, cursor.number(2)?),
        _ => return None,
    };
    cursor.eat(b' ')?;
    let (hour, minute, second) = cursor.clock()?;
    // glog always prints the sub-second part; requiring it keeps look-alikes out.
    if cursor.peek() != Some(b'.') {
        return None;
    }
    let nanos = cursor.fraction();
    match cursor.peek() {
        Some(b' ') => {}
        Some(b']') if bracketed => {}
        _ => return None,
    }
    let date = NaiveDate::from_ymd_opt(year(), month, day)?;
    Some(
        date.and_hms_nano_opt(hour, minute, second, nanos)?
            .and_utc(),
    )
}

/// NeMo's header `[NeMo I 2024-07-30 14:21:44 exp_manager:396]`.
fn nemo(bytes: &[u8]) -> Option<DateTime<Utc>> {
    let rest = bytes.strip_prefix(b"[NeMo ")?;
    let mut cursor = Cursor::new(rest);
    cursor.peek().filter(u8::is_ascii_uppercase)?;
    cursor.pos += 1;
    cursor.eat(b' ')?;
    let timestamp = cursor.iso_datetime()?;
    cursor.eat(b' ')?;
    Some(timestamp)
}

/// A stamp right after a log level: `[INFO] 2024-07-30 14:21:44 ...`,
/// `INFO 2024-07-30 14:21:44,123 ...`, `WARNING: [2024-07-30T14:21:44Z] ...`.
fn after_level(bytes: &[u8]) -> Option<DateTime<Utc>> {
    let mut cursor = Cursor::new(bytes);
    let bracketed = cursor.eat(b'[').is_some();
    cursor.level()?;
    if bracketed {
        cursor.eat(b']')?;
    }
    let _ = cursor.eat(b':');
    let spaces = cursor.skip_spaces();
    if spaces == 0 && !bracketed {
        return None;
    }
    let stamp_bracketed = cursor.eat(b'[').is_some();
    let timestamp = cursor.iso_datetime()?;
    if stamp_bracketed {
        cursor.eat(b']')?;
    } else if cursor.peek().is_some_and(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    Some(timestamp)
}

/// A bounds-checked reader over the start of a line; every step returns None
/// instead of panicking when the bytes run out or do not fit.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn eat(&mut self, want: u8) -> Option<()> {
        (self.peek()? == want).then(|| self.pos += 1)
    }

    /// Exactly `width` ASCII digits (width is at most 4, so no overflow).
    fn number(&mut self, width: usize) -> Option<u32> {
        let digits = self.bytes.get(self.pos..self.pos + width)?;
        let mut value = 0u32;
        for &b in digits {
            if !b.is_ascii_digit() {
                return None;
            }
            value = value * 10 + u32::from(b - b'0');
        }
        self.pos += width;
        Some(value)
    }

    /// `22`, `2` or space-padded ` 2`, as syslog and dmesg print days.
    fn day_of_month(&mut self) -> Option<u32> {
        if self.eat(b' ').is_some() {
            return self.number(1);
        }
        let first = self.number(1)?;
        match self.number(1) {
            Some(second) => Some(first * 10 + second),
            None => Some(first),
        }
    }

    fn clock(&mut self) -> Option<(u32, u32, u32)> {
        let hour = self.number(2)?;
        self.eat(b':')?;
        let minute = self.number(2)?;
        self.eat(b':')?;
        let second = self.number(2)?;
        Some((hour, minute, second))
    }

    fn three_letters(&mut self) -> Option<&'a [u8]> {
        let word = self.bytes.get(self.pos..self.pos + 3)?;
        self.pos += 3;
        Some(word)
    }

    fn month(&mut self) -> Option<u32> {
        const MONTHS: [&[u8]; 12] = [
            b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
            b"Dec",
        ];
        let word = self.three_letters()?;
        let index = MONTHS.iter().position(|&m| m == word)?;
        u32::try_from(index + 1).ok()
    }

    fn weekday(&mut self) -> Option<()> {
        const WEEKDAYS: [&[u8]; 7] = [b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat", b"Sun"];
        let word = self.three_letters()?;
        WEEKDAYS.contains(&word).then_some(())
    }

    /// How many ASCII digits follow, counting at most five.
    fn digits_ahead(&self) -> usize {
        self.bytes
            .iter()
            .skip(self.pos)
            .take(5)
            .take_while(|b| b.is_ascii_digit())
            .count()
    }

    fn skip_spaces(&mut self) -> usize {
        let start = self.pos;
        while self.peek() == Some(b' ') && self.pos - start < 8 {
            self.pos += 1;
        }
        self.pos - start
    }

    /// A log level word as Python logging, Go and most loggers print it.
    fn level(&mut self) -> Option<()> {
        const LEVELS: [&[u8]; 9] = [
            b"TRACE",
            b"DEBUG",
            b"INFO",
            b"NOTICE",
            b"WARN",
            b"WARNING",
            b"ERROR",
            b"CRITICAL",
            b"FATAL",
        ];
        let len = self
            .bytes
            .iter()
            .skip(self.pos)
            .take(9)
            .take_while(|b| b.is_ascii_uppercase())
            .count();
        let word = self.bytes.get(self.pos..self.pos + len)?;
        LEVELS.contains(&word).then(|| self.pos += len)
    }

    /// `YYYY-MM-DD[T ]HH:MM:SS[.,fraction][Z|±HH[:MM]]` (or `YYYY/MM/DD ...`); no zone means UTC.
    fn iso_datetime(&mut self) -> Option<DateTime<Utc>> {
        let year = self.number(4)?;
        let separator = self.peek().filter(|b| matches!(b, b'-' | b'/'))?;
        self.pos += 1;
        let month = self.number(2)?;
        self.eat(separator)?;
        let day = self.number(2)?;
        match self.peek()? {
            b'T' | b' ' => self.pos += 1,
            _ => return None,
        }
        let (hour, minute, second) = self.clock()?;
        let nanos = self.fraction();
        let offset = self.zone_offset()?;
        let date = NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, month, day)?;
        let naive: NaiveDateTime = date.and_hms_nano_opt(hour, minute, second, nanos)?;
        let local = offset.from_local_datetime(&naive).single()?;
        Some(local.with_timezone(&Utc))
    }

    /// Sub-second digits after `.` or `,` (Python logging uses a comma);
    /// digits past nanoseconds are read and dropped.
    fn fraction(&mut self) -> u32 {
        let has_fraction = matches!(self.peek(), Some(b'.' | b','))
            && self.bytes.get(self.pos + 1).is_some_and(u8::is_ascii_digit);
        if !has_fraction {
            return 0;
        }
        self.pos += 1;
        let mut nanos = 0u32;
        let mut scale = 100_000_000u32;
        while let Some(b) = self.peek().filter(u8::is_ascii_digit) {
            nanos += u32::from(b - b'0') * scale;
            scale /= 10;
            self.pos += 1;
        }
        nanos
    }

    /// `Z`, `+02:00`, `+0200`, `-05`, or nothing (UTC). A sign not followed by
    /// an hour is left unread, as it belongs to the message.
    fn zone_offset(&mut self) -> Option<FixedOffset> {
        let sign = match self.peek() {
            Some(b'Z') => {
                self.pos += 1;
                return FixedOffset::east_opt(0);
            }
            Some(b'+') => 1,
            Some(b'-') => -1,
            _ => return FixedOffset::east_opt(0),
        };
        let start = self.pos;
        self.pos += 1;
        let Some(hours) = self.number(2) else {
            self.pos = start;
            return FixedOffset::east_opt(0);
        };
        let colon = self.eat(b':').is_some();
        let minutes = match self.number(2) {
            Some(minutes) => minutes,
            None if colon => return None,
            None => 0,
        };
        let seconds = i32::try_from(hours * 3600 + minutes * 60).ok()?;
        FixedOffset::east_opt(sign * seconds)
    }
}

#[cfg(test)]
mod cache_tests {
    use super::*;

    #[test]
    fn the_quick_trims_trim_as_the_standard_ones_do() {
        for text in [
            "",
            " ",
            "a",
            " a ",
            "\u{b}a\u{c}",
            "\u{85}a",
            "a\u{2003}",
            "\u{3000} a b \u{a0}",
            "é",
            "\ta\r",
            "x\u{1680}",
        ] {
            assert_eq!(trim(text), text.trim(), "{text:?}");
            assert_eq!(trim_start(text), text.trim_start(), "{text:?}");
        }
    }

    #[test]
    fn the_cached_stamp_gives_the_same_frames_as_parsing_each_line() {
        let text = std::fs::read_to_string("../tests/fixtures/logs/timestamps.log").unwrap()
            + &std::fs::read_to_string("../tests/fixtures/logs/megatron_pretrain.log").unwrap()
            + &std::fs::read_to_string("../tests/fixtures/logs/timestamps_headers.log").unwrap();
        let mut cache = StampCache::default();
        for line in text.lines() {
            assert_eq!(
                frame_cached(line, 2026, &mut cache),
                frame_with_year(line, 2026),
                "{line}"
            );
        }
    }

    #[test]
    fn a_longer_stamp_sharing_the_prefix_is_parsed_not_reused() {
        let mut cache = StampCache::default();
        let first = frame_cached("[2024-07-30 14:21:44] a", 2026, &mut cache);
        let second = frame_cached("[2024-07-30 14:21:44.500] b", 2026, &mut cache);
        assert_eq!(first.message, "a");
        assert_eq!(second, frame_with_year("[2024-07-30 14:21:44.500] b", 2026));
    }
}

#[cfg(test)]
mod tests;
