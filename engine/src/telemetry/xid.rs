//! The Xid table (`data/xid.toml`): which NVIDIA Xid codes end the work on a GPU, and the category each
//! is attributed to. The one place that says which Xids are fatal.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde::Deserialize;

const TABLE: &str = include_str!("../../../data/xid.toml");

/// One Xid code.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XidInfo {
    pub code: u32,
    /// Ends the work on that GPU: a node fault to act on, not a warning.
    pub fatal: bool,
    /// The failure category (`data/taxonomy.toml`) a failure with this Xid is attributed to.
    pub category: String,
    pub meaning: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TableFile {
    xid: Vec<XidInfo>,
}

static XIDS: LazyLock<BTreeMap<u32, XidInfo>> = LazyLock::new(|| {
    // The table is compiled in and checked by the tests below; a broken one reads as empty (every Xid a
    // warning) rather than stopping the engine.
    toml::from_str::<TableFile>(TABLE)
        .map(|file| file.xid.into_iter().map(|x| (x.code, x)).collect())
        .unwrap_or_default()
});

/// What the table says of `code`, if it knows it.
pub fn info(code: u32) -> Option<&'static XidInfo> {
    XIDS.get(&code)
}

/// Whether Xid `code` ends the work on its GPU; unknown codes are warnings.
pub fn is_fatal(code: u32) -> bool {
    info(code).is_some_and(|x| x.fatal)
}

/// Every known Xid, by code.
pub fn all() -> impl Iterator<Item = &'static XidInfo> {
    XIDS.values()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_loads_and_names_only_taxonomy_categories() {
        let file: TableFile = toml::from_str(TABLE).unwrap();
        assert_eq!(file.xid.len(), XIDS.len(), "a code appears twice");
        let categories: Vec<String> = crate::attribute::catalog::taxonomy()
            .into_iter()
            .map(|c| c.id)
            .collect();
        for xid in all() {
            assert!(categories.contains(&xid.category), "{xid:?}");
        }
    }

    #[test]
    fn bus_loss_ecc_nvlink_and_gsp_are_fatal_application_faults_are_not() {
        let fatal: Vec<u32> = all().filter(|x| x.fatal).map(|x| x.code).collect();
        assert_eq!(fatal, [48, 63, 64, 74, 79, 94, 95, 119, 120, 140]);
        assert!(!is_fatal(13) && !is_fatal(43) && !is_fatal(9999));
    }
    #[test]
    fn the_catalog_attributes_each_xid_to_the_tables_category() {
        let catalog = crate::attribute::Catalog::builtin().unwrap();
        let config = crate::config::Config::default();
        let dir = tempfile::tempdir().unwrap();
        for xid in all() {
            let kernel = dir.path().join(format!("xid-{}.kern.log", xid.code));
            std::fs::write(
                &kernel,
                format!(
                    "2026-01-05T08:00:00+00:00 node-03 kernel: NVRM: Xid (PCI:0000:3b:00): {}, pid=4242, name=python, Ch 00000008\n",
                    xid.code
                ),
            )
            .unwrap();
            let input = crate::explain::ExplainInput {
                logs: vec![],
                kernel_logs: vec![kernel],
                nodes: vec![],
                ranks_per_node: 8,
                stalled: false,
            };
            let got = crate::explain::explain(&catalog, &config, &input).unwrap();
            assert_eq!(
                got.attribution.category, xid.category,
                "Xid {} ({}) by {:?}",
                xid.code, xid.meaning, got.attribution.signature
            );
        }
    }
}
