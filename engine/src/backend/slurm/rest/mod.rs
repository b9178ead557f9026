//! slurmrestd, Slurm's REST daemon, as a way to reach Slurm without its command-line tools: the job
//! listing (`GET /jobs` answers the shape `squeue --json` of the same release prints, so
//! [`super::squeue::parse`] reads it), cancel, job updates and submission, on a unix socket or over TCP
//! with a JWT.
//!
//! **Which API.** Every release serves a window of OpenAPI versions (22.05: v0.0.38 with
//! `-s openapi/v0.0.38`; 24.11: v0.0.40..v0.0.42 with `-s openapi/slurmctld`; 25.05 adds v0.0.43). The
//! client asks `GET /openapi/v3` which ones, takes the newest it speaks ([`version`]), probes
//! `/slurm/vX/ping` newest first where the specification is not served, and negotiates again when
//! the chosen version's paths answer 404 (slurmrestd was upgraded). `[slurm] rest_api_version` pins one.
//!
//! **Tokens.** With rest_auth/jwt the token is read from its source ([`super::token`]) when it runs
//! out and again whenever Slurm turns it away, and the request is sent once more with a new one. A
//! refusal that stays is [`BackendError::Credentials`]. Slurm does not always say 401: 22.05's
//! slurmrestd passes the token to slurmctld and answers a refused one with HTTP 500 and "Unspecified
//! error" from `slurm_load_jobs` (or "Zero Bytes were transmitted or received" from `slurm_kill_job`),
//! the words a lost controller gives too; an expired or malformed token is told apart here, a token
//! signed with another key by asking the controller itself (see [`super::via_rest`]).
//!
//! What v0.0.38 (Slurm 22.05) offers, as measured against slurmrestd 22.05.8:
//! - `POST /job/{id}` takes sbatch's option names: `exclude_nodes` (the listing's `excluded_nodes` is
//!   refused as a "Disabled key"), `hold` (`true` holds, `false` releases) and `begin_time` (a Slurm
//!   time string such as `now`; an epoch number is refused with "Unable to parse time").
//! - It cannot requeue a job: there is no such endpoint, and the job field `requeue` only marks a job
//!   as eligible for requeueing. The backend runs `scontrol requeuehold` for that step (on every version).
//! - It cannot drain a node: `/node/{name}` answers GET only (POST gets HTTP 405). The backend runs
//!   `scontrol update NodeName=... State=DRAIN` for that (on every version).
//! - Every request acts as one Slurm user: the one slurmrestd runs as (rest_auth/local, which also
//!   turns away clients of another uid than its own or root's with HTTP 401) or the token's user
//!   (rest_auth/jwt). Slurm refuses changes to other users' jobs with error 2002.
//!
//! What v0.0.40..v0.0.42 (Slurm 24.11.5) do differently, as measured: updates take the job
//! description's names (`excluded_nodes` as a list, `hold`, `begin_time: "now"`); a submission's
//! environment is a list of `NAME=value` and its node count a string; a cancel answers HTTP 200 for an
//! unknown job (v0.0.42: with the job's error in `status`); a refusal to act on another user's job is
//! error 2010 "Invalid user id" or, for a cancel, 1 "Operation not permitted".

mod errors;
mod request;
mod version;

use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::Utc;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, StatusCode};
use serde_json::Value;

pub use self::request::{JobUpdate, RestRequest, SubmitOptions};
pub use self::version::ApiVersion;
use super::token::{TokenCache, TokenSource};
use crate::backend::BackendError;
use crate::redact::Redactor;
use crate::sync::lock;
use errors::{ESLURM_ALREADY_DONE, SlurmError, classify, slurm_errors};
use request::checked_job_id;

/// HTTP 511, which slurmrestd 23.11 on answers for SLURM_PROTOCOL_AUTHENTICATION_ERROR.
const NETWORK_AUTHENTICATION_REQUIRED: u16 = 511;

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
#[derive(Debug, Clone)]
pub struct RestOptions {
    pub endpoint: RestEndpoint,
    /// Sent as `X-SLURM-USER-NAME` (rest_auth/jwt).
    pub user_name: Option<String>,
    /// Where the token sent as `X-SLURM-USER-TOKEN` comes from (rest_auth/jwt); its Debug output
    /// never shows a token.
    pub token: TokenSource,
    /// Speak this OpenAPI version instead of negotiating one (`[slurm] rest_api_version`).
    pub api_version: Option<ApiVersion>,
    /// Longest one request may take, connecting included.
    pub timeout: Duration,
}

impl RestOptions {
    /// Options for `endpoint` with no credentials, a negotiated version and a 30 s timeout.
    pub fn new(endpoint: RestEndpoint) -> Self {
        Self {
            endpoint,
            user_name: None,
            token: TokenSource::None,
            api_version: None,
            timeout: Duration::from_secs(30),
        }
    }
}

/// How the version in use was settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Negotiated {
    /// Pinned by the configuration; slurmrestd was not asked.
    Pinned(ApiVersion),
    /// The newest of what `GET /openapi/v3` listed.
    FromSpecification {
        chosen: ApiVersion,
        offered: BTreeSet<ApiVersion>,
    },
    /// The newest version whose `/slurm/vX/ping` answered (no specification served).
    Probed(ApiVersion),
}

impl Negotiated {
    pub fn version(&self) -> ApiVersion {
        match self {
            Negotiated::Pinned(version) | Negotiated::Probed(version) => *version,
            Negotiated::FromSpecification { chosen, .. } => *chosen,
        }
    }
}

impl fmt::Display for Negotiated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Negotiated::Pinned(version) => write!(f, "{version} (pinned by rest_api_version)"),
            Negotiated::FromSpecification { chosen, offered } => write!(
                f,
                "{chosen} (slurmrestd offers {}; runguard speaks {} to {})",
                version::list(offered),
                ApiVersion::OLDEST,
                ApiVersion::NEWEST
            ),
            Negotiated::Probed(version) => {
                write!(f, "{version} (found by probing /slurm/VERSION/ping)")
            }
        }
    }
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

/// What came back, before it is judged.
struct Answer {
    status: StatusCode,
    text: String,
    /// The version whose path was asked.
    version: ApiVersion,
}

impl Answer {
    /// A 404 that is not one of Slurm's answers: slurmrestd has no such path (a version it does not
    /// serve), as opposed to a job it does not know, which comes with Slurm's JSON.
    fn path_unknown(&self) -> bool {
        self.status == StatusCode::NOT_FOUND
            && !serde_json::from_str::<Value>(&self.text).is_ok_and(|value| value.is_object())
    }

    /// slurmrestd turned the request away before Slurm saw it, or Slurm refused its credential.
    fn credentials_status(&self) -> bool {
        matches!(
            self.status,
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN
        ) || self.status.as_u16() == NETWORK_AUTHENTICATION_REQUIRED
    }
}

/// What the client keeps between requests.
struct RestState {
    negotiated: Option<Negotiated>,
    token: TokenCache,
}

/// A slurmrestd client: each method is one request (after the version is settled), and every answer
/// is checked for Slurm's errors.
pub struct SlurmRest {
    client: reqwest::Client,
    /// Scheme and authority the paths are appended to (a placeholder host on a unix socket).
    base_url: String,
    options: RestOptions,
    state: Mutex<RestState>,
    /// The last request failed in a way a refused token and a lost controller share.
    token_in_doubt: AtomicBool,
}

impl SlurmRest {
    /// slurmrestd cannot requeue a job; the backend runs `scontrol requeuehold` instead.
    pub const CAN_REQUEUE: bool = false;
    /// The backend drains nodes with `scontrol update NodeName=...` (v0.0.38 nodes are read-only).
    pub const CAN_DRAIN: bool = false;

    /// A client for `options`; nothing is sent until the first request.
    pub fn new(options: RestOptions) -> Result<Self, BackendError> {
        let mut headers = HeaderMap::new();
        if let Some(user) = &options.user_name {
            let value = HeaderValue::from_str(user).map_err(|_| {
                BackendError::Invalid(
                    "the slurmrestd user name holds characters an HTTP header cannot carry".into(),
                )
            })?;
            headers.insert(HeaderName::from_static("x-slurm-user-name"), value);
        }
        if let Some(version) = options.api_version
            && !version.known()
        {
            return Err(BackendError::Invalid(format!(
                "rest_api_version {version}: runguard speaks {} to {}",
                ApiVersion::OLDEST,
                ApiVersion::NEWEST
            )));
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
        let state = Mutex::new(RestState {
            negotiated: options.api_version.map(Negotiated::Pinned),
            token: TokenCache::new(options.token.clone()),
        });
        Ok(Self {
            client,
            base_url,
            options,
            state,
            token_in_doubt: AtomicBool::new(false),
        })
    }

    /// Where this client sends its requests.
    pub fn endpoint(&self) -> &RestEndpoint {
        &self.options.endpoint
    }

    /// The version in use and how it was settled; `None` before the first request.
    pub fn negotiated(&self) -> Option<Negotiated> {
        lock(&self.state).negotiated.clone()
    }

    /// Where the token comes from.
    pub fn token_source(&self) -> &TokenSource {
        &self.options.token
    }

    /// Whether the last request failed the way both a refused token and a lost controller make a
    /// request fail (22.05 says "Unspecified error" for both): someone who can ask the controller
    /// another way can tell them apart.
    pub fn token_in_doubt(&self) -> bool {
        self.token_in_doubt.load(Ordering::Relaxed)
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
        // v0.0.38 says `ping`, later versions `pinged`.
        let up = pings.iter().any(|ping| {
            ["ping", "pinged"]
                .iter()
                .any(|key| ping.get(*key).and_then(Value::as_str) == Some("UP"))
        });
        if !up {
            return Err(BackendError::Unavailable(format!(
                "{}: slurmctld is not up: {}",
                self.describe_at(&request, answer.version),
                excerpt(&Value::Array(pings).to_string())
            )));
        }
        Ok(["/meta/Slurm/release", "/meta/slurm/release"]
            .iter()
            .find_map(|pointer| value.pointer(pointer).and_then(Value::as_str))
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
                self.describe_at(&request, answer.version),
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
        let value = self.judge(&request, &answer)?;
        // v0.0.42 on: HTTP 200 with each job's outcome.
        let outcomes = value
            .get("status")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for outcome in &outcomes {
            let error = SlurmError {
                number: outcome.pointer("/error/code").and_then(Value::as_i64),
                error: text_at(outcome, "/error/string"),
                description: text_at(outcome, "/error/message"),
                source: "slurm_kill_jobs()".to_string(),
            };
            match error.number {
                None | Some(0) | Some(ESLURM_ALREADY_DONE) => {}
                Some(_) => {
                    let what = self.describe_at(&request, answer.version);
                    return Err(classify(&what, Some(job_id), &[error]));
                }
            }
        }
        Ok(())
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
        let value = self.judge(&request, &answer)?;
        // v0.0.40 on: an array job's tasks each say how the update went.
        let failed: Vec<SlurmError> = value
            .get("results")
            .and_then(Value::as_array)
            .map(|results| {
                results
                    .iter()
                    .map(|result| SlurmError {
                        number: result.get("error_code").and_then(Value::as_i64),
                        error: text_at(result, "/error"),
                        description: text_at(result, "/why"),
                        source: "slurm_update_job2()".to_string(),
                    })
                    .filter(|error| error.number.is_some_and(|number| number != 0))
                    .collect()
            })
            .unwrap_or_default();
        if !failed.is_empty() {
            let what = self.describe_at(&request, answer.version);
            return Err(classify(&what, Some(job_id), &failed));
        }
        Ok(())
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
            self.describe_at(&request, answer.version),
            excerpt(&answer.text)
        )))
    }

    /// Always an error: slurmrestd has no requeue (see [`Self::CAN_REQUEUE`]).
    pub async fn requeue(&self, job_id: &str) -> Result<(), BackendError> {
        Err(BackendError::Invalid(format!(
            "slurmrestd cannot requeue job {job_id}: it has no requeue operation (the job field \
             `requeue` only makes a job eligible); run `scontrol requeuehold {job_id}`"
        )))
    }

    /// Always an error: runguard does not change nodes through slurmrestd (see [`Self::CAN_DRAIN`]).
    pub async fn drain_node(&self, node: &str, _reason: &str) -> Result<(), BackendError> {
        Err(BackendError::Invalid(format!(
            "slurmrestd cannot drain {node} here (v0.0.38's /node/{{name}} is read-only); run \
             `scontrol update NodeName={node} State=DRAIN Reason=...`"
        )))
    }

    /// The HTTP request `request` sends with the version in use, for approvals and the journal:
    /// `POST /slurm/v0.0.38/job/42 {"exclude_nodes":"n2"}`. A submission's script and environment are
    /// summarised. Before the version is settled the path says `<negotiated>` and the body is the
    /// newest version's.
    pub fn describe(&self, request: &RestRequest) -> String {
        match self.negotiated() {
            Some(negotiated) => self.describe_at(request, negotiated.version()),
            None => describe_with(request, "<negotiated>", ApiVersion::NEWEST),
        }
    }

    fn describe_at(&self, request: &RestRequest, version: ApiVersion) -> String {
        describe_with(request, &version.to_string(), version)
    }

    /// The version to speak: pinned, settled before, or negotiated now.
    async fn version(&self) -> Result<ApiVersion, BackendError> {
        if let Some(negotiated) = self.negotiated() {
            return Ok(negotiated.version());
        }
        let negotiated = self.negotiate().await?;
        tracing::info!(
            endpoint = %self.options.endpoint,
            version = %negotiated,
            "slurmrestd API version chosen"
        );
        let version = negotiated.version();
        lock(&self.state).negotiated = Some(negotiated);
        Ok(version)
    }

    /// Asks slurmrestd which versions it serves: its OpenAPI specification, else a ping per version.
    async fn negotiate(&self) -> Result<Negotiated, BackendError> {
        let what = "GET /openapi/v3";
        let spec = self.send(Method::GET, "/openapi/v3", None, what).await?;
        if spec.credentials_status() {
            return Err(self.credentials_error(what, spec.status, &spec.text));
        }
        let offered = spec
            .status
            .is_success()
            .then(|| serde_json::from_str::<Value>(&spec.text).ok())
            .flatten()
            .and_then(|value| version::offered_in_spec(&value))
            .filter(|offered| !offered.is_empty());
        if let Some(offered) = offered {
            return match ApiVersion::choose(&offered) {
                Some(chosen) => Ok(Negotiated::FromSpecification { chosen, offered }),
                None => Err(BackendError::Unavailable(format!(
                    "slurmrestd at {} offers {}, none of which runguard speaks ({} to {})",
                    self.options.endpoint,
                    version::list(&offered),
                    ApiVersion::OLDEST,
                    ApiVersion::NEWEST
                ))),
            };
        }
        for version in ApiVersion::known_newest_first() {
            let path = RestRequest::Ping.path(&version.to_string());
            let what = format!("GET {path}");
            let answer = self.send(Method::GET, &path, None, &what).await?;
            if answer.credentials_status() {
                return Err(self.credentials_error(&what, answer.status, &answer.text));
            }
            if !answer.path_unknown() {
                return Ok(Negotiated::Probed(version));
            }
        }
        Err(BackendError::Unavailable(format!(
            "slurmrestd at {} serves no API runguard speaks: {what} answered HTTP {}, and \
             /slurm/VERSION/ping is unknown for every version from {} to {} (is it started with \
             -s openapi/slurmctld, or openapi/v0.0.38 on 22.05?)",
            self.options.endpoint,
            spec.status,
            ApiVersion::OLDEST,
            ApiVersion::NEWEST
        )))
    }

    /// Sends `request` with the version in use; on a path slurmrestd no longer has, negotiates again,
    /// and on a refusal of the token, reads the token again and resends once when it changed.
    async fn exchange(&self, request: &RestRequest) -> Result<Answer, BackendError> {
        self.token_in_doubt.store(false, Ordering::Relaxed);
        let version = self.version().await?;
        let mut answer = self.send_request(request, version).await?;
        if answer.path_unknown() && self.options.api_version.is_none() {
            // slurmrestd was upgraded, or restarted with other plugins.
            lock(&self.state).negotiated = None;
            let renewed = self.version().await?;
            if renewed != version {
                tracing::info!(
                    endpoint = %self.options.endpoint,
                    before = %version,
                    after = %renewed,
                    "slurmrestd no longer serves the API version in use; negotiated again"
                );
                answer = self.send_request(request, renewed).await?;
            }
        }
        if self.options.token.renewable() && self.maybe_token_refused(&answer) {
            let changed = lock(&self.state).token.reread();
            if changed {
                tracing::info!(source = %self.options.token, "slurmrestd refused the token; sending again with the one read now");
                answer = self.send_request(request, answer.version).await?;
            }
        }
        Ok(answer)
    }

    /// Whether the answer may be Slurm turning the token away.
    fn maybe_token_refused(&self, answer: &Answer) -> bool {
        if answer.credentials_status() {
            return true;
        }
        if answer.status.is_success() {
            return false;
        }
        let Ok(value) = serde_json::from_str::<Value>(&answer.text) else {
            return false;
        };
        slurm_errors(&value)
            .iter()
            .any(|error| error.credential_refused() || error.credential_or_controller())
    }

    async fn send_request(
        &self,
        request: &RestRequest,
        version: ApiVersion,
    ) -> Result<Answer, BackendError> {
        let path = request.path(&version.to_string());
        let what = self.describe_at(request, version);
        let mut answer = self
            .send(request.method(), &path, request.body(version), &what)
            .await?;
        answer.version = version;
        Ok(answer)
    }

    /// One HTTP exchange, with the token when there is one.
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        what: &str,
    ) -> Result<Answer, BackendError> {
        let url = format!("{}{path}", self.base_url);
        let mut builder = self.client.request(method, url);
        let token = lock(&self.state).token.token_at(Utc::now());
        if let Some(token) = token {
            let mut value = HeaderValue::from_str(&token).map_err(|_| {
                BackendError::Credentials(format!(
                    "{} holds characters an HTTP header cannot carry",
                    self.options.token
                ))
            })?;
            value.set_sensitive(true);
            builder = builder.header(HeaderName::from_static("x-slurm-user-token"), value);
        }
        if let Some(body) = body {
            builder = builder.json(&body);
        }
        let response = builder
            .send()
            .await
            .map_err(|err| self.transport_error(what, &err))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|err| self.transport_error(what, &err))?;
        let version = self
            .negotiated()
            .map_or(ApiVersion::NEWEST, |negotiated| negotiated.version());
        Ok(Answer {
            status,
            text,
            version,
        })
    }

    fn transport_error(&self, what: &str, err: &reqwest::Error) -> BackendError {
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

    /// `text` without the token, should an answer ever quote it.
    fn redacted(&self, text: &str) -> String {
        let state = lock(&self.state);
        Redactor::new(state.token.secret().map(str::to_string)).redact(text)
    }

    /// The credential error for a request slurmrestd or Slurm turned away, saying what runguard
    /// knows about its token.
    fn credentials_error(&self, what: &str, status: StatusCode, text: &str) -> BackendError {
        // Slurm's own words when the answer is one of its documents (24.11's HTTP 511), else its start.
        let errors = serde_json::from_str::<Value>(text)
            .map(|value| slurm_errors(&value))
            .unwrap_or_default();
        let text = if errors.is_empty() {
            excerpt(&self.redacted(text))
        } else {
            self.redacted(
                &errors
                    .iter()
                    .map(SlurmError::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        };
        let why = self.token_situation();
        BackendError::Credentials(format!(
            "{what}: slurmrestd answered HTTP {status}: {text}; {why}"
        ))
    }

    /// What runguard can tell about its token now.
    fn token_situation(&self) -> String {
        let now = Utc::now();
        let state = lock(&self.state);
        if let Some(fault) = state.token.fault_at(now) {
            return format!("{fault}: write a fresh `scontrol token` there");
        }
        match (&self.options.token, &self.options.endpoint) {
            (TokenSource::None, RestEndpoint::Unix(_)) => "slurmrestd's rest_auth/local accepts \
                 only its own uid and root on its socket; run runguard as one of them, or use \
                 rest_auth/jwt with a token"
                .to_string(),
            (TokenSource::None, RestEndpoint::Http(_)) => "no token is configured: set \
                 [slurm] rest_token_file or the variable rest_token_env names"
                .to_string(),
            (source, _) => format!(
                "{source} was refused although it has not expired (signed with another key, or \
                 for a user Slurm does not know): write a fresh `scontrol token` there"
            ),
        }
    }

    /// The answer as JSON, or the error it stands for.
    fn judge(&self, request: &RestRequest, answer: &Answer) -> Result<Value, BackendError> {
        let what = self.describe_at(request, answer.version);
        if answer.credentials_status() {
            return Err(self.credentials_error(&what, answer.status, &answer.text));
        }
        let value = match serde_json::from_str::<Value>(&answer.text) {
            Ok(value) if value.is_object() => value,
            _ => return Err(self.not_json(&what, answer)),
        };
        let errors = slurm_errors(&value);
        if !errors.is_empty() {
            return Err(self.classify_errors(&what, request.job_id(), &errors));
        }
        if !answer.status.is_success() {
            return Err(BackendError::Unavailable(format!(
                "{what}: slurmrestd answered HTTP {} without saying why: {}",
                answer.status,
                excerpt(&self.redacted(&answer.text))
            )));
        }
        Ok(value)
    }

    /// Slurm's errors, with what runguard knows of its token where they may be about it.
    fn classify_errors(
        &self,
        what: &str,
        job_id: Option<&str>,
        errors: &[SlurmError],
    ) -> BackendError {
        let message = || {
            self.redacted(
                &errors
                    .iter()
                    .map(SlurmError::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        };
        if errors.iter().any(SlurmError::credential_refused) {
            return BackendError::Credentials(format!(
                "{what}: Slurm refused the credential: {}; {}",
                message(),
                self.token_situation()
            ));
        }
        if !matches!(self.options.token, TokenSource::None)
            && errors.iter().any(SlurmError::credential_or_controller)
        {
            let fault = lock(&self.state).token.fault_at(Utc::now());
            if let Some(fault) = fault {
                return BackendError::Credentials(format!(
                    "{what}: {}; {fault}: write a fresh `scontrol token` there",
                    message()
                ));
            }
            self.token_in_doubt.store(true, Ordering::Relaxed);
        }
        classify(what, job_id, errors)
    }

    fn not_json(&self, what: &str, answer: &Answer) -> BackendError {
        let text = excerpt(&self.redacted(&answer.text));
        match answer.status {
            StatusCode::NOT_FOUND => match self.options.api_version {
                Some(pinned) => BackendError::Unavailable(format!(
                    "{what}: slurmrestd does not serve {pinned}, which rest_api_version pins: {text}"
                )),
                None => BackendError::Unavailable(format!(
                    "{what}: slurmrestd does not serve this path: {text}"
                )),
            },
            StatusCode::METHOD_NOT_ALLOWED => BackendError::Invalid(format!(
                "{what}: slurmrestd {} has no such operation: {text}",
                answer.version
            )),
            status => BackendError::Unavailable(format!(
                "{what}: slurmrestd answered HTTP {status} with something that is not JSON: {text}"
            )),
        }
    }
}

/// `request` as the HTTP line and body it sends at `version`, shown as `path_version`.
fn describe_with(request: &RestRequest, path_version: &str, version: ApiVersion) -> String {
    let line = format!("{} {}", request.method(), request.path(path_version));
    match request.shown_body(version) {
        Some(body) => format!("{line} {body}"),
        None => line,
    }
}

/// The string at `pointer`, or "".
fn text_at(value: &Value, pointer: &str) -> String {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

#[cfg(test)]
mod tests;
