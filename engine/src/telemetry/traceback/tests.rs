//! Tests of the traceback module.

use super::super::line::frame_with_year;
use super::*;

/// Feeds a log through framing and the assembler; returns the blocks in the
/// order they came out, with the line number (1-based) that released each
/// (0 for those released by the final flush).
fn assemble(log: &str, limits: TracebackLimits) -> Vec<(usize, TracebackBlock)> {
    let mut assembler = TracebackAssembler::with_limits(limits);
    let mut blocks = Vec::new();
    for (index, line) in log.lines().enumerate() {
        let framed = frame_with_year(line, 2026);
        if let Some(block) = assembler.push_framed(&framed) {
            blocks.push((index + 1, block));
        }
        while let Some(block) = assembler.pop_ready() {
            blocks.push((index + 1, block));
        }
    }
    blocks.extend(assembler.flush().into_iter().map(|block| (0, block)));
    blocks
}

fn raised(exception: &str, message: &str) -> RaisedException {
    RaisedException {
        exception: exception.to_string(),
        message: message.to_string(),
    }
}

#[test]
fn assembles_the_rank_zero_traceback_of_the_nccl_crash_with_its_continuation_line() {
    let blocks = assemble(
        include_str!("../../../../tests/fixtures/logs/nccl_timeout_crash.log"),
        TracebackLimits::default(),
    );
    assert_eq!(blocks.len(), 1);
    let (released_at, block) = &blocks[0];
    assert_eq!(*released_at, 0);
    assert_eq!(block.rank, Some(0));
    assert!(block.complete);
    assert_eq!(block.exception, "torch.distributed.DistBackendError");
    assert!(block.message.starts_with("NCCL error in: /opt/pytorch"));
    assert_eq!(block.lines.len(), 7);
    assert_eq!(block.lines[0], "Traceback (most recent call last):");
    assert_eq!(
        block.lines[1],
        "  File \"/workspace/Megatron-LM/pretrain_gpt.py\", line 245, in <module>"
    );
    assert!(block.lines[6].starts_with("ncclRemoteError: A call failed"));
}

#[test]
fn separates_interleaved_ranks_and_joins_chained_tracebacks() {
    let limits = TracebackLimits {
        max_unrelated: 3,
        ..TracebackLimits::default()
    };
    let blocks = assemble(
        include_str!("../../../../tests/fixtures/logs/traceback_interleaved.log"),
        limits,
    );
    let summary: Vec<(usize, Option<u32>, bool, &str, usize)> = blocks
        .iter()
        .map(|(at, b)| (*at, b.rank, b.complete, b.exception.as_str(), b.lines.len()))
        .collect();
    assert_eq!(
        summary,
        vec![
            // Rank 5 gives up after three unrelated lines.
            (34, Some(5), false, "", 2),
            // Rank 1 ends when it logs a timestamped line.
            (47, Some(1), true, "RuntimeError", 8),
            // The rest are still waiting for a possible chain at the end of input.
            (0, Some(2), true, "torch.OutOfMemoryError", 6),
            (0, Some(3), true, "checkpoint.CorruptCheckpoint", 11),
            (0, Some(7), true, "RuntimeError", 9),
        ]
    );
    let rank1 = &blocks[1].1;
    assert!(
        rank1
            .message
            .starts_with("DataLoader worker (pid 46794) is killed by signal: Bus error.")
    );
    assert!(rank1.earlier.is_empty());
    let rank3 = &blocks[3].1;
    assert_eq!(rank3.message, "/ckpt/llama/iter_0000240 cannot be read");
    assert_eq!(
        rank3.earlier,
        vec![raised(
            "RuntimeError",
            "PytorchStreamReader failed reading zip archive: failed finding central directory"
        )]
    );
    assert!(rank3.lines.contains(
        &"The above exception was the direct cause of the following exception:".to_string()
    ));
    let rank7 = &blocks[4].1;
    assert_eq!(rank7.message, "boom");
    assert_eq!(rank7.earlier, vec![raised("KeyError", "'x'")]);
    assert_eq!(
        rank7.lines.last().map(String::as_str),
        Some("RuntimeError: boom")
    );
}

#[test]
fn keeps_cuda_hint_lines_with_the_exception_from_the_corpus_excerpts() {
    let blocks = assemble(
        include_str!("../../../../tests/fixtures/logs/traceback_cuda_corpus.log"),
        TracebackLimits::default(),
    );
    assert_eq!(blocks.len(), 1, "{blocks:?}");
    let (released_at, block) = &blocks[0];
    assert_eq!(*released_at, 11);
    assert_eq!(block.exception, "RuntimeError");
    assert_eq!(
        block.message,
        "CUDA error: uncorrectable ECC error encountered"
    );
    assert_eq!(
        block.lines.last().map(String::as_str),
        Some("Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")
    );
    assert_eq!(block.lines.len(), 9);
}

#[test]
fn an_exception_line_without_a_header_is_no_block() {
    let mut assembler = TracebackAssembler::new();
    for line in include_str!("../../../../tests/fixtures/logs/node_faults.log").lines() {
        assert_eq!(assembler.push_framed(&frame_with_year(line, 2026)), None);
    }
    assert!(assembler.flush().is_empty());
}

#[test]
fn a_new_header_before_the_exception_hands_back_the_cut_block() {
    let mut assembler = TracebackAssembler::new();
    assert_eq!(assembler.push(Some(1), TRACEBACK_START), None);
    assert_eq!(
        assembler.push(Some(1), "  File \"a.py\", line 1, in f"),
        None
    );
    let cut_short = assembler.push(Some(1), TRACEBACK_START).unwrap();
    assert!(!cut_short.complete);
    assert_eq!(cut_short.lines.len(), 2);
    assert_eq!(assembler.push(Some(1), "ValueError: x"), None);
    let blocks = assembler.flush();
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0].exception, "ValueError");
    assert_eq!(blocks[0].lines, vec![TRACEBACK_START, "ValueError: x"]);
}

#[test]
fn a_long_traceback_keeps_its_first_and_last_lines_within_the_limit() {
    let limits = TracebackLimits {
        max_lines: 10,
        max_line_bytes: 40,
        ..TracebackLimits::default()
    };
    let mut assembler = TracebackAssembler::with_limits(limits);
    assembler.push(None, TRACEBACK_START);
    for depth in 0..1000 {
        assembler.push(
            None,
            &format!(
                "  File \"r.py\", line {depth}, in recurse{}",
                "x".repeat(100)
            ),
        );
    }
    assembler.push(None, "RecursionError: maximum recursion depth exceeded");
    let block = assembler.flush().pop().unwrap();
    assert!(block.complete);
    assert_eq!(block.lines.len(), 10);
    assert_eq!(block.omitted_lines, 992);
    assert_eq!(block.lines[0], TRACEBACK_START);
    assert!(block.lines[1].starts_with("  File \"r.py\", line 0, in recurse"));
    assert_eq!(block.lines[1].len(), 40);
    assert!(block.lines[8].starts_with("  File \"r.py\", line 999, in recurse"));
    assert_eq!(block.lines[9], "RecursionError: maximum recursion depth ");
    assert!(block.lines.iter().all(|line| line.len() <= 40));
}

#[test]
fn opening_more_blocks_than_allowed_hands_back_the_idlest() {
    let limits = TracebackLimits {
        max_open: 3,
        ..TracebackLimits::default()
    };
    let mut assembler = TracebackAssembler::with_limits(limits);
    for rank in 0..3 {
        assert_eq!(assembler.push(Some(rank), TRACEBACK_START), None);
    }
    // Rank 0 is busy again, so rank 1 is now the idlest.
    assembler.push(Some(0), "  File \"a.py\", line 1, in f");
    let evicted = assembler.push(Some(3), TRACEBACK_START).unwrap();
    assert_eq!(evicted.rank, Some(1));
    assert!(!evicted.complete);
    assert_eq!(assembler.open_blocks(), 3);
}

#[test]
fn settle_hands_back_blocks_past_their_exception_and_keeps_the_rest_open() {
    let mut assembler = TracebackAssembler::new();
    assembler.push(Some(0), TRACEBACK_START);
    assembler.push(Some(0), "KeyError: 'x'");
    assembler.push(Some(1), TRACEBACK_START);
    assembler.push(Some(1), "  File \"a.py\", line 1, in f");
    let settled = assembler.settle();
    assert_eq!(settled.len(), 1);
    assert_eq!(settled[0].rank, Some(0));
    assert_eq!(assembler.open_blocks(), 1);
}

#[test]
fn a_silent_rank_settles_after_enough_lines_of_others() {
    let limits = TracebackLimits {
        settle_lines: 100,
        ..TracebackLimits::default()
    };
    let mut assembler = TracebackAssembler::with_limits(limits);
    assembler.push(Some(4), TRACEBACK_START);
    assembler.push(Some(4), "OSError: [Errno 5] Input/output error");
    let released = (0..300)
        .position(|i| assembler.push(Some(0), &format!("iteration {i}")).is_some())
        .unwrap();
    assert!(
        (100..=100 + SETTLE_CHECK_EVERY as usize).contains(&released),
        "{released}"
    );
}

#[test]
fn recognises_exception_lines_only_in_their_python_shapes() {
    for (line, expected) in [
        ("KeyError: 'x'", Some(("KeyError", "'x'"))),
        ("KeyboardInterrupt", Some(("KeyboardInterrupt", ""))),
        ("StopIteration", Some(("StopIteration", ""))),
        (
            "ncclRemoteError: A call failed",
            Some(("ncclRemoteError", "A call failed")),
        ),
        (
            "mod.sub.Custom: went wrong",
            Some(("mod.sub.Custom", "went wrong")),
        ),
        ("CheckpointCorrupt: bad", Some(("CheckpointCorrupt", "bad"))),
        ("ChildFailedError: ", Some(("ChildFailedError", ""))),
        ("srun: error: node-07: task 1", None),
        ("Done", None),
        ("Epoch 3: 50%", None),
        ("ERROR:root:boom", None),
        ("mod.: x", None),
        ("", None),
        ("3Error: x", None),
    ] {
        let got = raised_exception(line);
        assert_eq!(got, expected.map(|(e, m)| raised(e, m)), "{line}");
    }
}

#[test]
fn never_panics_and_stays_bounded_on_garbage() {
    let limits = TracebackLimits {
        max_open: 8,
        max_lines: 16,
        ..TracebackLimits::default()
    };
    let mut assembler = TracebackAssembler::with_limits(limits);
    let pieces = [
        TRACEBACK_START,
        "  File \"x\"",
        "KeyError: x",
        "",
        CHAIN_SEPARATORS[0],
        CHAIN_SEPARATORS[1],
        "noise",
        "é",
        "\u{0}",
        "   ",
    ];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..20_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let rank = (state % 13) as u32;
        let piece = pieces[(state >> 8) as usize % pieces.len()];
        let _ = assembler.push((rank != 12).then_some(rank), piece);
        assert!(assembler.open_blocks() <= 8);
    }
    for block in assembler.flush() {
        assert!(block.lines.len() <= 16);
    }
}

#[test]
fn a_torchscript_traceback_is_a_block_of_its_own_frames() {
    let mut assembler = TracebackAssembler::with_limits(TracebackLimits::default());
    for line in [
        "Traceback of TorchScript (most recent call last):",
        "  File \"<string>\", line 61, in <backward op>",
        "            def backward(grad_output):",
        "RuntimeError: CUDA out of memory. Tried to allocate 6.00 GiB",
    ] {
        assembler.push(Some(0), line);
    }
    let block = assembler.flush().pop().unwrap();
    assert!(block.complete);
    assert_eq!(
        block.lines[1],
        "  File \"<string>\", line 61, in <backward op>"
    );
    assert_eq!(block.exception, "RuntimeError");
    assert!(block.message.starts_with("CUDA out of memory"));
}
