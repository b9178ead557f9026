//! Tests of the rest module.

use std::io::{Read, Write};
use std::sync::mpsc;

use super::*;

fn unix_client(path: PathBuf) -> SlurmRest {
    let mut options = RestOptions::new(RestEndpoint::Unix(path));
    options.timeout = Duration::from_millis(500);
    SlurmRest::new(options).unwrap()
}

/// A one-connection HTTP server on a unix socket that answers `status` and `body`, and hands over
/// the request it got.
fn serve_once(
    status: &'static str,
    body: &'static str,
) -> (tempfile::TempDir, PathBuf, mpsc::Receiver<String>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rest.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let Ok((mut stream, _)) = listener.accept() else {
            return;
        };
        let request = read_request(&mut stream);
        let _ = write!(
            stream,
            "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = sender.send(request);
    });
    (dir, path, receiver)
}

fn read_request(stream: &mut impl Read) -> String {
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 4096];
    while let Ok(read) = stream.read(&mut buffer) {
        if read == 0 {
            break;
        }
        bytes.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&bytes);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())
                        .flatten()
                })
                .unwrap_or(0);
            if body.len() >= length {
                break;
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// What slurmrestd 22.05.8 answered for `GET /job/999`.
const UNKNOWN_JOB: &str = r#"{"meta": {}, "errors": [{"description": "Unable to find JobId=999",
    "error_number": 2017, "error": "Invalid job id specified", "source": "slurm_load_job"}], "jobs": []}"#;

#[test]
fn each_request_is_described_as_the_http_line_and_body_it_sends() {
    let rest = unix_client("/run/rest.sock".into());
    let update = RestRequest::UpdateJob {
        job_id: "42".into(),
        update: JobUpdate {
            exclude_nodes: Some(vec!["n2".into()]),
            ..JobUpdate::default()
        },
    };
    assert_eq!(
        rest.describe(&update),
        r#"POST /slurm/v0.0.38/job/42 {"exclude_nodes":"n2"}"#
    );
    let release_now = RestRequest::UpdateJob {
        job_id: "42".into(),
        update: JobUpdate {
            exclude_nodes: Some(vec!["n2".into(), "n3".into()]),
            hold: Some(false),
            start_now: true,
        },
    };
    assert_eq!(
        rest.describe(&release_now),
        r#"POST /slurm/v0.0.38/job/42 {"begin_time":"now","exclude_nodes":"n2,n3","hold":false}"#
    );
    assert_eq!(
        rest.describe(&RestRequest::Cancel { job_id: "7".into() }),
        "DELETE /slurm/v0.0.38/job/7"
    );
    assert_eq!(rest.describe(&RestRequest::Jobs), "GET /slurm/v0.0.38/jobs");
}

#[test]
fn a_submission_is_described_without_its_script_or_environment_values() {
    let rest = unix_client("/run/rest.sock".into());
    let options = SubmitOptions {
        name: "llama".into(),
        exclude: vec!["n1".into()],
        work_dir: "/scratch/llama".into(),
        environment: BTreeMap::from([("WANDB_API_KEY".into(), "secret".into())]),
        ..SubmitOptions::default()
    };
    let shown = rest.describe(&RestRequest::Submit {
        script: "#!/bin/bash\nsrun train.py\n".into(),
        options,
    });
    assert_eq!(
        shown,
        r#"POST /slurm/v0.0.38/job/submit {"job":{"current_working_directory":"/scratch/llama","environment":"<1 variables>","exclude_nodes":"n1","name":"llama"},"script":"<script, 2 lines>"}"#
    );
    assert!(!shown.contains("secret"));
}

#[test]
fn a_submission_without_environment_gets_a_path_because_slurm_requires_one() {
    let job = SubmitOptions {
        work_dir: "/w".into(),
        ..SubmitOptions::default()
    }
    .job();
    assert_eq!(job["environment"], json!({ "PATH": FALLBACK_PATH }));
    assert_eq!(job["current_working_directory"], "/w");
    assert!(job.get("nodes").is_none());
}

#[test]
fn a_node_count_is_sent_as_a_number_since_slurm_misreads_the_schemas_array() {
    let job = SubmitOptions {
        nodes: Some(2),
        partition: Some("gpu".into()),
        work_dir: "/w".into(),
        ..SubmitOptions::default()
    }
    .job();
    assert_eq!(job["nodes"], json!(2));
    assert_eq!(job["partition"], "gpu");
}

#[test]
fn slurm_errors_map_to_the_backend_error_they_mean() {
    let errors = |text: &str| slurm_errors(&serde_json::from_str(text).unwrap());
    let unknown = classify("GET /job/999", Some("999"), &errors(UNKNOWN_JOB));
    assert!(matches!(unknown, BackendError::NoSuchJob(id) if id == "999"));

    let denied = classify(
        "DELETE /slurm/v0.0.38/job/1",
        Some("1"),
        &errors(
            r#"{"errors": [{"description": "unable to kill JobId=1 with signal 9: Access/permission denied",
            "error_number": 2002, "error": "Access/permission denied", "source": "slurm_kill_job"}]}"#,
        ),
    );
    let BackendError::Refused { command, message } = denied else {
        panic!("{denied:?}")
    };
    assert_eq!(command, "DELETE /slurm/v0.0.38/job/1");
    assert!(message.contains("unable to kill JobId=1"), "{message}");

    // With slurmctld gone, slurmrestd says it cannot find a job that exists.
    let lost = classify(
        "GET /job/1",
        Some("1"),
        &errors(
            r#"{"errors": [{"description": "Unable to find JobId=1", "error_number": -1,
            "error": "Unspecified error", "source": "slurm_load_job"}]}"#,
        ),
    );
    assert!(matches!(lost, BackendError::Unavailable(_)), "{lost:?}");
    let comm = classify(
        "DELETE /job/1",
        Some("1"),
        &errors(
            r#"{"errors": [{"error_number": 1800, "error": "Unable to contact slurm controller (connect failure)"}]}"#,
        ),
    );
    assert!(matches!(comm, BackendError::Unavailable(_)), "{comm:?}");

    // A key v0.0.38 does not take for updates: error 1 (EPERM) is not a refusal of rights.
    let disabled = classify(
        "POST /job/1",
        Some("1"),
        &errors(
            r#"{"errors": [{"description": "Disabled key: \"excluded_nodes\"", "error_number": 1,
            "error": "Operation not permitted", "source": "openapi specification"},
            {"description": "job parsing failed", "error_number": 9001, "error": "Failure during parsing"}]}"#,
        ),
    );
    let BackendError::Invalid(message) = disabled else {
        panic!("{disabled:?}")
    };
    assert!(message.contains("Disabled key"), "{message}");
    assert!(message.contains("Failure during parsing"), "{message}");
}

#[test]
fn job_ids_that_would_change_the_url_are_refused_before_sending() {
    assert!(checked_job_id("4201").is_ok());
    assert!(checked_job_id("4201_3").is_ok());
    for bad in ["", "../ping", "1?x=1", "1 2", "1/2"] {
        assert!(
            matches!(checked_job_id(bad), Err(BackendError::Invalid(_))),
            "{bad}"
        );
    }
}

#[test]
fn https_and_odd_versions_are_refused_when_configured() {
    let https = SlurmRest::new(RestOptions::new(RestEndpoint::Http(
        "https://head:6820".into(),
    )));
    assert!(matches!(https, Err(BackendError::Invalid(_))));
    let mut options = RestOptions::new(RestEndpoint::Unix("/s".into()));
    options.api_version = "v0.0.38/../x".into();
    assert!(matches!(
        SlurmRest::new(options),
        Err(BackendError::Invalid(_))
    ));
}

#[test]
fn the_token_stays_out_of_debug_output() {
    let mut options = RestOptions::new(RestEndpoint::Http("http://head:6820".into()));
    options.token = Some("eyJsecret".into());
    assert!(!format!("{options:?}").contains("eyJsecret"));
}

#[tokio::test]
async fn an_unknown_job_is_none() {
    let (_dir, path, _) = serve_once("500 Internal Server Error", UNKNOWN_JOB);
    assert_eq!(unix_client(path).job("999").await.unwrap(), None);
}

#[tokio::test]
async fn a_garbled_answer_is_unavailable_with_an_excerpt() {
    let (_dir, path, _) = serve_once("200 OK", "{\"jobs\": [ {\"job_id\": 4");
    let err = unix_client(path).jobs().await.unwrap_err();
    let BackendError::Unavailable(message) = err else {
        panic!("{err:?}")
    };
    assert!(message.contains("{\"jobs\": [ {\"job_id\": 4"), "{message}");
}

#[tokio::test]
async fn an_answer_of_the_wrong_shape_is_unavailable_not_a_panic() {
    let (_dir, path, _) = serve_once("200 OK", r#"{"errors": "none", "jobs": 3}"#);
    let err = unix_client(path).jobs().await.unwrap_err();
    assert!(matches!(err, BackendError::Unavailable(_)), "{err:?}");
    let (_dir, path, _) = serve_once("200 OK", "[1, 2]");
    let err = unix_client(path).ping().await.unwrap_err();
    assert!(matches!(err, BackendError::Unavailable(_)), "{err:?}");
}

#[tokio::test]
async fn http_401_is_refused_with_the_request() {
    let (_dir, path, _) = serve_once("401 Unauthorized", "Authentication failure");
    let err = unix_client(path).cancel("42").await.unwrap_err();
    let BackendError::Refused { command, message } = err else {
        panic!("{err:?}")
    };
    assert_eq!(command, "DELETE /slurm/v0.0.38/job/42");
    assert!(message.contains("Authentication failure"), "{message}");
}

#[tokio::test]
async fn a_missing_socket_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let err = unix_client(dir.path().join("absent.sock"))
        .ping()
        .await
        .unwrap_err();
    let BackendError::Unavailable(message) = err else {
        panic!("{err:?}")
    };
    assert!(message.contains("absent.sock"), "{message}");
}

#[tokio::test]
async fn a_server_that_never_answers_is_unavailable_after_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("silent.sock");
    // Accepted by the kernel's backlog, never read: the request hangs until the client gives up.
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let err = unix_client(path).jobs().await.unwrap_err();
    let BackendError::Unavailable(message) = err else {
        panic!("{err:?}")
    };
    assert!(message.contains("no answer"), "{message}");
}

#[tokio::test]
async fn a_held_submission_returns_its_job_id_despite_slurms_notice() {
    let (_dir, path, request) = serve_once(
        "200 OK",
        r#"{"errors": [{"error_code": 2042, "error": "Job is in held state, pending scheduler release"}],
            "job_id": 3, "step_id": "BATCH", "job_submit_user_msg": ""}"#,
    );
    let options = SubmitOptions {
        name: "held".into(),
        work_dir: "/w".into(),
        ..SubmitOptions::default()
    };
    let job_id = unix_client(path)
        .submit("#!/bin/bash\ntrue\n", &options)
        .await
        .unwrap();
    assert_eq!(job_id, "3");
    let request = request.recv().unwrap();
    assert!(
        request.starts_with("POST /slurm/v0.0.38/job/submit "),
        "{request}"
    );
    assert!(
        request.contains(r##""script":"#!/bin/bash\ntrue\n""##),
        "{request}"
    );
}

#[tokio::test]
async fn over_tcp_the_user_name_and_token_go_in_slurms_headers() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let Ok((mut stream, _)) = listener.accept() else {
            return;
        };
        let request = read_request(&mut stream);
        let body = r#"{"errors": [], "jobs": []}"#;
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = sender.send(request);
    });
    let mut options = RestOptions::new(RestEndpoint::Http(format!("http://{address}/")));
    options.user_name = Some("alice".into());
    options.token = Some("eyJtoken".into());
    let rest = SlurmRest::new(options).unwrap();
    assert_eq!(rest.jobs().await.unwrap(), r#"{"errors": [], "jobs": []}"#);
    let request = receiver.recv().unwrap().to_ascii_lowercase();
    assert!(request.starts_with("get /slurm/v0.0.38/jobs "), "{request}");
    assert!(request.contains("x-slurm-user-name: alice"), "{request}");
    assert!(
        request.contains("x-slurm-user-token: eyjtoken"),
        "{request}"
    );
}

#[tokio::test]
async fn requeue_and_drain_say_which_scontrol_command_to_run_instead() {
    let rest = unix_client("/run/rest.sock".into());
    let requeue = rest.requeue("42").await.unwrap_err().to_string();
    assert!(requeue.contains("scontrol requeuehold 42"), "{requeue}");
    let drain = rest
        .drain_node("n3", "xid 79")
        .await
        .unwrap_err()
        .to_string();
    assert!(drain.contains("scontrol update NodeName=n3"), "{drain}");
}
