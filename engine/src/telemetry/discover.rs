//! Finding an attempt's log when the scheduler does not say where it is: a configured directory and a
//! file-name pattern such as AJR's `{name}_{jobid}_{datetime}.log`.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use regex::Regex;

/// A pattern that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("log pattern {pattern:?}: {message}")]
pub struct PatternError {
    pub pattern: String,
    pub message: String,
}

/// A compiled file-name pattern. Placeholders: `{name}` (job name), `{jobid}`, `{datetime}` (any
/// date-time text), `{user}`; everything else is literal.
#[derive(Debug, Clone)]
pub struct LogPattern {
    pattern: String,
}

impl LogPattern {
    pub fn new(pattern: &str) -> Result<Self, PatternError> {
        let error = |message: &str| PatternError {
            pattern: pattern.to_string(),
            message: message.to_string(),
        };
        if pattern.contains('/') {
            return Err(error(
                "must be a file name, not a path (set the directory separately)",
            ));
        }
        if !pattern.contains("{jobid}") && !pattern.contains("{name}") {
            return Err(error(
                "needs {jobid} or {name}, or every job would match the same files",
            ));
        }
        let mut rest = pattern;
        while let Some(open) = rest.find('{') {
            let close = rest[open..].find('}').ok_or_else(|| error("unclosed {"))?;
            let placeholder = &rest[open..open + close + 1];
            if !matches!(placeholder, "{name}" | "{jobid}" | "{datetime}" | "{user}") {
                return Err(error(&format!(
                    "unknown placeholder {placeholder} (known: {{name}}, {{jobid}}, {{datetime}}, {{user}})"
                )));
            }
            rest = &rest[open + close + 1..];
        }
        Ok(Self {
            pattern: pattern.to_string(),
        })
    }

    /// The regex matching this job's file names.
    fn regex_for(&self, name: &str, job_id: &str, user: &str) -> Option<Regex> {
        let mut expression = String::from("^");
        let mut rest = self.pattern.as_str();
        while let Some(open) = rest.find('{') {
            expression.push_str(&regex::escape(&rest[..open]));
            let close = open + rest[open..].find('}')?;
            expression.push_str(&match &rest[open..=close] {
                "{name}" => regex::escape(name),
                "{jobid}" => regex::escape(job_id),
                "{user}" => regex::escape(user),
                _ => r"[0-9][0-9A-Za-z:._+-]*".to_string(),
            });
            rest = &rest[close + 1..];
        }
        expression.push_str(&regex::escape(rest));
        expression.push('$');
        Regex::new(&expression).ok()
    }

    /// The newest file in `dir` that matches the job and was written at or after `since` (the attempt's
    /// start, so a requeued job under the same id does not pick its previous attempt's file).
    pub fn find(
        &self,
        dir: &Path,
        name: &str,
        job_id: &str,
        user: &str,
        since: Option<SystemTime>,
    ) -> Option<PathBuf> {
        let regex = self.regex_for(name, job_id, user)?;
        let entries = std::fs::read_dir(dir).ok()?;
        entries
            .filter_map(Result::ok)
            .filter(|entry| {
                entry
                    .file_name()
                    .to_str()
                    .is_some_and(|file| regex.is_match(file))
            })
            .filter_map(|entry| {
                let modified = entry.metadata().ok()?.modified().ok()?;
                Some((modified, entry.path()))
            })
            .filter(|(modified, _)| since.is_none_or(|since| *modified >= since))
            .max_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)))
            .map(|(_, path)| path)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn finds_the_newest_file_of_the_job_and_ignores_other_jobs() {
        let dir = tempfile::tempdir().unwrap();
        let pattern = LogPattern::new("{name}_{jobid}_{datetime}.log").unwrap();
        for file in [
            "llama_4201_2026-01-05T08-00-00.log",
            "llama_42011_2026-01-05T09-00-00.log",
            "other_4201_2026-01-05T09-00-00.log",
            "llama_4201_notes.txt",
        ] {
            std::fs::write(dir.path().join(file), b"x").unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(dir.path().join("llama_4201_2026-01-05T10-30-00.log"), b"x").unwrap();
        let found = pattern
            .find(dir.path(), "llama", "4201", "alice", None)
            .unwrap();
        assert!(
            found.ends_with("llama_4201_2026-01-05T10-30-00.log"),
            "{found:?}"
        );
    }

    #[test]
    fn a_file_older_than_the_attempt_is_not_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let pattern = LogPattern::new("{name}_{jobid}_{datetime}.log").unwrap();
        std::fs::write(dir.path().join("llama_4201_20260105.log"), b"x").unwrap();
        let later = SystemTime::now() + Duration::from_secs(3600);
        assert!(
            pattern
                .find(dir.path(), "llama", "4201", "", Some(later))
                .is_none()
        );
    }

    #[test]
    fn names_with_regex_characters_are_literal() {
        let dir = tempfile::tempdir().unwrap();
        let pattern = LogPattern::new("{name}-{jobid}.out").unwrap();
        std::fs::write(dir.path().join("gpt(1.3b)-77.out"), b"x").unwrap();
        std::fs::write(dir.path().join("gptX1Y3bZ-77.out"), b"x").unwrap();
        let found = pattern
            .find(dir.path(), "gpt(1.3b)", "77", "", None)
            .unwrap();
        assert!(found.ends_with("gpt(1.3b)-77.out"));
    }

    #[test]
    fn bad_patterns_are_refused_with_the_reason() {
        for (pattern, reason) in [
            ("logs/{jobid}.log", "file name"),
            ("{jobid}_{date}.log", "unknown placeholder"),
            ("run.log", "needs {jobid}"),
            ("{name}_{jobid.log", "unclosed"),
        ] {
            let err = LogPattern::new(pattern).unwrap_err().to_string();
            assert!(err.contains(reason), "{pattern}: {err}");
        }
    }
}
