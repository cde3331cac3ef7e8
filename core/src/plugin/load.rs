//! Loading one plugin file in process: a private copy at a unique path, abi_stable's checks, and
//! the plugin's description turned into host-owned [`ToolSpec`]s.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use abi_stable::library::{LibraryError, RawLibrary, lib_header_from_raw_library};
use abi_stable::std_types::RResult;
use rho_plugin_api::ffi::{FfiPluginInfo, FfiToolDesc, INTERFACE_VERSION, PluginModRef};

use crate::plugin::call::plain_text;
use sha2::{Digest, Sha256};

use crate::error::LoadError;
use crate::spec::ToolSpec;

/// What a host knows about one loaded plugin version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginInfo {
    /// The plugin's name (its crate name).
    pub name: String,
    /// The plugin's version (its crate version).
    pub version: String,
    /// The interface version it was built against.
    pub interface_version: u32,
    /// The file it was loaded from.
    pub path: PathBuf,
    /// SHA-256 of the file's content, lowercase hex.
    pub sha256: String,
}

/// A plugin file read into memory: its bytes and their hash. Loading works from these bytes, so
/// what is loaded is exactly what was hashed.
pub struct PluginFile {
    /// The file it was read from.
    pub path: PathBuf,
    /// Its content.
    pub bytes: Vec<u8>,
    /// SHA-256 of the content, lowercase hex.
    pub sha256: String,
}

impl PluginFile {
    /// Reads `path`. An empty file is refused here: it cannot be a library.
    pub fn read(path: &Path) -> Result<Self, LoadError> {
        let bytes = std::fs::read(path).map_err(|e| LoadError::Read {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        if bytes.is_empty() {
            return Err(LoadError::Empty {
                path: path.to_owned(),
            });
        }
        let sha256 = sha256_hex(&bytes);
        Ok(PluginFile {
            path: path.to_owned(),
            bytes,
            sha256,
        })
    }
}

/// SHA-256 of `bytes`, lowercase hex (how rho names plugin versions and image contents).
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A private directory (mode 0700) for the copies the host loads plugins from. glibc hands back an
/// already-loaded image for a path or inode it has seen, so every load is from a new copy.
#[derive(Debug)]
pub struct CopyDir {
    dir: PathBuf,
    counter: AtomicU64,
}

impl CopyDir {
    /// Creates a fresh private directory under a safe temporary directory
    /// ([`secure_temp_dir`](crate::isolate::sandbox::secure_temp_dir): a `$TMPDIR` others could
    /// tamper with is avoided). The directory must not exist yet (`create_dir`, not `create_dir_all`): another user cannot hand the host
    /// a directory of theirs to load from; a taken name moves on to the next one.
    pub fn new() -> Result<Self, LoadError> {
        use std::os::unix::fs::DirBuilderExt;
        static INSTANCE: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let base = crate::isolate::sandbox::secure_temp_dir().map_err(|e| LoadError::Copy {
            path: std::env::temp_dir(),
            reason: e.to_string(),
        })?;
        let mut last_error = String::new();
        for _ in 0..64 {
            let n = INSTANCE.fetch_add(1, Ordering::Relaxed);
            let dir = base.join(format!(
                "rho-plugins-{}-{nanos:08x}-{n}",
                std::process::id()
            ));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => {
                    return Ok(CopyDir {
                        dir,
                        counter: AtomicU64::new(0),
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    last_error = e.to_string()
                }
                Err(e) => {
                    return Err(LoadError::Copy {
                        path: dir,
                        reason: e.to_string(),
                    });
                }
            }
        }
        Err(LoadError::Copy {
            path: base,
            reason: format!("no fresh private directory could be made: {last_error}"),
        })
    }

    /// Makes a copy of `file` at a new, unique path in the directory and returns that path. The
    /// copy holds exactly `file.bytes` (what was hashed and checked).
    ///
    /// The kernel copies the original (`copy_file_range`), which measured several times faster
    /// than writing the bytes out (an 8 MiB plugin: ~2 ms against ~25 ms on ext4); the copy is
    /// then compared with the bytes, and rewritten from them if the original changed meanwhile.
    pub fn copy(&self, file: &PluginFile) -> Result<PathBuf, LoadError> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let stem = file
            .path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "plugin".into());
        let copy = self
            .dir
            .join(format!("{stem}-{n}{}", std::env::consts::DLL_SUFFIX));
        let same = std::fs::copy(&file.path, &copy).is_ok() && same_content(&copy, &file.bytes);
        if !same {
            std::fs::write(&copy, &file.bytes).map_err(|e| LoadError::Copy {
                path: file.path.clone(),
                reason: e.to_string(),
            })?;
        }
        Ok(copy)
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

/// Whether the file at `path` holds exactly `bytes` (read in small chunks: no second copy of a
/// large plugin in memory).
fn same_content(path: &Path, bytes: &[u8]) -> bool {
    use std::io::Read;
    let Ok(mut file) = std::fs::File::open(path) else {
        return false;
    };
    let mut chunk = vec![0u8; 64 << 10];
    let mut at = 0;
    loop {
        match file.read(&mut chunk) {
            Ok(0) => return at == bytes.len(),
            Ok(n) => {
                if bytes.get(at..at + n) != Some(&chunk[..n]) {
                    return false;
                }
                at += n;
            }
            Err(_) => return false,
        }
    }
}

impl Drop for CopyDir {
    fn drop(&mut self) {
        // Mapped libraries stay valid after their file is removed.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A plugin library loaded in process, with its description. The library is never unloaded
/// (abi_stable's rule): dropping this leaves the image mapped.
pub struct Loaded {
    /// The plugin's identity.
    pub info: PluginInfo,
    /// Its root module.
    pub module: PluginModRef,
    /// Its tools, as host-owned specs.
    pub tools: Vec<ToolSpec>,
    /// One line for each tool the host refused (bad name, duplicate, bad schema).
    pub rejected: Vec<String>,
}

/// Loads `file` in process from a private copy in `copies`.
///
/// Every failure is one line naming the file and the cause; abi_stable's full report of a layout
/// mismatch goes to `tracing` at debug level.
pub fn load_in_process(file: &PluginFile, copies: &CopyDir) -> Result<Loaded, LoadError> {
    check_elf(file)?;
    let copy = copies.copy(file)?;
    let result = open_module(&file.path, &copy);
    // The image stays mapped after its file is gone; nothing is left on disk.
    let _ = std::fs::remove_file(&copy);
    finish_load(&file.path, &file.sha256, result?)
}

/// Checks a file's ELF structure before anything maps it (a truncated file would SIGBUS).
pub fn check_elf(file: &PluginFile) -> Result<(), LoadError> {
    crate::plugin::elf::check(&file.bytes).map_err(|reason| LoadError::Open {
        path: file.path.clone(),
        reason,
    })
}

/// Loads a private copy the host already checked (the isolated worker's way: a fresh process, a
/// unique path). Errors name `shown_path`.
pub fn load_checked_copy(copy: &Path, shown_path: &Path) -> Result<Loaded, LoadError> {
    finish_load(shown_path, "", open_module(shown_path, copy)?)
}

fn finish_load(path: &Path, sha256: &str, module: PluginModRef) -> Result<Loaded, LoadError> {
    let (interface_version, raw) = describe(path, module)?;
    let not_text = |what: &str| LoadError::Describe {
        path: path.to_owned(),
        reason: format!("its {what} is not UTF-8"),
    };
    let name = plain_text(raw.name).ok_or_else(|| not_text("name"))?;
    let version = plain_text(raw.version).ok_or_else(|| not_text("version"))?;
    let (tools, rejected) = tool_specs(path, &name, &version, raw.tools.into_vec());
    Ok(Loaded {
        info: PluginInfo {
            name,
            version,
            interface_version,
            path: path.to_owned(),
            sha256: sha256.to_owned(),
        },
        module,
        tools,
        rejected,
    })
}

fn open_module(path: &Path, copy: &Path) -> Result<PluginModRef, LoadError> {
    let raw = RawLibrary::load_at(copy).map_err(|e| library_error(path, copy, e))?;
    // SAFETY: the library is leaked right below and never unloaded, so the header's 'static
    // references stay valid.
    let header = unsafe { lib_header_from_raw_library(&raw) };
    std::mem::forget(raw);
    let header = header.map_err(|e| library_error(path, copy, e))?;
    header
        .init_root_module::<PluginModRef>()
        .map_err(|e| library_error(path, copy, e))
}

/// Calls the plugin's `describe` and checks its interface version.
pub(crate) fn describe(
    path: &Path,
    module: PluginModRef,
) -> Result<(u32, FfiPluginInfo), LoadError> {
    let interface_version = module.interface_version();
    if interface_version != INTERFACE_VERSION {
        return Err(LoadError::InterfaceVersion {
            path: path.to_owned(),
            found: interface_version,
            expected: INTERFACE_VERSION,
        });
    }
    match (module.describe())() {
        RResult::ROk(info) => Ok((interface_version, info)),
        RResult::RErr(message) => Err(LoadError::Describe {
            path: path.to_owned(),
            reason: message.to_string(),
        }),
    }
}

/// Turns a plugin's description into specs, refusing (one line each) tools with a name,
/// description or schema that is not UTF-8, a bad name, a duplicate name or a schema that is not a
/// JSON object. A refused name is shown escaped and cut to its first 64 characters.
pub(crate) fn tool_specs(
    path: &Path,
    plugin: &str,
    version: &str,
    descs: Vec<FfiToolDesc>,
) -> (Vec<ToolSpec>, Vec<String>) {
    let mut tools: Vec<ToolSpec> = Vec::new();
    let mut rejected = Vec::new();
    let file = crate::error::shown(path);
    for (i, desc) in descs.into_iter().enumerate() {
        let timeout_ms = desc.timeout_ms.into_option();
        let Some(name) = plain_text(desc.name) else {
            rejected.push(format!(
                "{file}: tool #{} refused: its name is not UTF-8",
                i + 1
            ));
            continue;
        };
        if !rho_plugin_api::is_valid_tool_name(&name) {
            let mut shown: String = name.chars().take(64).collect();
            if shown.len() < name.len() {
                shown.push_str("...");
            }
            rejected.push(format!(
                "{file}: tool {shown:?} refused: a tool name must match ^[a-zA-Z0-9_-]{{1,64}}$"
            ));
            continue;
        }
        if tools.iter().any(|t| t.name == name) {
            rejected.push(format!(
                "{file}: tool `{name}` refused: the plugin lists it twice"
            ));
            continue;
        }
        let (Some(description), Some(parameters)) = (
            plain_text(desc.description),
            plain_text(desc.parameters_json),
        ) else {
            rejected.push(format!(
                "{file}: tool `{name}` refused: its description or schema is not UTF-8"
            ));
            continue;
        };
        let parameters: serde_json::Value = match serde_json::from_str(&parameters) {
            Ok(v @ serde_json::Value::Object(_)) => v,
            Ok(_) | Err(_) => {
                rejected.push(format!(
                    "{file}: tool `{name}` refused: its parameters are not a JSON Schema object"
                ));
                continue;
            }
        };
        tools.push(ToolSpec {
            name,
            description,
            parameters,
            timeout_ms,
            plugin: Some(plugin.to_owned()),
            plugin_version: Some(version.to_owned()),
        });
    }
    (tools, rejected)
}

/// One line for an abi_stable error; the full report goes to `tracing`.
fn library_error(path: &Path, copy: &Path, error: LibraryError) -> LoadError {
    let path = path.to_owned();
    // dlerror's text starts with the path it opened: the copy's, which means nothing to a person.
    let copy_prefix = format!("{}: ", copy.display());
    let unmask = |s: String| s.strip_prefix(&copy_prefix).map(str::to_owned).unwrap_or(s);
    match error {
        LibraryError::OpenError { err, .. } => LoadError::Open {
            reason: unmask(first_line(&err.to_string())),
            path,
        },
        LibraryError::GetSymbolError { .. } => LoadError::NotAPlugin { path },
        LibraryError::IncompatibleVersionNumber {
            expected_version,
            actual_version,
            ..
        } => LoadError::Incompatible {
            path,
            reason: format!(
                "built against rho-plugin-api {actual_version}, this host needs {expected_version}"
            ),
        },
        LibraryError::AbiInstability(report) => {
            tracing::debug!(file = %path.display(), report = %report, "plugin layout mismatch");
            LoadError::Incompatible {
                path,
                reason: "the layout of its root module differs from this host's rho-plugin-api \
                         (rebuild it against this version)"
                    .into(),
            }
        }
        other => {
            let full = other.to_string();
            tracing::debug!(file = %path.display(), report = %full, "plugin load failed");
            LoadError::Incompatible {
                reason: unmask(first_line(&full)),
                path,
            }
        }
    }
}

fn first_line(s: &str) -> String {
    let line = s
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let mut line = line.to_owned();
    if line.len() > 200 {
        let cut = (0..=200)
            .rev()
            .find(|&i| line.is_char_boundary(i))
            .unwrap_or(0);
        line.truncate(cut);
        line.push_str("...");
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use abi_stable::std_types::{ROption, RVec};

    fn desc(name: &str, schema: &str) -> FfiToolDesc {
        FfiToolDesc {
            name: name.into(),
            description: "d".into(),
            parameters_json: schema.into(),
            timeout_ms: ROption::RSome(5),
        }
    }

    #[test]
    fn refuses_bad_names_duplicates_and_bad_schemas_one_line_each() {
        let info = FfiPluginInfo {
            name: "p".into(),
            version: "1.0.0".into(),
            tools: RVec::from(vec![
                desc("good", r#"{"type":"object"}"#),
                desc("no spaces", r#"{"type":"object"}"#),
                desc("good", r#"{"type":"object"}"#),
                desc("list", "[1]"),
            ]),
        };
        let (tools, rejected) =
            tool_specs(Path::new("/p/libp.so"), "p", "1.0.0", info.tools.into_vec());
        assert_eq!(tools.len(), 1);
        assert_eq!(tools[0].timeout_ms, Some(5));
        assert_eq!(tools[0].plugin.as_deref(), Some("p"));
        assert_eq!(
            rejected,
            [
                "/p/libp.so: tool \"no spaces\" refused: a tool name must match ^[a-zA-Z0-9_-]{1,64}$",
                "/p/libp.so: tool `good` refused: the plugin lists it twice",
                "/p/libp.so: tool `list` refused: its parameters are not a JSON Schema object",
            ]
        );
    }
}
