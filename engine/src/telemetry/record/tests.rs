//! Tests of the record module.

use super::super::line::frame_with_year;
use super::*;

fn recognise_log(log: &str) -> Vec<Option<Record>> {
    log.lines()
        .map(|line| recognise(frame_with_year(line, 2026).message))
        .collect()
}

fn iteration(
    iteration: u64,
    total: Option<u64>,
    elapsed_ms: Option<f64>,
    tflops_per_gpu: Option<f64>,
    loss: Option<f64>,
    nan_or_inf: bool,
) -> Option<Record> {
    Some(Record::Iteration {
        iteration,
        total,
        elapsed_ms,
        tflops_per_gpu,
        loss,
        nan_or_inf,
        consumed_samples: None,
        loss_scale: None,
        skipped_iterations: None,
        nan_iterations: None,
    })
}

/// An iteration of the `megatron_pretrain.log` fixture.
fn pretrain_step(
    iteration: u64,
    elapsed_ms: f64,
    tflops: f64,
    loss: Option<f64>,
    consumed: u64,
    nans: u64,
) -> Option<Record> {
    Step {
        iteration,
        total: Some(81_380_208),
        elapsed_ms: Some(elapsed_ms),
        tflops: Some(tflops),
        loss,
        nan: loss.is_none(),
        consumed: Some(consumed),
        scale: Some(1.0),
        skipped: Some(0),
        nans: Some(nans),
    }
    .record()
}

/// A Megatron iteration with every field spelled out.
#[derive(Default)]
struct Step {
    iteration: u64,
    total: Option<u64>,
    elapsed_ms: Option<f64>,
    tflops: Option<f64>,
    loss: Option<f64>,
    nan: bool,
    consumed: Option<u64>,
    scale: Option<f64>,
    skipped: Option<u64>,
    nans: Option<u64>,
}

impl Step {
    fn record(self) -> Option<Record> {
        Some(Record::Iteration {
            iteration: self.iteration,
            total: self.total,
            elapsed_ms: self.elapsed_ms,
            tflops_per_gpu: self.tflops,
            loss: self.loss,
            nan_or_inf: self.nan,
            consumed_samples: self.consumed,
            loss_scale: self.scale,
            skipped_iterations: self.skipped,
            nan_iterations: self.nans,
        })
    }
}

/// Asserts that `line` is recognised as the Megatron iteration `step`.
#[track_caller]
fn assert_recognised_as(line: &str, step: Step) {
    assert_eq!(recognise(line), step.record(), "{line}");
}

fn saved(iteration: Option<u64>, path: Option<&str>) -> Option<Record> {
    Some(Record::CheckpointSaved {
        iteration,
        path: path.map(str::to_string),
    })
}

fn loaded(iteration: Option<u64>, path: Option<&str>) -> Option<Record> {
    Some(Record::CheckpointLoaded {
        iteration,
        path: path.map(str::to_string),
    })
}

fn error_text(text: &str) -> Option<Record> {
    Some(Record::Error {
        text: text.to_string(),
    })
}

fn exception(name: &str, message: &str) -> Option<Record> {
    Some(Record::ExceptionLine {
        exception: name.to_string(),
        message: message.to_string(),
    })
}

#[test]
fn parses_megatron_iteration_line_with_throughput() {
    assert_recognised_as(
        "iteration       30/   81380208 | consumed samples:          720 | elapsed time per iteration (ms): 2986.9 | throughput per GPU (TFLOP/s/GPU): 386.7 | learning rate: 3.000E-04 | global batch size:    24 | lm loss: 1.023436E+01 | loss scale: 1.0 | grad norm: 3.275 | number of skipped iterations:   0 | number of nan iterations:   0 |",
        Step {
            iteration: 30,
            total: Some(81_380_208),
            elapsed_ms: Some(2986.9),
            tflops: Some(386.7),
            loss: Some(10.23436),
            consumed: Some(720),
            scale: Some(1.0),
            skipped: Some(0),
            nans: Some(0),
            ..Step::default()
        },
    );
}

#[test]
fn megatron_nan_loss_is_an_iteration_flagged_nan_not_an_error() {
    assert_recognised_as(
        "iteration      230/   81380208 | elapsed time per iteration (ms): 2991.0 | lm loss: nan | loss scale: 1.0 | grad norm: 3.1 | number of nan iterations:   0 |",
        Step {
            iteration: 230,
            total: Some(81_380_208),
            elapsed_ms: Some(2991.0),
            nan: true,
            scale: Some(1.0),
            nans: Some(0),
            ..Step::default()
        },
    );
}

#[test]
fn megatron_nan_iteration_count_flags_nan_even_with_finite_loss() {
    assert_recognised_as(
        "iteration      231/      500 | lm loss: 2.5E+00 | number of nan iterations:   3 |",
        Step {
            iteration: 231,
            total: Some(500),
            loss: Some(2.5),
            nan: true,
            nans: Some(3),
            ..Step::default()
        },
    );
}

#[test]
fn megatron_infinite_grad_norm_flags_nan() {
    let record = recognise("iteration 5/ 10 | lm loss: 2.0 | grad norm: inf |");
    assert_eq!(record, iteration(5, Some(10), None, None, Some(2.0), true));
}

#[test]
fn parses_megatron_deepspeed_tflops_field() {
    assert_recognised_as(
        "iteration      100/     500 | consumed samples:          800 | elapsed time per iteration (ms): 350.2 | TFLOPs: 150.23 | lm loss: 7.5E+00 |",
        Step {
            iteration: 100,
            total: Some(500),
            elapsed_ms: Some(350.2),
            tflops: Some(150.23),
            loss: Some(7.5),
            consumed: Some(800),
            ..Step::default()
        },
    );
}

#[test]
fn megatron_iteration_too_large_for_u64_is_ignored() {
    assert_eq!(
        recognise("iteration 99999999999999999999999/ 1 | lm loss: 1.0 |"),
        None
    );
}

#[test]
fn recognises_megatron_pretrain_fixture() {
    let records = recognise_log(include_str!(
        "../../../../tests/fixtures/logs/megatron_pretrain.log"
    ));
    assert_eq!(
        records,
        vec![
            None,
            None,
            None,
            None,
            None,
            loaded(Some(200), Some("/ckpt/llama")),
            loaded(Some(200), Some("/ckpt/llama")),
            None,
            None,
            pretrain_step(210, 2986.9, 386.7, Some(10.23436), 5040, 0),
            pretrain_step(220, 2990.2, 386.3, Some(9.871203), 5280, 0),
            pretrain_step(230, 2991.0, 386.2, None, 5520, 3),
            None,
            saved(Some(240), Some("/ckpt/llama")),
            None,
            None,
            Some(Record::TrainingDone),
        ]
    );
}

#[test]
fn recognises_legacy_megatron_lines_without_throughput() {
    let records = recognise_log(include_str!(
        "../../../../tests/fixtures/logs/megatron_legacy.log"
    ));
    assert_eq!(
        records,
        vec![
            Step {
                iteration: 100,
                total: Some(500),
                elapsed_ms: Some(350.2),
                loss: Some(7.512345),
                consumed: Some(800),
                scale: Some(65536.0),
                skipped: Some(0),
                nans: Some(0),
                ..Step::default()
            }
            .record(),
            None,
            None,
            None,
            None,
            Step {
                iteration: 110,
                total: Some(500),
                elapsed_ms: Some(349.8),
                consumed: Some(880),
                scale: Some(32768.0),
                skipped: Some(1),
                nans: Some(0),
                ..Step::default()
            }
            .record(),
        ]
    );
}

#[test]
fn recognises_lightning_fixture() {
    let records = recognise_log(include_str!(
        "../../../../tests/fixtures/logs/lightning_fit.log"
    ));
    let expected = vec![
        None,
        None,
        None,
        loaded(None, Some("/ckpt/last.ckpt")),
        None,
        None,
        None,
        None,
        None,
        iteration(250, Some(500), Some(1000.0 / 3.75), None, Some(2.45), false),
        iteration(500, Some(500), Some(1000.0 / 3.75), None, Some(2.31), false),
        None,
        saved(Some(2000), Some("/ckpt/epoch=3-step=2000.ckpt")),
        iteration(500, Some(500), Some(1500.0), None, None, true),
        None,
        Some(Record::TrainingDone),
    ];
    assert_eq!(records, expected);
}

#[test]
fn takes_the_last_redraw_of_a_carriage_return_progress_line() {
    let record = recognise(
        "Epoch 0:   0%|          | 0/500 [00:00<?, ?it/s]\rEpoch 0:   1%|          | 5/500 [00:01<02:12, 3.74it/s, v_num=1, train_loss=9.12]\r",
    );
    assert_eq!(
        record,
        iteration(5, Some(500), Some(1000.0 / 3.74), None, Some(9.12), false)
    );
}

#[test]
fn progress_bar_without_rate_or_loss_still_gives_the_step() {
    let record = recognise("Epoch 0:   0%|          | 0/500 [00:00<?, ?it/s]");
    assert_eq!(record, iteration(0, Some(500), None, None, None, false));
}

#[test]
fn recognises_nemo_fixture() {
    let records = recognise_log(include_str!(
        "../../../../tests/fixtures/logs/nemo_train.log"
    ));
    assert_eq!(
        records,
        vec![
            None,
            None,
            None,
            Step {
                iteration: 400,
                elapsed_ms: Some(1230.0),
                loss: Some(3.12),
                consumed: Some(102_400),
                ..Step::default()
            }
            .record(),
            None,
            saved(Some(2000), None),
            saved(
                Some(2000),
                Some(
                    "/results/llama/checkpoints/megatron_llama--reduced_train_loss=3.12-epoch=0-step=2000.ckpt"
                )
            ),
            error_text(
                "[NeMo E 2024-07-30 14:31:00 nemo_logging:349] Caught signal 15, shutting down"
            ),
        ]
    );
}

#[test]
fn recognises_plain_checkpoint_announcements() {
    assert_eq!(
        recognise("Saving checkpoint to /ckpt/step_300"),
        saved(Some(300), Some("/ckpt/step_300"))
    );
    assert_eq!(
        recognise("Saved checkpoint at step 300"),
        saved(Some(300), None)
    );
    assert_eq!(recognise("Checkpoint saved: /x"), saved(None, Some("/x")));
    assert_eq!(
        recognise("Saving model checkpoint to /out/checkpoint-500"),
        saved(Some(500), Some("/out/checkpoint-500"))
    );
    assert_eq!(
        recognise(
            "[INFO] [engine.py:3500:_save_zero_checkpoint] zero checkpoint saved /ckpt/global_step300/zero_pp_rank_0_mp_rank_00_optim_states.pt"
        ),
        saved(
            Some(300),
            Some("/ckpt/global_step300/zero_pp_rank_0_mp_rank_00_optim_states.pt")
        )
    );
}

#[test]
fn recognises_every_checkpoint_form_in_the_fixture() {
    let records = recognise_log(include_str!(
        "../../../../tests/fixtures/logs/checkpoint_forms.log"
    ));
    let ckpt = Some("/ckpt/epoch=3-step=1500.ckpt");
    assert_eq!(
        records,
        vec![
            // Megatron: the announcement is not a save; the success line is.
            None,
            saved(Some(200), Some("/ckpt/llama")),
            loaded(Some(200), Some("/ckpt/llama")),
            loaded(Some(200), Some("/ckpt/llama")),
            None,
            // Lightning.
            saved(Some(1500), ckpt),
            saved(None, None),
            loaded(Some(1500), ckpt),
            loaded(Some(1500), ckpt),
            // NeMo: the step comes from the file name.
            saved(
                Some(1500),
                Some(
                    "/results/ckpt/megatron_gpt--val_loss=2.10-step=1500-consumed_samples=384000.0.ckpt"
                )
            ),
            saved(
                Some(1500),
                Some(
                    "/results/ckpt/megatron_gpt--val_loss=2.10-step=1500-consumed_samples=384000.0-last.ckpt"
                )
            ),
            // torchtitan / torch.distributed.checkpoint.
            None,
            saved(None, None),
            saved(Some(300), Some("/ckpt/step-300")),
            saved(Some(400), Some("/ckpt/step-400")),
            // A plain save without a step.
            saved(None, None),
            saved(None, None),
            loaded(Some(300), None),
            loaded(None, None),
            // Look-alikes: plans, failures and weight shards.
            None,
            None,
            None,
            None,
            None,
        ]
    );
}

#[test]
fn recognises_megatron_deepspeed_corpus_line_with_all_counters() {
    let records = recognise_log(include_str!(
        "../../../../tests/fixtures/logs/megatron_deepspeed_tflops.log"
    ));
    assert_eq!(
        records,
        vec![
            Step {
                iteration: 9,
                total: Some(10),
                elapsed_ms: Some(1979.2),
                tflops: Some(127.0),
                consumed: Some(108),
                scale: Some(1.0),
                skipped: Some(0),
                nans: Some(0),
                ..Step::default()
            }
            .record()
        ]
    );
}

#[test]
fn megatron_progress_log_gives_throughput_and_finished_saves() {
    let records = recognise_log(include_str!(
        "../../../../tests/fixtures/logs/megatron_progress_log.log"
    ));
    assert_eq!(
        records,
        vec![
            None,
            // An async save being written is progress, not yet a checkpoint.
            Step {
                iteration: 100,
                tflops: Some(364.8),
                ..Step::default()
            }
            .record(),
            saved(Some(200), None),
        ]
    );
}

#[test]
fn nan_and_inf_losses_are_flagged_in_every_framework() {
    let flags: Vec<(u64, Option<f64>, bool)> = recognise_log(include_str!(
        "../../../../tests/fixtures/logs/nan_losses.log"
    ))
    .into_iter()
    .map(|record| match record {
        Some(Record::Iteration {
            iteration,
            loss,
            nan_or_inf,
            ..
        }) => (iteration, loss, nan_or_inf),
        other => panic!("expected an iteration, got {other:?}"),
    })
    .collect();
    assert_eq!(
        flags,
        vec![
            (230, None, true),
            (240, None, true),
            (250, Some(2.5), true),
            (50, None, true),
            (410, None, true),
            (500, None, true),
            (500, Some(2.31), false),
        ]
    );
}

#[test]
fn structured_telemetry_lines_are_recognised_through_recognise() {
    assert_eq!(
        recognise(
            "[type=event | name=training_loop | event.name=training_iterations | event.metrics.current_iteration=7 | event.metrics.tflops=99.0 | count=1]"
        ),
        Step {
            iteration: 7,
            tflops: Some(99.0),
            ..Step::default()
        }
        .record()
    );
    assert_eq!(
        recognise(
            r#"{"type":"complete","name":"checkpoint_save_sync","stop_event":{"metrics":{"current_iteration":8}},"count":2}"#
        ),
        saved(Some(8), None)
    );
}

#[test]
fn telemetry_records_that_stand_for_nothing_are_not_read_for_other_signals() {
    assert_eq!(
        recognise(
            "[type=start | pid=1 | name=main_function | event.name=span_start | event.metrics.node_name=\"ERROR-node\" | count=1]"
        ),
        None
    );
}

#[test]
fn unit_words_are_not_checkpoint_paths() {
    assert_eq!(
        checkpoint_path("Saved checkpoint 364.8 TFLOP/s/GPU 3.1 it/s"),
        None
    );
    assert_eq!(
        checkpoint_path("Saved checkpoint 3.1 it/s to gs://bucket/run/step_5"),
        Some("gs://bucket/run/step_5")
    );
}

#[test]
fn megatron_save_announcement_is_not_a_completed_save() {
    assert_eq!(
        recognise(" saving checkpoint at iteration     200 to /ckpt/llama"),
        None
    );
}

#[test]
fn failed_checkpoint_load_is_an_error_not_a_load() {
    let text = "ERROR loading checkpoint from /ckpt/llama: Input/output error";
    assert_eq!(recognise(text), error_text(text));
}

#[test]
fn recognises_errors_in_the_nccl_crash_fixture() {
    let records = recognise_log(include_str!(
        "../../../../tests/fixtures/logs/nccl_timeout_crash.log"
    ));
    assert_eq!(
        records,
        vec![
            error_text(
                "[E1122 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12345, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600042 milliseconds before timing out."
            ),
            error_text(
                "[E1122 06:24:44.904112234 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank 3] Exception (either an error or timeout) detected by watchdog at work: 12345, last enqueued NCCL work: 12345, last completed NCCL work: 12344."
            ),
            error_text(
                "node-07:48213:48890 [4] NCCL WARN NET/IB : Got completion from peer 10.0.0.3<45678> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.7 remoteGidsfe80::"
            ),
            None,
            Some(Record::TracebackStart),
            None,
            None,
            None,
            None,
            exception(
                "torch.distributed.DistBackendError",
                "NCCL error in: /opt/pytorch/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.21.5",
            ),
            exception(
                "ncclRemoteError",
                "A call failed possibly due to a network error or a remote process exiting prematurely.",
            ),
            error_text("srun: error: node-07: task 52: Exited with exit code 1"),
            error_text("srun: error: node-03: tasks 24-31: Killed"),
        ]
    );
}

#[test]
fn recognises_node_faults_fixture() {
    let records = recognise_log(include_str!(
        "../../../../tests/fixtures/logs/node_faults.log"
    ));
    assert_eq!(
        records,
        vec![
            error_text(
                "NVRM: Xid (PCI:0000:3b:00): 79, pid=48213, name=python, GPU has fallen off the bus."
            ),
            error_text(
                "node-07 kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=48213, name=python, An uncorrectable ECC error detected"
            ),
            error_text(
                "node-07 kernel: Out of memory: Killed process 48213 (python) total-vm:912345kB, anon-rss:81234kB"
            ),
            exception(
                "OSError",
                "[Errno 28] No space left on device: '/ckpt/llama/iter_0000240/__0_0.distcp'"
            ),
            error_text(
                "/bin/bash: line 1: 48213 Segmentation fault      (core dumped) python train.py"
            ),
            exception(
                "RuntimeError",
                "CUDA error: an illegal memory access was encountered"
            ),
            exception(
                "torch.OutOfMemoryError",
                "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.02 GiB is free.",
            ),
            exception("KeyboardInterrupt", ""),
            error_text("- ERROR - data loader worker 3 exited unexpectedly"),
            error_text(
                "slurmstepd: error: *** STEP 123456.0 ON node-01 CANCELLED AT 2024-07-30T18:01:02 DUE TO TIME LIMIT ***"
            ),
        ]
    );
}

#[test]
fn each_listed_error_marker_makes_an_error() {
    for text in [
        "x NCCL error: unhandled system error",
        "CUDA error: device-side assert triggered",
        "caught RuntimeError in worker",
        "[ERROR] something failed",
        "Error: job step aborted",
        "Bus error (core dumped)",
        "/bin/sh: line 1: 12 Killed python train.py",
        "write failed: Input/output error",
        "worker raised an Exception in callback",
        "Fatal Python error: Aborted",
        "E1122 06:24:44.903881 12345 socket.cpp:420] connect failed",
    ] {
        assert_eq!(recognise(text), error_text(text), "{text}");
    }
}

#[test]
fn healthy_lines_produce_no_records() {
    let records = recognise_log(include_str!(
        "../../../../tests/fixtures/logs/healthy_noise.log"
    ));
    let noisy: Vec<_> = include_str!("../../../../tests/fixtures/logs/healthy_noise.log")
        .lines()
        .zip(&records)
        .filter(|(_, record)| record.is_some())
        .collect();
    assert!(noisy.is_empty(), "{noisy:?}");
    assert_eq!(records.len(), 18);
}

#[test]
fn look_alike_words_are_not_errors() {
    for text in [
        "ERRORS_SEEN=0",
        "killed=0 Unkilled",
        "Killedness",
        "eval error_rate=0.01",
        "no Errors: none",
        "    raise RuntimeError(\"loss is nan\")",
        "    except Exception:",
        "Warning: low disk",
        "Exit: 0",
    ] {
        assert_eq!(recognise(text), None, "{text}");
    }
}

#[test]
fn exception_line_wins_over_error_markers() {
    assert_eq!(
        recognise("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970"),
        exception("RuntimeError", "NCCL error in: ProcessGroupNCCL.cpp:1970")
    );
    assert_eq!(recognise("KeyError: 'x'"), exception("KeyError", "'x'"));
    assert_eq!(recognise("RuntimeError"), exception("RuntimeError", ""));
    assert_eq!(
        recognise("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: "),
        exception(
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError",
            ""
        )
    );
}

#[test]
fn name_glued_to_colon_text_is_not_an_exception_line() {
    assert_eq!(recognise("SomeError:nospace"), None);
    assert_eq!(recognise("ValueErrors: 3"), None);
}

#[test]
fn recognises_traceback_start() {
    assert_eq!(
        recognise("Traceback (most recent call last):"),
        Some(Record::TracebackStart)
    );
    // After a logger's prefix.
    for text in [
        "rank:  3 | 2022-04-03 18:44:26,615 CRITICAL | Traceback (most recent call last):",
        "ERROR:root:Traceback (most recent call last):",
        // TorchScript's, inside a scripted function's exception.
        "Traceback of TorchScript (most recent call last):",
        "Traceback of TorchScript, original code (most recent call last):",
    ] {
        assert_eq!(recognise(text), Some(Record::TracebackStart), "{text}");
    }
    assert_eq!(
        recognise("a Traceback (most recent call last): was printed"),
        None
    );
}

#[test]
fn recognises_training_done_lines() {
    for text in [
        "[after training is done] datetime: 2024-07-30 18:00:00",
        "Training finished",
        "`Trainer.fit` stopped: `max_steps=1000` reached.",
    ] {
        assert_eq!(recognise(text), Some(Record::TrainingDone), "{text}");
    }
}

#[test]
fn error_text_is_capped_on_a_character_boundary() {
    let line = format!("CUDA error: {}", "é".repeat(5000));
    let Some(Record::Error { text }) = recognise(&line) else {
        panic!("expected an error");
    };
    assert!(text.len() <= MAX_TEXT_BYTES && text.len() > MAX_TEXT_BYTES - 2);
    assert!(line.starts_with(&text));
}

#[test]
fn names_the_host_of_an_nccl_line() {
    assert_eq!(
        named_host("node-07:48213:48890 [4] NCCL WARN NET/IB : Got completion from peer"),
        Some("node-07")
    );
    assert_eq!(
        named_host("gpu-a100-17.cluster:901:902 [0] NCCL INFO Init COMPLETE"),
        Some("gpu-a100-17.cluster")
    );
    // The source location before the level, in every file kind NCCL releases print from.
    for location in [
        "transport/net_ib.cc:1696",
        "transport/net_ib.cu:80",
        "include/socket.h:361",
        "misc/socket.cc:484",
    ] {
        assert_eq!(
            named_host(&format!(
                "gpu-2:815:864 [0] {location} NCCL WARN Call to connect timeout"
            )),
            Some("gpu-2"),
            "{location}"
        );
    }
    assert_eq!(
        named_host("gpu-2:815:864 [0] notes.txt:3 NCCL WARN x"),
        None
    );
}

#[test]
fn names_the_host_of_an_srun_task_failure() {
    assert_eq!(
        named_host("srun: error: node-07: task 52: Exited with exit code 1"),
        Some("node-07")
    );
    assert_eq!(
        named_host("srun: error: node-03: tasks 24-31: Killed"),
        Some("node-03")
    );
}

#[test]
fn names_no_host_for_lines_that_only_resemble_nccl_or_srun() {
    for text in [
        "NCCL WARN without a prefix",
        "node-07:48213 [4] NCCL WARN missing thread id",
        "node-07:pid:48890 [4] NCCL WARN non-numeric pid",
        "node 07:1:2 [4] NCCL WARN space in host",
        "node-07:48213:48890 [4] Not NCCL",
        "srun: error: Unable to create step for job 123: Job has been cancelled",
        "srun: error: node-07 task 52 Exited",
        ":1:2 [0] NCCL INFO empty host",
        // A poster's redaction of the host, and names no resolver takes.
        "...-48:34050:34121 [0] transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : port error",
        "-node:1:2 [0] NCCL INFO leading dash",
        "node..07:1:2 [0] NCCL INFO empty label",
        "srun: error: xx-: task 0: Killed",
        "",
        ":",
    ] {
        assert_eq!(named_host(text), None, "{text}");
    }
}

#[test]
fn never_panics_on_truncated_fixture_lines_or_garbage() {
    let fixtures = [
        include_str!("../../../../tests/fixtures/logs/checkpoint_forms.log"),
        include_str!("../../../../tests/fixtures/logs/nan_losses.log"),
        include_str!("../../../../tests/fixtures/logs/megatron_progress_log.log"),
        include_str!("../../../../tests/fixtures/logs/training_telemetry_logger.log"),
        include_str!("../../../../tests/fixtures/logs/training_telemetry_file.jsonl"),
        include_str!("../../../../tests/fixtures/logs/megatron_pretrain.log"),
        include_str!("../../../../tests/fixtures/logs/megatron_legacy.log"),
        include_str!("../../../../tests/fixtures/logs/lightning_fit.log"),
        include_str!("../../../../tests/fixtures/logs/nemo_train.log"),
        include_str!("../../../../tests/fixtures/logs/nccl_timeout_crash.log"),
        include_str!("../../../../tests/fixtures/logs/node_faults.log"),
    ];
    let mut samples: Vec<String> = fixtures
        .iter()
        .flat_map(|text| text.lines())
        .flat_map(|line| {
            let message = frame_with_year(line, 2026).message;
            message
                .char_indices()
                .flat_map(|(i, _)| [message[..i].to_string(), message[i..].to_string()])
                .collect::<Vec<_>>()
        })
        .collect();
    samples.extend([
        "iteration 1/".to_string(),
        "iteration 1/ 2 | lm loss: | grad norm |:|".to_string(),
        "Epoch 1: |  | 3/ [".to_string(),
        "Epoch 1: 5%| | 1/2 [, =, global_step=1e400, train_loss=1e999, 0it/s, -1s/it".to_string(),
        "Epoch ]]]][[[[".to_string(),
        "\r\r\r".to_string(),
        format!("Saved checkpoint at step {}", "9".repeat(100)),
        format!("{}Error: x", "a".repeat(100_000)),
        "\u{0}\u{1}ERROR\u{7f}".to_string(),
        "E".to_string(),
        "[E".to_string(),
    ]);
    for sample in &samples {
        let _ = recognise(sample);
        let _ = named_host(sample);
    }
}

#[test]
fn nemo_float_global_step_beyond_exact_range_is_ignored() {
    let record = recognise(
        "Epoch 0: : 1%| | 1/100 [00:01<01:00, global_step=1e300, reduced_train_loss=2.0]",
    );
    assert_eq!(
        record,
        iteration(1, Some(100), None, None, Some(2.0), false)
    );
}

#[test]
fn records_serialise_with_a_snake_case_type_tag() {
    let record = Record::CheckpointSaved {
        iteration: Some(2000),
        path: Some("/ckpt/a".to_string()),
    };
    let json = serde_json::to_string(&record).unwrap();
    assert_eq!(
        json,
        r#"{"type":"checkpoint_saved","iteration":2000,"path":"/ckpt/a"}"#
    );
    assert_eq!(serde_json::from_str::<Record>(&json).unwrap(), record);
    assert_eq!(
        serde_json::to_string(&Record::TracebackStart).unwrap(),
        r#"{"type":"traceback_start"}"#
    );
}

/// What the regex captures, in the terms of [`iteration_counter`].
fn counter_by_regex(message: &str) -> Option<(&str, &str)> {
    let captures = MEGATRON_ITERATION.captures(message)?;
    Some((captures.get(1)?.as_str(), captures.get(2)?.as_str()))
}

fn assert_counter_agrees(message: &str) {
    match iteration_counter(message) {
        Counter::Found(iteration, total) => assert_eq!(
            counter_by_regex(message),
            Some((iteration, total)),
            "{message:?}"
        ),
        Counter::Absent => assert_eq!(counter_by_regex(message), None, "{message:?}"),
        Counter::Undecided => assert!(!message.is_ascii(), "{message:?}"),
    }
}

#[test]
fn the_iteration_counter_reads_what_the_regex_captures() {
    for message in [
        "iteration      120/   1000 | lm loss: 2.0",
        " iteration 5 /7|",
        "reiteration 5/7 | iteration 6/8 |",
        "iteration 5/7 iteration 6/8 |",
        "iteration\u{b}5\t/\r7\u{c}|",
        "iteration5/7|",
        "iteration 5/ |",
        "iteration 5/7",
        "é iteration 5/7 |",
        "éiteration 5/7 |",
        "iteration\u{3000}5/7 |",
        "iteration 5٣/7 |",
        "iteration 5/7\u{a0}|",
        "_iteration 5/7 | iteration 1/2 |",
    ] {
        assert_counter_agrees(message);
    }
    assert_eq!(
        iteration_counter("x | iteration 12 / 40 |"),
        Counter::Found("12", "40")
    );
}

proptest::proptest! {
    /// On any text built from the pieces the pattern cares about, ASCII or not, the hand reading
    /// agrees with the regex, or leaves the answer to it.
    #[test]
    fn the_iteration_counter_agrees_with_the_regex_everywhere(
        pieces in proptest::collection::vec(
            proptest::sample::select(vec![
                "iteration", "iter", " ", "\t", "\u{b}", "\u{3000}", "\u{a0}", "1", "42", "٣", "/",
                "|", "x", "_", "é", ":",
            ]),
            0..12,
        )
    ) {
        assert_counter_agrees(&pieces.concat());
    }
}
