//! How a plugin directory is loaded: in process or isolated ([`Isolation`]), and the bounds of
//! its loading ([`DirOptions`]).

use rho_worker::loader::trust::Trust;

/// Where a directory's plugins run. The default is [`Isolation::Process`]: a plugin that
/// crashes, exits, hangs or misbehaves ends its call, never the host. [`Isolation::InProcess`] is
/// for plugins the host trusts as it trusts its own code: calls cost microseconds less, but a
/// segfault, `abort` or `exit` in a plugin ends the host, and a plugin reads and writes what the
/// host can.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(clippy::large_enum_variant)] // options, made once per directory
pub enum Isolation {
    /// In the host's process (trusted plugins only; fastest; a plugin crash is the host's).
    InProcess,
    /// In sandboxed worker processes: crashes, exits and hangs end the call only.
    Process(crate::isolate::WorkerOptions),
}

impl Default for Isolation {
    /// Worker processes with the default [`WorkerOptions`](crate::WorkerOptions).
    fn default() -> Self {
        Isolation::Process(crate::isolate::WorkerOptions::default())
    }
}

/// How a plugin directory is loaded.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct DirOptions {
    /// In process or out of process.
    #[serde(default)]
    pub isolation: Isolation,
    /// Whether files other users can write are loaded.
    #[serde(default)]
    pub trust: Trust,
    /// In process, how many versions (distinct contents) of one plugin file may be mapped over
    /// the host's life (each reload leaves the old image mapped). Past it, a `warning` event
    /// recommends isolation or a restart and further versions are refused before anything is
    /// mapped.
    #[serde(default = "default_max_versions")]
    pub max_versions: usize,
    /// The largest plugin file loaded, bytes; a larger one is refused with one line before it is
    /// read.
    #[serde(default = "default_max_file_size")]
    pub max_file_size: u64,
    /// How long loading one file may take (its load-time code runs then). In process, past it the
    /// file is reported stalled and the scan moves on; it is used if it finishes later. Isolated,
    /// files load at once, each within this bound.
    #[serde(
        default = "default_load_timeout",
        with = "crate::millis",
        rename = "load_timeout_ms"
    )]
    pub load_timeout: std::time::Duration,
    /// Load only what was installed: a file loads only if the directory's lock file
    /// ([`PluginLock`](crate::PluginLock), `<dir>.lock`) names it with the SHA-256 of its
    /// bytes, checked on the private copy before anything of it is mapped or run. Anything else
    /// is refused with one line (a `plugin_load_failed` event), and the others load.
    #[serde(default)]
    pub locked: bool,
}

fn default_max_file_size() -> u64 {
    rho_worker::loader::open::DEFAULT_MAX_FILE_SIZE
}

fn default_load_timeout() -> std::time::Duration {
    std::time::Duration::from_secs(10)
}

fn default_max_versions() -> usize {
    64
}

impl DirOptions {
    /// The defaults, but in process: for plugins the host trusts (see [`Isolation`]).
    pub fn in_process() -> Self {
        DirOptions {
            isolation: Isolation::InProcess,
            ..DirOptions::default()
        }
    }
}

impl Default for DirOptions {
    /// Isolated (sandboxed workers), owner-only trust, 64 versions, 256 MiB files, 10 s loads,
    /// not locked.
    fn default() -> Self {
        DirOptions {
            isolation: Isolation::default(),
            trust: Trust::default(),
            max_versions: default_max_versions(),
            max_file_size: default_max_file_size(),
            load_timeout: default_load_timeout(),
            locked: false,
        }
    }
}
