//! Tests of the rest module.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::sync::mpsc;

use serde_json::{Map, json};

use super::request::FALLBACK_PATH;
use super::*;
use crate::backend::slurm::token::TokenSource;

/// A client of 22.05's API (pinned, so that it sends no negotiation first).
fn unix_client(path: PathBuf) -> SlurmRest {
    let mut options = RestOptions::new(RestEndpoint::Unix(path));
    options.timeout = Duration::from_millis(500);
    options.api_version = Some(ApiVersion::V38);
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
    .job(ApiVersion::V38);
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
    .job(ApiVersion::V38);
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
    options.api_version = ApiVersion::parse("v0.0.37");
    assert!(matches!(
        SlurmRest::new(options),
        Err(BackendError::Invalid(_))
    ));
}

#[test]
fn the_token_stays_out_of_debug_output() {
    let mut options = RestOptions::new(RestEndpoint::Http("http://head:6820".into()));
    options.token = TokenSource::Fixed("eyJsecret".into());
    assert!(!format!("{options:?}").contains("eyJsecret"));
    let rest = SlurmRest::new(options).unwrap();
    assert!(!format!("{:?}", rest.token_source()).contains("eyJsecret"));
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
async fn http_401_on_the_socket_is_a_credential_error_naming_rest_auth_local() {
    let (_dir, path, _) = serve_once("401 Unauthorized", "Authentication failure");
    let err = unix_client(path).cancel("42").await.unwrap_err();
    let BackendError::Credentials(message) = err else {
        panic!("{err:?}")
    };
    assert!(
        message.starts_with("DELETE /slurm/v0.0.38/job/42: slurmrestd answered HTTP 401"),
        "{message}"
    );
    assert!(message.contains("Authentication failure"), "{message}");
    assert!(message.contains("rest_auth/local"), "{message}");
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
    options.token = TokenSource::Fixed("eyJtoken".into());
    options.api_version = Some(ApiVersion::V38);
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

/// A slurmrestd on a unix socket that answers each connection with the next `(status, body)` and
/// hands over the requests; `before` runs before answering the connection of that index.
fn serve_script(
    answers: Vec<(&'static str, String)>,
    before: impl Fn(usize) + Send + 'static,
) -> (tempfile::TempDir, PathBuf, mpsc::Receiver<String>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rest.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for (index, (status, body)) in answers.into_iter().enumerate() {
            let Ok((mut stream, _)) = listener.accept() else {
                return;
            };
            let request = read_request(&mut stream);
            before(index);
            // Recorded before the answer: a client that has its answer finds its request listed.
            let _ = sender.send(request);
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (dir, path, receiver)
}

fn client_with(path: PathBuf, token: TokenSource, version: Option<ApiVersion>) -> SlurmRest {
    let mut options = RestOptions::new(RestEndpoint::Unix(path));
    options.timeout = Duration::from_secs(2);
    options.token = token;
    options.api_version = version;
    SlurmRest::new(options).unwrap()
}

/// The first line of each request.
fn request_lines(requests: &mpsc::Receiver<String>) -> Vec<String> {
    requests
        .try_iter()
        .map(|request| request.lines().next().unwrap_or("").to_string())
        .collect()
}

const NO_JOBS: &str = r#"{"meta": {}, "errors": [], "warnings": [], "jobs": []}"#;
/// What slurmrestd answers for a path it does not have (24.11.5, measured).
const NO_SUCH_PATH: &str = "Unable find requested URL. Please view /openapi/v3 for API reference.";

fn spec(versions: &[&str]) -> String {
    let paths: Map<String, Value> = versions
        .iter()
        .flat_map(|version| {
            [
                (format!("/slurm/{version}/jobs/"), json!({})),
                (format!("/slurmdb/{version}/jobs/"), json!({})),
            ]
        })
        .collect();
    json!({"openapi": "3.0.2", "paths": paths}).to_string()
}

/// A JWT-shaped token (unsigned: only Slurm checks signatures) for `user`, expiring at `exp`.
fn jwt(exp: i64, user: &str) -> String {
    use base64::Engine as _;
    let encode = |part: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(part);
    format!(
        "{}.{}.c2lnbmF0dXJl",
        encode(r#"{"alg":"HS256","typ":"JWT"}"#),
        encode(&format!(r#"{{"exp":{exp},"iat":0,"sun":"{user}"}}"#))
    )
}

#[tokio::test]
async fn the_newest_version_the_specification_offers_is_spoken_and_remembered() {
    let (_dir, path, requests) = serve_script(
        vec![
            ("200 OK", spec(&["v0.0.40", "v0.0.41", "v0.0.42"])),
            ("200 OK", NO_JOBS.into()),
            ("200 OK", NO_JOBS.into()),
        ],
        |_| {},
    );
    let rest = client_with(path, TokenSource::None, None);
    assert_eq!(rest.negotiated(), None);
    assert!(rest.describe(&RestRequest::Jobs).contains("<negotiated>"));
    rest.jobs().await.unwrap();
    rest.jobs().await.unwrap();
    assert_eq!(
        request_lines(&requests),
        [
            "GET /openapi/v3 HTTP/1.1",
            "GET /slurm/v0.0.42/jobs HTTP/1.1",
            "GET /slurm/v0.0.42/jobs HTTP/1.1"
        ]
    );
    let negotiated = rest.negotiated().unwrap();
    assert_eq!(negotiated.version(), ApiVersion::V42);
    assert_eq!(
        negotiated.to_string(),
        "v0.0.42 (slurmrestd offers v0.0.40, v0.0.41, v0.0.42; runguard speaks v0.0.38 to v0.0.43)"
    );
}

#[tokio::test]
async fn without_a_specification_the_versions_are_probed_newest_first() {
    let mut answers = vec![("404 Not Found", NO_SUCH_PATH.to_string())];
    // v0.0.43 .. v0.0.39 unknown, v0.0.38 answers.
    answers.extend((0..5).map(|_| ("404 Not Found", NO_SUCH_PATH.to_string())));
    answers.push((
        "200 OK",
        r#"{"pings": [{"ping": "UP"}], "errors": []}"#.into(),
    ));
    answers.push(("200 OK", NO_JOBS.into()));
    let (_dir, path, requests) = serve_script(answers, |_| {});
    let rest = client_with(path, TokenSource::None, None);
    rest.jobs().await.unwrap();
    let lines = request_lines(&requests);
    assert_eq!(lines[1], "GET /slurm/v0.0.43/ping HTTP/1.1");
    assert_eq!(lines[6], "GET /slurm/v0.0.38/ping HTTP/1.1");
    assert_eq!(lines[7], "GET /slurm/v0.0.38/jobs HTTP/1.1");
    assert_eq!(rest.negotiated(), Some(Negotiated::Probed(ApiVersion::V38)));
}

#[tokio::test]
async fn an_upgraded_slurmrestd_is_asked_again_and_the_request_resent() {
    let (_dir, path, requests) = serve_script(
        vec![
            ("200 OK", spec(&["v0.0.38"])),
            ("200 OK", NO_JOBS.into()),
            // Upgraded from 22.05 to 24.11 meanwhile.
            ("404 Not Found", NO_SUCH_PATH.into()),
            ("200 OK", spec(&["v0.0.40", "v0.0.41", "v0.0.42"])),
            ("200 OK", NO_JOBS.into()),
        ],
        |_| {},
    );
    let rest = client_with(path, TokenSource::None, None);
    rest.jobs().await.unwrap();
    rest.jobs().await.unwrap();
    assert_eq!(
        request_lines(&requests)[2..],
        [
            "GET /slurm/v0.0.38/jobs HTTP/1.1",
            "GET /openapi/v3 HTTP/1.1",
            "GET /slurm/v0.0.42/jobs HTTP/1.1"
        ]
    );
    assert_eq!(rest.negotiated().unwrap().version(), ApiVersion::V42);
}

#[tokio::test]
async fn a_job_slurm_does_not_know_is_not_a_path_slurmrestd_lacks() {
    // 24.11.5's answer for GET /slurm/v0.0.42/job/99999: HTTP 404 with Slurm's JSON.
    let unknown = r#"{"jobs": [], "errors": [{"description": "Unable to query JobId=99999",
        "error_number": 2017, "error": "Invalid job id specified", "source": "_handle_job_get"}], "warnings": []}"#;
    let (_dir, path, requests) = serve_script(vec![("404 Not Found", unknown.into())], |_| {});
    let rest = client_with(path, TokenSource::None, Some(ApiVersion::V42));
    assert_eq!(rest.job("99999").await.unwrap(), None);
    assert_eq!(request_lines(&requests).len(), 1);
}

#[tokio::test]
async fn a_pinned_version_slurmrestd_lacks_says_so() {
    let (_dir, path, _) = serve_script(vec![("404 Not Found", NO_SUCH_PATH.into())], |_| {});
    let rest = client_with(path, TokenSource::None, Some(ApiVersion::V38));
    let err = rest.jobs().await.unwrap_err();
    let BackendError::Unavailable(message) = err else {
        panic!("{err:?}")
    };
    assert!(
        message.contains("does not serve v0.0.38, which rest_api_version pins"),
        "{message}"
    );
}

#[tokio::test]
async fn a_slurmrestd_offering_only_versions_runguard_does_not_speak_is_unavailable() {
    let (_dir, path, _) = serve_script(vec![("200 OK", spec(&["v0.0.36", "v0.0.37"]))], |_| {});
    let err = client_with(path, TokenSource::None, None)
        .jobs()
        .await
        .unwrap_err();
    let BackendError::Unavailable(message) = err else {
        panic!("{err:?}")
    };
    assert!(
        message.contains("offers v0.0.36, v0.0.37, none of which"),
        "{message}"
    );
}

#[tokio::test]
async fn a_refused_token_is_read_again_and_the_request_sent_once_more() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jwt");
    let far = Utc::now().timestamp() + 3600;
    let (old, fresh) = (jwt(far, "nobody"), jwt(far + 60, "nobody"));
    std::fs::write(&file, &old).unwrap();
    let rewrite = file.clone();
    let renewed = fresh.clone();
    let (_sock_dir, path, requests) = serve_script(
        vec![
            (
                "200 OK",
                r#"{"pings": [{"pinged": "UP"}], "errors": []}"#.into(),
            ),
            ("401 Unauthorized", "Authentication failure".into()),
            ("200 OK", NO_JOBS.into()),
        ],
        // Slurm's key was rotated and the file renewed while runguard held the old token.
        move |index| {
            if index == 1 {
                std::fs::write(&rewrite, &renewed).unwrap();
            }
        },
    );
    let rest = client_with(path, TokenSource::File(file), Some(ApiVersion::V42));
    rest.ping().await.unwrap();
    rest.jobs().await.unwrap();
    let tokens: Vec<String> = requests
        .try_iter()
        .map(|request| {
            request
                .lines()
                .find_map(|line| line.strip_prefix("x-slurm-user-token: "))
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert_eq!(tokens, [old.clone(), old, fresh]);
}

#[tokio::test]
async fn a_refusal_that_stays_is_a_credential_error_without_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jwt");
    let token = jwt(Utc::now().timestamp() + 3600, "nobody");
    std::fs::write(&file, &token).unwrap();
    let (_sock_dir, path, requests) = serve_script(
        vec![(
            "401 Unauthorized",
            format!("Authentication failure for {token}"),
        )],
        |_| {},
    );
    let rest = client_with(path, TokenSource::File(file.clone()), Some(ApiVersion::V42));
    let err = rest.jobs().await.unwrap_err();
    let BackendError::Credentials(message) = err else {
        panic!("{err:?}")
    };
    assert!(!message.contains(&token), "{message}");
    assert!(
        message.contains(&format!("the token in {}", file.display())),
        "{message}"
    );
    assert!(message.contains("has not expired"), "{message}");
    // The file held the same token: nothing to send again.
    assert_eq!(request_lines(&requests).len(), 1);
}

/// What slurmrestd 22.05.8 answered for `GET /slurm/v0.0.38/jobs` when slurmctld (AuthAltTypes=auth/jwt)
/// refused the token: slurmctld logged "auth_p_verify: initial jwt_decode failure".
const REFUSED_BY_SLURMCTLD_22_05: &str = r#"{"meta": {"plugin": {"type": "openapi\/v0.0.38"}},
    "errors": [{"description": "Failed while looking for jobs", "error_number": -1,
    "error": "Unspecified error", "source": "slurm_load_jobs"}], "jobs": []}"#;

#[tokio::test]
async fn a_token_slurmctld_refuses_is_told_from_a_lost_controller_by_its_expiry_or_shape() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jwt");
    for (token, fault) in [
        (jwt(Utc::now().timestamp() - 60, "nobody"), "expired at"),
        ("garbage".to_string(), "is not a JSON web token"),
    ] {
        std::fs::write(&file, &token).unwrap();
        let (_sock_dir, path, _) = serve_script(
            vec![(
                "500 Internal Server Error",
                REFUSED_BY_SLURMCTLD_22_05.into(),
            )],
            |_| {},
        );
        let rest = client_with(path, TokenSource::File(file.clone()), Some(ApiVersion::V38));
        let err = rest.jobs().await.unwrap_err();
        let BackendError::Credentials(message) = err else {
            panic!("{err:?}")
        };
        assert!(message.contains(fault), "{message}");
        assert!(message.contains("Unspecified error"), "{message}");
    }

    // A token that looks right: the same answer may be a controller that went away.
    std::fs::write(&file, jwt(Utc::now().timestamp() + 3600, "nobody")).unwrap();
    let (_sock_dir, path, _) = serve_script(
        vec![(
            "500 Internal Server Error",
            REFUSED_BY_SLURMCTLD_22_05.into(),
        )],
        |_| {},
    );
    let rest = client_with(path, TokenSource::File(file.clone()), Some(ApiVersion::V38));
    let err = rest.jobs().await.unwrap_err();
    assert!(matches!(err, BackendError::Unavailable(_)), "{err:?}");
    assert!(rest.token_in_doubt());
}

#[tokio::test]
async fn a_cancel_answers_each_jobs_outcome_from_v0_0_42_on() {
    // 24.11.5's answers to DELETE /slurm/v0.0.42/job/N (HTTP 200 both).
    let unknown = r#"{"status": [{"error": {"string": "Invalid job id specified", "code": 2017,
        "message": "Invalid job id specified"}, "step_id": "99999", "job_id": {"set": false,
        "infinite": false, "number": 0}, "federation": {"sibling": ""}}], "errors": [], "warnings": []}"#;
    let ended = r#"{"status": [{"error": {"string": "Job/step already completing or completed",
        "code": 2021, "message": "Job/step already completing or completed"}, "step_id": "1",
        "job_id": {"set": true, "infinite": false, "number": 1}, "federation": {"sibling": ""}}],
        "errors": [], "warnings": []}"#;
    // Another user's job, as nobody (24.11.5, HTTP 500).
    let not_permitted = r#"{"status": [], "errors": [{"description": "Signal request failed",
        "error_number": 1, "error": "Operation not permitted", "source": "slurm_kill_jobs()"}], "warnings": []}"#;
    let (_dir, path, _) = serve_script(
        vec![
            ("200 OK", unknown.into()),
            ("200 OK", ended.into()),
            ("500 Internal Server Error", not_permitted.into()),
        ],
        |_| {},
    );
    let rest = client_with(path, TokenSource::None, Some(ApiVersion::V42));
    let err = rest.cancel("99999").await.unwrap_err();
    assert!(
        matches!(err, BackendError::NoSuchJob(ref id) if id == "99999"),
        "{err:?}"
    );
    rest.cancel("1").await.unwrap();
    let err = rest.cancel("2").await.unwrap_err();
    assert!(matches!(err, BackendError::Refused { .. }), "{err:?}");
}

#[test]
fn requests_take_the_shapes_of_the_version_they_are_sent_at() {
    let options = SubmitOptions {
        name: "llama".into(),
        nodes: Some(2),
        exclude: vec!["n1".into()],
        work_dir: "/w".into(),
        ..SubmitOptions::default()
    };
    let job = options.job(ApiVersion::V42);
    assert_eq!(job["nodes"], "2");
    assert_eq!(job["excluded_nodes"], json!(["n1"]));
    assert_eq!(job["environment"], json!([format!("PATH={FALLBACK_PATH}")]));
    let update = JobUpdate {
        exclude_nodes: Some(vec!["n2".into()]),
        hold: Some(false),
        start_now: true,
    };
    assert_eq!(
        update.body(ApiVersion::V42),
        json!({"excluded_nodes": ["n2"], "hold": false, "begin_time": "now"})
    );
    assert_eq!(
        update.body(ApiVersion::V38),
        json!({"exclude_nodes": "n2", "hold": false, "begin_time": "now"})
    );
    // v0.0.39 reads begin_time as a number only.
    assert!(update.body(ApiVersion::parse("v0.0.39").unwrap())["begin_time"].is_i64());
}
