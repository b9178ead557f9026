//! Cutting outside text down to size: log lines, scheduler answers, alert bodies. Each cut keeps whole
//! characters, so a line cut in the middle of a multi-byte character is still valid UTF-8.

/// The longest prefix of `text` that fits in `max` bytes and ends on a character boundary.
pub fn clip(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.get(..end).unwrap_or_default()
}

/// `text` cut to at most `max` characters, with `…` where something was cut.
pub fn ellipsize(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((end, _)) => format!("{}…", &text[..end]),
    }
}

/// `text` cut to at most `max` characters by leaving out its middle, marked ` … `: the head of a long
/// log line says who speaks (its labels, an exception's type) and its end, often, what went wrong
/// (after a tensor's or a config's dump).
pub fn keep_ends(text: &str, max: usize) -> String {
    const MARK: &str = " … ";
    let count = text.chars().count();
    if count <= max {
        return text.to_string();
    }
    let kept = max.saturating_sub(MARK.chars().count());
    if kept < 2 {
        return text.chars().take(max).collect();
    }
    let head = kept / 2;
    let tail = kept - head;
    let head_end = text
        .char_indices()
        .nth(head)
        .map_or(text.len(), |(at, _)| at);
    let tail_start = text
        .char_indices()
        .nth(count - tail)
        .map_or(text.len(), |(at, _)| at);
    format!("{}{MARK}{}", &text[..head_end], &text[tail_start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_never_splits_a_character() {
        assert_eq!(clip("grüße", 3), "gr");
        assert_eq!(clip("grüße", 4), "grü");
        assert_eq!(clip("short", 64), "short");
        assert_eq!(clip("", 0), "");
    }

    #[test]
    fn keep_ends_leaves_out_the_middle_in_whole_characters() {
        assert_eq!(keep_ends("short", 10), "short");
        let long = format!("Error: {} grüße at the end", "ä".repeat(100));
        let kept = keep_ends(&long, 40);
        assert_eq!(kept.chars().count(), 40, "{kept}");
        assert!(kept.starts_with("Error: ä"), "{kept}");
        assert!(kept.ends_with("grüße at the end"), "{kept}");
        assert!(kept.contains(" … "), "{kept}");
        assert_eq!(keep_ends("abcdef", 2).chars().count(), 2);
    }

    #[test]
    fn ellipsize_counts_characters_and_marks_the_cut() {
        assert_eq!(ellipsize("grüße", 3), "grü…");
        assert_eq!(ellipsize("grüße", 5), "grüße");
        assert_eq!(ellipsize("abc", 0), "…");
    }
}
