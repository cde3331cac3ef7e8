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

/// Where a directory's plugins run.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(clippy::large_enum_variant)] // options, made once per directory
pub enum Isolation {
    /// In the host's process (trusted plugins; fastest; a plugin crash is the host's).
    #[default]
    InProcess,
    /// In worker processes (untrusted plugins): crashes, exits and hangs end the call only.
    Process(crate::isolate::WorkerOptions),
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
            isolation: Isolation::default(),
            trust: Trust::default(),
            max_versions: default_max_versions(),
        }
    }
}

/// What one scan changed, for a caller that wants to print it.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ScanReport {
    /// Plugins loaded for the first time (`name@version`).
    pub loaded: Vec<String>,
    /// Plugins replaced by a new version.
    pub reloaded: Vec<String>,
    /// Plugins whose file went away.
    pub removed: Vec<String>,
    /// One line per file (or directory) that failed or was refused.
    pub errors: Vec<String>,
    /// Events to publish once the registry shows the scan's result.
    events: Vec<EventKind>,
    /// Versions to retire once the registry no longer hands them out.
    retired: Vec<PluginInfo>,
}

impl ScanReport {
    fn event(&mut self, kind: EventKind) {
        self.events.push(kind);
    }

    fn fail(&mut self, error: &LoadError) {
        let line = error.to_string();
        tracing::warn!("{line}");
        self.event(EventKind::PluginLoadFailed {
            path: error.path().display().to_string(),
            error: line.clone(),
        });
        self.errors.push(line);
    }
}

/// Marks a refused path in `State::failed` (instead of a content hash).
const REFUSED: &str = "refused";

/// What reading one listed file gave.
enum Read {
    /// The same file as the one loaded (same inode, size and mtime).
    Unchanged,
    /// Refused by the trust policy, or unreadable.
    Refused(LoadError),
    /// Its content, and its identity.
    File(PluginFile, Option<Stamp>),
}

/// A file's identity as the file system gives it: a rename, a hard link or a write changes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

impl Stamp {
    fn of(path: &Path) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        })
    }
}

struct Slot {
    info: PluginInfo,
    tools: Vec<ResolvedTool>,
    stamp: Option<Stamp>,
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

    /// The bus of the registry this directory feeds.
    pub(crate) fn registry_bus(&self) -> crate::bus::Bus {
        self.inner.registry.bus().clone()
    }

    /// Stops serving the directory: its tools leave the registry and every version is retired
    /// (isolated workers stop; in process, images stay mapped). A later `scan` loads it again.
    pub async fn close(&self) {
        let inner = &self.inner;
        let mut state = inner.state.lock().await;
        inner.registry.set_source_tools(inner.source, Vec::new());
        for (_, slot) in std::mem::take(&mut state.slots) {
            inner.backend.retire(&slot.info);
        }
        state.failed.clear();
    }

    /// The plugins loaded now.
    pub async fn plugins(&self) -> Vec<PluginInfo> {
        let state = self.inner.state.lock().await;
        state.slots.values().map(|s| s.info.clone()).collect()
    }

    /// Brings the registry in line with the directory: loads new files, reloads changed ones
    /// (content hash differs), drops the tools of deleted ones. A file that fails keeps its old
    /// version serving. Publishes one event per change and per failure, once the registry shows
    /// the result.
    pub async fn scan(&self) -> ScanReport {
        let inner = &self.inner;
        let mut state = inner.state.lock().await;
        let mut report = ScanReport::default();
        match self.read_files(&state).await {
            Err(error) => report.fail(&error),
            Ok(files) => {
                self.drop_deleted(&mut state, &mut report, &files);
                for (path, file) in files {
                    self.consider(&mut state, &mut report, path, file).await;
                }
                let tools = state.slots.values().flat_map(|s| s.tools.clone()).collect();
                inner.registry.set_source_tools(inner.source, tools);
            }
        }
        for info in std::mem::take(&mut report.retired) {
            inner.backend.retire(&info);
        }
        // Published only now: a subscriber that reacts to `plugin_loaded` finds the tools there.
        for event in std::mem::take(&mut report.events) {
            inner.registry.bus().publish(None, event);
        }
        report
    }

    /// Lists, checks and reads the plugin files. A file whose identity (inode, size, mtime) is
    /// unchanged since it was loaded is not read again; one that vanished since the listing is
    /// left out (it counts as deleted).
    async fn read_files(&self, state: &State) -> Result<Vec<(PathBuf, Read)>, LoadError> {
        let mut files = Vec::new();
        for (path, checked) in self.list().await? {
            let target = match checked {
                Ok(target) => target,
                Err(error) => {
                    files.push((path, Read::Refused(error)));
                    continue;
                }
            };
            let stamp = Stamp::of(&target);
            if stamp.is_some() && state.slots.get(&path).is_some_and(|s| s.stamp == stamp) {
                files.push((path, Read::Unchanged));
                continue;
            }
            let read = tokio::task::spawn_blocking(move || PluginFile::read(&target)).await;
            match read {
                Ok(Ok(file)) => {
                    files.push((path.clone(), Read::File(PluginFile { path, ..file }, stamp)))
                }
                Ok(Err(_)) if !path.exists() => {}
                Ok(Err(error)) => files.push((path, Read::Refused(error))),
                // The reading task died: keep what serves now rather than drop it as deleted.
                Err(_) => {
                    let reason = "the task reading it failed".to_owned();
                    let error = LoadError::Read {
                        path: path.clone(),
                        reason,
                    };
                    files.push((path, Read::Refused(error)));
                }
            }
        }
        Ok(files)
    }

    fn drop_deleted(&self, state: &mut State, report: &mut ScanReport, files: &[(PathBuf, Read)]) {
        let present = |p: &PathBuf| files.iter().any(|(f, _)| f == p);
        let gone: Vec<PathBuf> = state
            .slots
            .keys()
            .filter(|p| !present(p))
            .cloned()
            .collect();
        for path in gone {
            if let Some(slot) = state.slots.remove(&path) {
                report.retired.push(slot.info.clone());
                report
                    .removed
                    .push(format!("{}@{}", slot.info.name, slot.info.version));
                report.event(EventKind::PluginRemoved {
                    plugin: slot.info.name.clone(),
                    path: path.display().to_string(),
                    tools: slot.tools.iter().map(|t| t.spec.name.clone()).collect(),
                });
            }
        }
        state.failed.retain(|p, _| present(p));
    }

    /// Loads one file if it is new or changed; reports a failure once per content.
    async fn consider(
        &self,
        state: &mut State,
        report: &mut ScanReport,
        path: PathBuf,
        read: Read,
    ) {
        let (file, stamp) = match read {
            Read::Unchanged => return,
            Read::Refused(error) => {
                if state.failed.get(&path).map(String::as_str) != Some(REFUSED) {
                    report.fail(&error);
                    state.failed.insert(path, REFUSED.into());
                }
                return;
            }
            Read::File(file, stamp) => (file, stamp),
        };
        let current = state.slots.get(&path);
        if current.is_some_and(|s| s.info.sha256 == file.sha256) {
            if let Some(slot) = state.slots.get_mut(&path) {
                slot.stamp = stamp;
            }
            return;
        }
        if state.failed.get(&path) == Some(&file.sha256)
            || current.is_some_and(|s| s.failed_sha256.as_ref() == Some(&file.sha256))
        {
            return;
        }
        match self.load_version(state, &file).await {
            Ok(loaded) => {
                state.failed.remove(&path);
                self.install(state, report, &path, loaded, stamp);
            }
            Err(error) => {
                report.fail(&error);
                match state.slots.get_mut(&path) {
                    Some(slot) => slot.failed_sha256 = Some(file.sha256.clone()),
                    None => {
                        state.failed.insert(path, file.sha256.clone());
                    }
                }
            }
        }
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
        stamp: Option<Stamp>,
    ) {
        let inner = &self.inner;
        let file = path.display().to_string();
        for line in &loaded.rejected {
            tracing::warn!("{line}");
            report.event(EventKind::PluginLoadFailed {
                path: file.clone(),
                error: line.clone(),
            });
            report.errors.push(line.clone());
        }
        let generation = inner.registry.new_generation();
        let origin = format!(
            "{}@{} ({})",
            loaded.info.name,
            loaded.info.version,
            path.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        );
        let mut tools = Vec::new();
        for (spec, invoke) in loaded.tools {
            match ResolvedTool::new(spec, generation, &origin, invoke) {
                Ok(tool) => tools.push(tool),
                Err(line) => {
                    let line = format!("{file}: {line}");
                    report.event(EventKind::PluginLoadFailed {
                        path: file.clone(),
                        error: line.clone(),
                    });
                    report.errors.push(line);
                }
            }
        }
        let names: Vec<String> = tools.iter().map(|t| t.spec.name.clone()).collect();
        if let Some(sandbox) = loaded.sandbox.as_ref().filter(|s| !s.complete()) {
            report.event(EventKind::Warning {
                subject: loaded.info.name.clone(),
                message: format!("{file}: the plugin's sandbox is incomplete: {sandbox}"),
            });
        }
        let info = loaded.info;
        let label = format!("{}@{}", info.name, info.version);
        let old = state.slots.insert(
            path.to_owned(),
            Slot {
                info: info.clone(),
                tools,
                stamp,
                failed_sha256: None,
            },
        );
        match old {
            None => {
                report.loaded.push(label);
                report.event(EventKind::PluginLoaded {
                    plugin: info.name.clone(),
                    version: info.version.clone(),
                    path: file,
                    tools: names,
                    isolated: inner.backend.is_isolated(),
                    sandbox: loaded.sandbox,
                });
            }
            Some(old) => {
                report.retired.push(old.info.clone());
                let old_names: Vec<String> =
                    old.tools.iter().map(|t| t.spec.name.clone()).collect();
                report.reloaded.push(label);
                report.event(EventKind::PluginReloaded {
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
                });
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
