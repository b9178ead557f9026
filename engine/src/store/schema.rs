//! The store's schema as an ordered list of migrations; `PRAGMA user_version` records how many ran.

/// Each entry moves the schema one version forward. Never edit a released entry: append a new one.
pub const MIGRATIONS: &[&str] = &[
    // 1: the spine.
    r#"
    CREATE TABLE workflows (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        backend TEXT NOT NULL,
        spec TEXT NOT NULL,
        limits TEXT NOT NULL,
        status TEXT NOT NULL,
        status_reason TEXT,
        succeeded INTEGER NOT NULL DEFAULT 0,
        requeues_used INTEGER NOT NULL DEFAULT 0,
        failures_since_checkpoint INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE TABLE attempts (
        workflow_id INTEGER NOT NULL REFERENCES workflows(id) ON DELETE CASCADE,
        idx INTEGER NOT NULL,
        job_id TEXT NOT NULL,
        restart_count INTEGER NOT NULL,
        nodes TEXT NOT NULL,
        gpus INTEGER NOT NULL,
        state TEXT NOT NULL,
        state_raw TEXT NOT NULL,
        reason TEXT,
        submit_time TEXT,
        start_time TEXT,
        end_time TEXT,
        exit_code INTEGER,
        excluded_nodes TEXT NOT NULL,
        log_path TEXT,
        log_offset INTEGER NOT NULL DEFAULT 0,
        last_log_time TEXT,
        last_iteration INTEGER,
        handled INTEGER NOT NULL DEFAULT 0,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (workflow_id, idx)
    );
    CREATE INDEX attempts_by_job ON attempts(job_id);
    CREATE TABLE checkpoints (
        id INTEGER PRIMARY KEY,
        workflow_id INTEGER NOT NULL REFERENCES workflows(id) ON DELETE CASCADE,
        attempt_index INTEGER NOT NULL,
        iteration INTEGER NOT NULL,
        time TEXT NOT NULL,
        path TEXT NOT NULL
    );
    CREATE TABLE throughput (
        id INTEGER PRIMARY KEY,
        workflow_id INTEGER NOT NULL REFERENCES workflows(id) ON DELETE CASCADE,
        attempt_index INTEGER NOT NULL,
        time TEXT NOT NULL,
        iteration INTEGER NOT NULL,
        tflops_per_gpu REAL NOT NULL,
        rank INTEGER,
        node TEXT
    );
    CREATE TABLE evidence_lines (
        id INTEGER PRIMARY KEY,
        workflow_id INTEGER NOT NULL REFERENCES workflows(id) ON DELETE CASCADE,
        attempt_index INTEGER NOT NULL,
        time TEXT NOT NULL,
        rank INTEGER,
        text TEXT NOT NULL
    );
    CREATE INDEX evidence_by_attempt ON evidence_lines(workflow_id, attempt_index);
    CREATE TABLE anomalies (
        id INTEGER PRIMARY KEY,
        workflow_id INTEGER NOT NULL REFERENCES workflows(id) ON DELETE CASCADE,
        attempt_index INTEGER NOT NULL,
        kind TEXT NOT NULL,
        time TEXT NOT NULL,
        summary TEXT NOT NULL,
        evidence TEXT NOT NULL
    );
    CREATE TABLE attributions (
        id INTEGER PRIMARY KEY,
        workflow_id INTEGER NOT NULL REFERENCES workflows(id) ON DELETE CASCADE,
        attempt_index INTEGER NOT NULL,
        category TEXT NOT NULL,
        component TEXT NOT NULL,
        culprit TEXT NOT NULL,
        confidence REAL NOT NULL,
        recoverable INTEGER NOT NULL,
        signature TEXT,
        explanation TEXT NOT NULL,
        evidence TEXT NOT NULL,
        time TEXT NOT NULL
    );
    CREATE TABLE actions (
        id INTEGER PRIMARY KEY,
        workflow_id INTEGER NOT NULL REFERENCES workflows(id) ON DELETE CASCADE,
        attempt_index INTEGER NOT NULL,
        kind TEXT NOT NULL,
        params TEXT NOT NULL,
        state TEXT NOT NULL,
        permitted INTEGER NOT NULL,
        why TEXT NOT NULL,
        command TEXT,
        result TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE TABLE notifications (
        id INTEGER PRIMARY KEY,
        workflow_id INTEGER REFERENCES workflows(id) ON DELETE CASCADE,
        time TEXT NOT NULL,
        severity TEXT NOT NULL,
        title TEXT NOT NULL,
        body TEXT NOT NULL
    );
    CREATE TABLE journal (
        id INTEGER PRIMARY KEY,
        workflow_id INTEGER REFERENCES workflows(id) ON DELETE CASCADE,
        time TEXT NOT NULL,
        decision TEXT NOT NULL,
        evidence TEXT NOT NULL
    );
    CREATE TABLE commands (
        id INTEGER PRIMARY KEY,
        time TEXT NOT NULL,
        kind TEXT NOT NULL,
        action_id INTEGER NOT NULL,
        done INTEGER NOT NULL DEFAULT 0,
        outcome TEXT
    );
    CREATE TABLE log_offsets (
        path TEXT PRIMARY KEY,
        offset INTEGER NOT NULL
    );
    CREATE TABLE warnings (
        kind TEXT PRIMARY KEY,
        count INTEGER NOT NULL,
        last_message TEXT NOT NULL,
        last_time TEXT NOT NULL
    );
    "#,
    // 2: progress time for the no-progress hang rule.
    r#"
    ALTER TABLE attempts ADD COLUMN last_progress_time TEXT;
    "#,
    // 3: file identities, so a rotated log is read from its start.
    r#"
    ALTER TABLE attempts ADD COLUMN log_identity TEXT;
    ALTER TABLE log_offsets ADD COLUMN identity TEXT;
    "#,
    // 4: the catalog's recommended recovery steps with each attribution.
    r#"
    ALTER TABLE attributions ADD COLUMN remedies TEXT NOT NULL DEFAULT '[]';
    "#,
    // 5: Python tracebacks, each kept whole as one block of evidence.
    r#"
    CREATE TABLE tracebacks (
        id INTEGER PRIMARY KEY,
        workflow_id INTEGER NOT NULL REFERENCES workflows(id) ON DELETE CASCADE,
        attempt_index INTEGER NOT NULL,
        rank INTEGER,
        exception TEXT NOT NULL,
        message TEXT NOT NULL,
        lines TEXT NOT NULL
    );
    CREATE INDEX tracebacks_by_attempt ON tracebacks(workflow_id, attempt_index);
    "#,
    // 6: jobs the user asked to watch by reference (`runguard watch JOBID`), per backend.
    r#"
    CREATE TABLE watched_jobs (
        backend TEXT NOT NULL,
        job_ref TEXT NOT NULL,
        added_at TEXT NOT NULL,
        PRIMARY KEY (backend, job_ref)
    );
    "#,
    // 7: per-workflow reads without a scan of every row (thousands of workflows).
    r#"
    CREATE INDEX checkpoints_by_workflow ON checkpoints(workflow_id, attempt_index);
    CREATE INDEX throughput_by_workflow ON throughput(workflow_id, attempt_index);
    CREATE INDEX anomalies_by_workflow ON anomalies(workflow_id);
    CREATE INDEX attributions_by_workflow ON attributions(workflow_id);
    CREATE INDEX actions_by_workflow ON actions(workflow_id);
    CREATE INDEX actions_by_state ON actions(state);
    CREATE INDEX journal_by_workflow ON journal(workflow_id);
    "#,
    // 8: alerts. What each notification is about; one delivery per notification and channel, kept until
    // delivered so that a restart resumes it; how far the notifications were read for alerting; the
    // narratives a language model wrote for failures.
    r#"
    ALTER TABLE notifications ADD COLUMN event TEXT NOT NULL DEFAULT 'notice';
    CREATE TABLE alert_deliveries (
        id INTEGER PRIMARY KEY,
        notification_id INTEGER NOT NULL,
        workflow_id INTEGER,
        channel TEXT NOT NULL,
        event TEXT NOT NULL,
        severity TEXT NOT NULL,
        dedupe_key TEXT NOT NULL,
        payload TEXT NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        next_try_at TEXT NOT NULL,
        last_error TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE INDEX alert_deliveries_by_state ON alert_deliveries(state, next_try_at);
    CREATE INDEX alert_deliveries_by_key ON alert_deliveries(channel, dedupe_key, created_at);
    CREATE TABLE alert_cursor (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        last_notification_id INTEGER NOT NULL
    );
    CREATE TABLE narratives (
        workflow_id INTEGER NOT NULL REFERENCES workflows(id) ON DELETE CASCADE,
        anomaly_id INTEGER NOT NULL,
        source TEXT NOT NULL,
        text TEXT NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (workflow_id, anomaly_id)
    );
    "#,
    // 9: one log per attempt. A job requeued under its id writes all its attempts to one output file:
    // where an attempt's part of that file ends, and the last bytes read before its offset (to tell a
    // file appended to from one truncated and written again).
    r#"
    ALTER TABLE attempts ADD COLUMN log_end INTEGER;
    ALTER TABLE attempts ADD COLUMN log_tail BLOB;
    "#,
    // 10: the node ledger. Every incident seen on a node, from every workflow and from node signals;
    // each node's state; the exclusions runguard added to pending jobs, so that it removes only those.
    r#"
    CREATE TABLE node_incidents (
        id INTEGER PRIMARY KEY,
        node TEXT NOT NULL,
        time TEXT NOT NULL,
        source TEXT NOT NULL,
        kind TEXT NOT NULL,
        weight REAL NOT NULL,
        fatal INTEGER NOT NULL,
        workflow_id INTEGER,
        attempt_index INTEGER,
        job_id TEXT,
        evidence TEXT NOT NULL
    );
    CREATE INDEX node_incidents_by_node ON node_incidents(node, time);
    CREATE TABLE nodes (
        node TEXT PRIMARY KEY,
        state TEXT NOT NULL,
        since TEXT NOT NULL,
        reason TEXT NOT NULL,
        counted_from TEXT,
        quarantines INTEGER NOT NULL,
        next_check_at TEXT,
        failed_checks INTEGER NOT NULL,
        probation_until TEXT,
        drain_reason TEXT,
        updated_at TEXT NOT NULL
    );
    CREATE TABLE node_exclusions (
        node TEXT NOT NULL,
        workflow_id INTEGER NOT NULL,
        job_id TEXT NOT NULL,
        added_at TEXT NOT NULL,
        PRIMARY KEY (node, job_id)
    );
    ALTER TABLE commands ADD COLUMN node TEXT;
    "#,
    // 11: capacity planning. Each listing of the jobs (when, and the seconds it stands for) with every
    // job it showed, and each listing of the nodes with their state and GPUs.
    r#"
    CREATE TABLE IF NOT EXISTS capacity_listings (
        time TEXT PRIMARY KEY,
        seconds REAL NOT NULL
    );
    CREATE TABLE IF NOT EXISTS capacity_jobs (
        time TEXT NOT NULL,
        job_id TEXT NOT NULL,
        partition TEXT,
        pending INTEGER NOT NULL,
        reason TEXT,
        gpus INTEGER NOT NULL,
        PRIMARY KEY (time, job_id)
    );
    CREATE TABLE IF NOT EXISTS capacity_nodes (
        time TEXT NOT NULL,
        seconds REAL NOT NULL,
        node TEXT NOT NULL,
        partition TEXT NOT NULL,
        state TEXT NOT NULL,
        gpus INTEGER NOT NULL,
        gpus_allocated INTEGER NOT NULL,
        reason TEXT,
        PRIMARY KEY (time, node, partition)
    );
    "#,
    // 12: multiphase workflows. Each is a parent of ordered phases; a submitted phase points at the
    // workflow that follows its job (ON DELETE SET NULL: forgetting that run leaves the phase's
    // record).
    r#"
    CREATE TABLE multiphases (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        backend TEXT NOT NULL,
        source TEXT,
        state TEXT NOT NULL,
        reason TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE TABLE phases (
        multiphase_id INTEGER NOT NULL REFERENCES multiphases(id) ON DELETE CASCADE,
        idx INTEGER NOT NULL,
        name TEXT NOT NULL,
        spec TEXT NOT NULL,
        state TEXT NOT NULL,
        workflow_id INTEGER REFERENCES workflows(id) ON DELETE SET NULL,
        job_id TEXT,
        reason TEXT,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (multiphase_id, idx)
    );
    CREATE INDEX phases_by_workflow ON phases(workflow_id);
    "#,
];
