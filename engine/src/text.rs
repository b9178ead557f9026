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
    fn ellipsize_counts_characters_and_marks_the_cut() {
        assert_eq!(ellipsize("grüße", 3), "grü…");
        assert_eq!(ellipsize("grüße", 5), "grüße");
        assert_eq!(ellipsize("abc", 0), "…");
    }
}
