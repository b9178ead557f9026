//! Slurm's compressed host lists: `n[1-3,7]`, `node-[01-04]`, `gpu[1-2]-ib,login1`.

/// A host list that cannot be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid host list {list:?}: {reason}")]
pub struct HostlistError {
    pub list: String,
    pub reason: String,
}

/// Largest expansion accepted, so a garbled `n[1-999999999]` cannot exhaust memory.
const MAX_HOSTS: usize = 100_000;

/// Expands a compressed host list into host names, in order.
pub fn expand(list: &str) -> Result<Vec<String>, HostlistError> {
    let error = |reason: &str| HostlistError {
        list: list.to_string(),
        reason: reason.to_string(),
    };
    let list = list.trim();
    if list.is_empty() || list == "(null)" || list == "None assigned" {
        return Ok(Vec::new());
    }
    let mut hosts = Vec::new();
    for item in split_top_level(list).map_err(|reason| error(&reason))? {
        let Some(open) = item.find('[') else {
            hosts.push(item.to_string());
            continue;
        };
        let close = item.find(']').ok_or_else(|| error("unclosed ["))?;
        if close < open {
            return Err(error("] before ["));
        }
        let (prefix, ranges, suffix) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
        if suffix.contains('[') {
            return Err(error("more than one bracket in one host name"));
        }
        for range in ranges.split(',') {
            let (low, high) = range.split_once('-').unwrap_or((range, range));
            let width = low.len();
            let (low, high): (u64, u64) = (
                low.parse()
                    .map_err(|_| error("range bound is not a number"))?,
                high.parse()
                    .map_err(|_| error("range bound is not a number"))?,
            );
            if high < low {
                return Err(error("range runs backwards"));
            }
            if hosts.len() as u64 + (high - low + 1) > MAX_HOSTS as u64 {
                return Err(error("too many hosts"));
            }
            for number in low..=high {
                hosts.push(format!("{prefix}{number:0width$}{suffix}"));
            }
        }
    }
    Ok(hosts)
}

/// Splits on the commas that are not inside brackets.
fn split_top_level(list: &str) -> Result<Vec<&str>, String> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (at, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&list[start..at]);
                start = at + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err("unbalanced brackets".to_string());
        }
    }
    items.push(&list[start..]);
    Ok(items
        .into_iter()
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_ranges_lists_and_zero_padding() {
        assert_eq!(expand("n[1-3,7]").unwrap(), ["n1", "n2", "n3", "n7"]);
        assert_eq!(
            expand("node-[07-09]").unwrap(),
            ["node-07", "node-08", "node-09"]
        );
        assert_eq!(
            expand("gpu[1-2]-ib,login1").unwrap(),
            ["gpu1-ib", "gpu2-ib", "login1"]
        );
        assert_eq!(expand("n3").unwrap(), ["n3"]);
        assert!(expand("").unwrap().is_empty());
        assert!(expand("(null)").unwrap().is_empty());
    }

    #[test]
    fn garbled_lists_are_errors_not_panics() {
        for bad in [
            "n[1-3",
            "n]1[",
            "n[3-1]",
            "n[a-b]",
            "n[1-999999999]",
            "n[[1]]",
        ] {
            assert!(expand(bad).is_err(), "{bad}");
        }
    }
}
