//! [`Origin`]: where a tool the registry serves comes from, as a type. People read its
//! [`Display`](std::fmt::Display) form (`files@0.2.0 (libfiles.so)`, `host`,
//! `faults@0.1.0 via nats`); code matches on its fields, never on that text.
//!
//! ```
//! use rho_runtime::Origin;
//!
//! let origin = Origin::Plugin {
//!     plugin: "files".into(),
//!     version: "0.2.0".into(),
//!     file: "libfiles.so".into(),
//! };
//! assert_eq!(origin.to_string(), "files@0.2.0 (libfiles.so)");
//! assert_eq!(origin.release(), "files@0.2.0");
//! assert_eq!(Origin::Host.to_string(), "host");
//! ```

use serde::{Deserialize, Serialize};

/// Where a tool comes from. Serialized as an object tagged by `"kind"` (`host`, `plugin`,
/// `remote`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Origin {
    /// Registered by the host itself ([`crate::HostBuilder::tool`]).
    #[default]
    Host,
    /// A plugin file of a plugin directory.
    Plugin {
        /// The plugin's name.
        plugin: String,
        /// The version serving the tool.
        version: String,
        /// The file's name in its directory.
        file: String,
    },
    /// A remote source ([`crate::ToolSource`]).
    Remote {
        /// What the far end says serves it ([`crate::RemoteToolEntry::origin`], `plugin@version`
        /// for a NATS node).
        offered: String,
        /// The source's name.
        via: String,
    },
}

impl Origin {
    /// What every host serving the same build shares, without the local file: `plugin@version`
    /// for a plugin, `host` for the host's own tools, the whole origin for a remote tool.
    pub fn release(&self) -> String {
        match self {
            Origin::Plugin {
                plugin, version, ..
            } => format!("{plugin}@{version}"),
            other => other.to_string(),
        }
    }

    /// Whether the tool comes from plugin `name` (any version).
    pub fn is_plugin(&self, name: &str) -> bool {
        matches!(self, Origin::Plugin { plugin, .. } if plugin == name)
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Host => f.write_str("host"),
            Origin::Plugin {
                plugin,
                version,
                file,
            } => write!(f, "{plugin}@{version} ({file})"),
            Origin::Remote { offered, via } => write!(f, "{offered} via {via}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Origin;

    #[test]
    fn each_kind_reads_for_people_and_serializes_tagged() {
        let remote = Origin::Remote {
            offered: "faults@0.1.0".into(),
            via: "nats".into(),
        };
        assert_eq!(remote.to_string(), "faults@0.1.0 via nats");
        assert_eq!(remote.release(), "faults@0.1.0 via nats");
        assert!(!remote.is_plugin("faults"));
        let plugin = Origin::Plugin {
            plugin: "a (b)".into(),
            version: "1".into(),
            file: "lib (x).so".into(),
        };
        // Names with the separators of the text form stay whole: nothing parses the text.
        assert_eq!(plugin.release(), "a (b)@1");
        assert!(plugin.is_plugin("a (b)"));
        let value = serde_json::to_value(&plugin).ok();
        assert_eq!(
            value,
            Some(
                serde_json::json!({"kind": "plugin", "plugin": "a (b)", "version": "1", "file": "lib (x).so"})
            )
        );
        let back: Option<Origin> = value.and_then(|v| serde_json::from_value(v).ok());
        assert_eq!(back, Some(plugin));
        assert_eq!(
            serde_json::to_value(Origin::Host).ok(),
            Some(serde_json::json!({"kind": "host"}))
        );
    }
}
