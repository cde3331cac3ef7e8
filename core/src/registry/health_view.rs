//! [`HealthView`]: every tool's health folded from events, as a subscriber (a live view, a
//! journal read back) sees it.

use std::collections::BTreeMap;

use crate::bus::events::{Event, EventKind};
use crate::registry::health::{Tally, ToolStats};
use crate::registry::origin::Origin;
use rho_protocol::Outcome;

/// Every tool's health as a subscriber sees it: [`ToolStats`] folded from events (a host's bus or
/// a journal read back), with the same counting as [`Host::stats`](crate::Host::stats): calls by
/// outcome, p50/p99 of recent durations (calls the tool never ran left out), the
/// [`Origin`] (plugin, version and file, following reloads) and the quarantine. `runaway_threads` is the host's own
/// and stays 0 here.
///
/// ```
/// use rho_runtime::{Bus, BusItem, HealthView};
/// # async fn demo(bus: Bus) {
/// let mut view = HealthView::default();
/// let mut events = bus.subscribe();
/// while let Some(BusItem::Event(event)) = events.recv().await {
///     if view.observe(&event) {
///         for tool in view.stats() {
///             println!("{} {} calls, p99 {:.1} ms", tool.tool, tool.calls, tool.p99_ms);
///         }
///     }
/// }
/// # }
/// ```
#[derive(Default)]
pub struct HealthView {
    tools: BTreeMap<String, Tally>,
}

impl HealthView {
    /// Takes one event into account; returns whether it changed any tool's figures.
    pub fn observe(&mut self, event: &Event) -> bool {
        match &event.kind {
            EventKind::PluginLoaded {
                plugin,
                version,
                path,
                tools,
                ..
            } => {
                let origin = Origin::Plugin {
                    plugin: plugin.clone(),
                    version: version.clone(),
                    file: file_name(path),
                };
                for tool in tools {
                    self.tally(&tool.name).stats.origin = origin.clone();
                }
            }
            EventKind::PluginReloaded {
                plugin,
                new_version,
                path,
                ..
            } => {
                for tally in self.tools.values_mut() {
                    if tally.stats.origin.is_plugin(plugin) {
                        tally.stats.origin = Origin::Plugin {
                            plugin: plugin.clone(),
                            version: new_version.clone(),
                            file: file_name(path),
                        };
                    }
                }
            }
            EventKind::ToolExecutionEnd {
                tool,
                outcome,
                duration_ms,
                ..
            } => {
                if *outcome != Outcome::UnknownTool {
                    self.tally(tool).count(*outcome, *duration_ms);
                }
            }
            EventKind::ToolQuarantined {
                tool,
                reason,
                probe_after_ms,
                ..
            } => {
                let stats = &mut self.tally(tool).stats;
                stats.quarantine = Some(reason.clone());
                stats.probe_after_ms = *probe_after_ms;
                stats.probing = false;
            }
            EventKind::ToolProbing { tool, .. } => self.tally(tool).stats.probing = true,
            EventKind::ToolRestored { tool, .. } => {
                let stats = &mut self.tally(tool).stats;
                stats.quarantine = None;
                stats.probe_after_ms = None;
                stats.probing = false;
            }
            _ => return false,
        }
        true
    }

    /// The figures of every tool seen so far, by name, percentiles computed now.
    pub fn stats(&self) -> Vec<ToolStats> {
        self.tools.values().map(Tally::snapshot).collect()
    }

    fn tally(&mut self, tool: &str) -> &mut Tally {
        let tally = self.tools.entry(tool.to_owned()).or_default();
        tally.stats.tool = tool.to_owned();
        tally
    }
}

/// The file name of an event's `path`, as [`Origin::Plugin`] holds it.
fn file_name(path: &str) -> String {
    std::path::Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
