//! Tests of the line module.

use super::*;

fn utc(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}

#[test]
fn splits_srun_rank_prefix_with_leading_spaces() {
    let framed = frame("  12: hello world");
    assert_eq!(framed.rank, Some(12));
    assert_eq!(framed.timestamp, None);
    assert_eq!(framed.message, "hello world");
}

#[test]
fn splits_srun_rank_prefix_without_padding_and_keeps_message_indentation() {
    let framed = frame("3:   File \"train.py\", line 7, in <module>");
    assert_eq!(framed.rank, Some(3));
    assert_eq!(framed.message, "  File \"train.py\", line 7, in <module>");
}

#[test]
fn srun_label_on_an_empty_line_leaves_an_empty_message() {
    let framed = frame("  7:");
    assert_eq!(framed.rank, Some(7));
    assert_eq!(framed.message, "");
}

#[test]
fn rank_prefix_with_thirty_digits_has_no_rank() {
    let framed = frame("123456789012345678901234567890: boom");
    assert_eq!(framed.rank, None);
    assert_eq!(framed.message, "boom");
}

#[test]
fn clock_time_at_line_start_is_not_a_rank_label() {
    let framed = frame("12:34:56 something");
    assert_eq!(framed.rank, None);
    assert_eq!(framed.message, "12:34:56 something");
}

#[test]
fn lone_colon_and_empty_line_are_plain_messages() {
    assert_eq!(
        frame(":"),
        FramedLine {
            rank: None,
            timestamp: None,
            message: ":"
        }
    );
    assert_eq!(
        frame(""),
        FramedLine {
            rank: None,
            timestamp: None,
            message: ""
        }
    );
    assert_eq!(frame("   ").message, "   ");
}

#[test]
fn parses_megatron_bracketed_timestamp_after_rank_label() {
    let framed = frame(" 15:  [2024-07-30 14:21:44] iteration       30/   81380208 |");
    assert_eq!(framed.rank, Some(15));
    assert_eq!(framed.timestamp, Some(utc("2024-07-30T14:21:44Z")));
    assert_eq!(framed.message, "iteration       30/   81380208 |");
}

#[test]
fn parses_bracketed_timestamp_with_milliseconds() {
    let framed = frame("[2024-07-30 14:21:44.123] saving");
    assert_eq!(framed.timestamp, Some(utc("2024-07-30T14:21:44.123Z")));
    assert_eq!(framed.message, "saving");
}

#[test]
fn parses_deepspeed_bracketed_timestamp_with_comma_fraction() {
    let framed = frame("[2024-07-30 14:21:44,250] [INFO] [engine.py:1234:step] step=10");
    assert_eq!(framed.timestamp, Some(utc("2024-07-30T14:21:44.250Z")));
    assert_eq!(framed.message, "[INFO] [engine.py:1234:step] step=10");
}

#[test]
fn parses_iso_timestamp_with_zulu_zone() {
    let framed = frame("2024-07-30T14:21:44Z worker started");
    assert_eq!(framed.timestamp, Some(utc("2024-07-30T14:21:44Z")));
    assert_eq!(framed.message, "worker started");
}

#[test]
fn converts_iso_timestamp_with_offset_to_utc() {
    let framed = frame("2024-07-30T14:21:44.123456+02:00 msg");
    assert_eq!(framed.timestamp, Some(utc("2024-07-30T12:21:44.123456Z")));
    assert_eq!(framed.message, "msg");
    let compact = frame("2024-07-30T14:21:44-0530 msg");
    assert_eq!(compact.timestamp, Some(utc("2024-07-30T19:51:44Z")));
}

#[test]
fn treats_python_logging_timestamp_as_utc() {
    let framed = frame("2024-07-30 14:21:44,123 - INFO - step 5");
    assert_eq!(framed.timestamp, Some(utc("2024-07-30T14:21:44.123Z")));
    assert_eq!(framed.message, "- INFO - step 5");
}

#[test]
fn keeps_nanosecond_fraction_and_drops_excess_digits() {
    let framed = frame("2024-07-30T14:21:44.123456789987Z x");
    assert_eq!(
        framed.timestamp,
        Some(utc("2024-07-30T14:21:44.123456789Z"))
    );
    assert_eq!(framed.message, "x");
}

#[test]
fn syslog_timestamp_takes_the_default_year() {
    let framed = frame_with_year("Nov 22 14:21:44 node-07 kernel: NVRM: Xid 79", 2025);
    assert_eq!(framed.timestamp, Some(utc("2025-11-22T14:21:44Z")));
    assert_eq!(framed.message, "node-07 kernel: NVRM: Xid 79");
    let padded = frame_with_year("Nov  2 04:05:06 node-07 sshd[1]: ok", 2025);
    assert_eq!(padded.timestamp, Some(utc("2025-11-02T04:05:06Z")));
}

#[test]
fn frame_gives_syslog_timestamp_the_current_year() {
    let framed = frame("Jan  1 00:00:00 host cron: tick");
    let timestamp = framed.timestamp.unwrap();
    assert_eq!(timestamp.year(), Utc::now().year());
    assert_eq!((timestamp.month(), timestamp.day()), (1, 1));
}

#[test]
fn syslog_february_29_in_a_common_year_is_not_a_timestamp() {
    let framed = frame_with_year("Feb 29 10:00:00 host x", 2025);
    assert_eq!(framed.timestamp, None);
    assert_eq!(framed.message, "Feb 29 10:00:00 host x");
}

#[test]
fn parses_dmesg_human_timestamp() {
    let framed = frame("[Sun Nov 22 14:21:44 2026] NVRM: Xid (PCI:0000:3b:00): 79");
    assert_eq!(framed.timestamp, Some(utc("2026-11-22T14:21:44Z")));
    assert_eq!(framed.message, "NVRM: Xid (PCI:0000:3b:00): 79");
    let padded = frame("[Mon Nov  2 01:02:03 2026] x");
    assert_eq!(padded.timestamp, Some(utc("2026-11-02T01:02:03Z")));
}

#[test]
fn torch_glog_header_gives_rank_and_timestamp_and_keeps_the_header() {
    let framed = frame_with_year(
        "[rank3]:[E1122 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout",
        2026,
    );
    assert_eq!(framed.rank, Some(3));
    assert_eq!(
        framed.timestamp,
        Some(utc("2026-11-22T06:24:44.903881913Z"))
    );
    assert_eq!(
        framed.message,
        "[E1122 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout"
    );
}

#[test]
fn torch_glog_header_with_unpadded_month_takes_the_supplied_year() {
    let line = "[rank1]:[E626 06:24:44.906457629 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank 1] Exception";
    let framed = frame_with_year(line, 2024);
    assert_eq!(
        framed.timestamp,
        Some(utc("2024-06-26T06:24:44.906457629Z"))
    );
    assert!(framed.message.starts_with("[E626 06:24:44.906457629 "));
}

#[test]
fn plain_glog_line_gives_timestamp_and_keeps_severity() {
    let framed = frame_with_year(
        "I1122 06:24:44.903881 12345 socket.cpp:420] connected",
        2025,
    );
    assert_eq!(framed.timestamp, Some(utc("2025-11-22T06:24:44.903881Z")));
    assert_eq!(
        framed.message,
        "I1122 06:24:44.903881 12345 socket.cpp:420] connected"
    );
    let warning = frame_with_year("  4: W0101 00:00:01.5 77 x.cc:1] slow", 2025);
    assert_eq!(warning.rank, Some(4));
    assert_eq!(warning.timestamp, Some(utc("2025-01-01T00:00:01.5Z")));
    assert_eq!(warning.message, "W0101 00:00:01.5 77 x.cc:1] slow");
}

#[test]
fn nemo_header_gives_timestamp_and_keeps_the_header() {
    let line = "[NeMo I 2024-07-30 14:21:44 exp_manager:396] Experiments will be logged";
    let framed = frame(line);
    assert_eq!(framed.timestamp, Some(utc("2024-07-30T14:21:44Z")));
    assert_eq!(framed.message, line);
}

#[test]
fn timestamp_after_a_log_level_is_read_and_the_level_kept() {
    for (line, stamp) in [
        ("[INFO] 2024-07-30 14:21:44 step 5", "2024-07-30T14:21:44Z"),
        (
            "INFO 2024-07-30 14:21:44,123 train.py:12 step 5",
            "2024-07-30T14:21:44.123Z",
        ),
        (
            "WARNING: 2024-07-30T14:21:44+02:00 slow rank",
            "2024-07-30T12:21:44Z",
        ),
        ("[ERROR] [2024-07-30 14:21:44] boom", "2024-07-30T14:21:44Z"),
    ] {
        let framed = frame(line);
        assert_eq!(framed.timestamp, Some(utc(stamp)), "{line}");
        assert_eq!(framed.message, line);
    }
}

#[test]
fn parses_go_style_slash_dates() {
    let framed = frame("2024/07/30 14:21:44 rendezvous ok");
    assert_eq!(framed.timestamp, Some(utc("2024-07-30T14:21:44Z")));
    assert_eq!(framed.message, "rendezvous ok");
}

#[test]
fn parses_iso_timestamp_with_space_and_zone() {
    let framed = frame("2024-07-30 14:21:44.5-05:00 msg");
    assert_eq!(framed.timestamp, Some(utc("2024-07-30T19:21:44.5Z")));
    assert_eq!(framed.message, "msg");
}

#[test]
fn syslog_timestamp_may_carry_a_fraction() {
    let framed = frame_with_year("Nov 22 14:21:44.250 node-07 kernel: x", 2025);
    assert_eq!(framed.timestamp, Some(utc("2025-11-22T14:21:44.250Z")));
    assert_eq!(framed.message, "node-07 kernel: x");
}

#[test]
fn srun_rank_wins_over_torch_rank_label() {
    let framed = frame(" 11: [rank3]: Traceback (most recent call last):");
    assert_eq!(framed.rank, Some(11));
    assert_eq!(framed.message, "Traceback (most recent call last):");
}

#[test]
fn torchrun_tee_label_is_removed_without_claiming_a_global_rank() {
    let framed = frame("[default5]:[2024-07-30 14:21:44] iteration 5/ 10 |");
    assert_eq!(framed.rank, None);
    assert_eq!(framed.timestamp, Some(utc("2024-07-30T14:21:44Z")));
    assert_eq!(framed.message, "iteration 5/ 10 |");
}

#[test]
fn impossible_bracketed_date_is_left_in_the_message() {
    let framed = frame("[9999-99-99 99:99:99] odd");
    assert_eq!(framed.timestamp, None);
    assert_eq!(framed.message, "[9999-99-99 99:99:99] odd");
}

#[test]
fn look_alikes_are_not_timestamps() {
    for line in [
        "2024-07-30 is the date",
        "2024-07-30T14:21:44Zulu time",
        "[after training is done] datetime: 2024-07-30 18:00:00",
        "[NeMo I 2024-07-30 exp_manager:396] Experiments",
        "2024-07/30 14:21:44 mixed separators",
        "E1122 06:24:44 no fraction",
        "E11223 06:24:44.1 five digits",
        "E1322 06:24:44.1 month thirteen",
        "X1122 06:24:44.1 unknown severity",
        "[E1122 06:24:44.1x glued",
        "INFORMATION 2024-07-30 14:21:44 not a level",
        "INFO2024-07-30 14:21:44 glued level",
        "[INFO 2024-07-30 14:21:44 unclosed level",
        "[INFO] [2024-07-30 14:21:44 unclosed stamp",
        "INFO 2024-07-30 14:21:44abc",
        "Iteration 1122 06:24:44.1",
        "Novel 22 14:21:44",
        "Nov 22 14:21",
        "[Sun Nov 22 14:21:44]",
        "[2024-07-30 14:21:44",
        "2024-07-30T14:21:44+02: x",
    ] {
        let framed = frame(line);
        assert_eq!(framed.timestamp, None, "{line}");
        assert_eq!(framed.message, line);
    }
}

#[test]
fn strips_trailing_carriage_return_and_newline() {
    let framed = frame("  1: done\r\n");
    assert_eq!(framed.message, "done");
}

#[test]
fn frames_every_line_of_the_timestamp_fixture() {
    let fixture = include_str!("../../../../tests/fixtures/logs/timestamps.log");
    let framed: Vec<(Option<u32>, Option<String>, &str)> = fixture
        .lines()
        .map(|line| frame_with_year(line, 2026))
        .map(|f| (f.rank, f.timestamp.map(|t| t.to_rfc3339()), f.message))
        .collect();
    let stamp = |s: &str| Some(s.to_string());
    assert_eq!(
        framed,
        vec![
            (
                Some(0),
                stamp("2024-07-30T14:21:44+00:00"),
                "iteration 10/ 100 |"
            ),
            (Some(1), stamp("2024-07-30T14:21:44.123+00:00"), "saving"),
            (None, stamp("2024-07-30T14:21:44+00:00"), "worker up"),
            (
                None,
                stamp("2024-07-30T12:21:44.123456+00:00"),
                "rendezvous complete"
            ),
            (
                Some(2),
                stamp("2024-07-30T14:21:44.123+00:00"),
                "- INFO - Loading data"
            ),
            (
                None,
                stamp("2026-11-22T14:21:44+00:00"),
                "node-07 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=48213, name=python, GPU has fallen off the bus."
            ),
            (
                None,
                stamp("2026-11-22T14:21:44+00:00"),
                "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."
            ),
            (
                Some(3),
                stamp("2026-11-22T06:24:44.903881913+00:00"),
                "[E1122 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout"
            ),
            (Some(4), None, "no timestamp here"),
            (None, None, "[9999-99-99 99:99:99] corrupted"),
        ]
    );
}

#[test]
fn frames_every_line_of_the_header_timestamp_fixture() {
    let fixture = include_str!("../../../../tests/fixtures/logs/timestamps_headers.log");
    let framed: Vec<(Option<u32>, Option<String>)> = fixture
        .lines()
        .map(|line| frame_with_year(line, 2026))
        .map(|f| (f.rank, f.timestamp.map(|t| t.to_rfc3339())))
        .collect();
    let stamp = |s: &str| Some(s.to_string());
    assert_eq!(
        framed,
        vec![
            (Some(0), stamp("2026-06-26T06:24:44.159932949+00:00")),
            (None, stamp("2026-11-22T06:24:44.903881+00:00")),
            (Some(1), stamp("2024-07-30T14:21:44+00:00")),
            (None, stamp("2024-07-30T14:21:45+00:00")),
            (None, stamp("2024-07-30T14:21:46.123+00:00")),
            (None, stamp("2024-07-30T14:21:47+00:00")),
            (None, stamp("2026-11-22T14:21:48.250+00:00")),
            (Some(2), stamp("2024-07-30T19:21:49.500+00:00")),
            (None, None),
            (None, None),
        ]
    );
}

#[test]
fn never_panics_on_random_bytes_or_single_byte_corruptions_of_stamps() {
    let valid: Vec<&str> = [
        include_str!("../../../../tests/fixtures/logs/timestamps.log"),
        include_str!("../../../../tests/fixtures/logs/timestamps_headers.log"),
    ]
    .iter()
    .flat_map(|text| text.lines())
    .collect();
    let mut samples: Vec<Vec<u8>> = Vec::new();
    // Every valid line with each byte replaced by each of a few troublemakers.
    for line in &valid {
        for at in 0..line.len().min(48) {
            for replacement in [b'9', b' ', b'[', b']', b':', b'.', b'\xff', b'\0', b'Z'] {
                let mut bytes = line.as_bytes().to_vec();
                bytes[at] = replacement;
                samples.push(bytes.clone());
                bytes.truncate(at + 1);
                samples.push(bytes);
            }
        }
    }
    // Deterministic pseudo-random lines over an alphabet of stamp pieces.
    let alphabet: &[u8] = b"0123456789:[]-/ TZ+.,NovSunrankIEWFNeMoINFOWARNERROR\xff\xc3\x00\t";
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..5000 {
        let len = state % 64;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                alphabet[(state % alphabet.len() as u64) as usize]
            })
            .collect();
        samples.push(bytes);
    }
    for bytes in &samples {
        let line = String::from_utf8_lossy(bytes);
        let framed = frame_with_year(&line, 2026);
        let trimmed = line.trim_end_matches(['\n', '\r']);
        assert!(
            trimmed.ends_with(framed.message),
            "{line:?} framed as {framed:?}"
        );
        let _ = frame(&line);
    }
}

#[test]
fn never_panics_on_truncated_or_garbled_lines() {
    let mut samples: Vec<String> = [
        include_str!("../../../../tests/fixtures/logs/timestamps.log"),
        include_str!("../../../../tests/fixtures/logs/nccl_timeout_crash.log"),
    ]
    .iter()
    .flat_map(|text| text.lines())
    .flat_map(|line| {
        line.char_indices()
            .map(|(i, _)| line[..i].to_string())
            .collect::<Vec<_>>()
    })
    .collect();
    // Deterministic pseudo-random bytes, decoded lossily like a reader would.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..2000 {
        let bytes: Vec<u8> = (0..(state % 48))
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                b"0123456789:[]- TZ+.,NovSunrank\xff\xc3"[(state % 32) as usize]
            })
            .collect();
        samples.push(String::from_utf8_lossy(&bytes).into_owned());
    }
    samples.push(format!("{}: x", "9".repeat(10_000)));
    samples.push(format!("[rank{}]:x", "9".repeat(40)));
    samples.push("[2024-07-30 14:21:44.".to_string());
    samples.push("2024-07-30T14:21:44+".to_string());
    samples.push("é".repeat(100));
    for sample in &samples {
        let framed = frame_with_year(sample, 2026);
        assert!(sample.contains(framed.message) || framed.message.is_empty());
    }
}

#[test]
fn splits_open_mpi_s_tag_before_or_after_its_timestamp() {
    let framed = frame(
        "[1,12]<stdout>:node-3:815:864 [0] NCCL WARN NET/IB : Got async event : local catastrophic error",
    );
    assert_eq!(framed.rank, Some(12));
    assert_eq!(
        framed.message,
        "node-3:815:864 [0] NCCL WARN NET/IB : Got async event : local catastrophic error"
    );
    let framed =
        frame("2019-06-02T16:13:44.884Z: [1,14]<stderr>: Traceback (most recent call last):");
    assert_eq!(framed.rank, Some(14));
    assert_eq!(framed.timestamp, Some(utc("2019-06-02T16:13:44.884Z")));
    assert_eq!(framed.message, "Traceback (most recent call last):");
    // A stamp and colon without a tag keep their message as it was; a bracket that is no tag stays.
    assert_eq!(frame("2019-06-02T16:13:44.884Z: hello").message, ": hello");
    assert_eq!(frame("[1,2] not a tag").message, "[1,2] not a tag");
    assert_eq!(frame("[1,2]<stdout> no colon").rank, None);
}

#[test]
fn an_exception_group_s_gutter_is_cut_and_a_table_s_is_kept() {
    assert_eq!(
        frame("  + Exception Group Traceback (most recent call last):").message,
        "Exception Group Traceback (most recent call last):"
    );
    assert_eq!(
        frame("  |   File \"/workspace/serve.py\", line 41, in <module>").message,
        "  File \"/workspace/serve.py\", line 41, in <module>"
    );
    assert_eq!(
        frame("    | FileNotFoundError: shard 3 missing").message,
        "FileNotFoundError: shard 3 missing"
    );
    assert_eq!(
        frame("  3:     | RuntimeError: boom").message,
        "RuntimeError: boom"
    );
    // nvidia-smi's rows and Markdown tables start in the first column.
    let row = "|   0  NVIDIA A100-SXM4-80GB          On  | 00000000:07:00.0 Off |";
    assert_eq!(frame(row).message, row);
    assert_eq!(frame(" | a | b |").message, " | a | b |");
    assert_eq!(
        frame("  +-+---------------- 1 ----------------").message,
        "  +-+---------------- 1 ----------------"
    );
}

#[test]
fn a_quoted_log_line_is_read_without_its_quote_marks() {
    let framed = frame_with_year(">   File \"train.py\", line 12, in <module>", 2026);
    assert_eq!(framed.message, "  File \"train.py\", line 12, in <module>");
    let framed = frame_with_year("> > [2024-05-26 14:55:04] Epoch 3 done", 2026);
    assert_eq!(framed.message, "Epoch 3 done");
    assert!(framed.timestamp.is_some());
    let framed = frame_with_year(">  12: RuntimeError: boom", 2026);
    assert_eq!(
        (framed.rank, framed.message),
        (Some(12), "RuntimeError: boom")
    );
    assert_eq!(frame_with_year(">", 2026).message, "");
    // Not a quote: a shell's redirection or a comparison keeps its text.
    assert_eq!(
        frame_with_year(">>> import torch", 2026).message,
        ">>> import torch"
    );
    assert_eq!(frame_with_year(">/dev/null", 2026).message, ">/dev/null");
}

#[test]
fn rank_of_finds_the_rank_framing_finds_without_reading_the_stamp_where_it_cannot_matter() {
    let lines = [
        " 12: [2026-01-05 08:00:00] step 3",
        "3: plain",
        "12:no space",
        "> 7: quoted in an issue",
        "[rank5]: [2026-01-05 08:00:00] step 3",
        "[default3]: step 3",
        "[1,12]<stdout>:node-3 NCCL WARN",
        "2019-06-02T16:13:44.884Z: [1,14]<stderr>: Traceback (most recent call last):",
        "[2026-01-05 08:00:00] [1,9]<stdout>: after a bracketed stamp",
        "2019-06-02T16:13:44.884Z: hello ]< not a tag",
        "[1,2]<stdout> no colon",
        "no label at all",
        "",
        "4294967296: beyond a rank",
        "4294967296: [rank5]: beyond a rank, then a torch label",
        " 3: [rank5]: both labels",
        "[rank5]: [1,3]<stdout>: a torch label and a tag",
        "[default2]:[1,3]<stderr>: a local label and a tag",
        "[default2]: [2026-01-05 08:00:00] [1,9]<stdout>: after a local label and a stamp",
    ];
    for line in lines {
        assert_eq!(
            rank_of(line, 2026),
            frame_with_year(line, 2026).rank,
            "{line:?}"
        );
    }
    assert_eq!(rank_of(lines[7], 2026), Some(14));
}

#[test]
fn the_byte_wise_trims_trim_as_the_standard_ones_do() {
    let texts = [
        "",
        " ",
        "plain",
        "  lm loss ",
        "\t\x0b\x0c\r\n value \x0b",
        "\u{a0}value\u{3000}",
        " \u{85} value \u{2003} ",
        " é ",
        "\u{a0}",
        " \u{a0} ",
        "é",
    ];
    for text in texts {
        assert_eq!(trim(text), text.trim(), "{text:?}");
        assert_eq!(trim_start(text), text.trim_start(), "{text:?}");
    }
}

proptest::proptest! {
    /// On any text built from the pieces the labels are made of, the rank read at once or label by
    /// label is the rank framing finds, and the trims trim as the standard ones do.
    #[test]
    fn rank_of_and_the_trims_agree_with_framing_and_the_standard_library(
        pieces in proptest::collection::vec(
            proptest::sample::select(vec![
                " ", "  ", "0", "7", "12", "4294967295", "4294967296", ":", ": ", "> ", "[rank",
                "[default", "]:", "[1,", "]<stdout>:", "\r", "\n", "\u{a0}", "\u{3000}", "\t",
                "\u{b}", "é", "x", "[2026-01-05 08:00:00] ",
            ]),
            0..8,
        )
    ) {
        let line = pieces.concat();
        proptest::prop_assert_eq!(rank_of(&line, 2026), frame_with_year(&line, 2026).rank);
        proptest::prop_assert_eq!(trim(&line), line.trim());
        proptest::prop_assert_eq!(trim_start(&line), line.trim_start());
    }
}
