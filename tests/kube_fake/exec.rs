//! `pods/{name}/exec` over a WebSocket, as the API server serves it to kubectl (1.31 and later use
//! WebSockets for exec by default) and to client libraries: the request's `command` (repeated, the
//! argv), `container`, `stdin`, `stdout`, `stderr` and `tty` parameters are checked before the
//! HTTP/1.1 upgrade, which negotiates `v5.channel.k8s.io` or `v4.channel.k8s.io` in the client's order
//! of preference. Every binary message then starts with its channel: 0 stdin, 1 stdout, 2 stderr,
//! 3 the exit status as a `metav1.Status` (JSON since v4), 4 terminal resizes; in v5 the client
//! closes a channel with `[255, N]` (its stdin's end: `[255, 0]`), which is recorded. The server says
//! the streams are up with an empty message on the lowest channel the client reads, as the kubelet
//! does, and ends them all by closing the connection normally (1000) after the status: a client
//! reads the status channel to its end, and kubectl 1.32 discards a `255` from the server as an
//! unknown stream.
//!
//! The containers run nothing: `kill -s SIGNAL 1` and `kill -SIGNAL 1` are understood — the signal is
//! recorded as received by the container's main process and the test's handler is called, which may
//! write to the container's log what a training process handling the signal would. Any other
//! command exits 127 with the runtime's message, as in a container without that binary; a `kill` of
//! another PID or an unknown signal exits 1 with kill's own message.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use hyper::header::{
    CONNECTION, HeaderMap, HeaderValue, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY,
    SEC_WEBSOCKET_PROTOCOL, SEC_WEBSOCKET_VERSION, UPGRADE,
};
use hyper::upgrade::OnUpgrade;
use hyper::{Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::body::{self, ResponseBody};
use super::resources::{self, RESOURCES};
use super::shared::{Shared, lock};
use super::status::ApiError;
use super::store::{ContainerKey, LogLine, Store};

/// The subprotocols served, most preferred first.
pub const V5: &str = "v5.channel.k8s.io";
pub const V4: &str = "v4.channel.k8s.io";
const SERVED: [&str; 2] = [V5, V4];

const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const STATUS: u8 = 3;
/// v5: the client's `[CLOSE, N]` says channel N has ended.
const CLOSE: u8 = 255;

/// How long the server waits for the client to close after the status was sent.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// Every signal name Linux has, as `kill -l` lists them.
const LINUX_SIGNALS: [&str; 31] = [
    "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV", "USR2",
    "PIPE", "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN", "TTOU", "URG",
    "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS",
];

/// An exec request as its query and path give it.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    pub namespace: String,
    pub pod: String,
    pub container: Option<String>,
    /// The argv, from the repeated `command` parameter.
    pub command: Vec<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// One exec as the server ran it.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecRecord {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub command: Vec<String>,
    /// The subprotocol negotiated.
    pub protocol: String,
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
    /// The channels the client closed with v5's CLOSE signal (its stdin: 0).
    pub closed_by_client: Vec<u8>,
}

/// A signal a container's main process received through `kill`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedSignal {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// Its name without SIG: `USR1`.
    pub signal: String,
}

/// What the test does when a container's main process receives a signal (see
/// [`super::FakeKube::on_signal`]).
pub type SignalHandler = Arc<dyn Fn(&ReceivedSignal, &ContainerLog) + Send + Sync>;

/// A container's log, for a signal handler to write to as the container's process would.
pub struct ContainerLog {
    shared: Arc<Shared>,
    key: ContainerKey,
}

impl ContainerLog {
    /// Appends a line, stamped with the server clock.
    pub fn append(&self, line: &str) {
        let line = LogLine {
            time: chrono::Utc::now(),
            text: line.to_string(),
        };
        self.shared
            .write(|store| store.append_log(self.key.clone(), line));
    }
}

/// What the exec records and calls, kept in [`Shared`].
#[derive(Default)]
pub struct ExecState {
    pub records: Vec<ExecRecord>,
    pub signals: Vec<ReceivedSignal>,
    pub handler: Option<SignalHandler>,
}

fn pods() -> usize {
    resources::by_plural("", "pods").expect("the resource table serves pods")
}

/// The container the exec runs in, refused as the API server refuses it: a missing pod, a container
/// the pod does not have or that does not run, a pod not bound to a node, or no container named
/// where there are several.
fn container_of(store: &Store, request: &ExecRequest) -> Result<String, ApiError> {
    let pod = store
        .get(pods(), &request.namespace, &request.pod)
        .ok_or_else(|| ApiError::not_found(&RESOURCES[pods()], &request.pod))?;
    let names: Vec<&str> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|container| container["name"].as_str())
        .collect();
    let container = match request.container.as_deref().filter(|name| !name.is_empty()) {
        Some(name) if names.contains(&name) => name.to_string(),
        Some(name) => {
            return Err(ApiError::bad_request(format!(
                "container {name} is not valid for pod {}",
                request.pod
            )));
        }
        None if names.len() == 1 => names[0].to_string(),
        None => {
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {}, choose one of: [{}]",
                request.pod,
                names.join(" ")
            )));
        }
    };
    if pod["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .is_empty()
    {
        return Err(ApiError::bad_request(format!(
            "pod {} does not have a host assigned",
            request.pod
        )));
    }
    let running = pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|status| {
            status["name"].as_str() == Some(container.as_str())
                && status["state"]["running"].is_object()
        });
    if !running {
        return Err(ApiError::bad_request(format!(
            "unable to upgrade connection: container not found (\"{container}\")"
        )));
    }
    Ok(container)
}

fn header_values<'a>(headers: &'a HeaderMap, name: &hyper::header::HeaderName) -> Vec<&'a str> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .filter(|value| !value.is_empty())
        .collect()
}

/// The subprotocol to speak: the first the client offers that is served.
fn negotiate(headers: &HeaderMap) -> Result<&'static str, ApiError> {
    let offered = header_values(headers, &SEC_WEBSOCKET_PROTOCOL);
    offered
        .iter()
        .find_map(|offer| SERVED.iter().find(|served| *served == offer).copied())
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "unable to upgrade connection: requested protocol(s) are not supported: [{}]; \
                 supports [{}]",
                offered.join(" "),
                SERVED.join(" ")
            ))
        })
}

/// Checks the request and its upgrade headers; answers `101 Switching Protocols` and runs the
/// session on the upgraded connection.
pub fn start(
    shared: &Arc<Shared>,
    request: ExecRequest,
    headers: &HeaderMap,
    upgrade: &Mutex<Option<OnUpgrade>>,
) -> Result<Response<ResponseBody>, ApiError> {
    if request.command.is_empty() {
        return Err(ApiError::bad_request("you must specify at least 1 command"));
    }
    if !(request.stdin || request.stdout || request.stderr) {
        return Err(ApiError::bad_request(
            "you must specify at least 1 of stdin, stdout, stderr",
        ));
    }
    if request.tty && request.stderr {
        return Err(ApiError::bad_request("tty and stderr cannot both be true"));
    }
    let container = shared.read(|store| container_of(store, &request))?;
    let wants_websocket = header_values(headers, &CONNECTION)
        .iter()
        .any(|token| token.eq_ignore_ascii_case("upgrade"))
        && header_values(headers, &UPGRADE)
            .iter()
            .any(|protocol| protocol.eq_ignore_ascii_case("websocket"));
    if !wants_websocket {
        let offered = header_values(headers, &UPGRADE).join(", ");
        return Err(ApiError::bad_request(if offered.is_empty() {
            "Upgrade request required".to_string()
        } else {
            format!(
                "Upgrade request required: the stand-in streams exec over WebSockets only, not {offered}"
            )
        }));
    }
    if header_values(headers, &SEC_WEBSOCKET_VERSION) != ["13"] {
        return Err(ApiError::bad_request(
            "unable to upgrade connection: websocket: unsupported version: 13 not found in 'Sec-Websocket-Version' header",
        ));
    }
    let key = headers
        .get(SEC_WEBSOCKET_KEY)
        .map(|key| derive_accept_key(key.as_bytes()))
        .ok_or_else(|| {
            ApiError::bad_request(
                "unable to upgrade connection: websocket: not a websocket handshake: 'Sec-WebSocket-Key' header is missing or blank",
            )
        })?;
    let protocol = negotiate(headers)?;
    let upgraded = lock(upgrade).take().ok_or_else(|| {
        ApiError::bad_request("unable to upgrade connection: the connection cannot be upgraded")
    })?;
    tokio::spawn(session(
        shared.clone(),
        request,
        container,
        protocol,
        upgraded,
    ));
    let mut response = Response::new(body::full(""));
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(
        SEC_WEBSOCKET_ACCEPT,
        HeaderValue::from_str(&key).expect("an accept key is base64"),
    );
    headers.insert(SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(protocol));
    Ok(response)
}

/// What a command did.
struct Outcome {
    exit_code: i32,
    stdout: String,
    stderr: String,
    signal: Option<String>,
}

impl Outcome {
    fn exited(exit_code: i32, stderr: String) -> Self {
        Outcome {
            exit_code,
            stdout: String::new(),
            stderr,
            signal: None,
        }
    }
}

/// Runs `command` as the stand-in's containers do: only `kill` of PID 1.
fn run(command: &[String]) -> Outcome {
    let program = command.first().map(String::as_str).unwrap_or_default();
    if program.rsplit('/').next() != Some("kill") {
        return Outcome::exited(
            127,
            format!(
                "OCI runtime exec failed: exec failed: unable to start container process: exec: \
                 \"{program}\": executable file not found in $PATH: unknown\n"
            ),
        );
    }
    let (given, pid) = match &command[1..] {
        [flag, signal, pid] if flag == "-s" => (signal.as_str(), pid.as_str()),
        [signal, pid] if signal.starts_with('-') && signal.len() > 1 => {
            (&signal[1..], pid.as_str())
        }
        _ => {
            return Outcome::exited(
                1,
                "kill: the stand-in's kill takes `kill -s SIGNAL 1` or `kill -SIGNAL 1`\n"
                    .to_string(),
            );
        }
    };
    let upper = given.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    if !LINUX_SIGNALS.contains(&name) {
        return Outcome::exited(1, format!("kill: unknown signal name: {given}\n"));
    }
    if pid != "1" {
        return Outcome::exited(1, format!("kill: ({pid}) - No such process\n"));
    }
    Outcome {
        exit_code: 0,
        stdout: String::new(),
        stderr: String::new(),
        signal: Some(name.to_string()),
    }
}

/// The status channel's message: success, or the kubelet's `NonZeroExitCode` with the code.
fn status(command: &[String], exit_code: i32) -> Value {
    if exit_code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!(
            "command terminated with non-zero exit code: error executing command [{}], exit code {exit_code}",
            command.join(" ")
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": exit_code.to_string()}]},
    })
}

fn framed(channel: u8, data: &[u8]) -> Message {
    let mut frame = Vec::with_capacity(data.len() + 1);
    frame.push(channel);
    frame.extend_from_slice(data);
    Message::binary(frame)
}

async fn session(
    shared: Arc<Shared>,
    request: ExecRequest,
    container: String,
    protocol: &'static str,
    upgrade: OnUpgrade,
) {
    let Ok(upgraded) = upgrade.await else {
        return;
    };
    let mut socket =
        WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
    let v5 = protocol == V5;
    let first = if request.stdout {
        STDOUT
    } else if request.stderr {
        STDERR
    } else {
        STATUS
    };
    let outcome = run(&request.command);
    if let Some(signal) = &outcome.signal {
        let received = ReceivedSignal {
            namespace: request.namespace.clone(),
            pod: request.pod.clone(),
            container: container.clone(),
            signal: signal.clone(),
        };
        let handler = {
            let mut state = lock(&shared.exec);
            state.signals.push(received.clone());
            state.handler.clone()
        };
        if let Some(handler) = handler {
            let log = ContainerLog {
                shared: shared.clone(),
                key: (
                    request.namespace.clone(),
                    request.pod.clone(),
                    container.clone(),
                ),
            };
            handler(&received, &log);
        }
    }
    let mut messages = vec![framed(first, b"")];
    if request.stdout && !outcome.stdout.is_empty() {
        messages.push(framed(STDOUT, outcome.stdout.as_bytes()));
    }
    if request.stderr && !outcome.stderr.is_empty() {
        messages.push(framed(STDERR, outcome.stderr.as_bytes()));
    }
    let status = status(&request.command, outcome.exit_code).to_string();
    messages.push(framed(STATUS, status.as_bytes()));
    for message in messages {
        if socket.send(message).await.is_err() {
            break;
        }
    }
    // The streams end with the connection, closed normally (1000): a client reads the status
    // channel to its end, and takes a close without a code as an error.
    let _ = socket
        .close(Some(CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        }))
        .await;
    let mut closed_by_client = Vec::new();
    let _ = tokio::time::timeout(CLOSE_WAIT, async {
        while let Some(Ok(message)) = socket.next().await {
            if let Message::Binary(data) = message
                && v5
                && data.len() == 2
                && data[0] == CLOSE
            {
                closed_by_client.push(data[1]);
            }
        }
    })
    .await;
    lock(&shared.exec).records.push(ExecRecord {
        namespace: request.namespace,
        pod: request.pod,
        container,
        command: request.command,
        protocol: protocol.to_string(),
        exit_code: outcome.exit_code,
        stdout: outcome.stdout,
        stderr: outcome.stderr,
        closed_by_client,
    });
}
