//! Per-tool accounting: call counts by outcome, durations, and quarantine after repeated crashes
//! or timeouts within a window.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::bus::events::{Event, EventKind};
use crate::registry::origin::Origin;
use rho_protocol::Outcome;

/// When a tool is quarantined: `max_failures` crashes or timeouts within `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuarantinePolicy {
    /// Crashes plus timeouts that quarantine a tool (0 disables quarantine).
    pub max_failures: u32,
    /// The window they must fall within.
    #[serde(with = "crate::millis", rename = "window_ms")]
    pub window: Duration,
}

impl Default for QuarantinePolicy {
    /// 3 crashes or timeouts within 5 minutes.
    fn default() -> Self {
        QuarantinePolicy {
            max_failures: 3,
            window: Duration::from_secs(300),
        }
    }
}

/// One tool's figures, as the host queries them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolStats {
    /// The tool.
    pub tool: String,
    /// Where it comes from now.
    pub origin: Origin,
    /// Calls that reached the tool's accounting (every outcome but `unknown_tool`).
    pub calls: u64,
    /// Ended `ok`.
    pub ok: u64,
    /// Ended `error`.
    pub errors: u64,
    /// Ended `crashed`.
    pub crashed: u64,
    /// Ended `timed_out`.
    pub timed_out: u64,
    /// Ended `blocked`.
    pub blocked: u64,
    /// Ended `invalid_arguments`.
    pub invalid_arguments: u64,
    /// Refused while quarantined.
    pub quarantined_calls: u64,
    /// Ended `unavailable` (a remote tool no node answered for).
    #[serde(default)]
    pub unavailable: u64,
    /// Median duration of recent calls, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile duration of recent calls, milliseconds.
    pub p99_ms: f64,
    /// Blocking threads still running calls the host gave up on.
    pub runaway_threads: usize,
    /// Why the tool is quarantined, if it is.
    pub quarantine: Option<String>,
}

/// How many recent durations the percentiles are computed from.
const RECENT: usize = 1024;

/// One tool's counts and recent durations: the one fold of call ends, used by the registry (from
/// its own accounting) and by [`HealthView`] (from events).
#[derive(Default)]
struct Tally {
    stats: ToolStats,
    recent: VecDeque<f64>,
}

impl Tally {
    /// Counts one call's end.
    fn count(&mut self, outcome: Outcome, duration_ms: f64) {
        let s = &mut self.stats;
        s.calls += 1;
        match outcome {
            Outcome::Ok => s.ok += 1,
            Outcome::Error => s.errors += 1,
            Outcome::Crashed => s.crashed += 1,
            Outcome::TimedOut => s.timed_out += 1,
            Outcome::Blocked => s.blocked += 1,
            Outcome::InvalidArguments => s.invalid_arguments += 1,
            Outcome::Quarantined => s.quarantined_calls += 1,
            Outcome::Unavailable => s.unavailable += 1,
            // Not the tool's: it never ran (and outcomes added later count only as calls).
            _ => {}
        }
        // Calls the tool never ran do not count towards its latency.
        if !matches!(
            outcome,
            Outcome::Quarantined
                | Outcome::Blocked
                | Outcome::InvalidArguments
                | Outcome::Unavailable
        ) {
            if self.recent.len() == RECENT {
                self.recent.pop_front();
            }
            self.recent.push_back(duration_ms);
        }
    }

    /// The figures, with percentiles computed now.
    fn snapshot(&self) -> ToolStats {
        let mut stats = self.stats.clone();
        let mut sorted: Vec<f64> = self.recent.iter().copied().collect();
        sorted.sort_by(f64::total_cmp);
        stats.p50_ms = percentile(&sorted, 0.50);
        stats.p99_ms = percentile(&sorted, 0.99);
        stats
    }
}

#[derive(Default)]
struct Entry {
    tally: Tally,
    /// The crashes and timeouts of the window, oldest first.
    failures: VecDeque<(Instant, Outcome)>,
    /// The last of them, `outcome: text`, for the quarantine's reason.
    last_failure: String,
    /// The generation whose failures are counted.
    generation: u64,
    /// The generation quarantined, with the reason.
    quarantined: Option<(u64, String)>,
}

/// Which tool, from which load of its plugin.
#[derive(Clone, Copy)]
pub(crate) struct ToolKey<'a> {
    pub tool: &'a str,
    pub origin: &'a Origin,
    pub generation: u64,
}

/// How a call ended, as accounting needs it.
#[derive(Clone, Copy)]
pub(crate) struct CallEnd<'a> {
    pub outcome: Outcome,
    pub duration: Duration,
    pub text: &'a str,
}

/// What recording a call's end changed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Change {
    None,
    Quarantined(String),
}

/// Stats and quarantine for every tool of a registry.
#[derive(Default)]
pub(crate) struct Health {
    entries: HashMap<String, Entry>,
}

impl Health {
    /// The quarantine text if `tool` of `generation` is quarantined.
    pub fn quarantined(&self, tool: &str, generation: u64) -> Option<String> {
        self.entries
            .get(tool)
            .and_then(|e| e.quarantined.as_ref())
            .filter(|(g, _)| *g == generation)
            .map(|(_, reason)| reason.clone())
    }

    /// Records the end of a call of `tool` of `generation`: counted in its figures, and a crash or
    /// timeout charged to it (see [`Health::charge`]) unless `charged` is `false` (another tool
    /// caused it, and is charged instead).
    pub fn record(
        &mut self,
        policy: &QuarantinePolicy,
        tool: &ToolKey<'_>,
        end: &CallEnd<'_>,
        charged: bool,
    ) -> Change {
        let CallEnd {
            outcome, duration, ..
        } = *end;
        let Some(entry) = self.entry(tool) else {
            return Change::None;
        };
        entry.tally.count(outcome, duration.as_secs_f64() * 1000.0);
        if !charged {
            return Change::None;
        }
        self.charge(policy, tool, end)
    }

    /// The entry of `tool`, made if new, started over for a new generation.
    fn entry(&mut self, tool: &ToolKey<'_>) -> Option<&mut Entry> {
        let ToolKey {
            tool,
            origin,
            generation,
        } = *tool;
        // No allocation for a tool already known (every call but its first).
        if !self.entries.contains_key(tool) {
            self.entries.insert(tool.to_owned(), Default::default());
        }
        let entry = self.entries.get_mut(tool)?;
        if entry.generation != generation {
            entry.generation = generation;
            entry.failures.clear();
        }
        if entry.tally.stats.tool != tool {
            entry.tally.stats.tool = tool.to_owned();
        }
        if entry.tally.stats.origin != *origin {
            entry.tally.stats.origin = origin.clone();
        }
        Some(entry)
    }

    /// Charges a crash or timeout (`end`) to `tool` without counting a call of it: quarantine
    /// after [`QuarantinePolicy::max_failures`] within its window. Other outcomes charge nothing.
    pub fn charge(
        &mut self,
        policy: &QuarantinePolicy,
        tool: &ToolKey<'_>,
        end: &CallEnd<'_>,
    ) -> Change {
        let CallEnd { outcome, text, .. } = *end;
        let (name, origin, generation) = (tool.tool, tool.origin, tool.generation);
        if !matches!(outcome, Outcome::Crashed | Outcome::TimedOut) || policy.max_failures == 0 {
            return Change::None;
        }
        let Some(entry) = self.entry(tool) else {
            return Change::None;
        };
        let tool = name;
        let now = Instant::now();
        entry.failures.push_back((now, outcome));
        entry.last_failure = format!("{outcome}: {text}");
        while entry
            .failures
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > policy.window)
        {
            entry.failures.pop_front();
        }
        if entry.failures.len() < policy.max_failures as usize || entry.quarantined.is_some() {
            return Change::None;
        }
        let crashes = entry
            .failures
            .iter()
            .filter(|(_, outcome)| *outcome == Outcome::Crashed)
            .count();
        let timeouts = entry.failures.len() - crashes;
        let last = &entry.last_failure;
        let reason = format!(
            "tool `{tool}` ({origin}) is quarantined after {crashes} crash(es) and {timeouts} timeout(s) within {} s; last failure: {last}",
            policy.window.as_secs()
        );
        entry.quarantined = Some((generation, reason.clone()));
        Change::Quarantined(reason)
    }

    /// Lifts the quarantine of `tool`; returns whether it was quarantined.
    pub fn lift(&mut self, tool: &str) -> bool {
        match self.entries.get_mut(tool) {
            Some(entry) => {
                entry.failures.clear();
                entry.quarantined.take().is_some()
            }
            None => false,
        }
    }

    /// Tools quarantined under a generation other than the one now serving them.
    pub fn stale_quarantines(&self, current: &HashMap<String, u64>) -> Vec<String> {
        self.entries
            .iter()
            .filter(|(tool, e)| {
                e.quarantined
                    .as_ref()
                    .is_some_and(|(g, _)| current.get(*tool).is_some_and(|c| c != g))
            })
            .map(|(tool, _)| tool.clone())
            .collect()
    }

    /// The figures of `tool`, with percentiles computed now.
    pub fn stats(&self, tool: &str) -> Option<ToolStats> {
        let entry = self.entries.get(tool)?;
        let mut stats = entry.tally.snapshot();
        stats.quarantine = entry.quarantined.as_ref().map(|(_, r)| r.clone());
        Some(stats)
    }
}

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
            EventKind::ToolQuarantined { tool, reason, .. } => {
                self.tally(tool).stats.quarantine = Some(reason.clone())
            }
            EventKind::ToolRestored { tool, .. } => self.tally(tool).stats.quarantine = None,
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

/// The `q` quantile (0..=1) of `sorted` values, by nearest rank; 0 for none.
pub(crate) fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quarantines_after_three_failures_and_new_generation_resets() {
        let policy = QuarantinePolicy::default();
        let origin = Origin::Plugin {
            plugin: "p".into(),
            version: "1".into(),
            file: "libp.so".into(),
        };
        let mut h = Health::default();
        let d = Duration::from_millis(5);
        assert_eq!(
            h.record(
                &policy,
                &ToolKey {
                    tool: "t",
                    origin: &origin,
                    generation: 1
                },
                &CallEnd {
                    outcome: Outcome::Crashed,
                    duration: d,
                    text: "boom"
                },
                true
            ),
            Change::None
        );
        assert_eq!(
            h.record(
                &policy,
                &ToolKey {
                    tool: "t",
                    origin: &origin,
                    generation: 1
                },
                &CallEnd {
                    outcome: Outcome::Ok,
                    duration: d,
                    text: ""
                },
                true
            ),
            Change::None
        );
        assert_eq!(
            h.record(
                &policy,
                &ToolKey {
                    tool: "t",
                    origin: &origin,
                    generation: 1
                },
                &CallEnd {
                    outcome: Outcome::TimedOut,
                    duration: d,
                    text: "slow"
                },
                true
            ),
            Change::None
        );
        let Change::Quarantined(reason) = h.record(
            &policy,
            &ToolKey {
                tool: "t",
                origin: &origin,
                generation: 1,
            },
            &CallEnd {
                outcome: Outcome::Crashed,
                duration: d,
                text: "bang",
            },
            true,
        ) else {
            panic!("not quarantined");
        };
        assert_eq!(
            reason,
            "tool `t` (p@1 (libp.so)) is quarantined after 2 crash(es) and 1 timeout(s) within 300 s; last failure: crashed: bang"
        );
        assert!(h.quarantined("t", 1).is_some());
        assert!(h.quarantined("t", 2).is_none());
        let current = HashMap::from([("t".to_owned(), 2)]);
        assert_eq!(h.stale_quarantines(&current), vec!["t".to_owned()]);
        assert!(h.lift("t"));
        let stats = h.stats("t").unwrap();
        assert_eq!(
            (stats.calls, stats.ok, stats.crashed, stats.timed_out),
            (4, 1, 2, 1)
        );
        assert_eq!(stats.p50_ms, 5.0);
    }

    #[test]
    fn percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
