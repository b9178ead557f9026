#!/usr/bin/env python3
"""Builds `squeue --json` fixtures for data_parser versions no Slurm on this machine serves.

    tests/slurm/from_spec.py v0.0.39|v0.0.43 FIXTURES_DIR > squeue_VERSION_from_spec.json

The jobs are the real Slurm 24.11 records of the lab's situations (FIXTURES_DIR holds the 24.11
captures of tests/slurm/capture.sh), renumbered 1..7 so that one listing holds them all, and reshaped
field by field to what the version's data_parser dumps (tests/fixtures/slurm/data_parser.md gives the
sources and the rules):

    1 RUNNING on n[1-2] with the AJR comment and `-o %x_%j.log`     (running, job 1)
    2 FAILED with exit code 3                                       (failed, job 1)
    3 PENDING, held by `scontrol requeuehold`                       (held, job 1)
    4 PENDING, held by its owner (`scontrol hold` run by nobody)    (held, job 2)
    5 PENDING, held by root (`scontrol hold`: an admin hold)        (held, job 3)
    6 PENDING on BeginTime after requeue, ExcNodeList=n2            (begintime, job 1)
    7 COMPLETED on its second run                                   (completed, job 1)

v0.0.39 (Slurm 23.02's squeue, and 23.11's with --json=v0.0.39) starts from the v0.0.40 records
slurmrestd 24.11 served (the field list v0.0.40 inherited from v0.0.39); v0.0.43 (Slurm 25.05) from
the v0.0.42 records of squeue 24.11.
"""

import json
import os
import sys

PICKS = [  # (situation, original job id)
    ("running", 1),
    ("failed", 1),
    ("held", 1),
    ("held", 2),
    ("held", 3),
    ("begintime", 1),
    ("completed", 1),
]

# job_state_string(): a state flag, when set, names the state instead of the base state.
STATE_FLAG_PRECEDENCE = [
    "COMPLETING", "STAGE_OUT", "CONFIGURING", "RESIZING", "REQUEUED", "REQUEUE_FED",
    "REQUEUE_HOLD", "SPECIAL_EXIT", "STOPPED", "REVOKED", "RESV_DEL_HOLD", "SIGNALING",
]

# JOB_FLAGS names the v0.0.39 parser knows (data_parser/v0.0.39/parsers.c, slurm-23-02-7-1).
V39_JOB_FLAGS = {
    "KILL_INVALID_DEPENDENCY", "NO_KILL_INVALID_DEPENDENCY", "HAS_STATE_DIRECTORY",
    "TESTING_BACKFILL", "GRES_BINDING_ENFORCED", "TEST_NOW_ONLY", "SEND_JOB_ENVIRONMENT",
    "SPREAD_JOB", "PREFER_MINIMUM_NODE_COUNT", "JOB_KILL_HURRY", "SKIP_TRES_STRING_ACCOUNTING",
    "SIBLING_CLUSTER_UPDATE_ONLY", "HETEROGENEOUS_JOB", "EXACT_TASK_COUNT_REQUESTED",
    "EXACT_CPU_COUNT_REQUESTED", "TESTING_WHOLE_NODE_BACKFILL", "TOP_PRIORITY_JOB",
    "ACCRUE_COUNT_CLEARED", "GRED_BINDING_DISABLED", "JOB_WAS_RUNNING", "JOB_ACCRUE_TIME_RESET",
    "CRON_JOB", "EXACT_MEMORY_REQUESTED", "JOB_RESIZED", "USING_DEFAULT_ACCOUNT",
    "USING_DEFAULT_PARTITION", "USING_DEFAULT_QOS", "USING_DEFAULT_WCKEY", "DEPENDENT",
    "MAGNETIC", "PARTITION_ASSIGNED", "BACKFILL_ATTEMPTED", "SCHEDULING_ATTEMPTED",
    "SAVE_BATCH_SCRIPT",
}

# v0.0.39's JOB_INFO paths, in the order the parser dumps them, each with how its value is made
# from the v0.0.40 record: "same", "time" (TIMESTAMP_NO_VAL -> integer or null), "exit" (the
# verbose exit code -> the wait status as UINT32_NO_VAL), "state" (list -> one string), "qos"
# ("" -> null), "flags" (unknown names dropped), "tres" (23.02's `gres:` spelling), "show_flags",
# "power".
V39_FIELDS = [
    ("account", "same"), ("accrue_time", "time"), ("admin_comment", "same"),
    ("allocating_node", "same"), ("array_job_id", "same"), ("array_task_id", "same"),
    ("array_max_tasks", "same"), ("array_task_string", "same"), ("association_id", "same"),
    ("batch_features", "same"), ("batch_flag", "same"), ("batch_host", "same"),
    ("flags", "flags"), ("burst_buffer", "same"), ("burst_buffer_state", "same"),
    ("cluster", "same"), ("cluster_features", "same"), ("command", "same"), ("comment", "same"),
    ("container", "same"), ("container_id", "same"), ("contiguous", "same"),
    ("core_spec", "same"), ("thread_spec", "same"), ("cores_per_socket", "same"),
    ("billable_tres", "same"), ("cpus_per_task", "same"), ("cpu_frequency_minimum", "same"),
    ("cpu_frequency_maximum", "same"), ("cpu_frequency_governor", "same"),
    ("cpus_per_tres", "tres"), ("cron", "same"), ("deadline", "time"), ("delay_boot", "same"),
    ("dependency", "same"), ("derived_exit_code", "exit"), ("eligible_time", "time"),
    ("end_time", "time"), ("excluded_nodes", "same"), ("exit_code", "exit"), ("extra", "same"),
    ("failed_node", "same"), ("features", "same"), ("federation_origin", "same"),
    ("federation_siblings_active", "same"), ("federation_siblings_viable", "same"),
    ("gres_detail", "same"), ("group_id", "same"), ("group_name", "same"),
    ("het_job_id", "same"), ("het_job_id_set", "same"), ("het_job_offset", "same"),
    ("job_id", "same"), ("job_resources", "same"), ("job_size_str", "same"),
    ("job_state", "state"), ("last_sched_evaluation", "time"), ("licenses", "same"),
    ("mail_type", "same"), ("mail_user", "same"), ("max_cpus", "same"), ("max_nodes", "same"),
    ("mcs_label", "same"), ("memory_per_tres", "tres"), ("name", "same"), ("network", "same"),
    ("nodes", "same"), ("nice", "same"), ("tasks_per_core", "same"), ("tasks_per_tres", "same"),
    ("tasks_per_node", "same"), ("tasks_per_socket", "same"), ("tasks_per_board", "same"),
    ("cpus", "same"), ("node_count", "same"), ("tasks", "same"), ("partition", "same"),
    ("prefer", "same"), ("memory_per_cpu", "same"), ("memory_per_node", "same"),
    ("minimum_cpus_per_node", "same"), ("minimum_tmp_disk_per_node", "same"),
    ("power", "power"), ("preempt_time", "time"), ("preemptable_time", "time"),
    ("pre_sus_time", "time"), ("hold", "same"), ("priority", "same"), ("profile", "same"),
    ("qos", "qos"), ("reboot", "same"), ("required_nodes", "same"),
    ("minimum_switches", "same"), ("requeue", "same"), ("resize_time", "time"),
    ("restart_cnt", "same"), ("resv_name", "same"), ("scheduled_nodes", "same"),
    ("selinux_context", "same"), ("shared", "same"), ("exclusive", "same"),
    ("oversubscribe", "same"), ("show_flags", "show_flags"), ("sockets_per_board", "same"),
    ("sockets_per_node", "same"), ("start_time", "time"), ("state_description", "same"),
    ("state_reason", "same"), ("standard_error", "same"), ("standard_input", "same"),
    ("standard_output", "same"), ("submit_time", "time"), ("suspend_time", "time"),
    ("system_comment", "same"), ("time_limit", "same"), ("time_minimum", "same"),
    ("threads_per_core", "same"), ("tres_bind", "same"), ("tres_freq", "same"),
    ("tres_per_job", "tres"), ("tres_per_node", "tres"), ("tres_per_socket", "tres"),
    ("tres_per_task", "tres"), ("tres_req_str", "same"), ("tres_alloc_str", "same"),
    ("user_id", "same"), ("user_name", "same"), ("maximum_switch_wait_time", "same"),
    ("wckey", "same"), ("current_working_directory", "same"),
]


def load(path):
    with open(path) as f:
        return json.load(f)


def picked(directory, name_of):
    jobs = []
    for number, (situation, job_id) in enumerate(PICKS, start=1):
        listing = load(os.path.join(directory, name_of(situation)))
        record = next(j for j in listing["jobs"] if j["job_id"] == job_id)
        jobs.append(renumbered(record, job_id, number))
    return jobs


def renumbered(record, old, new):
    """The record as job `new`: its id and the file names that carry the id."""
    record = json.loads(json.dumps(record))
    record["job_id"] = new
    for key in list(record):
        value = record[key]
        if isinstance(value, str) and key.startswith(("standard_", "std")):
            record[key] = value.replace(f"_{old}.log", f"_{new}.log")
    return record


def wait_status(verbose):
    """The verbose exit code of v0.0.40+ as the wait status v0.0.39 dumps (UINT32_NO_VAL)."""
    status = verbose["status"]
    if "PENDING" in status:
        return {"set": False, "infinite": False, "number": 0}
    if "SIGNALED" in status:
        number = verbose["signal"]["id"]["number"]
    elif "CORE_DUMPED" in status:
        number = 0x80
    elif "INVALID" in status:
        number = verbose["return_code"]["number"]
    else:
        number = verbose["return_code"]["number"] << 8
    return {"set": True, "infinite": False, "number": number}


def to_v39(record):
    job = {}
    for path, rule in V39_FIELDS:
        if rule == "same":
            job[path] = record[path]
        elif rule == "time":
            value = record[path]
            job[path] = value["number"] if value["set"] else None
        elif rule == "exit":
            job[path] = wait_status(record[path])
        elif rule == "state":
            states = record["job_state"]
            flag = next((s for s in STATE_FLAG_PRECEDENCE if s in states), None)
            job[path] = flag or states[0]
        elif rule == "tres":
            # Slurm 23.02 writes requested GPUs as `gres:gpu:N` (src/common/slurm_opt.c, xfmt_tres);
            # 23.11 changed that to `gres/gpu:N`, whatever the data_parser version.
            job[path] = record[path].replace("gres/", "gres:")
        elif rule == "qos":
            job[path] = record["qos"] or None
        elif rule == "flags":
            job[path] = [f for f in record["flags"] if f in V39_JOB_FLAGS]
        elif rule == "power":
            job[path] = {"flags": []}
        elif rule == "show_flags":
            # The request's show flags, packed with every job: `squeue --all --json` asks SHOW_ALL
            # and SHOW_DETAIL (--json sets detail_flag), slurm_load_jobs() adds SHOW_LOCAL outside a
            # federation (22.05 shows the same three as SHOW_ALL, SHOW_DETAIL, SHOW_LOCAL).
            job[path] = ["ALL", "DETAIL", "LOCAL"]
        else:
            raise ValueError(rule)
    return job


def v39(directory):
    jobs = [to_v39(r) for r in picked(directory, lambda s: f"slurmrestd-v0.0.40-jobs_24.11_{s}.json")]
    return {
        "meta": {
            "plugins": {
                "data_parser": "data_parser/v0.0.39",
                "accounting_storage": "accounting_storage/none",
            },
            "command": ["squeue", "--all", "--json"],
            "Slurm": {
                "version": {"major": 23, "micro": 7, "minor": 2},
                "release": "23.02.7",
            },
        },
        "jobs": jobs,
        "errors": [],
        "warnings": [],
    }


def to_v43(record):
    job = {}
    for key, value in record.items():
        if key in ("standard_input", "standard_output", "standard_error"):
            continue
        job[key] = value
        if key == "licenses":
            job["licenses_allocated"] = ""
        elif key == "scheduled_nodes":
            job["segment_size"] = 0
        elif key == "state_reason":
            # The raw paths as submitted (patterns unexpanded), then the expanded ones.
            # Every lab job was submitted with `-o DIR/%x_%j.log` and neither -i nor -e: the job
            # keeps no stdin or stderr path (earlier versions show /dev/null and the stdout path,
            # the defaults slurm_get_job_stdin/stderr fill in), and an empty path expands to "".
            job["standard_input"] = ""
            job["standard_output"] = os.path.join(
                os.path.dirname(record["standard_output"]), "%x_%j.log"
            )
            job["standard_error"] = ""
            job["stdin_expanded"] = ""
            job["stdout_expanded"] = record["standard_output"]
            job["stderr_expanded"] = ""
    return job


def v43(directory):
    base = lambda s: f"squeue-states-all_24.11_{s}.json"  # noqa: E731
    template = load(os.path.join(directory, base("running")))
    jobs = [to_v43(r) for r in picked(directory, base)]
    meta = json.loads(json.dumps(template["meta"]))
    meta["plugin"]["data_parser"] = "data_parser/v0.0.43"
    meta["slurm"]["version"] = {"major": "25", "micro": "3", "minor": "05"}
    meta["slurm"]["release"] = "25.05.3"
    out = {}
    for key, value in template.items():
        out[key] = {"jobs": jobs, "meta": meta}.get(key, value)
    return out


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("v0.0.39", "v0.0.43"):
        sys.exit(__doc__)
    document = v39(sys.argv[2]) if sys.argv[1] == "v0.0.39" else v43(sys.argv[2])
    json.dump(document, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
