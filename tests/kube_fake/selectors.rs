//! `labelSelector` and `fieldSelector` as the API server parses and applies them.

use serde_json::Value;

use super::resources::ResourceType;

#[derive(Debug, Clone, PartialEq)]
enum LabelRequirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

/// Requirements joined by commas, all of which must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    requirements: Vec<LabelRequirement>,
}

/// Splits at commas outside parentheses, so `a in (x,y),b` is two terms.
fn split_terms(text: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (index, character) in text.char_indices() {
        match character {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                terms.push(&text[start..index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    terms.push(&text[start..]);
    terms
}

fn valid_key(key: &str) -> Result<String, String> {
    if key.is_empty()
        || key
            .chars()
            .any(|character| character.is_whitespace() || "=!(),<>".contains(character))
    {
        return Err(format!("invalid label key \"{key}\""));
    }
    Ok(key.to_string())
}

fn parse_requirement(term: &str) -> Result<LabelRequirement, String> {
    if let Some(key) = term.strip_prefix('!') {
        return Ok(LabelRequirement::DoesNotExist(valid_key(key.trim())?));
    }
    if let Some(open) = term.find('(') {
        let head: Vec<&str> = term[..open].split_whitespace().collect();
        let close = term
            .rfind(')')
            .filter(|&close| close > open && term[close + 1..].trim().is_empty())
            .ok_or_else(|| format!("unable to parse requirement: missing ')' in \"{term}\""))?;
        let values: Vec<String> = term[open + 1..close]
            .split(',')
            .map(|value| value.trim().to_string())
            .collect();
        return match head.as_slice() {
            [key, "in"] => Ok(LabelRequirement::In(valid_key(key)?, values)),
            [key, "notin"] => Ok(LabelRequirement::NotIn(valid_key(key)?, values)),
            _ => Err(format!(
                "unable to parse requirement: found '(', expected: in or notin in \"{term}\""
            )),
        };
    }
    for operator in ["!=", "==", "=", ">", "<"] {
        if let Some(position) = term.find(operator) {
            let key = valid_key(term[..position].trim())?;
            let value = term[position + operator.len()..].trim().to_string();
            return match operator {
                "!=" => Ok(LabelRequirement::NotEquals(key, value)),
                ">" | "<" => {
                    let bound: i64 = value.parse().map_err(|_| {
                        format!(
                            "for 'gt', 'lt' operators, the value must be an integer: \"{value}\""
                        )
                    })?;
                    Ok(if operator == ">" {
                        LabelRequirement::GreaterThan(key, bound)
                    } else {
                        LabelRequirement::LessThan(key, bound)
                    })
                }
                _ => Ok(LabelRequirement::Equals(key, value)),
            };
        }
    }
    Ok(LabelRequirement::Exists(valid_key(term)?))
}

impl LabelSelector {
    /// Parses the query parameter; an empty text selects everything.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        let requirements = split_terms(text)
            .into_iter()
            .map(|term| parse_requirement(term.trim()))
            .collect::<Result<_, _>>()?;
        Ok(LabelSelector { requirements })
    }

    pub fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        let label = |key: &str| labels.get(key).and_then(Value::as_str);
        self.requirements
            .iter()
            .all(|requirement| match requirement {
                LabelRequirement::Equals(key, value) => label(key) == Some(value.as_str()),
                LabelRequirement::NotEquals(key, value) => label(key) != Some(value.as_str()),
                LabelRequirement::In(key, values) => {
                    label(key).is_some_and(|found| values.iter().any(|value| value == found))
                }
                LabelRequirement::NotIn(key, values) => {
                    label(key).is_none_or(|found| values.iter().all(|value| value != found))
                }
                LabelRequirement::Exists(key) => label(key).is_some(),
                LabelRequirement::DoesNotExist(key) => label(key).is_none(),
                LabelRequirement::GreaterThan(key, bound) => label(key)
                    .and_then(|found| found.parse::<i64>().ok())
                    .is_some_and(|found| found > *bound),
                LabelRequirement::LessThan(key, bound) => label(key)
                    .and_then(|found| found.parse::<i64>().ok())
                    .is_some_and(|found| found < *bound),
            })
    }
}

#[derive(Debug, Clone, PartialEq)]
struct FieldRequirement {
    path: &'static str,
    value: String,
    equal: bool,
}

/// Field requirements joined by commas; only the fields the resource indexes are accepted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

/// Splits at commas not escaped by a backslash and removes the escapes.
fn split_escaped(text: &str) -> Vec<String> {
    let mut terms = vec![String::new()];
    let mut characters = text.chars();
    while let Some(character) = characters.next() {
        match character {
            '\\' => {
                if let (Some(escaped), Some(term)) = (characters.next(), terms.last_mut()) {
                    term.push(escaped);
                }
            }
            ',' => terms.push(String::new()),
            other => {
                if let Some(term) = terms.last_mut() {
                    term.push(other);
                }
            }
        }
    }
    terms
}

/// The text a field selector compares: strings as they are, booleans and numbers printed, and an
/// absent field as the empty string (so `spec.nodeName=` finds unscheduled pods).
fn field_text(object: &Value, path: &str) -> String {
    let mut current = object;
    for part in path.split('.') {
        match current.get(part) {
            Some(next) => current = next,
            None => return String::new(),
        }
    }
    match current {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl FieldSelector {
    pub fn parse(text: &str, resource: &ResourceType) -> Result<Self, String> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        let mut requirements = Vec::new();
        for term in split_escaped(text) {
            let (label, value, equal) = if let Some((label, value)) = term.split_once("!=") {
                (label, value, false)
            } else if let Some((label, value)) = term.split_once("==") {
                (label, value, true)
            } else if let Some((label, value)) = term.split_once('=') {
                (label, value, true)
            } else {
                return Err(format!(
                    "invalid selector: '{term}'; can't understand '{term}'"
                ));
            };
            let label = label.trim();
            let path = resource
                .field_path(label)
                .ok_or_else(|| format!("field label not supported: {label}"))?;
            requirements.push(FieldRequirement {
                path,
                value: value.trim().to_string(),
                equal,
            });
        }
        Ok(FieldSelector { requirements })
    }

    pub fn matches(&self, object: &Value) -> bool {
        self.requirements.iter().all(|requirement| {
            (field_text(object, requirement.path) == requirement.value) == requirement.equal
        })
    }
}

/// Both selectors of one request.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selection {
    pub fn matches(&self, object: &Value) -> bool {
        self.labels.matches(object) && self.fields.matches(object)
    }
}
