//! Host names: one subject token.

use crate::NatsError;

/// A host's name as it appears in subjects (`rho.<host>.<type>`): 1 to 64 ASCII letters, digits,
/// `-` and `_` (no `.`, `*`, `>` or space, which would change the subject's meaning).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostName(String);

impl HostName {
    /// `name`, if it is usable as is.
    ///
    /// ```
    /// use rho_bridge_nats::HostName;
    /// assert!(HostName::new("build-1").is_ok());
    /// assert!(HostName::new("a.b").is_err());
    /// assert!(HostName::new("rho.*").is_err());
    /// ```
    pub fn new(name: &str) -> Result<HostName, NatsError> {
        let usable = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if usable {
            Ok(HostName(name.to_owned()))
        } else {
            Err(NatsError::BadName(name.to_owned()))
        }
    }

    /// This machine's host name, cleaned into a usable one (other characters become `-`;
    /// `rho` if it has none).
    pub fn of_this_machine() -> HostName {
        let raw = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let cleaned: String = raw
            .trim()
            .chars()
            .take(64)
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        HostName::new(&cleaned).unwrap_or_else(|_| HostName("rho".into()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for HostName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
