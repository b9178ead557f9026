//! slurmrestd, Slurm's REST daemon, as a way to reach Slurm without its command-line tools: the job
//! listing (`GET /jobs` answers the OpenAPI v0.0.38 shape that `squeue --json` prints, so
//! [`super::squeue::parse`] reads it), cancel, job updates and submission, on a unix socket or over TCP
//! with a JWT.
//!
//! What v0.0.38 (Slurm 22.05) offers, as measured against slurmrestd 22.05.8:
//! - `POST /job/{id}` takes sbatch's option names: `exclude_nodes` (the listing's `excluded_nodes` is
//!   refused as a "Disabled key"), `hold` (`true` holds, `false` releases) and `begin_time` (a Slurm
//!   time string such as `now`; an epoch number is refused with "Unable to parse time").
//! - It cannot requeue a job: there is no such endpoint, and the job field `requeue` only marks a job
//!   as eligible for requeueing. The backend runs `scontrol requeuehold` for that step.
//! - It cannot drain a node: `/node/{name}` answers GET only (POST gets HTTP 405). The backend runs
//!   `scontrol update NodeName=... State=DRAIN` for that.
//! - Every request acts as one Slurm user: the one slurmrestd runs as (rest_auth/local, which also
//!   turns away clients of another uid than its own or root's with HTTP 401) or the token's user
//!   (rest_auth/jwt). Slurm refuses changes to other users' jobs with error 2002.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, StatusCode};
use serde_json::{Map, Value, json};

use crate::backend::BackendError;

/// The OpenAPI plugin this client was written and tested against (`slurmrestd -s openapi/v0.0.38`).
pub const DEFAULT_API_VERSION: &str = "v0.0.38";

/// What a job submitted with no environment gets: v0.0.38 refuses a job without one ("environment
/// must be set"), and a batch script without PATH finds none of its tools.
const FALLBACK_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Slurm's error numbers that say something to the caller (slurm_errno.h).
const ESLURM_ACCESS_DENIED: i64 = 2002;
const ESLURM_USER_ID_MISSING: i64 = 2010;
const ESLURM_INVALID_JOB_ID: i64 = 2017;

/// Where slurmrestd listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestEndpoint {
    /// A unix socket (`slurmrestd unix:/path`): rest_auth/local identifies the client by its uid.
    Unix(PathBuf),
    /// A base URL such as `http://slurm-head:6820`: rest_auth/jwt wants a user name and token.
    Http(String),
}

impl fmt::Display for RestEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RestEndpoint::Unix(path) => write!(f, "unix:{}", path.display()),
            RestEndpoint::Http(url) => f.write_str(url),
        }
    }
}

/// How to reach slurmrestd.
#[derive(Clone)]
pub struct RestOptions {
    pub endpoint: RestEndpoint,
    /// Sent as `X-SLURM-USER-NAME` (rest_auth/jwt).
    pub user_name: Option<String>,
    /// Sent as `X-SLURM-USER-TOKEN`: a token from `scontrol token` (rest_auth/jwt).
    pub token: Option<String>,
    /// The OpenAPI plugin slurmrestd serves; only [`DEFAULT_API_VERSION`] is tested.
    pub api_version: String,
    /// Longest one request may take, connecting included.
    pub timeout: Duration,
}

impl RestOptions {
    /// Options for `endpoint` with no credentials, v0.0.38 and a 30 s timeout.
    pub fn new(endpoint: RestEndpoint) -> Self {
        Self {
            endpoint,
            user_name: None,
            token: None,
            api_version: DEFAULT_API_VERSION.to_string(),
            timeout: Duration::from_secs(30),
        }
    }
}

// By hand, so that the token never reaches a log.
impl fmt::Debug for RestOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RestOptions")
            .field("endpoint", &self.endpoint)
            .field("user_name", &self.user_name)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("api_version", &self.api_version)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Changes to one job, sent together in one `POST /job/{id}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobUpdate {
    /// Replaces the nodes the job must not run on; an empty list clears them. Slurm changes this
    /// only while the job is pending ("Job is no longer pending execution" otherwise).
    pub exclude_nodes: Option<Vec<String>>,
    /// `Some(true)` holds the job, `Some(false)` releases it. Holding a running job is accepted but
    /// only sets its priority to 0.
    pub hold: Option<bool>,
    /// Makes the job eligible now, ending the ~2 minute BeginTime wait Slurm puts on a requeued job.
    pub start_now: bool,
}

impl JobUpdate {
    /// Whether the update changes nothing.
    pub fn is_empty(&self) -> bool {
        self.exclude_nodes.is_none() && self.hold.is_none() && !self.start_now
    }

    fn body(&self) -> Value {
        let mut body = Map::new();
        if let Some(nodes) = &self.exclude_nodes {
            body.insert("exclude_nodes".into(), nodes.join(",").into());
        }
        if let Some(hold) = self.hold {
            body.insert("hold".into(), hold.into());
        }
        if self.start_now {
            body.insert("begin_time".into(), "now".into());
        }
        Value::Object(body)
    }
}

/// A batch job to submit. slurmrestd ignores the script's `#SBATCH` lines (sbatch reads them, not
/// Slurm): whatever the job needs must be given here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubmitOptions {
    pub name: String,
    pub comment: Option<String>,
    /// Node count (`sbatch -N`); Slurm's default of one node when `None`.
    pub nodes: Option<u32>,
    /// Slurm's default partition when `None`.
    pub partition: Option<String>,
    /// Nodes the job must not run on.
    pub exclude: Vec<String>,
    /// Where the job runs and writes relative outputs. Required: without it Slurm uses slurmrestd's
    /// own working directory, where the job's user usually cannot write.
    pub work_dir: PathBuf,
    /// The output path pattern (`%x_%j.log`), relative to `work_dir`; Slurm's default when `None`.
    pub output: Option<String>,
    /// The job's environment: slurmrestd passes on nothing of its own. When empty, only
    /// `PATH=/usr/local/bin:/usr/bin:/bin` is sent, since v0.0.38 refuses an empty environment.
    pub environment: BTreeMap<String, String>,
}

impl SubmitOptions {
    fn job(&self) -> Value {
        let mut job = Map::new();
        if !self.name.is_empty() {
            job.insert("name".into(), self.name.clone().into());
        }
        if let Some(comment) = &self.comment {
            job.insert("comment".into(), comment.clone().into());
        }
        // A number: the [min, max] array the v0.0.38 schema describes is read as one node.
        if let Some(nodes) = self.nodes {
            job.insert("nodes".into(), nodes.into());
        }
        if let Some(partition) = &self.partition {
            job.insert("partition".into(), partition.clone().into());
        }
        if !self.exclude.is_empty() {
            job.insert("exclude_nodes".into(), self.exclude.join(",").into());
        }
        job.insert(
            "current_working_directory".into(),
            self.work_dir.display().to_string().into(),
        );
        if let Some(output) = &self.output {
            job.insert("standard_output".into(), output.clone().into());
        }
        let environment: Map<String, Value> = if self.environment.is_empty() {
            Map::from_iter([("PATH".to_string(), Value::from(FALLBACK_PATH))])
        } else {
            self.environment
                .iter()
                .map(|(key, value)| (key.clone(), Value::from(value.clone())))
                .collect()
        };
        job.insert("environment".into(), Value::Object(environment));
        Value::Object(job)
    }
}

/// One request to slurmrestd, as the client sends it; [`SlurmRest::describe`] shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestRequest {
    Ping,
    Jobs,
    Job {
        job_id: String,
    },
    Cancel {
        job_id: String,
    },
    UpdateJob {
        job_id: String,
        update: JobUpdate,
    },
    Submit {
        script: String,
        options: SubmitOptions,
    },
}

impl RestRequest {
    fn method(&self) -> Method {
        match self {
            RestRequest::Ping | RestRequest::Jobs | RestRequest::Job { .. } => Method::GET,
            RestRequest::Cancel { .. } => Method::DELETE,
            RestRequest::UpdateJob { .. } | RestRequest::Submit { .. } => Method::POST,
        }
    }

    fn path(&self, api_version: &str) -> String {
        let tail = match self {
            RestRequest::Ping => "ping".to_string(),
            RestRequest::Jobs => "jobs".to_string(),
            RestRequest::Job { job_id }
            | RestRequest::Cancel { job_id }
            | RestRequest::UpdateJob { job_id, .. } => format!("job/{job_id}"),
            RestRequest::Submit { .. } => "job/submit".to_string(),
        };
        format!("/slurm/{api_version}/{tail}")
    }

    fn body(&self) -> Option<Value> {
        match self {
            RestRequest::UpdateJob { update, .. } => Some(update.body()),
            RestRequest::Submit { script, options } => {
                Some(json!({ "script": script, "job": options.job() }))
            }
            _ => None,
        }
    }

    /// The body as shown to people: a submission's script and environment are summarised, since the
    /// one is long and the other may hold secrets.
    fn shown_body(&self) -> Option<Value> {
        let mut body = self.body()?;
        if let RestRequest::Submit { script, .. } = self {
            body["script"] = format!("<script, {} lines>", script.lines().count()).into();
            let variables = body["job"]["environment"]
                .as_object()
                .map_or(0, |environment| environment.len());
            body["job"]["environment"] = format!("<{variables} variables>").into();
        }
        Some(body)
    }

    fn job_id(&self) -> Option<&str> {
        match self {
            RestRequest::Job { job_id }
            | RestRequest::Cancel { job_id }
            | RestRequest::UpdateJob { job_id, .. } => Some(job_id),
            _ => None,
        }
    }
}

/// One entry of the `errors` array slurmrestd puts in its answers.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SlurmError {
    /// Slurm's error number (`error_number`, or `error_code` in some answers); -1 when unspecified.
    number: Option<i64>,
    error: String,
    description: String,
    /// The Slurm call that failed (`slurm_load_jobs`, `_parse_job_list`, ...).
    source: String,
}

impl SlurmError {
    fn from_value(value: &Value) -> Self {
        let text = |key: &str| {
            value
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let number = value
            .get("error_number")
            .or_else(|| value.get("error_code"))
            .and_then(Value::as_i64);
        let mut error = Self {
            number,
            error: text("error"),
            description: text("description"),
            source: text("source"),
        };
        if error.error.is_empty() && error.description.is_empty() && !value.is_object() {
            error.error = value.to_string();
        }
        error
    }

    /// Slurm could not reach slurmctld: errors 1000-1999 are communication failures, and a lost
    /// controller shows as "Unspecified error" (-1) from the load calls, even for `GET /job/{id}`.
    fn controller_unreachable(&self) -> bool {
        match self.number {
            Some(number) if (1000..2000).contains(&number) => true,
            Some(-1) => self.source.starts_with("slurm_load"),
            _ => false,
        }
    }
}

impl fmt::Display for SlurmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let number = self
            .number
            .map_or(String::new(), |number| format!(" {number}"));
        if self.description.is_empty() || self.description == self.error {
            write!(f, "{} (Slurm error{number})", self.error)
        } else {
            write!(
                f,
                "{} (Slurm error{number}: {})",
                self.description, self.error
            )
        }
    }
}

fn slurm_errors(answer: &Value) -> Vec<SlurmError> {
    answer
        .get("errors")
        .and_then(Value::as_array)
        .map(|errors| errors.iter().map(SlurmError::from_value).collect())
        .unwrap_or_default()
}

/// The start of an answer, on one line, for an error message.
fn excerpt(text: &str) -> String {
    const LIMIT: usize = 200;
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.is_empty() {
        return "(an empty answer)".to_string();
    }
    crate::text::ellipsize(&line, LIMIT)
}

/// A job id that can go into a URL path: digits, with `_` or `+` for array and heterogeneous jobs.
fn checked_job_id(job_id: &str) -> Result<(), BackendError> {
    let fits = !job_id.is_empty()
        && job_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '+');
    if fits {
        Ok(())
    } else {
        Err(BackendError::Invalid(format!(
            "{job_id:?} is not a Slurm job id"
        )))
    }
}

/// What came back, before it is judged.
struct Answer {
    status: StatusCode,
    text: String,
}

/// A slurmrestd client: each method is one request, and every answer is checked for Slurm's errors.
pub struct SlurmRest {
    client: reqwest::Client,
    /// Scheme and authority the paths are appended to (a placeholder host on a unix socket).
    base_url: String,
    options: RestOptions,
}

impl SlurmRest {
    /// slurmrestd v0.0.38 cannot requeue a job; the backend runs `scontrol requeuehold` instead.
    pub const CAN_REQUEUE: bool = false;
    /// slurmrestd v0.0.38 cannot drain a node; the backend runs `scontrol update NodeName=...` instead.
    pub const CAN_DRAIN: bool = false;

    /// A client for `options`; nothing is sent until the first request.
    pub fn new(options: RestOptions) -> Result<Self, BackendError> {
        let version = &options.api_version;
        if version.is_empty()
            || !version
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.')
        {
            return Err(BackendError::Invalid(format!(
                "{version:?} is not an OpenAPI plugin version such as {DEFAULT_API_VERSION}"
            )));
        }
        let mut headers = HeaderMap::new();
        for (name, value, secret) in [
            ("x-slurm-user-name", &options.user_name, false),
            ("x-slurm-user-token", &options.token, true),
        ] {
            let Some(value) = value else { continue };
            let mut value = HeaderValue::from_str(value).map_err(|_| {
                BackendError::Invalid(format!(
                    "the slurmrestd {name} holds characters an HTTP header cannot carry"
                ))
            })?;
            value.set_sensitive(secret);
            headers.insert(HeaderName::from_static(name), value);
        }
        let builder = crate::http::client_builder()
            .timeout(options.timeout)
            .default_headers(headers)
            // A fresh connection per request: runguard asks every few seconds, and a pooled
            // connection to a slurmrestd that restarted fails once with a broken pipe.
            .pool_max_idle_per_host(0)
            // slurmrestd is a cluster-internal service: a proxy set for the outside world must not
            // carry its requests.
            .no_proxy();
        let (builder, base_url) = match &options.endpoint {
            RestEndpoint::Unix(path) => (
                builder.unix_socket(path.clone()),
                "http://slurmrestd".to_string(),
            ),
            RestEndpoint::Http(url) => {
                let url = url.trim_end_matches('/');
                if !url.starts_with("http://") {
                    return Err(BackendError::Invalid(format!(
                        "slurmrestd URL {url:?}: only http:// is supported (this build has no TLS)"
                    )));
                }
                (builder, url.to_string())
            }
        };
        let client = builder.build().map_err(|err| {
            BackendError::Invalid(format!("slurmrestd client for {}: {err}", options.endpoint))
        })?;
        Ok(Self {
            client,
            base_url,
            options,
        })
    }

    /// Where this client sends its requests.
    pub fn endpoint(&self) -> &RestEndpoint {
        &self.options.endpoint
    }

    /// Checks that slurmrestd answers and reaches slurmctld; returns Slurm's release (`22.05.8`).
    pub async fn ping(&self) -> Result<String, BackendError> {
        let request = RestRequest::Ping;
        let answer = self.exchange(&request).await?;
        let value = self.judge(&request, &answer)?;
        let pings = value
            .get("pings")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let up = pings
            .iter()
            .any(|ping| ping.get("ping").and_then(Value::as_str) == Some("UP"));
        if !up {
            return Err(BackendError::Unavailable(format!(
                "{}: slurmctld is not up: {}",
                self.describe(&request),
                excerpt(&Value::Array(pings).to_string())
            )));
        }
        Ok(value
            .pointer("/meta/Slurm/release")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_string())
    }

    /// Every job slurmctld knows, as the JSON text slurmrestd sent (read it with [`super::squeue::parse`]).
    pub async fn jobs(&self) -> Result<String, BackendError> {
        let request = RestRequest::Jobs;
        let answer = self.exchange(&request).await?;
        let value = self.judge(&request, &answer)?;
        if !value.get("jobs").is_some_and(Value::is_array) {
            return Err(BackendError::Unavailable(format!(
                "{}: the answer holds no job listing: {}",
                self.describe(&request),
                excerpt(&answer.text)
            )));
        }
        Ok(answer.text)
    }

    /// One job as JSON text in the listing's shape, or `None` when slurmctld does not know it (never
    /// existed, or ended longer than MinJobAge ago).
    pub async fn job(&self, job_id: &str) -> Result<Option<String>, BackendError> {
        checked_job_id(job_id)?;
        let request = RestRequest::Job {
            job_id: job_id.to_string(),
        };
        let answer = self.exchange(&request).await?;
        match self.judge(&request, &answer) {
            Ok(value) => {
                let listed = value
                    .get("jobs")
                    .and_then(Value::as_array)
                    .is_some_and(|jobs| !jobs.is_empty());
                Ok(listed.then_some(answer.text))
            }
            Err(BackendError::NoSuchJob(_)) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Cancels the job (SIGKILL to all its steps). A job that has already ended counts as cancelled.
    pub async fn cancel(&self, job_id: &str) -> Result<(), BackendError> {
        checked_job_id(job_id)?;
        let request = RestRequest::Cancel {
            job_id: job_id.to_string(),
        };
        let answer = self.exchange(&request).await?;
        self.judge(&request, &answer).map(drop)
    }

    /// Applies `update` to the job in one request.
    pub async fn update_job(&self, job_id: &str, update: &JobUpdate) -> Result<(), BackendError> {
        checked_job_id(job_id)?;
        if update.is_empty() {
            return Err(BackendError::Invalid(format!(
                "an update of job {job_id} that changes nothing"
            )));
        }
        let request = RestRequest::UpdateJob {
            job_id: job_id.to_string(),
            update: update.clone(),
        };
        let answer = self.exchange(&request).await?;
        self.judge(&request, &answer).map(drop)
    }

    /// Submits `script` (its full text) as a new batch job; returns the new job id.
    pub async fn submit(
        &self,
        script: &str,
        options: &SubmitOptions,
    ) -> Result<String, BackendError> {
        if options.work_dir.as_os_str().is_empty() {
            return Err(BackendError::Invalid(format!(
                "job {}: a submission through slurmrestd needs a working directory",
                options.name
            )));
        }
        let request = RestRequest::Submit {
            script: script.to_string(),
            options: options.clone(),
        };
        let answer = self.exchange(&request).await?;
        // A job submitted held comes back with its id *and* an error entry ("Job is in held state,
        // pending scheduler release"): once there is an id, the job exists and entries are notices.
        if answer.status.is_success()
            && let Ok(value) = serde_json::from_str::<Value>(&answer.text)
            && let Some(job_id) = value.get("job_id").and_then(Value::as_u64)
        {
            for notice in slurm_errors(&value) {
                tracing::info!(job_id, %notice, "slurmrestd submission notice");
            }
            return Ok(job_id.to_string());
        }
        self.judge(&request, &answer)?;
        Err(BackendError::Unavailable(format!(
            "{}: the answer names no job id: {}",
            self.describe(&request),
            excerpt(&answer.text)
        )))
    }

    /// Always an error: v0.0.38 has no requeue (see [`Self::CAN_REQUEUE`]).
    pub async fn requeue(&self, job_id: &str) -> Result<(), BackendError> {
        Err(BackendError::Invalid(format!(
            "slurmrestd {} cannot requeue job {job_id}: it has no requeue operation (the job field \
             `requeue` only makes a job eligible); run `scontrol requeuehold {job_id}`",
            self.options.api_version
        )))
    }

    /// Always an error: v0.0.38 cannot change a node (see [`Self::CAN_DRAIN`]).
    pub async fn drain_node(&self, node: &str, _reason: &str) -> Result<(), BackendError> {
        Err(BackendError::Invalid(format!(
            "slurmrestd {} cannot drain {node}: /node/{{name}} is read-only; run \
             `scontrol update NodeName={node} State=DRAIN Reason=...`",
            self.options.api_version
        )))
    }

    /// The HTTP request `request` sends, for approvals and the journal:
    /// `POST /slurm/v0.0.38/job/42 {"exclude_nodes":"n2"}`. A submission's script and environment are
    /// summarised.
    pub fn describe(&self, request: &RestRequest) -> String {
        let line = format!(
            "{} {}",
            request.method(),
            request.path(&self.options.api_version)
        );
        match request.shown_body() {
            Some(body) => format!("{line} {body}"),
            None => line,
        }
    }

    async fn exchange(&self, request: &RestRequest) -> Result<Answer, BackendError> {
        let url = format!(
            "{}{}",
            self.base_url,
            request.path(&self.options.api_version)
        );
        let mut builder = self.client.request(request.method(), url);
        if let Some(body) = request.body() {
            builder = builder.json(&body);
        }
        let response = builder
            .send()
            .await
            .map_err(|err| self.transport_error(request, &err))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|err| self.transport_error(request, &err))?;
        Ok(Answer { status, text })
    }

    fn transport_error(&self, request: &RestRequest, err: &reqwest::Error) -> BackendError {
        let what = self.describe(request);
        let endpoint = &self.options.endpoint;
        if err.is_timeout() {
            return BackendError::Unavailable(format!(
                "{what}: no answer from slurmrestd at {endpoint} within {:.1} s",
                self.options.timeout.as_secs_f64()
            ));
        }
        // reqwest's own message is generic; the cause (e.g. "No such file or directory") is below it.
        let mut causes = vec![err.to_string()];
        let mut source = std::error::Error::source(err);
        while let Some(cause) = source {
            causes.push(cause.to_string());
            source = cause.source();
        }
        let verb = if err.is_connect() {
            "cannot connect to"
        } else {
            "lost the exchange with"
        };
        BackendError::Unavailable(format!(
            "{what}: {verb} slurmrestd at {endpoint}: {}",
            causes.join(": ")
        ))
    }

    /// The answer as JSON, or the error it stands for.
    fn judge(&self, request: &RestRequest, answer: &Answer) -> Result<Value, BackendError> {
        let what = self.describe(request);
        let status = answer.status;
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(BackendError::Refused {
                command: what,
                message: format!(
                    "slurmrestd answered HTTP {status}: {}",
                    excerpt(&answer.text)
                ),
            });
        }
        let value = match serde_json::from_str::<Value>(&answer.text) {
            Ok(value) if value.is_object() => value,
            _ => return Err(self.not_json(request, answer)),
        };
        let errors = slurm_errors(&value);
        if !errors.is_empty() {
            return Err(classify(&what, request.job_id(), &errors));
        }
        if !status.is_success() {
            return Err(BackendError::Unavailable(format!(
                "{what}: slurmrestd answered HTTP {status} without saying why: {}",
                excerpt(&answer.text)
            )));
        }
        Ok(value)
    }

    fn not_json(&self, request: &RestRequest, answer: &Answer) -> BackendError {
        let what = self.describe(request);
        let text = excerpt(&answer.text);
        match answer.status {
            StatusCode::NOT_FOUND => BackendError::Unavailable(format!(
                "{what}: slurmrestd does not serve this path (does it load openapi/{}?): {text}",
                self.options.api_version
            )),
            StatusCode::METHOD_NOT_ALLOWED => BackendError::Invalid(format!(
                "{what}: slurmrestd {} has no such operation: {text}",
                self.options.api_version
            )),
            status => BackendError::Unavailable(format!(
                "{what}: slurmrestd answered HTTP {status} with something that is not JSON: {text}"
            )),
        }
    }
}

/// The error Slurm's `errors` entries stand for; all their messages are kept.
fn classify(what: &str, job_id: Option<&str>, errors: &[SlurmError]) -> BackendError {
    let message = errors
        .iter()
        .map(SlurmError::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    let has = |number: i64| errors.iter().any(|error| error.number == Some(number));
    // A lost controller first: it also makes "Unable to find JobId" answers for jobs that exist.
    if errors.iter().any(SlurmError::controller_unreachable) {
        BackendError::Unavailable(format!(
            "{what}: slurmrestd cannot reach slurmctld: {message}"
        ))
    } else if has(ESLURM_INVALID_JOB_ID) {
        BackendError::NoSuchJob(job_id.map_or(message, str::to_string))
    } else if has(ESLURM_ACCESS_DENIED) || has(ESLURM_USER_ID_MISSING) {
        BackendError::Refused {
            command: what.to_string(),
            message,
        }
    } else {
        BackendError::Invalid(format!("{what}: {message}"))
    }
}

#[cfg(test)]
mod tests;
