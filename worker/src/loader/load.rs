//! Loading one plugin file in process: a private copy at a unique path, abi_stable's checks, and
//! the plugin's description turned into host-owned [`ToolSpec`]s.

use std::path::{Path, PathBuf};

use abi_stable::library::{LibraryError, RawLibrary, lib_header_from_raw_library};
use abi_stable::std_types::RResult;
use rho_plugin_api::Capabilities;
use rho_plugin_api::declare::{Declaration, ToolDeclaration};
use rho_plugin_api::ffi::{
    FfiPluginInfo, FfiToolDesc, INTERFACE_VERSION, OLDEST_INTERFACE_VERSION, PluginModRef, v1, v2,
    v3,
};

use crate::loader::abi::{plain_text, uses_interface};

use crate::error::LoadError;
use crate::loader::copy::{PluginFile, PrivateCopy};
use rho_protocol::{RawTool, ToolSpec, check_tools};

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
    /// What the plugin says it needs (nothing, for interface 1).
    pub capabilities: Capabilities,
    /// What the host grants it: `Some` for an isolated plugin (its sandbox's grants, which cover
    /// `capabilities` or the plugin was refused), `None` in process, where a plugin has every
    /// power of the host.
    pub granted: Option<rho_protocol::Grants>,
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

/// Loads `file` in process from its private copy (removed right after: the mapping stays).
///
/// Every failure is one line naming the file and the cause; abi_stable's full report of a layout
/// mismatch goes to `tracing` at debug level.
pub fn load_in_process(file: &PluginFile) -> Result<Loaded, LoadError> {
    let PrivateCopy::File(copy) = &file.copy else {
        return Err(LoadError::Copy {
            path: file.path.clone(),
            reason: "an isolated plugin's copy cannot load in process".into(),
        });
    };
    let result = open_module(&file.path, copy);
    // The image stays mapped after its file is gone; nothing is left on disk.
    let _ = std::fs::remove_file(copy);
    finish_load(&file.path, &file.sha256, result?)
}

/// Loads a private copy the host already checked (the isolated worker's way: a fresh process, a
/// unique path). Errors name `shown_path`.
pub fn load_checked_copy(copy: &Path, shown_path: &Path) -> Result<Loaded, LoadError> {
    finish_load(shown_path, "", open_module(shown_path, copy)?)
}

fn finish_load(path: &Path, sha256: &str, module: PluginModRef) -> Result<Loaded, LoadError> {
    let (interface_version, raw) = describe(path, module)?;
    let (declaration, set_aside) = declaration(path, module)?;
    let not_text = |what: &str| LoadError::Describe {
        path: path.to_owned(),
        reason: format!("its {what} is not UTF-8"),
    };
    let name = plain_text(raw.name).ok_or_else(|| not_text("name"))?;
    let version = plain_text(raw.version).ok_or_else(|| not_text("version"))?;
    check_identity(path, &name, &version)?;
    let (tools, mut rejected) = tool_specs(
        path,
        &name,
        &version,
        raw.tools.into_vec(),
        declaration.tools,
    );
    rejected.extend(set_aside);
    Ok(Loaded {
        info: PluginInfo {
            name,
            version,
            interface_version,
            path: path.to_owned(),
            sha256: sha256.to_owned(),
            capabilities: declaration.capabilities,
            granted: None,
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
    match header.init_root_module::<PluginModRef>() {
        Err(LibraryError::AbiInstability(report)) => {
            // abi_stable wants a library to have every field of the host's root module; a plugin
            // of an older interface has fewer. Checked against that interface's frozen layout, it
            // is read through today's type, whose later fields then read as `None`.
            let frozen = if header.ensure_layout::<v3::PluginModRef>().is_ok() {
                3
            } else if header.ensure_layout::<v2::PluginModRef>().is_ok() {
                2
            } else if header.ensure_layout::<v1::PluginModRef>().is_ok() {
                1
            } else {
                return Err(library_error(
                    path,
                    copy,
                    LibraryError::AbiInstability(report),
                ));
            };
            // SAFETY: the layout of every field of interface `frozen` was checked just above; the
            // fields after them may exist with other types (a library of some other "version
            // 3"), so such a module must report that interface (checked here) and is then never
            // asked for a field of a later one (`call_module` asks by the reported version).
            let module = unsafe { header.init_root_module_with_unchecked_layout::<PluginModRef>() }
                .map_err(|e| library_error(path, copy, e))?;
            match module.interface_version() {
                reported if reported == frozen => Ok(module),
                other => Err(LoadError::Incompatible {
                    path: path.to_owned(),
                    reason: format!(
                        "its root module has the layout of interface {frozen} but it reports \
                         interface {other}"
                    ),
                }),
            }
        }
        other => other.map_err(|e| library_error(path, copy, e)),
    }
}

/// Calls the plugin's `describe` and checks its interface version.
pub fn describe(path: &Path, module: PluginModRef) -> Result<(u32, FfiPluginInfo), LoadError> {
    let interface_version = module.interface_version();
    if !(OLDEST_INTERFACE_VERSION..=INTERFACE_VERSION).contains(&interface_version) {
        return Err(LoadError::InterfaceVersion {
            path: path.to_owned(),
            found: interface_version,
            oldest: OLDEST_INTERFACE_VERSION,
            newest: INTERFACE_VERSION,
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

/// The longest declaration (JSON text) a plugin may hand the host: 16 MiB.
const MAX_DECLARATION_BYTES: usize = 16 << 20;

/// What a plugin of interface 2 or later declares (its `declare`); the defaults for interface 1.
/// A declaration the host cannot read is set aside with a line saying why, and the plugin's tools
/// take the defaults (the cautious hints, no schema, no limit): one bad field of one tool loses
/// nothing else. Text that is not UTF-8 is read lossily, so only the tools it named are lost.
pub fn declaration(
    path: &Path,
    module: PluginModRef,
) -> Result<(Declaration, Option<String>), LoadError> {
    let Some(declare) = uses_interface(module, 2)
        .then(|| module.declare())
        .flatten()
    else {
        return Ok((Declaration::default(), None));
    };
    let json = match declare() {
        RResult::ROk(json) => json,
        RResult::RErr(message) => {
            return Err(LoadError::Describe {
                path: path.to_owned(),
                reason: message.to_string(),
            });
        }
    };
    let file = crate::error::shown(path);
    let set_aside = |why: String| {
        Ok((
            Declaration::default(),
            Some(format!(
                "{file}: its declaration was set aside ({why}): its tools take the defaults"
            )),
        ))
    };
    if json.len() > MAX_DECLARATION_BYTES {
        return set_aside(format!(
            "{} bytes, over the {MAX_DECLARATION_BYTES} a host reads",
            json.len()
        ));
    }
    let bytes = json.into_bytes().into_vec();
    match serde_json::from_str(&String::from_utf8_lossy(&bytes)) {
        Ok(declaration) => Ok((declaration, None)),
        Err(e) => set_aside(format!("it does not parse: {e}")),
    }
}

/// Turns an in-process plugin's description and declaration into specs (see [`check_tools`]).
/// A declaration is matched to its tool by name; a tool without one takes the defaults.
pub fn tool_specs(
    path: &Path,
    plugin: &str,
    version: &str,
    descs: Vec<FfiToolDesc>,
    mut declared: Vec<ToolDeclaration>,
) -> (Vec<ToolSpec>, Vec<String>) {
    let raw = descs
        .into_iter()
        .map(|desc| {
            let name = plain_text(desc.name);
            let declared = name
                .as_deref()
                .and_then(|name| declared.iter().position(|d| d.name == name))
                .map(|at| declared.swap_remove(at))
                .unwrap_or_default();
            RawTool {
                timeout_ms: desc.timeout_ms.into_option(),
                name,
                description: plain_text(desc.description),
                parameters: plain_text(desc.parameters_json)
                    .map(|json| serde_json::from_str(&json).unwrap_or(serde_json::Value::Null)),
                declared,
            }
        })
        .collect();
    check_tools(&crate::error::shown(path), plugin, version, raw)
}

/// Checks a plugin's name and version as the host shows them: at most 128 characters, no
/// control characters.
pub fn check_identity(path: &Path, name: &str, version: &str) -> Result<(), LoadError> {
    for (what, text) in [("name", name), ("version", version)] {
        if text.is_empty() || text.chars().count() > 128 || text.chars().any(char::is_control) {
            return Err(LoadError::Describe {
                path: path.to_owned(),
                reason: format!(
                    "its {what} must be 1 to 128 characters without control characters"
                ),
            });
        }
    }
    Ok(())
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
        let (tools, rejected) = tool_specs(
            Path::new("/p/libp.so"),
            "p",
            "1.0.0",
            info.tools.into_vec(),
            Vec::new(),
        );
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
