//! A plugin directory as a registry source: every plugin file in it loaded, and each [`PluginDir::scan`]
//! bringing the registry in line with the directory (new files load, changed files reload, deleted
//! files' tools go). The watcher in [`crate::watch`] calls `scan` when the directory changes.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::LoadError;
use crate::events::EventKind;
use crate::plugin::backend::{Backend, LoadedVersion};
use crate::plugin::load::{CopyDir, PluginFile, PluginInfo};
use crate::plugin::trust::{self, Trust};
use crate::registry::{ResolvedTool, SourceId, ToolRegistry};

/// How a plugin directory is loaded.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct DirOptions {
    /// Whether files other users can write are loaded.
    #[serde(default)]
    pub trust: Trust,
    /// In process, how many versions of one plugin may be loaded over the host's life (each
    /// reload leaves the old image mapped). Past it, a `warning` event recommends isolation or a
    /// restart and further versions are refused.
    #[serde(default = "default_max_versions")]
    pub max_versions: usize,
}

fn default_max_versions() -> usize {
    64
}

impl Default for DirOptions {
    fn default() -> Self {
        DirOptions {
            trust: Trust::default(),
            max_versions: default_max_versions(),
        }
    }
}

/// What one scan changed, for a caller that wants to print it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ScanReport {
    /// Plugins loaded for the first time (`name@version`).
    pub loaded: Vec<String>,
    /// Plugins replaced by a new version.
    pub reloaded: Vec<String>,
    /// Plugins whose file went away.
    pub removed: Vec<String>,
    /// One line per file (or directory) that failed or was refused.
    pub errors: Vec<String>,
}

struct Slot {
    info: PluginInfo,
    tools: Vec<ResolvedTool>,
    /// The hash of the last version that failed to load from this path, so it is reported once.
    failed_sha256: Option<String>,
}

struct State {
    slots: BTreeMap<PathBuf, Slot>,
    failed: HashMap<PathBuf, String>,
    versions: HashMap<String, usize>,
}

/// One plugin directory loaded into a registry. Cheap to clone.
#[derive(Clone)]
pub struct PluginDir {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    options: DirOptions,
    registry: ToolRegistry,
    source: SourceId,
    backend: Backend,
    copies: CopyDir,
    state: tokio::sync::Mutex<State>,
}

impl PluginDir {
    /// Adds `dir` to `registry` as a source served by `backend` and loads what it holds now.
    pub(crate) async fn open(
        registry: &ToolRegistry,
        dir: &Path,
        options: DirOptions,
        backend: Backend,
    ) -> Result<(PluginDir, ScanReport), LoadError> {
        let copies = CopyDir::new()?;
        let plugin_dir = PluginDir {
            inner: Arc::new(Inner {
                dir: dir.to_owned(),
                options,
                registry: registry.clone(),
                source: registry.new_source(),
                backend,
                copies,
                state: tokio::sync::Mutex::new(State {
                    slots: BTreeMap::new(),
                    failed: HashMap::new(),
                    versions: HashMap::new(),
                }),
            }),
        };
        let report = plugin_dir.scan().await;
        Ok((plugin_dir, report))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// The plugins loaded now.
    pub async fn plugins(&self) -> Vec<PluginInfo> {
        let state = self.inner.state.lock().await;
        state.slots.values().map(|s| s.info.clone()).collect()
    }

    /// Brings the registry in line with the directory: loads new files, reloads changed ones
    /// (content hash differs), drops the tools of deleted ones. A file that fails keeps its old
    /// version serving. Publishes one event per change and per failure.
    pub async fn scan(&self) -> ScanReport {
        let inner = &self.inner;
        let bus = inner.registry.bus().clone();
        let mut state = inner.state.lock().await;
        let mut report = ScanReport::default();
        let fail = |report: &mut ScanReport, error: &LoadError| {
            let line = error.to_string();
            tracing::warn!("{line}");
            bus.publish(
                None,
                EventKind::PluginLoadFailed {
                    path: error.path().display().to_string(),
                    error: line.clone(),
                },
            );
            report.errors.push(line);
        };
        let files = match self.list().await {
            Ok(files) => files,
            Err(error) => {
                fail(&mut report, &error);
                return report;
            }
        };
        // Deleted files.
        let gone: Vec<PathBuf> = state
            .slots
            .keys()
            .filter(|p| !files.iter().any(|(f, _)| f == *p))
            .cloned()
            .collect();
        for path in gone {
            if let Some(slot) = state.slots.remove(&path) {
                inner.backend.retire(&slot.info);
                report
                    .removed
                    .push(format!("{}@{}", slot.info.name, slot.info.version));
                bus.publish(
                    None,
                    EventKind::PluginRemoved {
                        plugin: slot.info.name.clone(),
                        path: path.display().to_string(),
                        tools: slot.tools.iter().map(|t| t.spec.name.clone()).collect(),
                    },
                );
            }
        }
        state
            .failed
            .retain(|p, _| files.iter().any(|(f, _)| f == p));
        for (path, checked) in files {
            let checked = match checked {
                Ok(target) => target,
                Err(error) => {
                    if state.failed.get(&path).map(String::as_str) != Some("refused") {
                        fail(&mut report, &error);
                        state.failed.insert(path.clone(), "refused".into());
                    }
                    continue;
                }
            };
            let read_path = checked.clone();
            let file = match tokio::task::spawn_blocking(move || PluginFile::read(&read_path)).await
            {
                Ok(Ok(file)) => PluginFile {
                    path: path.clone(),
                    ..file
                },
                Ok(Err(error)) => {
                    fail(&mut report, &error);
                    continue;
                }
                Err(_) => continue,
            };
            let current = state.slots.get(&path);
            if current.is_some_and(|s| s.info.sha256 == file.sha256)
                || state.failed.get(&path) == Some(&file.sha256)
                || current.is_some_and(|s| s.failed_sha256.as_ref() == Some(&file.sha256))
            {
                continue;
            }
            match self.load_version(&mut state, &file).await {
                Ok(loaded) => {
                    state.failed.remove(&path);
                    self.install(&mut state, &mut report, &path, loaded);
                }
                Err(error) => {
                    fail(&mut report, &error);
                    match state.slots.get_mut(&path) {
                        Some(slot) => slot.failed_sha256 = Some(file.sha256.clone()),
                        None => {
                            state.failed.insert(path.clone(), file.sha256.clone());
                        }
                    }
                }
            }
        }
        let tools: Vec<ResolvedTool> = state.slots.values().flat_map(|s| s.tools.clone()).collect();
        inner.registry.set_source_tools(inner.source, tools);
        report
    }

    async fn load_version(
        &self,
        state: &mut State,
        file: &PluginFile,
    ) -> Result<LoadedVersion, LoadError> {
        let inner = &self.inner;
        let loaded = inner.backend.load(file, &inner.copies).await?;
        if inner.backend.leaves_images() {
            let count = state.versions.entry(loaded.info.name.clone()).or_insert(0);
            if *count >= inner.options.max_versions {
                let message = format!(
                    "{count} versions of plugin `{}` are already mapped in this process (the cap is {}); \
                     load it isolated or restart the host to reload it again",
                    loaded.info.name, inner.options.max_versions
                );
                inner.registry.bus().publish(
                    None,
                    EventKind::Warning {
                        subject: loaded.info.name.clone(),
                        message: message.clone(),
                    },
                );
                return Err(LoadError::Refused {
                    path: file.path.clone(),
                    reason: message,
                });
            }
            *count += 1;
        }
        Ok(loaded)
    }

    fn install(
        &self,
        state: &mut State,
        report: &mut ScanReport,
        path: &Path,
        loaded: LoadedVersion,
    ) {
        let inner = &self.inner;
        let bus = inner.registry.bus();
        let file = path.display().to_string();
        for line in &loaded.rejected {
            tracing::warn!("{line}");
            bus.publish(
                None,
                EventKind::PluginLoadFailed {
                    path: file.clone(),
                    error: line.clone(),
                },
            );
            report.errors.push(line.clone());
        }
        let generation = inner.registry.new_generation();
        let mut tools = Vec::new();
        for (spec, invoke) in loaded.tools {
            match ResolvedTool::new(spec, generation, invoke) {
                Ok(tool) => tools.push(tool),
                Err(line) => {
                    let line = format!("{file}: {line}");
                    bus.publish(
                        None,
                        EventKind::PluginLoadFailed {
                            path: file.clone(),
                            error: line.clone(),
                        },
                    );
                    report.errors.push(line);
                }
            }
        }
        let names: Vec<String> = tools.iter().map(|t| t.spec.name.clone()).collect();
        let info = loaded.info;
        let label = format!("{}@{}", info.name, info.version);
        let old = state.slots.insert(
            path.to_owned(),
            Slot {
                info: info.clone(),
                tools,
                failed_sha256: None,
            },
        );
        match old {
            None => {
                report.loaded.push(label);
                bus.publish(
                    None,
                    EventKind::PluginLoaded {
                        plugin: info.name.clone(),
                        version: info.version.clone(),
                        path: file,
                        tools: names,
                        isolated: inner.backend.is_isolated(),
                    },
                );
            }
            Some(old) => {
                inner.backend.retire(&old.info);
                let old_names: Vec<String> =
                    old.tools.iter().map(|t| t.spec.name.clone()).collect();
                report.reloaded.push(label);
                bus.publish(
                    None,
                    EventKind::PluginReloaded {
                        plugin: info.name.clone(),
                        path: file,
                        old_version: old.info.version.clone(),
                        new_version: info.version.clone(),
                        tools_added: names
                            .iter()
                            .filter(|n| !old_names.contains(n))
                            .cloned()
                            .collect(),
                        tools_removed: old_names
                            .iter()
                            .filter(|n| !names.contains(n))
                            .cloned()
                            .collect(),
                    },
                );
            }
        }
    }

    /// The plugin files of the directory, sorted by name, each checked against the trust policy.
    async fn list(&self) -> Result<Listing, LoadError> {
        let dir = self.inner.dir.clone();
        let trust = self.inner.options.trust;
        let listed = tokio::task::spawn_blocking(move || list_dir(&dir, trust)).await;
        listed.unwrap_or_else(|_| Ok(Vec::new()))
    }
}

/// A directory's plugin files, each with the path to read it from or why it is refused.
type Listing = Vec<(PathBuf, Result<PathBuf, LoadError>)>;

fn list_dir(dir: &Path, trust: Trust) -> Result<Listing, LoadError> {
    let canonical = trust::check_dir(dir, trust)?;
    let entries = std::fs::read_dir(dir).map_err(|e| LoadError::Refused {
        path: dir.to_owned(),
        reason: format!("cannot list the plugin directory: {e}"),
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| trust::is_plugin_name(&e.file_name().to_string_lossy()))
        .map(|e| e.path())
        .collect();
    files.sort();
    Ok(files
        .into_iter()
        .map(|path| {
            let checked = trust::check_file(&path, &canonical, trust);
            (path, checked)
        })
        .collect())
}
