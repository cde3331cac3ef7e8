//! What a sandbox is asked to be and what it reports: who the plugin runs as ([`Identity`]), its
//! resource limits ([`WorkerLimits`]), and what of the sandbox is in force ([`SandboxReport`]).

use std::fmt;

use serde::{Deserialize, Serialize};

/// Resource limits of one worker process (`setrlimit`); `None` leaves the host's own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkerLimits {
    /// Address space, bytes (`RLIMIT_AS`): an allocation past it fails and the worker aborts.
    pub memory_bytes: Option<u64>,
    /// Writable private memory of each process, bytes (`RLIMIT_DATA`: the heap and private
    /// writable mappings; address space only reserved, `PROT_NONE`, does not count). The bound
    /// for programs whose runtime reserves far more address space than it uses (V8): an
    /// allocation past it fails. Each process of the sandbox has it on its own.
    pub data_bytes: Option<u64>,
    /// CPU time over the worker's life, seconds (`RLIMIT_CPU`): past it the kernel kills it and the
    /// pool starts another.
    pub cpu_seconds: Option<u64>,
    /// Open files (`RLIMIT_NOFILE`).
    pub open_files: Option<u64>,
    /// Processes and threads of the sandbox together (`RLIMIT_NPROC`, counted in the worker's own
    /// user namespace).
    pub processes: Option<u64>,
    /// The largest file the plugin may write (`RLIMIT_FSIZE`).
    pub file_bytes: Option<u64>,
    /// The size of the worker's private tmpfs at `/tmp` (its scratch space; it counts against
    /// memory, not disk, and is gone with the worker).
    pub scratch_bytes: u64,
}

impl Default for WorkerLimits {
    /// 2 GiB of address space, no bound on writable memory beyond it, no CPU limit, 256 open files, 64 processes and threads, files of
    /// at most 1 GiB, a 64 MiB scratch tmpfs.
    fn default() -> Self {
        WorkerLimits {
            memory_bytes: Some(2 << 30),
            data_bytes: None,
            cpu_seconds: None,
            open_files: Some(256),
            processes: Some(64),
            file_bytes: Some(1 << 30),
            scratch_bytes: 64 << 20,
        }
    }
}

/// Who an isolated plugin runs as.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Identity {
    /// `nobody` (65534:65534) when the host runs as root, the host's own ids otherwise.
    #[default]
    Auto,
    /// The host's own ids.
    Host,
    /// These ids (the host must run as root to switch to them).
    User {
        /// User id.
        uid: u32,
        /// Group id.
        gid: u32,
    },
}

impl Identity {
    /// The ids a worker of a host running as `euid` switches to, if any.
    pub fn resolve(self, euid: u32) -> Option<(u32, u32)> {
        let root = euid == 0;
        match self {
            Identity::Auto if root => Some((NOBODY, NOBODY)),
            Identity::Auto | Identity::Host => None,
            Identity::User { uid, gid } => Some((uid, gid)),
        }
    }
}

/// `nobody`'s user and group id.
pub const NOBODY: u32 = 65534;

/// What of the sandbox is in force in a worker, as it reported after loading its plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SandboxReport {
    /// The user id the plugin runs as (outside its user namespace).
    pub uid: u32,
    /// The group id.
    pub gid: u32,
    /// A user namespace of its own.
    pub user_ns: bool,
    /// A PID namespace of its own (it sees and signals only its own processes; they all die
    /// with the worker).
    pub pid_ns: bool,
    /// A mount namespace with a fresh `/proc`.
    pub fresh_proc: bool,
    /// A private tmpfs is mounted at `/tmp` (the plugin's scratch space).
    pub scratch: bool,
    /// A network namespace of its own (no network).
    pub net_ns: bool,
    /// The Landlock ABI enforced (0: none).
    pub landlock_abi: u8,
    /// Whether every Landlock restriction asked for is enforced.
    pub landlock_full: bool,
    /// The seccomp filter is installed.
    pub seccomp: bool,
    /// `no_new_privs` is set.
    pub no_new_privs: bool,
    /// Capabilities were dropped.
    pub caps_dropped: bool,
    /// The file system is read-only but for the scratch directory and the write grants, so
    /// nothing outside them changes, metadata included (modes, owners, times, extended
    /// attributes: Landlock does not govern those).
    #[serde(default)]
    pub read_only: bool,
    /// The plugin runs in a user namespace nested in the sandbox's, which owns none of the
    /// sandbox's namespaces (no capability it could regain reaches them).
    #[serde(default)]
    pub nested_user_ns: bool,
    /// System V shared memory and message queues are bounded in the sandbox's own IPC namespace,
    /// and POSIX message queues by `RLIMIT_MSGQUEUE` (see [`WorkerLimits::memory_bytes`]).
    #[serde(default)]
    pub ipc_limits: bool,
    /// macOS: the plugin process runs under a Seatbelt profile generated from its grants (reads
    /// of the system and the grants, writes to its scratch directory and the write grants,
    /// network and processes only when granted).
    #[serde(default)]
    pub seatbelt: bool,
    /// The granted paths in force, as `read PATH` or `write PATH` (resolved paths): the same as
    /// the host granted, or the plugin is refused.
    #[serde(default)]
    pub grants: Vec<String>,
    /// What could not be set up, one line each.
    pub missing: Vec<String>,
    /// A WebAssembly component's sandbox (then the process fields above say nothing: it runs in
    /// the host's process, confined by the engine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wasm: Option<WasmSandbox>,
}

/// What confines a WebAssembly component: it reaches nothing but what the engine links into it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WasmSandbox {
    /// The linear memory of one instance, bytes (past it, growth fails).
    pub memory_bytes: u64,
    /// The fuel of one call (instructions, roughly), if bounded.
    pub fuel: Option<u64>,
    /// The size of the in-memory scratch directory at `/tmp`, bytes (0: none).
    pub scratch_bytes: u64,
    /// Sockets are allowed (the network grant).
    pub network: bool,
    /// The environment keys it sees.
    pub env: Vec<String>,
}

impl SandboxReport {
    /// Whether every mechanism is in force.
    pub fn complete(&self) -> bool {
        self.missing.is_empty()
    }

    /// The mechanisms in force around a worker process, comma-separated.
    fn fmt_process(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = vec![format!("uid {}", self.uid)];
        let ns: Vec<&str> = [
            (self.user_ns, "user"),
            (self.pid_ns, "pid"),
            (self.fresh_proc, "mount"),
            (self.net_ns, "net"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, name)| *name)
        .collect();
        if !ns.is_empty() {
            parts.push(format!("{} namespaces", ns.join("+")));
        }
        if self.fresh_proc {
            parts.push("fresh /proc".into());
        }
        if self.read_only {
            parts.push("read-only file system".into());
        }
        if self.ipc_limits {
            parts.push("IPC bounded".into());
        }
        if self.seatbelt {
            parts.push("Seatbelt".into());
        }
        if self.landlock_abi > 0 {
            parts.push(format!(
                "Landlock ABI {}{}",
                self.landlock_abi,
                if self.landlock_full { "" } else { " (partly)" }
            ));
        }
        for (on, name) in [
            (self.seccomp, "seccomp"),
            (self.no_new_privs, "no_new_privs"),
            (self.caps_dropped, "no capabilities"),
        ] {
            if on {
                parts.push(name.into());
            }
        }
        write!(f, "{}", parts.join(", "))
    }
}

impl fmt::Display for SandboxReport {
    /// One line: `uid 65534, user+pid+mount+net namespaces, fresh /proc, Landlock ABI 7, seccomp,
    /// no_new_privs, no capabilities`, then what is missing.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(wasm) = &self.wasm {
            write!(f, "{wasm}")?;
        } else {
            self.fmt_process(f)?;
        }
        if !self.missing.is_empty() {
            write!(f, "; missing: {}", self.missing.join("; "))?;
        }
        Ok(())
    }
}

impl fmt::Display for WasmSandbox {
    /// One line: `wasm component: memory 256 MiB, scratch 16 MiB, no network, no environment`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |bytes: u64| format!("{} MiB", bytes >> 20);
        write!(f, "wasm component: memory {}", mib(self.memory_bytes))?;
        if let Some(fuel) = self.fuel {
            write!(f, ", fuel {fuel}")?;
        }
        if self.scratch_bytes > 0 {
            write!(f, ", scratch {}", mib(self.scratch_bytes))?;
        }
        f.write_str(if self.network {
            ", network"
        } else {
            ", no network"
        })?;
        if self.env.is_empty() {
            f.write_str(", no environment")
        } else {
            write!(f, ", environment {}", self.env.join(" "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_reads_as_one_line() {
        let r = SandboxReport {
            uid: 65534,
            user_ns: true,
            pid_ns: true,
            fresh_proc: true,
            net_ns: true,
            landlock_abi: 7,
            landlock_full: true,
            seccomp: true,
            no_new_privs: true,
            caps_dropped: true,
            ..SandboxReport::default()
        };
        assert_eq!(
            r.to_string(),
            "uid 65534, user+pid+mount+net namespaces, fresh /proc, Landlock ABI 7, seccomp, \
             no_new_privs, no capabilities"
        );
        // macOS: what a worker there reports.
        let mac = SandboxReport {
            uid: 501,
            scratch: true,
            seatbelt: true,
            missing: vec!["the open files limit: Invalid argument".into()],
            ..SandboxReport::default()
        };
        assert_eq!(
            mac.to_string(),
            "uid 501, Seatbelt; missing: the open files limit: Invalid argument"
        );
    }
}
