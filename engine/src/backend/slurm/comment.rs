//! Enrolment through the job's `--comment`, as AJR reads it:
//! `{"APS": {"auto_resume_mode": "requeue", "max_requeue_times": 3}}`.

use serde::Deserialize;

use crate::model::RecoveryLimits;

/// What a job's comment says about enrolment.
#[derive(Debug, Clone, PartialEq)]
pub enum Enrolment {
    /// The comment enrols the job with these limits.
    Enrolled {
        limits: RecoveryLimits,
        /// Something the user should know (a deprecated mode).
        warning: Option<String>,
    },
    /// The comment does not mention runguard/APS: not enrolled by comment.
    NotMentioned,
    /// The comment tries to enrol but is wrong; the message says how, for the user.
    Invalid(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Aps {
    auto_resume_mode: Option<String>,
    max_requeue_times: Option<i64>,
}

/// Reads a job comment. Only a JSON object with an `APS` key is about enrolment; any other comment is
/// the user's own business.
pub fn parse(comment: &str) -> Enrolment {
    let comment = comment.trim();
    if !comment.starts_with('{') || !comment.contains("APS") {
        return Enrolment::NotMentioned;
    }
    let value: serde_json::Value = match serde_json::from_str(comment) {
        Ok(value) => value,
        Err(err) => return Enrolment::Invalid(format!("the job comment is not valid JSON: {err}")),
    };
    let Some(aps) = value.get("APS") else {
        return Enrolment::NotMentioned;
    };
    let aps: Aps = match serde_json::from_value(aps.clone()) {
        Ok(aps) => aps,
        Err(err) => {
            return Enrolment::Invalid(format!("the APS section of the job comment: {err}"));
        }
    };
    let mode = aps.auto_resume_mode.as_deref().unwrap_or("requeue");
    let warning = match mode {
        "requeue" => None,
        "singleton_dependency" | "singleton" => Some(format!(
            "auto_resume_mode {mode:?} is deprecated; it is handled as \"requeue\""
        )),
        other => {
            return Enrolment::Invalid(format!(
                "auto_resume_mode {other:?} is not known (use \"requeue\")"
            ));
        }
    };
    let max_requeue_times = match aps.max_requeue_times {
        None => None,
        Some(n) if (0..=10_000).contains(&n) => Some(n as u32),
        Some(n) => {
            return Enrolment::Invalid(format!(
                "max_requeue_times {n} must be between 0 and 10000"
            ));
        }
    };
    Enrolment::Enrolled {
        limits: RecoveryLimits {
            max_requeue_times,
            auto_resume_mode: Some("requeue".to_string()),
            allowed_actions: None,
        },
        warning,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ajr_comment_enrols_with_its_limit() {
        let enrolment =
            parse(r#"{"APS": {"auto_resume_mode": "requeue", "max_requeue_times": 3}}"#);
        assert_eq!(
            enrolment,
            Enrolment::Enrolled {
                limits: RecoveryLimits {
                    max_requeue_times: Some(3),
                    auto_resume_mode: Some("requeue".into()),
                    allowed_actions: None,
                },
                warning: None
            }
        );
    }

    #[test]
    fn singleton_dependency_is_accepted_with_a_deprecation_warning() {
        let Enrolment::Enrolled { warning, .. } =
            parse(r#"{"APS": {"auto_resume_mode": "singleton_dependency"}}"#)
        else {
            panic!("not enrolled");
        };
        assert!(warning.unwrap().contains("deprecated"));
    }

    #[test]
    fn other_comments_are_not_about_enrolment() {
        assert_eq!(parse("nightly eval run"), Enrolment::NotMentioned);
        assert_eq!(parse(""), Enrolment::NotMentioned);
        assert_eq!(parse(r#"{"owner": "alice"}"#), Enrolment::NotMentioned);
    }

    #[test]
    fn a_broken_aps_comment_is_an_error_for_the_user_not_a_crash() {
        for comment in [
            r#"{"APS": {"auto_resume_mode": "requeue", "max_requeue_times": "three"}}"#,
            r#"{"APS": {"auto_resume_mode": "teleport"}}"#,
            r#"{"APS": {"auto_resume_mode": "requeue", "max_requeue_times": -1}}"#,
            r#"{"APS": {"mode": "requeue"}}"#,
            r#"{"APS": {"auto_resume_mode": "requeue""#,
        ] {
            assert!(matches!(parse(comment), Enrolment::Invalid(_)), "{comment}");
        }
    }
}
