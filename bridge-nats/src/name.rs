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
        let mut buf = [0u8; 256];
        // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`.
        let got = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
        let len = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
        let raw = if got {
            String::from_utf8_lossy(&buf[..len]).into_owned()
        } else {
            String::new()
        };
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
