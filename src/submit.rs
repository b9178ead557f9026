//! `runguard submit workflow.toml`: validates a multiphase workflow, says what it will do, stores it
//! and submits its first phase; the engine (`runguard run --auto` or the cockpit) submits the rest,
//! each once the phase before it succeeded.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use runguard_engine::config::Config;
use runguard_engine::model::{ActionState, PhaseJob};
use runguard_engine::phases::{WorkflowFile, record};
use runguard_engine::store::Store;

/// The options of `runguard submit`.
#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    /// The workflow file: a `name` and an ordered `[[phase]]` list (see docs/workflows.md).
    pub file: PathBuf,
    /// Validate the file and print what would be done, without storing or submitting anything.
    #[arg(long)]
    pub dry_run: bool,
}

/// Runs `runguard submit`.
pub fn run(args: &SubmitArgs, config: &Config, store_path: &Path) -> Result<()> {
    let kind = config.backend.kind;
    let file = WorkflowFile::load(&args.file, kind)?;
    print!("{}", plan(&file, kind));
    if args.dry_run {
        println!("dry run: nothing stored or submitted");
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let backend = runtime.block_on(crate::compose::submission_backend(config, store_path))?;
    let mut store = Store::open(store_path)?;
    let now = chrono::Utc::now();
    let source = std::path::absolute(&args.file).unwrap_or_else(|_| args.file.clone());
    // Recorded before anything is submitted: a submission cut short is found again by its tag by
    // the engine, which never submits a phase twice. The user asked for this one: it runs at once
    // here, or (on the simulated cluster) approved for the engine's next pass.
    let state = if backend.is_some() {
        ActionState::Executing
    } else {
        ActionState::Approved
    };
    let (id, prepared) = store.write(|db| {
        let id = record::store_multiphase(db, &file, kind, Some(&source), now)?;
        let multiphase =
            db.multiphase(id)?
                .ok_or_else(|| runguard_engine::store::StoreError::NotFound {
                    what: "multiphase workflow",
                    id: id.to_string(),
                })?;
        let mut first = db.phases(id)?.remove(0);
        let why = format!(
            "start phase {} of {}, as `runguard submit` asked",
            first.spec.name, file.name
        );
        let describe = |job: &runguard_engine::backend::NewJob| match &backend {
            Some(backend) => backend.submit_command(job),
            None => format!("submit {} to the simulated cluster", job.name),
        };
        let prepared =
            record::prepare(db, describe, &multiphase, &mut first, state, true, why, now)?;
        Ok((id, prepared))
    })?;
    let Some(backend) = backend else {
        println!(
            "stored multiphase workflow {id}; the engine submits phase {} on its next pass",
            file.phases[0].name
        );
        return Ok(());
    };
    let mut action = prepared.action;
    let outcome = match record::make_checkpoint_dir(&prepared.job) {
        Ok(()) => runtime
            .block_on(backend.submit(&prepared.job))
            .map_err(|err| err.to_string()),
        Err(message) => Err(message),
    };
    let now = chrono::Utc::now();
    action.updated_at = now;
    match outcome {
        Ok(outcome) => {
            action.state = ActionState::Done;
            action.result = Some(outcome.detail.clone());
            store.write(|db| {
                db.update_action(&action)?;
                if let Some(job_id) = &outcome.new_job_id {
                    record::submitted(db, action.workflow_id, job_id, now)?;
                }
                db.journal(
                    Some(action.workflow_id),
                    now,
                    &format!("action {} submit done: {}", action.id, outcome.detail),
                    &[],
                )
            })?;
            println!(
                "stored multiphase workflow {id}; {}\nthe engine (`runguard run --auto` or the \
                 cockpit) watches it and submits each later phase once the one before it \
                 succeeded (`submit` in [recovery] whitelist, or approve it)",
                outcome.detail
            );
            Ok(())
        }
        Err(message) => {
            action.state = ActionState::Failed;
            action.result = Some(message.clone());
            store.write(|db| {
                db.update_action(&action)?;
                db.journal(
                    Some(action.workflow_id),
                    now,
                    &format!("action {} submit failed: {message}", action.id),
                    &[],
                )
            })?;
            bail!(
                "stored multiphase workflow {id}, but phase {} could not be submitted: {message}",
                file.phases[0].name
            )
        }
    }
}

/// What `runguard submit` will do, one phase a line.
pub fn plan(file: &WorkflowFile, backend: runguard_engine::model::BackendKind) -> String {
    let mut out = format!(
        "multiphase workflow {:?} on {backend}: {} phases, each started only once the one before \
         it succeeded\n",
        file.name,
        file.phases.len()
    );
    for (index, phase) in file.phases.iter().enumerate() {
        let what = match &phase.job {
            PhaseJob::Batch {
                script,
                args,
                sbatch_args,
            } => {
                let mut what = format!("sbatch {}", script.display());
                for arg in args {
                    let _ = write!(what, " {arg}");
                }
                if !sbatch_args.is_empty() {
                    let _ = write!(what, " (sbatch {})", sbatch_args.join(" "));
                }
                what
            }
            PhaseJob::Manifest { path } => format!("create {}", path.display()),
        };
        let plural = |n: u32| if n == 1 { "node" } else { "nodes" };
        let nodes = match (phase.min_nodes, phase.nodes) {
            (Some(min), Some(nodes)) if min < nodes => {
                format!("; {nodes} nodes, restarts on as few as {min}")
            }
            (Some(min), None) => format!("; restarts on at least {min} {}", plural(min)),
            (_, Some(nodes)) => format!("; {nodes} {}", plural(nodes)),
            (None, None) => String::new(),
        };
        let failures = phase.max_failures.map_or_else(
            || "the configured crash-loop threshold".to_string(),
            |n| format!("{n} restart{}", if n == 1 { "" } else { "s" }),
        );
        let checkpoints = phase
            .checkpoint_dir
            .as_ref()
            .map(|dir| format!("; checkpoints in {}", dir.display()))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {}. {}: {what}{nodes}; fails for good after {failures} without a new \
             checkpoint{checkpoints}{}",
            index + 1,
            phase.name,
            if index == 0 { " — submitted now" } else { "" }
        );
    }
    out
}
