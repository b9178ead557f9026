//! The field shapes of Slurm's JSON answers across data_parser versions v0.0.38 (22.05) to v0.0.43
//! (25.05), read into one form (`tests/fixtures/slurm/data_parser.md` has the table):
//!
//! - `job_state`: a string (`"RUNNING"`, v0.0.38/39) or a list, base state then flags
//!   (`["PENDING","REQUEUED"]`, v0.0.40 on);
//! - numbers and times: a plain integer (v0.0.38), `null` for unset (v0.0.39), or
//!   `{"set", "infinite", "number"}` (v0.0.40 on);
//! - `exit_code`: a wait status (`768` = exit 3) as an integer or wrapped number (v0.0.38/39), or
//!   `{"status": [..], "return_code": {..}, "signal": {..}}` (v0.0.40 on);
//! - the log path: `standard_output` is the user's pattern in v0.0.38 and v0.0.43, expanded in between;
//!   v0.0.43 adds `stdout_expanded`.

use serde_json::Value;

/// The data_parser version an answer declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct DataParser(pub u32);

impl DataParser {
    /// Where each release puts it: `meta.plugin.type` "openapi/v0.0.38" (22.05, also for `squeue
    /// --json`), `meta.plugins.data_parser` "data_parser/v0.0.39" (23.02's CLI), `meta.plugin.data_parser`
    /// "data_parser/v0.0.42" (23.11 on).
    /// `meta` is the answer's `meta` object.
    pub fn declared(meta: &Value) -> Option<Self> {
        [
            "/plugin/data_parser",
            "/plugins/data_parser",
            "/plugin/type",
        ]
        .iter()
        .filter_map(|pointer| meta.pointer(pointer)?.as_str())
        .find_map(Self::parse)
    }

    /// `data_parser/v0.0.42`, `openapi/v0.0.38`, `v0.0.40`.
    pub fn parse(text: &str) -> Option<Self> {
        let minor = text.rsplit_once("v0.0.")?.1;
        let digits: String = minor.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok().map(Self)
    }

    /// Whether runguard knows this version's shapes (v0.0.38 to v0.0.43).
    pub fn known(self) -> bool {
        (38..=43).contains(&self.0)
    }
}

impl std::fmt::Display for DataParser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "v0.0.{}", self.0)
    }
}

/// A non-empty string field.
pub fn text<'v>(value: &'v Value, key: &str) -> Option<&'v str> {
    value.get(key)?.as_str().filter(|s| !s.is_empty())
}

/// A number as an integer, a wrapped `{"set": true, "number": N}`, or absent when unset (`null`,
/// `set: false`) or infinite.
pub fn number(value: &Value, key: &str) -> Option<i64> {
    wrapped_number(value.get(key)?)
}

fn wrapped_number(field: &Value) -> Option<i64> {
    if let Some(n) = field.as_i64() {
        return Some(n);
    }
    let set = field.get("set").and_then(Value::as_bool).unwrap_or(true);
    let infinite = field
        .get("infinite")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if !set || infinite {
        return None;
    }
    field.get("number")?.as_i64()
}

/// A job's state: the base state word, and the flags newer versions list after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateWords {
    pub base: String,
    pub flags: Vec<String>,
}

impl StateWords {
    /// As Slurm's own `job_state_string` prints it: a flag that says more than the base state
    /// (`REQUEUED`, `COMPLETING`...) wins, as in v0.0.38/39's single word.
    pub fn word(&self) -> &str {
        const TELLING_FLAGS: [&str; 8] = [
            "REQUEUED",
            "REQUEUE_HOLD",
            "REQUEUE_FED",
            "COMPLETING",
            "CONFIGURING",
            "RESIZING",
            "SIGNALING",
            "STAGE_OUT",
        ];
        self.flags
            .iter()
            .find(|flag| TELLING_FLAGS.contains(&flag.as_str()))
            .map_or(self.base.as_str(), String::as_str)
    }

    /// Everything the scheduler said, for display: `PENDING,REQUEUED`.
    pub fn raw(&self) -> String {
        std::iter::once(&self.base)
            .chain(&self.flags)
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// `job_state` as a string or a list of words; `None` when missing or of another shape.
pub fn state_words(value: &Value) -> Option<StateWords> {
    match value.get("job_state")? {
        Value::String(word) if !word.trim().is_empty() => Some(StateWords {
            base: word.trim().to_string(),
            flags: Vec::new(),
        }),
        Value::Array(words) => {
            let mut words = words.iter().map(|w| w.as_str().map(str::to_string));
            let base = words.next()??;
            let flags = words.collect::<Option<Vec<_>>>()?;
            Some(StateWords { base, flags })
        }
        _ => None,
    }
}

/// The exit code of a job: from a wait status (`768` = exit 3) or from v0.0.40's
/// `{"status", "return_code", "signal"}` object, where a job ended by a signal reads as the signal's
/// number as in the older shapes. `None` while there is none yet.
pub fn exit_code(value: &Value) -> Option<i32> {
    let field = value.get("exit_code")?;
    if field.is_object() && field.get("return_code").is_some() {
        let status: Vec<&str> = field
            .get("status")
            .and_then(Value::as_array)
            .map(|words| words.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if status.iter().any(|s| *s == "PENDING" || *s == "INVALID") {
            return None;
        }
        let signal = field.pointer("/signal/id").and_then(wrapped_number);
        if status
            .iter()
            .any(|s| *s == "SIGNALED" || *s == "CORE_DUMPED")
            && let Some(signal) = signal.filter(|s| *s > 0)
        {
            return i32::try_from(signal).ok();
        }
        return field
            .get("return_code")
            .and_then(wrapped_number)
            .and_then(|code| i32::try_from(code).ok());
    }
    wrapped_number(field).map(wait_status)
}

/// An exit code from a wait status (`768` is exit 3) or a plain code; a job ended by a signal alone
/// (`ExitCode=0:15`) reads as the signal's number, as `scontrol` shows it.
fn wait_status(raw: i64) -> i32 {
    let code = if raw > 255 { raw >> 8 } else { raw };
    i32::try_from(code).unwrap_or(i32::MAX)
}

/// Where the job's output goes, expanded where the version gives it expanded (v0.0.43's
/// `stdout_expanded`); otherwise `standard_output`, which the caller expands when it holds patterns.
pub fn standard_output(value: &Value) -> Option<&str> {
    text(value, "stdout_expanded").or_else(|| text(value, "standard_output"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_version_is_read_where_each_release_declares_it() {
        let v38 = json!({"meta": {"plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"}}});
        let v39 = json!({"meta": {"plugins": {"data_parser": "data_parser/v0.0.39"}}});
        let v42 = json!({"meta": {"plugin": {"type": "", "data_parser": "data_parser/v0.0.42"}}});
        assert_eq!(DataParser::declared(&v38["meta"]), Some(DataParser(38)));
        assert_eq!(DataParser::declared(&v39["meta"]), Some(DataParser(39)));
        assert_eq!(DataParser::declared(&v42["meta"]), Some(DataParser(42)));
        assert_eq!(DataParser::declared(&json!({"jobs": []})["meta"]), None);
        assert!(!DataParser(44).known() && DataParser(43).known());
    }

    #[test]
    fn numbers_come_plain_null_or_wrapped() {
        let job = json!({
            "a": 5, "b": null, "c": {"set": true, "infinite": false, "number": 7},
            "d": {"set": false, "infinite": false, "number": 0},
            "e": {"set": true, "infinite": true, "number": 0}
        });
        assert_eq!(number(&job, "a"), Some(5));
        assert_eq!(number(&job, "b"), None);
        assert_eq!(number(&job, "c"), Some(7));
        assert_eq!(number(&job, "d"), None);
        assert_eq!(number(&job, "e"), None);
        assert_eq!(number(&job, "missing"), None);
    }

    #[test]
    fn the_state_is_a_word_or_a_list_where_a_telling_flag_wins() {
        let old = state_words(&json!({"job_state": "RUNNING"})).unwrap();
        assert_eq!((old.word(), old.raw().as_str()), ("RUNNING", "RUNNING"));
        let requeued = state_words(&json!({"job_state": ["PENDING", "REQUEUED"]})).unwrap();
        assert_eq!(requeued.word(), "REQUEUED");
        assert_eq!(requeued.raw(), "PENDING,REQUEUED");
        let held = state_words(&json!({"job_state": ["PENDING"]})).unwrap();
        assert_eq!(held.word(), "PENDING");
        assert_eq!(state_words(&json!({"job_state": 3})), None);
        assert_eq!(state_words(&json!({"job_state": []})), None);
        assert_eq!(state_words(&json!({})), None);
    }

    #[test]
    fn exit_codes_of_every_shape() {
        assert_eq!(exit_code(&json!({"exit_code": 768})), Some(3));
        assert_eq!(exit_code(&json!({"exit_code": 15})), Some(15));
        assert_eq!(exit_code(&json!({"exit_code": 0})), Some(0));
        assert_eq!(
            exit_code(&json!({"exit_code": {"set": true, "infinite": false, "number": 768}})),
            Some(3)
        );
        let failed = json!({"exit_code": {"status": ["ERROR"], "return_code": {"set": true, "infinite": false, "number": 3}, "signal": {"id": {"set": false, "infinite": false, "number": 0}, "name": ""}}});
        assert_eq!(exit_code(&failed), Some(3));
        let killed = json!({"exit_code": {"status": ["SIGNALED"], "return_code": {"set": true, "infinite": false, "number": 0}, "signal": {"id": {"set": true, "infinite": false, "number": 9}, "name": "KILL"}}});
        assert_eq!(exit_code(&killed), Some(9));
        let pending = json!({"exit_code": {"status": ["PENDING"], "return_code": {"set": true, "infinite": false, "number": 0}, "signal": {"id": {"set": false, "infinite": false, "number": 0}, "name": ""}}});
        assert_eq!(exit_code(&pending), None);
    }

    #[test]
    fn the_expanded_output_path_is_preferred() {
        let v43 = json!({"standard_output": "/x/%x_%j.log", "stdout_expanded": "/x/train_7.log"});
        assert_eq!(standard_output(&v43), Some("/x/train_7.log"));
        let v38 = json!({"standard_output": "/x/%x_%j.log"});
        assert_eq!(standard_output(&v38), Some("/x/%x_%j.log"));
        let no_output = json!({"standard_output": "", "stdout_expanded": ""});
        assert_eq!(standard_output(&no_output), None);
    }
}
