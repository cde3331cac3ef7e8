//! [`LogLevel`]: how much a tool's log line matters.

use serde::{Deserialize, Serialize};

/// The level of a tool's log line: the eight of RFC 5424 (syslog) that MCP's
/// `notifications/message` carries, lowest first. Ordered: a client that asked for `warning` is
/// sent `warning` and above. The numbers 0 (debug) to 7 (emergency) are the ABI's
/// ([`crate::ffi::HostFns::log`]): never renumber them.
///
/// ```
/// use rho_plugin_api::LogLevel;
/// assert!(LogLevel::Error > LogLevel::Warning);
/// assert_eq!(serde_json::to_string(&LogLevel::Notice).unwrap(), "\"notice\"");
/// assert_eq!("critical".parse::<LogLevel>(), Ok(LogLevel::Critical));
/// assert_eq!(LogLevel::Alert.to_string(), "alert");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[repr(u8)]
pub enum LogLevel {
    /// Detail for debugging.
    Debug = 0,
    /// What the tool is doing.
    Info = 1,
    /// Normal but significant.
    Notice = 2,
    /// Something may be wrong.
    Warning = 3,
    /// Something failed.
    Error = 4,
    /// A part stopped working.
    Critical = 5,
    /// Someone must act now.
    Alert = 6,
    /// Nothing works.
    Emergency = 7,
}

impl LogLevel {
    /// Every level, lowest first.
    pub const ALL: [LogLevel; 8] = [
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Notice,
        LogLevel::Warning,
        LogLevel::Error,
        LogLevel::Critical,
        LogLevel::Alert,
        LogLevel::Emergency,
    ];

    /// The level's name, as MCP and the journal write it (`"warning"`).
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::Alert => "alert",
            LogLevel::Emergency => "emergency",
        }
    }
}

impl std::fmt::Display for LogLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for LogLevel {
    type Err = String;

    /// A level by its name; anything else is an error listing the names.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        LogLevel::ALL
            .into_iter()
            .find(|level| level.as_str() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = LogLevel::ALL.iter().map(|l| l.as_str()).collect();
                format!("`{name}` is no log level (one of {})", names.join(", "))
            })
    }
}
