//! The literals a pattern's every match must contain, which the whole-read scan and the per-line
//! prefilter search for instead of running the pattern.

/// Shortest literal worth scanning for; shorter ones match too many lines to save anything.
const MIN_LITERAL: usize = 6;
/// Most literals one pattern may expand to (an alternation of many words is still fine).
const MAX_LITERALS: usize = 64;

/// The first pattern whose matches need not hold any `prefilter` literal: neither does the pattern
/// spell one out, nor does each literal the parser finds in all its matches hold one. (A literal the
/// pattern spells out inside an optional group passes: the check catches a wording added to a
/// signature without its literal, not every way to write a pattern.)
pub(super) fn uncovered_by_prefilter<'p>(
    prefilter: &[String],
    patterns: &'p [String],
) -> Option<&'p str> {
    if prefilter.is_empty() {
        return None;
    }
    let holds = |text: &str| {
        prefilter
            .iter()
            .any(|wanted| text.contains(wanted.as_str()))
    };
    patterns.iter().map(String::as_str).find(|pattern| {
        !holds(&unescaped(pattern))
            && !required_literals(pattern)
                .is_some_and(|literals| literals.iter().all(|literal| holds(literal)))
    })
}

/// A pattern's text with its escaped punctuation (`\(`, `\.`) written plainly.
pub(super) fn unescaped(pattern: &str) -> String {
    let mut plain = String::with_capacity(pattern.len());
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match chars.peek() {
            Some(&next) if c == '\\' && next.is_ascii_punctuation() => {
                plain.push(next);
                chars.next();
            }
            _ => plain.push(c),
        }
    }
    plain
}

/// Literals one of which every match of `pattern` contains, when the regex parser can tell.
pub(super) fn required_literals(pattern: &str) -> Option<Vec<String>> {
    use regex_syntax::hir::literal::{ExtractKind, Extractor};
    let hir = regex_syntax::Parser::new().parse(pattern).ok()?;
    // Of the prefix and the suffix literals, the set whose shortest literal is longest is the most
    // selective; generic short words ("Rank ") would mark most lines of a log.
    [ExtractKind::Prefix, ExtractKind::Suffix]
        .into_iter()
        .filter_map(|kind| {
            let mut extractor = Extractor::new();
            extractor.kind(kind);
            let seq = extractor.extract(&hir);
            let literals = seq.literals()?;
            let shortest = literals.iter().map(|l| l.as_bytes().len()).min()?;
            (literals.len() <= MAX_LITERALS && shortest >= MIN_LITERAL).then(|| {
                let texts = literals
                    .iter()
                    .map(|l| String::from_utf8(l.as_bytes().to_vec()).ok())
                    .collect::<Option<Vec<String>>>();
                texts.map(|texts| (shortest, texts))
            })?
        })
        .max_by_key(|(shortest, _)| *shortest)
        .map(|(_, texts)| texts)
}

/// A pattern with its named groups made plain, so patterns can share one regex.
pub(super) fn unnamed(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut rest = pattern;
    while let Some(at) = rest.find("(?") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let named = after.strip_prefix("P<").or_else(|| {
            after
                .strip_prefix('<')
                .filter(|a| !a.starts_with('=') && !a.starts_with('!'))
        });
        match named.and_then(|n| n.find('>').map(|end| &n[end + 1..])) {
            Some(tail) => {
                out.push_str("(?:");
                rest = tail;
            }
            None => {
                out.push_str("(?");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}
