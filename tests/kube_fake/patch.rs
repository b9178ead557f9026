//! The patch formats clients send: JSON merge patch (RFC 7386, also standing in for strategic merge
//! patch) and JSON patch (RFC 6902).

use serde_json::Value;

/// RFC 7386: objects merge key by key, `null` removes a key, anything else replaces the target whole.
/// Lists are replaced whole, which is what a strategic merge patch does for taints too.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch_fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    let Value::Object(target_fields) = target else {
        return;
    };
    for (key, value) in patch_fields {
        if value.is_null() {
            target_fields.remove(key);
        } else {
            merge_patch(
                target_fields.entry(key.clone()).or_insert(Value::Null),
                value,
            );
        }
    }
}

/// Splits a JSON pointer (RFC 6901) into unescaped reference tokens.
fn pointer_tokens(pointer: &str) -> Result<Vec<String>, String> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(format!(
            "JSON pointer \"{pointer}\" does not start with '/'"
        ));
    };
    Ok(rest
        .split('/')
        .map(|token| token.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn array_index(token: &str, length: usize, allow_end: bool) -> Result<usize, String> {
    if allow_end && token == "-" {
        return Ok(length);
    }
    let index: usize = token
        .parse()
        .map_err(|_| format!("\"{token}\" is not an array index"))?;
    let limit = if allow_end {
        length
    } else {
        length.saturating_sub(1)
    };
    if index > limit || (!allow_end && length == 0) {
        return Err(format!("array index {index} is out of bounds"));
    }
    Ok(index)
}

/// The container holding the location a pointer names, and the last token.
fn parent_of<'a>(
    document: &'a mut Value,
    pointer: &str,
) -> Result<(&'a mut Value, String), String> {
    let mut tokens = pointer_tokens(pointer)?;
    let Some(last) = tokens.pop() else {
        return Err("the operation cannot target the whole document".to_string());
    };
    let mut current = document;
    for token in tokens {
        current = match current {
            Value::Object(fields) => fields
                .get_mut(&token)
                .ok_or_else(|| format!("path \"{pointer}\" does not exist"))?,
            Value::Array(items) => {
                let index = array_index(&token, items.len(), false)?;
                &mut items[index]
            }
            _ => return Err(format!("path \"{pointer}\" does not exist")),
        };
    }
    Ok((current, last))
}

fn add(document: &mut Value, pointer: &str, value: Value) -> Result<(), String> {
    if pointer.is_empty() {
        *document = value;
        return Ok(());
    }
    let (parent, last) = parent_of(document, pointer)?;
    match parent {
        Value::Object(fields) => {
            fields.insert(last, value);
            Ok(())
        }
        Value::Array(items) => {
            let index = array_index(&last, items.len(), true)?;
            items.insert(index, value);
            Ok(())
        }
        _ => Err(format!("path \"{pointer}\" does not exist")),
    }
}

fn remove(document: &mut Value, pointer: &str) -> Result<Value, String> {
    let (parent, last) = parent_of(document, pointer)?;
    match parent {
        Value::Object(fields) => fields
            .remove(&last)
            .ok_or_else(|| format!("path \"{pointer}\" does not exist")),
        Value::Array(items) => {
            let index = array_index(&last, items.len(), false)?;
            Ok(items.remove(index))
        }
        _ => Err(format!("path \"{pointer}\" does not exist")),
    }
}

fn lookup<'a>(document: &'a Value, pointer: &str) -> Result<&'a Value, String> {
    if !pointer.is_empty() && !pointer.starts_with('/') {
        return Err(format!(
            "JSON pointer \"{pointer}\" does not start with '/'"
        ));
    }
    document
        .pointer(pointer)
        .ok_or_else(|| format!("path \"{pointer}\" does not exist"))
}

/// RFC 6902, all or nothing: on any failing operation the document is left as it was.
pub fn json_patch(document: &mut Value, operations: &Value) -> Result<(), String> {
    let Value::Array(operations) = operations else {
        return Err("a JSON patch must be an array of operations".to_string());
    };
    let mut working = document.clone();
    for operation in operations {
        let op = operation["op"].as_str().unwrap_or_default();
        let path = operation["path"]
            .as_str()
            .ok_or_else(|| format!("operation {operation} has no path"))?;
        let value = || {
            operation
                .get("value")
                .cloned()
                .ok_or_else(|| format!("operation {operation} has no value"))
        };
        let from = || {
            operation["from"]
                .as_str()
                .ok_or_else(|| format!("operation {operation} has no from"))
        };
        match op {
            "add" => add(&mut working, path, value()?)?,
            "remove" => {
                remove(&mut working, path)?;
            }
            "replace" => {
                lookup(&working, path)?;
                if path.is_empty() {
                    working = value()?;
                } else {
                    remove(&mut working, path)?;
                    add(&mut working, path, value()?)?;
                }
            }
            "move" => {
                let moved = remove(&mut working, from()?)?;
                add(&mut working, path, moved)?;
            }
            "copy" => {
                let copied = lookup(&working, from()?)?.clone();
                add(&mut working, path, copied)?;
            }
            "test" => {
                if *lookup(&working, path)? != value()? {
                    return Err(format!("testing value {path} failed"));
                }
            }
            other => return Err(format!("unexpected kind of operation \"{other}\"")),
        }
    }
    *document = working;
    Ok(())
}
