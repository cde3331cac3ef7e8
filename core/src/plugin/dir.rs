//! A plugin directory as a registry source: every plugin file in it loaded, and each [`PluginDir::scan`]
//! bringing the registry in line with the directory (new files load, changed files reload, deleted
//! files' tools go). The watcher in [`crate::plugin::watch`] calls `scan` when the directory changes.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::bus::events::EventKind;
use crate::plugin::backend::{Backend, LoadOutcome, LoadedVersion};
use crate::plugin::component::ComponentEngine;
use crate::plugin::options::DirOptions;
use crate::plugin::scan::{ScanReport, Scanning};
use crate::registry::origin::Origin;
use crate::registry::{ResolvedTool, SourceId, ToolRegistry};
use rho_protocol::ToolSpec;
use rho_worker::LoadError;
use rho_worker::loader::open::{DirError, DirHandle, Stamp, open_dir};
use rho_worker::loader::trust::{PluginKind, plugin_kind};
use rho_worker::loader::{CopyDir, PluginFile, PluginInfo};

struct Slot {
    info: PluginInfo,
    tools: Vec<ResolvedTool>,
    stamp: Option<Stamp>,
    /// The hash of the last version that failed to load from this path, so it is reported once.
    failed_sha256: Option<String>,
}

/// A file that failed or was refused: not read again while its identity is `stamp`, not loaded
/// again while its content is `sha256`, its error reported once.
#[derive(Default)]
struct Failed {
    stamp: Option<Stamp>,
    sha256: Option<String>,
    line: String,
}

struct State {
    slots: BTreeMap<PathBuf, Slot>,
    failed: HashMap<PathBuf, Failed>,
    /// In process: images mapped from each file over the host's life (the version cap).
    mapped: HashMap<PathBuf, usize>,
    /// Loads still running past their bound, with the identity of the file they load.
    stalled: HashMap<PathBuf, Stamp>,
    /// Stalled loads that finished since, for the next scan.
    finished: Vec<Finished>,
    /// Isolated loads under way (each in a task of its own), with the identity of their file.
    loading: HashMap<PathBuf, Stamp>,
    /// The plugin files of the last listing: a load that finishes after its file went away is
    /// not installed.
    listed: Vec<PathBuf>,
    /// The directory was gone at the last scan (reported once).
    gone: bool,
    /// Shut down: scans do nothing.
    shut: bool,
}

/// A stalled load that finished: the file, its identity and content then, and the result.
struct Finished {
    path: PathBuf,
    stamp: Stamp,
    sha256: String,
    result: Result<LoadedVersion, LoadError>,
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
    /// Loads the directory's components (`.wasm` files are plugins only with one).
    components: Option<Arc<dyn ComponentEngine>>,
    copies: CopyDir,
    state: tokio::sync::Mutex<State>,
    /// Asks for a scan (a stalled load finished); served by a task of its own.
    rescan: Arc<tokio::sync::Notify>,
    /// How long a scan waits for the loads it started (see [`Scanning::settle`]).
    load_wait: std::time::Duration,
    /// Fault injection: the next listings panic.
    #[cfg(test)]
    listing_panics: std::sync::atomic::AtomicBool,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Ends the rescanning task.
        self.rescan.notify_one();
    }
}

impl PluginDir {
    /// Adds `dir` to `registry` as a source served by `backend` (and `components`, for its
    /// `.wasm` files) and starts loading what it holds now; `load_wait` bounds how long its scans
    /// wait for their loads.
    pub(crate) async fn open(
        registry: &ToolRegistry,
        dir: &Path,
        options: DirOptions,
        backend: Backend,
        components: Option<Arc<dyn ComponentEngine>>,
        load_wait: std::time::Duration,
    ) -> Result<(PluginDir, Scanning), LoadError> {
        let copies = CopyDir::new()?;
        let plugin_dir = PluginDir {
            inner: Arc::new(Inner {
                dir: dir.to_owned(),
                options,
                registry: registry.clone(),
                source: registry.new_source(),
                backend,
                components,
                copies,
                state: tokio::sync::Mutex::new(State {
                    slots: BTreeMap::new(),
                    failed: HashMap::new(),
                    mapped: HashMap::new(),
                    stalled: HashMap::new(),
                    finished: Vec::new(),
                    loading: HashMap::new(),
                    listed: Vec::new(),
                    gone: false,
                    shut: false,
                }),
                rescan: Arc::new(tokio::sync::Notify::new()),
                load_wait,
                #[cfg(test)]
                listing_panics: std::sync::atomic::AtomicBool::new(false),
            }),
        };
        let rescan = plugin_dir.inner.rescan.clone();
        let weak = Arc::downgrade(&plugin_dir.inner);
        tokio::spawn(async move {
            loop {
                rescan.notified().await;
                let Some(inner) = weak.upgrade() else { return };
                PluginDir { inner }.scan().await;
            }
        });
        let scanning = plugin_dir.start_scan().await;
        Ok((plugin_dir, scanning))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// The bus of the registry this directory feeds.
    pub(crate) fn registry_bus(&self) -> crate::bus::Bus {
        self.inner.registry.bus().clone()
    }

    /// Closes the directory for good, as its host stops: its tools leave the registry, every
    /// version is retired (isolated workers stop; in process, images stay mapped), the private
    /// copies' directory is removed; later scans do nothing.
    pub async fn shut_down(&self) {
        let inner = &self.inner;
        // One lock for all of it: no scan queued meanwhile can load anything again.
        let mut state = inner.state.lock().await;
        state.shut = true;
        inner.registry.set_source_tools(inner.source, Vec::new());
        for (_, slot) in std::mem::take(&mut state.slots) {
            inner.backend.retire(&slot.info);
        }
        state.failed.clear();
        inner.copies.remove();
    }

    /// The plugins loaded now.
    pub async fn plugins(&self) -> Vec<PluginInfo> {
        let state = self.inner.state.lock().await;
        state.slots.values().map(|s| s.info.clone()).collect()
    }

    /// Brings the registry in line with the directory: loads new files, reloads changed ones
    /// (content hash differs), drops the tools of deleted ones, and of every file when the
    /// directory itself is gone. A file that fails keeps its old version serving and is not read
    /// again until it changes. Files are opened, checked, copied and hashed one at a time, off the
    /// async runtime's threads. Publishes one event per change and per failure, once the registry
    /// shows the result. Isolated files load beside each other and beside the scan: each serves
    /// as soon as it has loaded; the scan waits for them up to the host's `load_wait` and names
    /// those still loading in [`ScanReport::loading`].
    pub async fn scan(&self) -> ScanReport {
        let deadline = tokio::time::Instant::now() + self.inner.load_wait;
        self.start_scan().await.settle(deadline).await
    }

    /// The scan's work up to the isolated loads it starts, which go on in tasks of their own.
    pub(crate) async fn start_scan(&self) -> Scanning {
        let inner = &self.inner;
        let mut state = inner.state.lock().await;
        let mut report = ScanReport::default();
        let mut loads = Vec::new();
        if state.shut {
            return Scanning::new(
                report,
                Vec::new(),
                inner.registry.bus(),
                inner.load_wait,
                inner.options.load_timeout,
            );
        }
        let dir = inner.dir.clone();
        let trust = inner.options.trust;
        let components = inner.components.is_some();
        #[cfg(test)]
        let injected = inner
            .listing_panics
            .load(std::sync::atomic::Ordering::Relaxed);
        let listed = tokio::task::spawn_blocking(move || {
            #[cfg(test)]
            assert!(!injected, "injected: the listing panics");
            let handle = open_dir(&dir, trust)?;
            let names = handle.list(components).map_err(DirError::Unusable)?;
            Ok::<_, DirError>((handle, names))
        })
        .await;
        match listed {
            Err(_) => report.fail_dir(&LoadError::Read {
                path: inner.dir.clone(),
                reason: "the task listing the plugin directory failed".into(),
            }),
            Ok(Err(DirError::Unusable(error))) => report.fail_dir(&error),
            Ok(Err(DirError::Gone(error))) => {
                if !state.gone {
                    report.fail_dir(&error);
                    state.gone = true;
                }
                state.listed.clear();
                self.drop_deleted(&mut state, &mut report, &[]);
                inner.registry.set_source_tools(inner.source, Vec::new());
            }
            Ok(Ok((handle, names))) => {
                state.gone = false;
                loads = self
                    .scan_files(&mut state, &mut report, Arc::new(handle), names)
                    .await;
                self.serve(&state);
            }
        }
        self.publish(&mut report);
        Scanning::new(
            report,
            loads,
            inner.registry.bus(),
            inner.load_wait,
            inner.options.load_timeout,
        )
    }

    /// Puts the tools of every loaded file in the registry, in one step.
    fn serve(&self, state: &State) {
        let tools = state.slots.values().flat_map(|s| s.tools.clone()).collect();
        self.inner
            .registry
            .set_source_tools(self.inner.source, tools);
    }

    /// Retires what `report` replaced and publishes its events: only once the registry shows
    /// the result, so a subscriber that reacts to `plugin_loaded` finds the tools there.
    fn publish(&self, report: &mut ScanReport) {
        for info in std::mem::take(&mut report.retired) {
            self.inner.backend.retire(&info);
        }
        for event in std::mem::take(&mut report.events) {
            self.inner.registry.bus().publish(None, event);
        }
    }

    /// Loads what changed; returns the isolated loads it started.
    async fn scan_files(
        &self,
        state: &mut State,
        report: &mut ScanReport,
        handle: Arc<DirHandle>,
        names: Vec<OsString>,
    ) -> Vec<(PathBuf, tokio::task::JoinHandle<ScanReport>)> {
        let inner = &self.inner;
        let paths: Vec<PathBuf> = names.iter().map(|n| handle.path_of(n)).collect();
        self.drop_deleted(state, report, &paths);
        state.listed = paths.clone();
        // Stalled loads that finished, first: each is used if its file is still the one it
        // loaded (the slot or the failure then carries that identity, so the file is not loaded
        // again below; a file that changed meanwhile loads anew).
        for done in std::mem::take(&mut state.finished) {
            let current = state.slots.get(&done.path).and_then(|s| s.stamp);
            if paths.contains(&done.path) && current != Some(done.stamp) {
                self.finish(
                    state,
                    report,
                    &done.path,
                    done.stamp,
                    &done.sha256,
                    done.result,
                );
            }
        }
        let mut loads = Vec::new();
        for name in names {
            let path = handle.path_of(&name);
            if state.stalled.contains_key(&path) || state.loading.contains_key(&path) {
                continue;
            }
            let Some((file, stamp)) = self.open_and_copy(state, report, &handle, name).await else {
                continue;
            };
            if inner.backend.is_isolated() || is_component(&file.path) {
                loads.push((file.path.clone(), self.spawn_load(state, file, stamp)));
                continue;
            }
            // glibc holds its loader lock while a library's load-time code runs: while a load
            // is stalled, others would only queue behind it. They load after it.
            if !state.stalled.is_empty() {
                continue;
            }
            self.load_in_process(state, report, file, stamp).await;
        }
        loads
    }

    /// Loads an isolated file or a component in a task of its own, within the directory's
    /// `load_timeout`: it serves (or fails, with its event) as soon as the load ends, whoever
    /// waits for it.
    fn spawn_load(
        &self,
        state: &mut State,
        file: PluginFile,
        stamp: Stamp,
    ) -> tokio::task::JoinHandle<ScanReport> {
        let (path, sha256) = (file.path.clone(), file.sha256.clone());
        state.loading.insert(path.clone(), stamp);
        self.inner.registry.set_loading(&path, true);
        let dir = self.clone();
        tokio::spawn(async move {
            let bound = dir.inner.options.load_timeout;
            let result = match &dir.inner.components {
                Some(engine) if is_component(&path) => {
                    let grants = dir.inner.backend.grants();
                    crate::plugin::component::load(engine.clone(), file, grants, bound).await
                }
                _ => match dir.inner.backend.load(file, bound).await {
                    LoadOutcome::Done(result) => *result,
                    LoadOutcome::Stalled(_) => Err(LoadError::Worker {
                        path: path.clone(),
                        reason: "loading stalled".into(),
                    }),
                },
            };
            let mut state = dir.inner.state.lock().await;
            state.loading.remove(&path);
            let mut report = ScanReport::default();
            if state.shut || !state.listed.contains(&path) {
                // The directory closed or the file went away meanwhile.
                if let Ok(loaded) = &result {
                    dir.inner.backend.retire(&loaded.info);
                }
            } else {
                dir.finish(&mut state, &mut report, &path, stamp, &sha256, result);
                dir.serve(&state);
                dir.publish(&mut report);
            }
            drop(state);
            dir.inner.registry.set_loading(&path, false);
            // The file may have changed while it loaded: the next scan sees it.
            dir.inner.rescan.notify_one();
            report
        })
    }

    /// Opens entry `name`, checks it, and copies it into private storage (hashing the copy),
    /// unless its identity or content is the one already loaded or already failed.
    async fn open_and_copy(
        &self,
        state: &mut State,
        report: &mut ScanReport,
        handle: &Arc<DirHandle>,
        name: OsString,
    ) -> Option<(PluginFile, Stamp)> {
        let inner = self.inner.clone();
        let path = handle.path_of(&name);
        let opening = handle.clone();
        let (trust, max) = (inner.options.trust, inner.options.max_file_size);
        let opened =
            tokio::task::spawn_blocking(move || opening.open_entry(&name, trust, max)).await;
        // A blocking task that died: the file counts as failed, what serves keeps serving.
        let task_failed = |what: &str| LoadError::Read {
            path: path.clone(),
            reason: format!("the task {what} it failed"),
        };
        let (mut source, stamp) = match opened {
            Ok(Ok(opened)) => opened,
            Ok(Err(LoadError::Read { .. })) if !path.exists() => {
                // Gone since the listing: the next scan drops it.
                return None;
            }
            Ok(Err(error)) => {
                self.failed(state, report, &path, None, None, &error);
                return None;
            }
            Err(_) => {
                self.failed(state, report, &path, None, None, &task_failed("reading"));
                return None;
            }
        };
        if state
            .slots
            .get(&path)
            .is_some_and(|s| s.stamp == Some(stamp))
            || state
                .failed
                .get(&path)
                .is_some_and(|f| f.stamp == Some(stamp))
        {
            return None;
        }
        let copying = path.clone();
        let copied = tokio::task::spawn_blocking(move || {
            let file = if is_component(&copying) {
                rho_worker::loader::copy::component_copy(&mut source, &copying, max)
            } else {
                inner
                    .backend
                    .private_copy(&mut source, &copying, &inner.copies, max)
            }?;
            if inner.options.locked {
                crate::plugin::lock::admit(&inner.dir, &copying, &file.sha256)?;
            }
            Ok(file)
        })
        .await;
        let file = match copied {
            Ok(Ok(file)) => file,
            Ok(Err(error)) => {
                self.failed(state, report, &path, Some(stamp), None, &error);
                return None;
            }
            Err(_) => {
                self.failed(state, report, &path, None, None, &task_failed("copying"));
                return None;
            }
        };
        if let Some(slot) = state.slots.get_mut(&path)
            && (slot.info.sha256 == file.sha256
                || slot.failed_sha256.as_ref() == Some(&file.sha256))
        {
            slot.stamp = Some(stamp);
            return None;
        }
        if let Some(failed) = state.failed.get_mut(&path)
            && failed.sha256.as_ref() == Some(&file.sha256)
        {
            failed.stamp = Some(stamp);
            return None;
        }
        Some((file, stamp))
    }

    /// Loads `file` in process within the time bound, refusing before anything is mapped a
    /// version past the cap.
    async fn load_in_process(
        &self,
        state: &mut State,
        report: &mut ScanReport,
        file: PluginFile,
        stamp: Stamp,
    ) {
        let inner = &self.inner;
        let path = file.path.clone();
        let mapped = state.mapped.get(&path).copied().unwrap_or(0);
        if inner.backend.would_map(&file.sha256) && mapped >= inner.options.max_versions {
            let message = format!(
                "{mapped} versions of {} are already mapped in this process (the cap is {}); \
                 load it isolated or restart the host to reload it again",
                rho_worker::shown(&path),
                inner.options.max_versions
            );
            report.event(EventKind::Warning {
                subject: path.display().to_string(),
                message: message.clone(),
            });
            let error = LoadError::Refused {
                path: path.clone(),
                reason: message,
            };
            let sha = file.sha256.clone();
            self.failed(state, report, &path, Some(stamp), Some(sha), &error);
            return;
        }
        let bound = inner.options.load_timeout;
        let sha256 = file.sha256.clone();
        match inner.backend.load(file, bound).await {
            LoadOutcome::Done(result) => self.finish(state, report, &path, stamp, &sha256, *result),
            LoadOutcome::Stalled(rx) => {
                state.stalled.insert(path.clone(), stamp);
                report.fail(&LoadError::Refused {
                    path: path.clone(),
                    reason: format!(
                        "stalled: loading has taken longer than {} ms (its load-time code may \
                         hang); other files load after it, and it serves if it finishes",
                        bound.as_millis()
                    ),
                });
                let dir = Arc::downgrade(&self.inner);
                tokio::spawn(async move {
                    let result = rx.await.unwrap_or_else(|_| {
                        Err(LoadError::Copy {
                            path: path.clone(),
                            reason: "the loading thread died".into(),
                        })
                    });
                    let Some(inner) = dir.upgrade() else { return };
                    let mut state = inner.state.lock().await;
                    state.stalled.remove(&path);
                    state.finished.push(Finished {
                        path,
                        stamp,
                        sha256,
                        result,
                    });
                    drop(state);
                    inner.rescan.notify_one();
                });
            }
        }
    }

    /// Records a load's result: installs the version, or records the failure.
    fn finish(
        &self,
        state: &mut State,
        report: &mut ScanReport,
        path: &Path,
        stamp: Stamp,
        sha256: &str,
        result: Result<LoadedVersion, LoadError>,
    ) {
        match result {
            Ok(loaded) => {
                if loaded.mapped_new {
                    *state.mapped.entry(path.to_owned()).or_insert(0) += 1;
                }
                state.failed.remove(path);
                self.install(state, report, path, loaded, stamp);
            }
            Err(error) => match state.slots.get_mut(path) {
                // The old version serves on; this content is not tried again.
                Some(slot) => {
                    if slot.failed_sha256.as_deref() != Some(sha256) {
                        report.fail(&error);
                    }
                    slot.failed_sha256 = Some(sha256.to_owned());
                    slot.stamp = Some(stamp);
                }
                None => {
                    let sha = Some(sha256.to_owned());
                    self.failed(state, report, path, Some(stamp), sha, &error);
                }
            },
        }
    }

    /// Records a failure of `path`, reported once per identity of the file and cause; the old
    /// version, if any, keeps serving.
    fn failed(
        &self,
        state: &mut State,
        report: &mut ScanReport,
        path: &Path,
        stamp: Option<Stamp>,
        sha256: Option<String>,
        error: &LoadError,
    ) {
        let line = error.to_string();
        let entry = state.failed.entry(path.to_owned()).or_default();
        if entry.line != line || entry.stamp != stamp {
            report.fail(error);
        }
        *entry = Failed {
            stamp,
            sha256,
            line,
        };
    }

    fn drop_deleted(&self, state: &mut State, report: &mut ScanReport, present: &[PathBuf]) {
        let gone: Vec<PathBuf> = state
            .slots
            .keys()
            .filter(|p| !present.contains(p))
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
        state.failed.retain(|p, _| present.contains(p));
    }

    fn install(
        &self,
        state: &mut State,
        report: &mut ScanReport,
        path: &Path,
        loaded: LoadedVersion,
        stamp: Stamp,
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
        let origin = Origin::Plugin {
            plugin: loaded.info.name.clone(),
            version: loaded.info.version.clone(),
            file: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        };
        let mut tools = Vec::new();
        for (spec, invoke) in loaded.tools {
            match ResolvedTool::new(spec, generation, origin.clone(), invoke) {
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
        let specs: Vec<ToolSpec> = tools.iter().map(|t| (*t.spec).clone()).collect();
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
                stamp: Some(stamp),
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
                    tools: specs,
                    sha256: info.sha256.clone(),
                    // Isolated versions report a worker's sandbox; components the engine's.
                    isolated: loaded.sandbox.as_ref().is_some_and(|s| s.wasm.is_none()),
                    sandbox: loaded.sandbox,
                    capabilities: info.capabilities.clone(),
                    granted: info.granted.clone(),
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
                    old_sha256: old.info.sha256.clone(),
                    new_sha256: info.sha256.clone(),
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
}

/// Whether the plugin file at `path` is a component (listed only for a directory with an engine).
fn is_component(path: &Path) -> bool {
    path.file_name()
        .and_then(|name| plugin_kind(&name.to_string_lossy(), true))
        == Some(PluginKind::Component)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::Bus;
    use crate::call::invoke::{NativeInvoke, Tool, ToolCtx};
    use crate::registry::ResolvedTool;
    use rho_plugin_api::{Answer, ToolError};
    use rho_protocol::ToolSpec;

    struct Kept;

    #[async_trait::async_trait]
    impl Tool for Kept {
        fn spec(&self) -> ToolSpec {
            ToolSpec::native(
                "kept",
                "a tool of the directory",
                serde_json::json!({"type": "object"}),
            )
        }
        async fn call(&self, _args: serde_json::Value, _ctx: ToolCtx) -> Result<Answer, ToolError> {
            Ok(Answer::text("kept"))
        }
    }

    /// A listing task that panics is the directory's error for this scan; the plugins loaded
    /// before it keep serving (they were dropped as deleted before [2/9]).
    #[tokio::test]
    async fn a_listing_that_panics_drops_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let registry = ToolRegistry::new(Bus::default());
        let backend = Backend::new(&crate::plugin::options::Isolation::InProcess);
        let wait = crate::call::options::DEFAULT_LOAD_WAIT;
        let options = DirOptions::default();
        let (dir, scanning) = PluginDir::open(&registry, tmp.path(), options, backend, None, wait)
            .await
            .unwrap();
        let report = scanning.settle(tokio::time::Instant::now() + wait).await;
        assert!(report.dir_error.is_none() && report.errors.is_empty());
        let tool = ResolvedTool::new(
            Kept.spec(),
            1,
            Origin::Host,
            Arc::new(NativeInvoke(Arc::new(Kept))),
        )
        .unwrap();
        registry.set_source_tools(dir.inner.source, vec![tool]);
        dir.inner
            .listing_panics
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let report = dir.scan().await;
        assert!(report.dir_error.is_some(), "{report:?}");
        assert_eq!(registry.names(), ["kept"]);
        // The next listing that works brings the registry in line with the directory again.
        dir.inner
            .listing_panics
            .store(false, std::sync::atomic::Ordering::Relaxed);
        let report = dir.scan().await;
        assert!(report.dir_error.is_none(), "{report:?}");
        assert!(registry.names().is_empty());
    }
}
