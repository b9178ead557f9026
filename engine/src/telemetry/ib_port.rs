//! `ibstat`'s port sections, read whole. A port's state is spread over several lines, and whether a
//! port that is down matters is said last, by its link layer:
//!
//! ```text
//! CA 'mlx5_10'
//!     Port 1:
//!         State: Down
//!         Physical state: Polling
//!         ...
//!         Link layer: InfiniBand
//! ```
//!
//! An InfiniBand port that is not `Active` (or whose physical state is not `LinkUp`) has no link for
//! NCCL. An Ethernet port (RoCE) is the fabric on clusters that run RDMA over Ethernet; but on a node
//! whose report shows an active InfiniBand port, the fabric is InfiniBand, and an Ethernet port its
//! administrator disabled there is one nobody cabled: it counts only when the report shows no active
//! InfiniBand port. A section whose link layer is never shown (an excerpt cut short) is taken as
//! InfiniBand, `ibstat`'s default. What a section finds is one derived evidence line, `runguard: RDMA
//! port mlx5_10/1 (InfiniBand) is not active (State: Down, Physical state: Polling)`, which the catalog
//! reads like any other.

use crate::attribute::DERIVED_PREFIX;

/// Literals one of which every line [`parse`] reads holds.
pub const MARKERS: &[&str] = &[
    "CA '",
    "Port ",
    "State: ",
    "Physical state: ",
    "Link layer: ",
];

/// One line of a port section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// `CA 'mlx5_10'`: a new adapter.
    Adapter(String),
    /// `Port 1:`: a new port of the adapter.
    Port(u32),
    /// `State: Down` (the logical state: Down, Initializing, Armed, Active).
    State(String),
    /// `Physical state: Polling` (LinkUp, Polling, Disabled, LinkErrorRecovery, Sleep...).
    Physical(String),
    /// `Link layer: InfiniBand` or `Ethernet`: the last line of the section.
    LinkLayer(String),
}

/// The logical states `ibstat` prints; `State: Running` of `kubectl describe` is none of them.
const STATES: &[&str] = &[
    "Down",
    "Initializing",
    "Init",
    "Armed",
    "Active",
    "ActiveDefer",
];

/// The field a line's message holds, if it is one of a port section's.
pub fn parse(message: &str) -> Option<Field> {
    let line = message.trim();
    if let Some(rest) = line.strip_prefix("CA '") {
        let name = rest.strip_suffix('\'')?;
        let plain = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        return plain.then(|| Field::Adapter(name.to_string()));
    }
    if let Some(rest) = line.strip_prefix("Port ") {
        return rest.strip_suffix(':')?.parse().ok().map(Field::Port);
    }
    let word = |rest: &str| {
        let rest = rest.trim();
        (!rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphabetic()))
            .then(|| rest.to_string())
    };
    if let Some(rest) = line.strip_prefix("Physical state: ") {
        return word(rest).map(Field::Physical);
    }
    if let Some(rest) = line.strip_prefix("Link layer: ") {
        return word(rest).map(Field::LinkLayer);
    }
    if let Some(rest) = line.strip_prefix("State: ") {
        return word(rest)
            .filter(|state| STATES.contains(&state.as_str()))
            .map(Field::State);
    }
    None
}

/// The port section being read.
#[derive(Debug, Clone, Default)]
pub struct PortSection {
    adapter: Option<String>,
    port: Option<u32>,
    state: Option<String>,
    physical: Option<String>,
    /// An InfiniBand port of the report is active: the node's fabric is InfiniBand.
    infiniband_active: bool,
    /// Disabled Ethernet ports, said only if the report ends without an active InfiniBand port.
    disabled_ethernet: Vec<String>,
}

impl PortSection {
    /// Takes in one field; the derived line of a section it closes that found a port not active.
    pub fn feed(&mut self, field: Field) -> Option<String> {
        match field {
            Field::Adapter(name) => {
                let closed = self.end_section("InfiniBand");
                self.adapter = Some(name);
                closed
            }
            Field::Port(port) => {
                let closed = self.end_section("InfiniBand");
                self.port = Some(port);
                closed
            }
            Field::State(state) => {
                self.state = Some(state);
                None
            }
            Field::Physical(physical) => {
                self.physical = Some(physical);
                None
            }
            Field::LinkLayer(layer) => self.end_section(&layer),
        }
    }

    /// Ends the report (the read ends): its last section, taken as InfiniBand when its link layer was
    /// not shown, and the disabled Ethernet ports of a node that showed no active InfiniBand port.
    pub fn close(&mut self) -> Vec<String> {
        let mut found: Vec<String> = self.end_section("InfiniBand").into_iter().collect();
        let disabled = std::mem::take(&mut self.disabled_ethernet);
        if !std::mem::take(&mut self.infiniband_active) {
            found.extend(disabled);
        }
        found
    }

    /// Ends the section of `layer`: its finding, unless it waits for the report's end.
    fn end_section(&mut self, layer: &str) -> Option<String> {
        let found = self.finding(layer);
        // An active port is one whose state was read: a `Port N:` line alone shows nothing.
        let seen = self.state.is_some() || self.physical.is_some();
        let disabled = self.physical.as_deref() == Some("Disabled");
        self.clear_port();
        if layer != "InfiniBand" {
            return match found {
                Some(line) if disabled => {
                    self.disabled_ethernet.push(line);
                    None
                }
                found => found,
            };
        }
        if seen && found.is_none() {
            self.infiniband_active = true;
        }
        found
    }

    fn clear_port(&mut self) {
        self.port = None;
        self.state = None;
        self.physical = None;
    }

    /// The derived line when the section's port, of `layer`, is not active.
    fn finding(&self, layer: &str) -> Option<String> {
        let down = self.state.as_deref().is_some_and(|state| state != "Active")
            || self
                .physical
                .as_deref()
                .is_some_and(|physical| physical != "LinkUp");
        if !down {
            return None;
        }
        let adapter = self.adapter.as_deref().unwrap_or("?");
        let port = self.port.map_or_else(|| "?".to_string(), |p| p.to_string());
        let said: Vec<String> = [
            self.state.as_deref().map(|s| format!("State: {s}")),
            self.physical
                .as_deref()
                .map(|p| format!("Physical state: {p}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        Some(format!(
            "{DERIVED_PREFIX}RDMA port {adapter}/{port} ({layer}) is not active ({})",
            said.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Vec<String> {
        let mut section = PortSection::default();
        let mut found: Vec<String> = text
            .lines()
            .filter_map(parse)
            .filter_map(|field| section.feed(field))
            .collect();
        found.extend(section.close());
        found
    }

    #[test]
    fn a_disabled_ethernet_port_counts_where_no_infiniband_port_is_active() {
        let found = read(
            "CA 'mlx5_1'\n\tPort 1:\n\t\tState: Down\n\t\tPhysical state: Disabled\n\t\tLink layer: Ethernet\n",
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("mlx5_1/1 (Ethernet)"), "{found:?}");
    }

    #[test]
    fn an_infiniband_port_down_is_found_with_its_adapter_and_port() {
        let found = read(
            "CA 'mlx5_10'\n\tCA type: MT4129\n\tPort 1:\n\t\tState: Down\n\t\tPhysical state: Polling\n\t\tRate: 10\n\t\tLink layer: InfiniBand\n",
        );
        assert_eq!(
            found,
            vec![
                "runguard: RDMA port mlx5_10/1 (InfiniBand) is not active (State: Down, Physical state: Polling)"
            ]
        );
    }

    #[test]
    fn a_roce_port_that_cannot_link_is_found() {
        let found = read(
            "CA 'mlx5_2'\n\tPort 1:\n\t\tState: Down\n\t\tPhysical state: Polling\n\t\tLink layer: Ethernet\n",
        );
        assert_eq!(
            found,
            vec![
                "runguard: RDMA port mlx5_2/1 (Ethernet) is not active (State: Down, Physical state: Polling)"
            ]
        );
    }

    #[test]
    fn a_disabled_ethernet_port_and_active_infiniband_ports_are_nothing() {
        let found = read(
            "CA 'mlx5_0'\n\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tLink layer: InfiniBand\nCA 'mlx5_1'\n\tPort 1:\n\t\tState: Down\n\t\tPhysical state: Disabled\n\t\tLink layer: Ethernet\n",
        );
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn a_port_line_without_its_state_shows_no_active_infiniband_port() {
        let found = read(
            "CA 'mlx5_0'\n\tPort 1:\nCA 'mlx5_1'\n\tPort 1:\n\t\tState: Down\n\t\tPhysical state: Disabled\n\t\tLink layer: Ethernet\n",
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("mlx5_1/1 (Ethernet)"), "{found:?}");
    }

    #[test]
    fn a_section_cut_before_its_link_layer_is_taken_as_infiniband() {
        let found = read("CA 'mlx5_8'\n\tPort 1:\n\t\tState: Down\n\t\tPhysical state: Disabled\n");
        assert_eq!(found.len(), 1, "{found:?}");
        let next = read(
            "CA 'mlx5_8'\n\tPort 1:\n\t\tState: Down\nCA 'mlx5_9'\n\tPort 1:\n\t\tState: Active\n",
        );
        assert_eq!(next.len(), 1, "{next:?}");
        assert!(next[0].contains("mlx5_8/1"), "{next:?}");
    }

    #[test]
    fn other_tools_state_lines_are_not_fields() {
        assert_eq!(parse("    State:          Running"), None);
        assert_eq!(parse("State: Running"), None);
        assert_eq!(parse("Port 8080 is in use"), None);
        assert_eq!(parse("CA 'x y'"), None);
        assert_eq!(
            parse("  State: Active"),
            Some(Field::State("Active".into()))
        );
    }
}
