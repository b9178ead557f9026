//! Multiphase workflows and their phases.

use rusqlite::{Row, params};

use super::columns::{json, named, time, to_json};
use super::db::{Db, FromRow};
use super::{StoreError, time_to_text};
use crate::model::{
    BackendKind, Multiphase, MultiphaseId, MultiphaseState, Phase, PhaseSpec, PhaseState,
    WorkflowId,
};

impl FromRow for Multiphase {
    const COLUMNS: &'static str =
        "id, name, backend, source, state, reason, created_at, updated_at";

    fn from_row(row: &Row<'_>) -> Result<Self, StoreError> {
        let source: Option<String> = row.get(3)?;
        Ok(Self {
            id: row.get(0)?,
            name: row.get(1)?,
            backend: named(row, 2, "backend", BackendKind::parse)?,
            source: source.map(Into::into),
            state: named(row, 4, "multiphase state", MultiphaseState::parse)?,
            reason: row.get(5)?,
            created_at: time(row, 6)?,
            updated_at: time(row, 7)?,
        })
    }
}

impl FromRow for Phase {
    const COLUMNS: &'static str =
        "multiphase_id, idx, spec, state, workflow_id, job_id, reason, updated_at";

    fn from_row(row: &Row<'_>) -> Result<Self, StoreError> {
        Ok(Self {
            multiphase_id: row.get(0)?,
            index: row.get(1)?,
            spec: json::<PhaseSpec>(row, 2)?,
            state: named(row, 3, "phase state", PhaseState::parse)?,
            workflow_id: row.get(4)?,
            job_id: row.get(5)?,
            reason: row.get(6)?,
            updated_at: time(row, 7)?,
        })
    }
}

impl Db<'_> {
    /// Stores a new multiphase workflow with its phases (all waiting) and returns its id.
    pub fn insert_multiphase(
        &self,
        multiphase: &Multiphase,
        phases: &[PhaseSpec],
    ) -> Result<MultiphaseId, StoreError> {
        self.execute(
            "INSERT INTO multiphases (name, backend, source, state, reason, created_at, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                multiphase.name,
                multiphase.backend.as_str(),
                multiphase
                    .source
                    .as_ref()
                    .map(|path| path.display().to_string()),
                multiphase.state.as_str(),
                multiphase.reason,
                time_to_text(multiphase.created_at),
                time_to_text(multiphase.updated_at),
            ],
        )?;
        let id = self.conn.last_insert_rowid();
        for (index, spec) in phases.iter().enumerate() {
            self.execute(
                "INSERT INTO phases (multiphase_id, idx, name, spec, state, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    id,
                    index as i64,
                    spec.name,
                    to_json(spec)?,
                    PhaseState::Waiting.as_str(),
                    time_to_text(multiphase.created_at),
                ],
            )?;
        }
        Ok(id)
    }

    pub fn update_multiphase(&self, multiphase: &Multiphase) -> Result<(), StoreError> {
        let changed = self.execute(
            "UPDATE multiphases SET state = ?2, reason = ?3, updated_at = ?4 WHERE id = ?1",
            params![
                multiphase.id,
                multiphase.state.as_str(),
                multiphase.reason,
                time_to_text(multiphase.updated_at),
            ],
        )?;
        if changed == 0 {
            return Err(StoreError::NotFound {
                what: "multiphase workflow",
                id: multiphase.id.to_string(),
            });
        }
        Ok(())
    }

    /// Every multiphase workflow, oldest first.
    pub fn multiphases(&self) -> Result<Vec<Multiphase>, StoreError> {
        self.select("FROM multiphases ORDER BY id", [])
    }

    pub fn multiphase(&self, id: MultiphaseId) -> Result<Option<Multiphase>, StoreError> {
        self.select_one("FROM multiphases WHERE id = ?1", [id])
    }

    /// The phases of a multiphase workflow, in order.
    pub fn phases(&self, multiphase_id: MultiphaseId) -> Result<Vec<Phase>, StoreError> {
        self.select(
            "FROM phases WHERE multiphase_id = ?1 ORDER BY idx",
            [multiphase_id],
        )
    }

    /// The phase whose run `workflow_id` is, if it is one.
    pub fn phase_of_workflow(&self, workflow_id: WorkflowId) -> Result<Option<Phase>, StoreError> {
        self.select_one("FROM phases WHERE workflow_id = ?1", [workflow_id])
    }

    pub fn update_phase(&self, phase: &Phase) -> Result<(), StoreError> {
        let changed = self.execute(
            "UPDATE phases SET state = ?3, workflow_id = ?4, job_id = ?5, reason = ?6, \
             updated_at = ?7 WHERE multiphase_id = ?1 AND idx = ?2",
            params![
                phase.multiphase_id,
                phase.index,
                phase.state.as_str(),
                phase.workflow_id,
                phase.job_id,
                phase.reason,
                time_to_text(phase.updated_at),
            ],
        )?;
        if changed == 0 {
            return Err(StoreError::NotFound {
                what: "phase",
                id: format!("{}/{}", phase.multiphase_id, phase.index),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use crate::model::{
        BackendKind, JobSpec, Multiphase, MultiphaseState, PhaseJob, PhaseSpec, PhaseState,
        RecoveryLimits, Workflow,
    };
    use crate::store::Store;

    fn spec(name: &str) -> PhaseSpec {
        PhaseSpec {
            name: name.to_string(),
            job: PhaseJob::Batch {
                script: format!("/w/{name}.sbatch").into(),
                args: vec!["--steps".into(), "10".into()],
                sbatch_args: vec![],
            },
            nodes: Some(2),
            min_nodes: Some(1),
            max_failures: Some(2),
            checkpoint_dir: Some(format!("/w/ckpt/{name}").into()),
            work_dir: None,
        }
    }

    #[test]
    fn phases_round_trip_and_are_found_by_their_run() {
        let mut store = Store::open_in_memory().unwrap();
        let now = Utc::now();
        let multiphase = Multiphase {
            id: 0,
            name: "llama".into(),
            backend: BackendKind::Slurm,
            source: Some("/w/workflow.toml".into()),
            state: MultiphaseState::Running,
            reason: None,
            created_at: now,
            updated_at: now,
        };
        let (id, workflow_id) = store
            .write(|db| {
                let id = db.insert_multiphase(&multiphase, &[spec("pretrain"), spec("eval")])?;
                let workflow_id = db.insert_workflow(&Workflow::enrolled(
                    "llama/pretrain",
                    BackendKind::Slurm,
                    JobSpec::default(),
                    RecoveryLimits::default(),
                    now,
                ))?;
                let mut first = db.phases(id)?.remove(0);
                first.state = PhaseState::Running;
                first.workflow_id = Some(workflow_id);
                first.job_id = Some("42".into());
                db.update_phase(&first)?;
                Ok((id, workflow_id))
            })
            .unwrap();
        let db = store.db();
        let phases = db.phases(id).unwrap();
        assert_eq!(phases.len(), 2);
        assert_eq!(phases[0].spec, spec("pretrain"));
        assert_eq!(phases[1].state, PhaseState::Waiting);
        let found = db.phase_of_workflow(workflow_id).unwrap().unwrap();
        assert_eq!((found.index, found.job_id.as_deref()), (0, Some("42")));
        assert_eq!(db.multiphases().unwrap()[0].name, "llama");
    }
}
