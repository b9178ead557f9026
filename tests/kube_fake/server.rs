//! The HTTP face: routes Kubernetes API paths to the store, checks the credentials and the refusals
//! the test set up, and records every request.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{
    ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue, SEC_WEBSOCKET_PROTOCOL, UPGRADE,
};
use hyper::upgrade::OnUpgrade;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};

use super::body::{self, ResponseBody};
use super::exec::{self, ExecRequest};
use super::logs::{self, LogRequest};
use super::patch;
use super::resources::{self, RESOURCES, ResourceType};
use super::selectors::{FieldSelector, LabelSelector, Selection};
use super::shared::{RecordedRequest, Shared, lock};
use super::status::ApiError;
use super::store::{Part, Writer};
use super::table::{self, RowObject};
use super::watch::{self, WatchRequest};

/// The bearer token the kubeconfig carries and the server accepts.
pub const TOKEN: &str = "fake-token";

/// How long a watch without `timeoutSeconds` stays open, as the API server's default request timeout.
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

/// A request as the handlers need it: body already read, query decoded.
struct ApiRequest {
    method: Method,
    path: String,
    query: Vec<(String, String)>,
    content_type: String,
    accept: String,
    authorization: String,
    body: Vec<u8>,
    headers: HeaderMap,
    /// The connection once upgraded (a WebSocket exec), taken by the handler that answers 101.
    upgrade: Mutex<Option<OnUpgrade>>,
}

impl ApiRequest {
    /// Every value of a repeated query parameter, in order (exec's `command`).
    fn params(&self, name: &str) -> Vec<String> {
        self.query
            .iter()
            .filter(|(key, _)| key == name)
            .map(|(_, value)| value.clone())
            .collect()
    }

    fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    fn flag(&self, name: &str) -> bool {
        matches!(self.param(name), Some("true" | "1"))
    }

    fn json_body(&self) -> Result<Value, ApiError> {
        let media_type = self
            .content_type
            .split(';')
            .next()
            .unwrap_or_default()
            .trim();
        if !media_type.is_empty() && media_type != "application/json" {
            return Err(ApiError::unsupported_media_type(
                media_type,
                "application/json",
            ));
        }
        serde_json::from_slice(&self.body).map_err(|error| {
            ApiError::bad_request(format!(
                "couldn't get version/kind; json parse error: {error}"
            ))
        })
    }

    /// The DeleteOptions a DELETE carries in its body, or an empty object.
    fn delete_options(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|_| json!({}))
    }
}

/// What a request handler answers: a response, or the API error to send instead.
type Reply = Result<Response<ResponseBody>, ApiError>;

/// The resource a path names, with its namespace, object name and subresource.
#[derive(Debug)]
struct Target {
    resource: usize,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

impl Target {
    fn resource_type(&self) -> &'static ResourceType {
        &RESOURCES[self.resource]
    }

    fn namespace_or_cluster(&self) -> &str {
        self.namespace.as_deref().unwrap_or_default()
    }

    /// The object's name, empty for a collection.
    fn name(&self) -> &str {
        self.name.as_deref().unwrap_or_default()
    }
}

/// Percent-decodes a query component as Go's `url.ParseQuery` does, `+` standing for a space.
fn decode_component(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'+' => decoded.push(b' '),
            b'%' if index + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[index + 1..index + 3]).unwrap_or_default();
                match u8::from_str_radix(hex, 16) {
                    Ok(byte) => {
                        decoded.push(byte);
                        index += 2;
                    }
                    Err(_) => decoded.push(b'%'),
                }
            }
            other => decoded.push(other),
        }
        index += 1;
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

pub fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode_component(key), decode_component(value))
        })
        .collect()
}

fn json_response(status: StatusCode, document: &Value) -> Response<ResponseBody> {
    let mut response = Response::new(body::full(document.to_string()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn ok(document: &Value) -> Reply {
    Ok(json_response(StatusCode::OK, document))
}

fn stream_response(body: ResponseBody, content_type: &'static str) -> Response<ResponseBody> {
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn status_response(error: &ApiError) -> Response<ResponseBody> {
    let code = StatusCode::from_u16(error.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(code, &error.to_status())
}

/// Serves one request.
pub async fn handle(
    shared: Arc<Shared>,
    mut request: Request<Incoming>,
) -> Result<Response<ResponseBody>, Infallible> {
    // Down: the request is never answered; the connection closes with the cut that took it down.
    if shared.is_refusing() {
        std::future::pending::<()>().await;
    }
    // A request to upgrade the connection (a WebSocket exec) keeps the means to take it over.
    let upgrade = request
        .headers()
        .contains_key(UPGRADE)
        .then(|| hyper::upgrade::on(&mut request));
    let (parts, incoming) = request.into_parts();
    let body = incoming
        .collect()
        .await
        .map(|collected| collected.to_bytes().to_vec())
        .unwrap_or_default();
    let header = |name| {
        parts
            .headers
            .get(name)
            .and_then(|value: &HeaderValue| value.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let request = ApiRequest {
        method: parts.method.clone(),
        path: parts.uri.path().to_string(),
        query: parse_query(parts.uri.query().unwrap_or_default()),
        content_type: header(CONTENT_TYPE),
        accept: header(ACCEPT),
        authorization: header(AUTHORIZATION),
        body,
        headers: parts.headers.clone(),
        upgrade: Mutex::new(upgrade),
    };
    shared.record(RecordedRequest {
        method: request.method.to_string(),
        path: request.path.clone(),
        query: request.query.clone(),
        content_type: Some(request.content_type.clone()).filter(|value| !value.is_empty()),
        accept: Some(request.accept.clone()).filter(|value| !value.is_empty()),
        authorization: Some(request.authorization.clone()).filter(|value| !value.is_empty()),
        body: (!request.body.is_empty()).then(|| {
            serde_json::from_slice(&request.body).unwrap_or_else(|_| {
                Value::String(String::from_utf8_lossy(&request.body).into_owned())
            })
        }),
        upgrade: Some(header(UPGRADE)).filter(|value| !value.is_empty()),
        protocols: Some(header(SEC_WEBSOCKET_PROTOCOL)).filter(|value| !value.is_empty()),
    });
    let response = route(&shared, &request).unwrap_or_else(|error| status_response(&error));
    if request.method != Method::GET {
        shared.write_answered();
    }
    Ok(response)
}

fn route(shared: &Arc<Shared>, request: &ApiRequest) -> Reply {
    let segments: Vec<&str> = request
        .path
        .split('/')
        .filter(|segment| !segment.is_empty())
        .collect();
    match segments.as_slice() {
        ["version"] => return ok(&resources::version_info()),
        ["healthz" | "livez" | "readyz"] => {
            return Ok(stream_response(
                body::full("ok"),
                "text/plain; charset=utf-8",
            ));
        }
        _ => {}
    }
    // kubectl sends no credentials over plain HTTP (client-go drops them for insecure servers), so
    // only a wrong credential is refused; `unauthorized(true)` refuses everyone.
    let wrong_credential =
        !request.authorization.is_empty() && request.authorization != format!("Bearer {TOKEN}");
    if lock(&shared.access).unauthorized || wrong_credential {
        return Err(ApiError::unauthorized());
    }
    // A kind whose CRD is not installed: no route to it.
    let absent = {
        let access = lock(&shared.access);
        segments
            .iter()
            .any(|segment| access.absent.contains(*segment))
    };
    if matches!(segments.first(), Some(&"apis")) && absent {
        return Err(ApiError::no_route());
    }
    if request.method != Method::GET
        && matches!(segments.first(), Some(&"api" | &"apis"))
        && segments.len() <= 3
    {
        let discovery =
            segments.len() < 3 || resources::serves_group_version(segments[1], segments[2]);
        if discovery {
            return Err(ApiError::method_not_allowed());
        }
    }
    // Aggregated discovery is not served: the legacy documents with `application/json` make
    // clients fall back to them.
    match segments.as_slice() {
        ["api"] => ok(&resources::api_versions(&shared.address)),
        ["apis"] => ok(&resources::api_group_list()),
        ["apis", group] => resources::api_group_document(group)
            .ok_or_else(ApiError::no_route)
            .and_then(|document| ok(&document)),
        ["api", "v1"] => ok(&resources::api_resource_list("", "v1")),
        ["apis", group, version] if resources::serves_group_version(group, version) => {
            ok(&resources::api_resource_list(group, version))
        }
        ["api", "v1", rest @ ..] => serve_resource(shared, request, "", "v1", rest),
        ["apis", group, version, rest @ ..] => {
            serve_resource(shared, request, group, version, rest)
        }
        _ => Err(ApiError::no_route()),
    }
}

fn parse_target(group: &str, version: &str, rest: &[&str]) -> Option<Target> {
    let owned = |segment: Option<&&str>| segment.map(|segment| segment.to_string());
    let namespaced = match rest {
        ["namespaces", namespace, plural, tail @ ..] if tail.len() <= 2 => {
            resources::by_group_version_plural(group, version, plural)
                .filter(|&resource| RESOURCES[resource].namespaced)
                .map(|resource| Target {
                    resource,
                    namespace: Some(namespace.to_string()),
                    name: owned(tail.first()),
                    subresource: owned(tail.get(1)),
                })
        }
        _ => None,
    };
    let target = namespaced.or_else(|| match rest {
        [plural, tail @ ..] if tail.len() <= 2 => {
            let resource = resources::by_group_version_plural(group, version, plural)?;
            // A namespaced object is only reachable through its namespace.
            if RESOURCES[resource].namespaced && !tail.is_empty() {
                return None;
            }
            Some(Target {
                resource,
                namespace: None,
                name: owned(tail.first()),
                subresource: owned(tail.get(1)),
            })
        }
        _ => None,
    })?;
    match &target.subresource {
        Some(subresource)
            if !target
                .resource_type()
                .subresources
                .contains(&subresource.as_str()) =>
        {
            None
        }
        _ => Some(target),
    }
}

fn serve_resource(
    shared: &Arc<Shared>,
    request: &ApiRequest,
    group: &str,
    version: &str,
    rest: &[&str],
) -> Reply {
    let target = parse_target(group, version, rest).ok_or_else(ApiError::no_route)?;
    if target.subresource.as_deref() == Some("exec") {
        return pod_exec(shared, request, &target);
    }
    let verb = match (&request.method, &target.name) {
        (&Method::GET, None) if request.flag("watch") => "watch",
        (&Method::GET, None) => "list",
        (&Method::GET, Some(_)) => "get",
        (&Method::POST, None) => "create",
        (&Method::PUT, Some(_)) => "update",
        (&Method::PATCH, Some(_)) => "patch",
        (&Method::DELETE, Some(_)) => "delete",
        (&Method::DELETE, None) => "deletecollection",
        _ => return Err(ApiError::method_not_allowed()),
    };
    let resource_type = target.resource_type();
    let checked = match &target.subresource {
        Some(subresource) => format!("{}/{subresource}", resource_type.plural),
        None => resource_type.plural.to_string(),
    };
    if lock(&shared.access).refuses(verb, &checked) {
        return Err(ApiError::forbidden(
            resource_type,
            target.subresource.as_deref(),
            verb,
            target.namespace.as_deref(),
            target.name(),
        ));
    }
    match verb {
        "watch" => watch(shared, request, &target),
        "list" => list(shared, request, &target),
        "get" if target.subresource.as_deref() == Some("log") => pod_log(shared, request, &target),
        "get" => get(shared, request, &target),
        "create" => create(shared, request, &target),
        "update" => update(shared, request, &target),
        "patch" => patch(shared, request, &target),
        "delete" => delete(shared, request, &target),
        _ => delete_collection(shared, request, &target),
    }
}

fn selection(request: &ApiRequest, resource: &ResourceType) -> Result<Selection, ApiError> {
    let labels = LabelSelector::parse(request.param("labelSelector").unwrap_or_default())
        .map_err(ApiError::bad_request)?;
    let fields = FieldSelector::parse(request.param("fieldSelector").unwrap_or_default(), resource)
        .map_err(ApiError::bad_request)?;
    Ok(Selection { labels, fields })
}

fn table_request(request: &ApiRequest) -> Option<RowObject> {
    table::wants_table(&request.accept)
        .then(|| RowObject::from_query(request.param("includeObject")))
}

/// An opaque continue token naming the last object of the previous page.
fn continue_token(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
        .bytes()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

fn parse_continue_token(token: &str) -> Result<(String, String), ApiError> {
    let invalid = || ApiError::bad_request(format!("continue key is not valid: {token:?}"));
    if !token.len().is_multiple_of(2) || !token.is_ascii() {
        return Err(invalid());
    }
    let bytes = (0..token.len())
        .step_by(2)
        .map(|index| u8::from_str_radix(&token[index..index + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| invalid())?;
    let text = String::from_utf8(bytes).map_err(|_| invalid())?;
    let (namespace, name) = text.split_once('/').ok_or_else(invalid)?;
    Ok((namespace.to_string(), name.to_string()))
}

fn list(shared: &Arc<Shared>, request: &ApiRequest, target: &Target) -> Reply {
    let resource_type = target.resource_type();
    let selection = selection(request, resource_type)?;
    let after = request
        .param("continue")
        .filter(|token| !token.is_empty())
        .map(parse_continue_token)
        .transpose()?;
    let limit = request
        .param("limit")
        .and_then(|limit| limit.parse::<usize>().ok())
        .filter(|&limit| limit > 0);
    let (mut items, resource_version) = shared.read(|store| {
        let items: Vec<Value> = store
            .list(target.resource, target.namespace.as_deref())
            .into_iter()
            .filter(|object| selection.matches(object))
            .filter(|object| {
                after.as_ref().is_none_or(|(namespace, name)| {
                    let key = (
                        object["metadata"]["namespace"].as_str().unwrap_or_default(),
                        object["metadata"]["name"].as_str().unwrap_or_default(),
                    );
                    key > (namespace.as_str(), name.as_str())
                })
            })
            .cloned()
            .collect();
        (items, store.resource_version())
    });
    let mut metadata = json!({"resourceVersion": resource_version.to_string()});
    if let Some(limit) = limit
        && items.len() > limit
    {
        let remaining = items.len() - limit;
        items.truncate(limit);
        if let Some(last) = items.last() {
            metadata["continue"] = json!(continue_token(
                last["metadata"]["namespace"].as_str().unwrap_or_default(),
                last["metadata"]["name"].as_str().unwrap_or_default(),
            ));
            metadata["remainingItemCount"] = json!(remaining);
        }
    }
    if let Some(include) = table_request(request) {
        let rows: Vec<&Value> = items.iter().collect();
        let mut document = table::table(resource_type, &rows, include, Some(resource_version));
        document["metadata"] = metadata;
        return ok(&document);
    }
    // Built-in kinds list their items without kind and apiVersion; custom resources keep them.
    if !resource_type.group.contains('.') {
        for item in &mut items {
            if let Some(fields) = item.as_object_mut() {
                fields.remove("kind");
                fields.remove("apiVersion");
            }
        }
    }
    ok(&json!({
        "kind": resource_type.list_kind(),
        "apiVersion": resource_type.api_version(),
        "metadata": metadata,
        "items": items,
    }))
}

fn watch(shared: &Arc<Shared>, request: &ApiRequest, target: &Target) -> Reply {
    let resource_type = target.resource_type();
    let since =
        match request.param("resourceVersion").unwrap_or_default() {
            "" | "0" => None,
            given => Some(given.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("invalid resource version {given:?}"))
            })?),
        };
    let timeout = request
        .param("timeoutSeconds")
        .and_then(|seconds| seconds.parse::<u64>().ok())
        .map_or(DEFAULT_WATCH_TIMEOUT, Duration::from_secs);
    let watch_request = WatchRequest {
        resource: target.resource,
        namespace: target.namespace.clone(),
        selection: selection(request, resource_type)?,
        since,
        send_initial_events: request.flag("sendInitialEvents"),
        bookmarks: request.flag("allowWatchBookmarks"),
        timeout,
        table: table_request(request),
    };
    let body = watch::start(shared.clone(), watch_request);
    Ok(stream_response(body, "application/json"))
}

fn stored(shared: &Shared, target: &Target) -> Result<Value, ApiError> {
    let name = target.name();
    shared
        .read(|store| {
            store
                .get(target.resource, target.namespace_or_cluster(), name)
                .cloned()
        })
        .ok_or_else(|| ApiError::not_found(target.resource_type(), name))
}

fn get(shared: &Arc<Shared>, request: &ApiRequest, target: &Target) -> Reply {
    let object = stored(shared, target)?;
    match table_request(request) {
        Some(include) => ok(&table::table(
            target.resource_type(),
            &[&object],
            include,
            None,
        )),
        None => ok(&object),
    }
}

fn pod_log(shared: &Arc<Shared>, request: &ApiRequest, target: &Target) -> Reply {
    let previous = request.flag("previous");
    let pod = target.name();
    let container = shared.read(|store| {
        logs::resolve_container(
            store,
            target.namespace_or_cluster(),
            pod,
            request.param("container"),
            previous,
        )
    })?;
    let since_time = request
        .param("sinceTime")
        .map(|text| {
            DateTime::parse_from_rfc3339(text)
                .map(|time| time.with_timezone(&Utc))
                .map_err(|error| {
                    ApiError::bad_request(format!("invalid sinceTime {text:?}: {error}"))
                })
        })
        .transpose()?;
    let since_seconds = request
        .param("sinceSeconds")
        .and_then(|seconds| seconds.parse::<i64>().ok())
        .map(|seconds| Utc::now() - chrono::Duration::seconds(seconds));
    let log_request = LogRequest {
        container,
        follow: request.flag("follow"),
        timestamps: request.flag("timestamps"),
        since: since_time.or(since_seconds),
        tail_lines: request
            .param("tailLines")
            .and_then(|lines| lines.parse::<i64>().ok())
            .and_then(|lines| usize::try_from(lines).ok()),
        limit_bytes: request
            .param("limitBytes")
            .and_then(|bytes| bytes.parse().ok()),
        previous,
    };
    Ok(stream_response(
        logs::start(shared.clone(), log_request),
        "text/plain",
    ))
}

/// `pods/{name}/exec`: GET (kubectl, client libraries) or POST, authorized as `create` on
/// `pods/exec` as RBAC checks it.
fn pod_exec(shared: &Arc<Shared>, request: &ApiRequest, target: &Target) -> Reply {
    if !matches!(request.method, Method::GET | Method::POST) || target.name.is_none() {
        return Err(ApiError::method_not_allowed());
    }
    let resource_type = target.resource_type();
    if lock(&shared.access).refuses("create", &format!("{}/exec", resource_type.plural)) {
        return Err(ApiError::forbidden(
            resource_type,
            Some("exec"),
            "create",
            target.namespace.as_deref(),
            target.name(),
        ));
    }
    let exec_request = ExecRequest {
        namespace: target.namespace_or_cluster().to_string(),
        pod: target.name().to_string(),
        container: request.param("container").map(str::to_string),
        command: request.params("command"),
        stdin: request.flag("stdin"),
        stdout: request.flag("stdout"),
        stderr: request.flag("stderr"),
        tty: request.flag("tty"),
    };
    exec::start(shared, exec_request, &request.headers, &request.upgrade)
}

fn create(shared: &Arc<Shared>, request: &ApiRequest, target: &Target) -> Reply {
    if target.subresource.is_some() {
        return Err(ApiError::method_not_allowed());
    }
    let resource_type = target.resource_type();
    let object = request.json_body()?;
    let body_kind = object["kind"].as_str().unwrap_or(resource_type.kind);
    if body_kind != resource_type.kind {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({}) does not match the expected API version ({})",
            object["apiVersion"].as_str().unwrap_or_default(),
            resource_type.api_version()
        )));
    }
    let namespace = target.namespace_or_cluster().to_string();
    let created =
        shared.write(|store| store.create(target.resource, &namespace, object, Writer::Client))?;
    Ok(json_response(StatusCode::CREATED, &created))
}

fn written_part(target: &Target) -> Part {
    if target.subresource.as_deref() == Some("status") {
        Part::Status
    } else {
        Part::Main
    }
}

fn update(shared: &Arc<Shared>, request: &ApiRequest, target: &Target) -> Reply {
    let object = request.json_body()?;
    let name = target.name();
    let updated = shared.write(|store| {
        store.update(
            target.resource,
            target.namespace_or_cluster(),
            name,
            object,
            written_part(target),
            Writer::Client,
        )
    })?;
    ok(&updated)
}

fn patch(shared: &Arc<Shared>, request: &ApiRequest, target: &Target) -> Reply {
    let resource_type = target.resource_type();
    let name = target.name().to_string();
    let media_type = request
        .content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim();
    let patch_document: Value = serde_json::from_slice(&request.body)
        .map_err(|error| ApiError::bad_request(format!("error decoding patch: {error}")))?;
    let namespace = target.namespace_or_cluster().to_string();
    let patched = shared.write(|store| {
        let current = store.get(target.resource, &namespace, &name).cloned();
        let mut object = match (current, media_type) {
            (Some(current), _) => current,
            // Server-side apply creates what does not exist yet.
            (None, "application/apply-patch+yaml") if target.subresource.is_none() => {
                let mut object = patch_document.clone();
                object["metadata"]["name"] = json!(name);
                return store.create(target.resource, &namespace, object, Writer::Client);
            }
            (None, _) => return Err(ApiError::not_found(resource_type, &name)),
        };
        match media_type {
            "application/merge-patch+json"
            | "application/strategic-merge-patch+json"
            | "application/apply-patch+yaml" => {
                patch::merge_patch(&mut object, &patch_document);
            }
            "application/json-patch+json" => {
                patch::json_patch(&mut object, &patch_document)
                    .map_err(|message| ApiError::invalid(resource_type, &name, message))?;
            }
            other => {
                return Err(ApiError::unsupported_media_type(
                    other,
                    "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml",
                ));
            }
        }
        store.update(
            target.resource,
            &namespace,
            &name,
            object,
            written_part(target),
            Writer::Client,
        )
    })?;
    ok(&patched)
}

/// Whether a delete also removes dependents: yes unless the client asks to orphan them.
fn cascades(request: &ApiRequest) -> bool {
    let options = request.delete_options();
    let policy = request
        .param("propagationPolicy")
        .or_else(|| options["propagationPolicy"].as_str());
    policy != Some("Orphan") && options["orphanDependents"] != json!(true)
}

fn delete(shared: &Arc<Shared>, request: &ApiRequest, target: &Target) -> Reply {
    if target.subresource.is_some() {
        return Err(ApiError::method_not_allowed());
    }
    let current = stored(shared, target)?;
    let preconditions = request.delete_options()["preconditions"].clone();
    for field in ["uid", "resourceVersion"] {
        if let Some(expected) = preconditions[field].as_str()
            && current["metadata"][field].as_str() != Some(expected)
        {
            return Err(ApiError::conflict(target.resource_type(), target.name()));
        }
    }
    let name = target.name();
    let cascade = cascades(request);
    let deleted = shared.write(|store| {
        store.delete(
            target.resource,
            target.namespace_or_cluster(),
            name,
            cascade,
        )
    })?;
    ok(&deleted)
}

fn delete_collection(shared: &Arc<Shared>, request: &ApiRequest, target: &Target) -> Reply {
    let resource_type = target.resource_type();
    let selection = selection(request, resource_type)?;
    let cascade = cascades(request);
    let (deleted, resource_version) = shared.write(|store| {
        let doomed: Vec<(String, String)> = store
            .list(target.resource, target.namespace.as_deref())
            .into_iter()
            .filter(|object| selection.matches(object))
            .map(|object| {
                (
                    object["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    object["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                )
            })
            .collect();
        let deleted: Vec<Value> = doomed
            .iter()
            .filter_map(|(namespace, name)| {
                store.delete(target.resource, namespace, name, cascade).ok()
            })
            .collect();
        (deleted, store.resource_version())
    });
    ok(&json!({
        "kind": resource_type.list_kind(),
        "apiVersion": resource_type.api_version(),
        "metadata": {"resourceVersion": resource_version.to_string()},
        "items": deleted,
    }))
}
