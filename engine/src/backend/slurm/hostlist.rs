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
/// Longest host name a range may produce (a DNS name's limit), so that zero padding such as
/// `n[0000…0001-99999]` cannot make each of the hosts huge.
const MAX_HOST_NAME: usize = 255;

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
            // Counted without overflow: `n[0-18446744073709551615]` is too many hosts, not a panic.
            if high - low >= (MAX_HOSTS - hosts.len()) as u64 {
                return Err(error("too many hosts"));
            }
            let digits = high.checked_ilog10().map_or(1, |log| log as usize + 1);
            if prefix.len() + width.max(digits) + suffix.len() > MAX_HOST_NAME {
                return Err(error("host name too long"));
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

    #[test]
    fn a_range_over_every_number_is_too_many_hosts_not_an_overflow() {
        let err = expand("n[0-18446744073709551615]").unwrap_err();
        assert_eq!(err.reason, "too many hosts");
        let err = expand("n[1-3],m[0-18446744073709551615]").unwrap_err();
        assert_eq!(err.reason, "too many hosts");
        assert_eq!(
            expand("n[18446744073709551615]").unwrap(),
            ["n18446744073709551615"]
        );
    }

    #[test]
    fn zero_padding_cannot_make_host_names_longer_than_a_dns_name() {
        let padded = format!("n[{}1-99999]", "0".repeat(4000));
        assert_eq!(expand(&padded).unwrap_err().reason, "host name too long");
        let longest = format!("n[{}1-2]", "0".repeat(MAX_HOST_NAME - 2));
        let hosts = expand(&longest).unwrap();
        assert_eq!(hosts.len(), 2);
        assert!(hosts.iter().all(|host| host.len() == MAX_HOST_NAME));
    }
}

#[cfg(test)]
mod proptests {
    //! Properties of the expander: what a list says is what it expands to, whatever its shape, and no
    //! text makes it panic or grow past its bound.

    use proptest::prelude::*;

    use super::*;

    /// One bracketed range as Slurm writes it: the low bound padded to `width` digits.
    #[derive(Debug, Clone)]
    struct Range {
        low: u64,
        count: u64,
        width: usize,
    }

    impl Range {
        fn text(&self) -> String {
            let high = self.low + self.count - 1;
            if self.count == 1 {
                format!("{:0w$}", self.low, w = self.width)
            } else {
                format!("{:0w$}-{high}", self.low, w = self.width)
            }
        }

        /// The numbers it stands for, padded as the low bound is written.
        fn numbers(&self) -> Vec<String> {
            let width = self.text().split('-').next().map_or(0, str::len);
            (self.low..self.low + self.count)
                .map(|n| format!("{n:0width$}"))
                .collect()
        }
    }

    /// One item of a list: a plain name, or a prefix, bracketed ranges and a suffix.
    #[derive(Debug, Clone)]
    struct Item {
        prefix: String,
        ranges: Vec<Range>,
        suffix: String,
    }

    impl Item {
        fn text(&self) -> String {
            if self.ranges.is_empty() {
                return self.prefix.clone();
            }
            let ranges: Vec<String> = self.ranges.iter().map(Range::text).collect();
            format!("{}[{}]{}", self.prefix, ranges.join(","), self.suffix)
        }

        fn hosts(&self) -> Vec<String> {
            if self.ranges.is_empty() {
                return vec![self.prefix.clone()];
            }
            self.ranges
                .iter()
                .flat_map(Range::numbers)
                .map(|n| format!("{}{n}{}", self.prefix, self.suffix))
                .collect()
        }
    }

    fn range() -> impl Strategy<Value = Range> {
        (0u64..100_000, 1u64..40, 1usize..7).prop_map(|(low, count, width)| Range {
            low,
            count,
            width,
        })
    }

    fn item() -> impl Strategy<Value = Item> {
        (
            "[a-z][a-z0-9-]{0,8}",
            prop::collection::vec(range(), 0..4),
            "(-[a-z]{1,4})?",
        )
            .prop_map(|(prefix, ranges, suffix)| Item {
                prefix,
                ranges,
                suffix,
            })
    }

    /// Hosts named by a prefix and a number of a fixed width, written back as Slurm compresses them:
    /// one item per prefix, runs of consecutive numbers as ranges.
    fn compress(hosts: &[(String, u64)], width: usize) -> String {
        let mut items: Vec<(String, Vec<(u64, u64)>)> = Vec::new();
        for (prefix, number) in hosts {
            match items.last_mut() {
                Some((last, runs)) if last == prefix => match runs.last_mut() {
                    Some((_, high)) if *high + 1 == *number => *high = *number,
                    _ => runs.push((*number, *number)),
                },
                _ => items.push((prefix.clone(), vec![(*number, *number)])),
            }
        }
        let item = |(prefix, runs): &(String, Vec<(u64, u64)>)| {
            let runs: Vec<String> = runs
                .iter()
                .map(|&(low, high)| match low == high {
                    true => format!("{low:0width$}"),
                    false => format!("{low:0width$}-{high:0width$}"),
                })
                .collect();
            format!("{prefix}[{}]", runs.join(","))
        };
        items.iter().map(item).collect::<Vec<_>>().join(",")
    }

    proptest! {
        #[test]
        fn a_list_expands_to_the_hosts_it_names_in_order(items in prop::collection::vec(item(), 1..6)) {
            let list: Vec<String> = items.iter().map(Item::text).collect();
            let expected: Vec<String> = items.iter().flat_map(Item::hosts).collect();
            prop_assert_eq!(expand(&list.join(",")).unwrap(), expected);
        }

        #[test]
        fn compressing_hosts_and_expanding_them_gives_them_back(
            prefixes in prop::collection::vec("[a-z]{1,5}-?", 1..4),
            numbers in prop::collection::vec(prop::collection::btree_set(0u64..500, 1..30), 1..4),
            width in 1usize..5,
        ) {
            let hosts: Vec<(String, u64)> = prefixes
                .iter()
                .zip(&numbers)
                .flat_map(|(prefix, set)| set.iter().map(move |n| (prefix.clone(), *n)))
                .collect();
            let expected: Vec<String> = hosts
                .iter()
                .map(|(prefix, n)| format!("{prefix}{n:0width$}"))
                .collect();
            prop_assert_eq!(expand(&compress(&hosts, width)).unwrap(), expected);
        }

        #[test]
        fn a_range_is_every_number_between_its_bounds_padded_like_its_low_bound(
            low in 0u64..1_000_000,
            count in 1u64..200,
            zeros in 0usize..4,
        ) {
            let high = low + count - 1;
            let low_text = format!("{}{low}", "0".repeat(zeros));
            let hosts = expand(&format!("gpu[{low_text}-{high}]")).unwrap();
            prop_assert_eq!(hosts.len() as u64, count);
            for (host, n) in hosts.iter().zip(low..=high) {
                let digits = &host["gpu".len()..];
                prop_assert_eq!(digits.parse::<u64>().unwrap(), n);
                prop_assert!(digits.len() >= low_text.len());
                prop_assert!(digits.len() == low_text.len() || !digits.starts_with('0'));
            }
        }

        #[test]
        fn commas_inside_brackets_are_ranges_and_outside_them_items(
            first in prop::collection::vec(range(), 1..4),
            second in prop::collection::vec(range(), 1..4),
        ) {
            let (a, b) = (
                Item { prefix: "a".into(), ranges: first, suffix: String::new() },
                Item { prefix: "b".into(), ranges: second, suffix: "-ib".into() },
            );
            let hosts = expand(&format!("{}, {} ,", a.text(), b.text())).unwrap();
            let expected: Vec<String> = a.hosts().into_iter().chain(b.hosts()).collect();
            prop_assert_eq!(hosts, expected);
        }

        #[test]
        fn any_bounds_give_the_hosts_or_an_error_never_more_than_the_bound(
            low in prop_oneof![Just(0u64), 0u64..1_000, any::<u64>()],
            span in prop_oneof![0u64..10, 99_990u64..100_010, Just(u64::MAX), any::<u64>()],
        ) {
            let high = low.saturating_add(span);
            match expand(&format!("n[{low}-{high}]")) {
                Ok(hosts) => {
                    prop_assert!(high - low < MAX_HOSTS as u64);
                    prop_assert_eq!(hosts.len() as u64, high - low + 1);
                }
                Err(err) => prop_assert!(high - low >= MAX_HOSTS as u64, "{err}"),
            }
        }

        #[test]
        fn never_panics_and_stays_bounded_on_arbitrary_text(text in "[\\[\\]0-9a-z,\\- ]{0,40}|\\PC{0,40}") {
            if let Ok(hosts) = expand(&text) {
                prop_assert!(hosts.len() <= MAX_HOSTS);
                prop_assert!(hosts.iter().all(|host| host.len() <= MAX_HOST_NAME.max(text.len())));
                // Every byte of every host name comes from the list or is a digit of a range.
                prop_assert!(hosts.iter().all(|host| host
                    .chars()
                    .all(|c| c.is_ascii_digit() || text.contains(c))));
            }
        }
    }
}
