//! Locators: lines that name the node a log was taken on without being errors themselves.

use regex::Regex;

use super::spec::LocatorExample;
#[cfg(doc)]
use super::spec::LocatorSpec;

/// A compiled locator.
#[derive(Debug, Clone)]
pub struct Locator {
    pub id: String,
    pub examples: Vec<LocatorExample>,
    /// See [`LocatorSpec::origin`].
    pub origin: bool,
    /// See [`LocatorSpec::not_located`].
    pub not_located: Vec<String>,
    pub(super) pattern: Regex,
    /// See [`LocatorSpec::unless`].
    pub(super) unless: Vec<Regex>,
}

impl Locator {
    /// The node `line` names, if it is this locator's kind of line.
    pub fn node<'l>(&self, line: &'l str) -> Option<&'l str> {
        self.locate(line).map(|(node, _)| node)
    }

    /// Whether `line` is this locator's kind of line, whether or not it locates a node.
    pub fn is_its_kind(&self, line: &str) -> bool {
        self.pattern.is_match(line)
    }

    /// The node `line` names, and the rank when the locator captures one.
    pub fn locate<'l>(&self, line: &'l str) -> Option<(&'l str, Option<u32>)> {
        let captures = self.pattern.captures(line)?;
        let node = captures.name("node")?.as_str();
        if is_replica_set_pod(node) || self.unless.iter().any(|veto| veto.is_match(line)) {
            return None;
        }
        let rank = captures
            .name("rank")
            .and_then(|rank| rank.as_str().parse().ok());
        Some((node, rank))
    }
}

/// Kubernetes names a Deployment's pods `<name>-<template hash>-<suffix>` from an alphabet without vowels
/// (and 0, 1, 3): a container's prompt shows that pod name, which is no node.
fn is_replica_set_pod(host: &str) -> bool {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let generated = |part: &str| part.bytes().all(|b| ALPHABET.contains(&b));
    let mut parts = host.rsplit('-');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(suffix), Some(hash), Some(name)) => {
            suffix.len() == 5
                && (8..=10).contains(&hash.len())
                && generated(suffix)
                && generated(hash)
                && !name.is_empty()
        }
        _ => false,
    }
}
