//! Per-tool accounting: call counts by outcome, durations, and quarantine after repeated crashes
//! or timeouts within a window.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::outcome::Outcome;

/// When a tool is quarantined: `max_failures` crashes or timeouts within `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuarantinePolicy {
    /// Crashes plus timeouts that quarantine a tool (0 disables quarantine).
    pub max_failures: u32,
    /// The window they must fall within.
    #[serde(with = "crate::health::millis", rename = "window_ms")]
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

pub(crate) mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

/// One tool's figures, as the host queries them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolStats {
    /// The tool.
    pub tool: String,
    /// Where it comes from now (`plugin@version` or `host`).
    pub origin: String,
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

#[derive(Default)]
struct Entry {
    stats: ToolStats,
    recent: VecDeque<f64>,
    failures: VecDeque<(Instant, String)>,
    /// The generation whose failures are counted.
    generation: u64,
    /// The generation quarantined, with the reason.
    quarantined: Option<(u64, String)>,
}

/// Which tool, from which load of its plugin.
#[derive(Clone, Copy)]
pub(crate) struct ToolKey<'a> {
    pub tool: &'a str,
    pub origin: &'a str,
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

    /// Records the end of a call of `tool` of `generation`.
    pub fn record(
        &mut self,
        policy: &QuarantinePolicy,
        tool: &ToolKey<'_>,
        end: &CallEnd<'_>,
    ) -> Change {
        let ToolKey {
            tool,
            origin,
            generation,
        } = *tool;
        let CallEnd {
            outcome,
            duration,
            text,
        } = *end;
        let entry = self.entries.entry(tool.to_owned()).or_default();
        if entry.generation != generation {
            entry.generation = generation;
            entry.failures.clear();
        }
        let s = &mut entry.stats;
        s.tool = tool.to_owned();
        s.origin = origin.to_owned();
        s.calls += 1;
        match outcome {
            Outcome::Ok => s.ok += 1,
            Outcome::Error => s.errors += 1,
            Outcome::Crashed => s.crashed += 1,
            Outcome::TimedOut => s.timed_out += 1,
            Outcome::Blocked => s.blocked += 1,
            Outcome::InvalidArguments => s.invalid_arguments += 1,
            Outcome::Quarantined => s.quarantined_calls += 1,
            Outcome::UnknownTool => {}
        }
        if !matches!(
            outcome,
            Outcome::Quarantined | Outcome::Blocked | Outcome::InvalidArguments
        ) {
            if entry.recent.len() == RECENT {
                entry.recent.pop_front();
            }
            entry.recent.push_back(duration.as_secs_f64() * 1000.0);
        }
        if !matches!(outcome, Outcome::Crashed | Outcome::TimedOut) || policy.max_failures == 0 {
            return Change::None;
        }
        let now = Instant::now();
        entry
            .failures
            .push_back((now, format!("{outcome}: {text}")));
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
            .filter(|(_, t)| t.starts_with("crashed"))
            .count();
        let timeouts = entry.failures.len() - crashes;
        let last = entry.failures.back().map(|(_, t)| t.as_str()).unwrap_or("");
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
        let mut stats = entry.stats.clone();
        let mut sorted: Vec<f64> = entry.recent.iter().copied().collect();
        sorted.sort_by(f64::total_cmp);
        stats.p50_ms = percentile(&sorted, 0.50);
        stats.p99_ms = percentile(&sorted, 0.99);
        stats.quarantine = entry.quarantined.as_ref().map(|(_, r)| r.clone());
        Some(stats)
    }
}

/// The `q` quantile (0..=1) of `sorted` values, by nearest rank; 0 for none.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
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
        let mut h = Health::default();
        let d = Duration::from_millis(5);
        assert_eq!(
            h.record(
                &policy,
                &ToolKey {
                    tool: "t",
                    origin: "p@1",
                    generation: 1
                },
                &CallEnd {
                    outcome: Outcome::Crashed,
                    duration: d,
                    text: "boom"
                }
            ),
            Change::None
        );
        assert_eq!(
            h.record(
                &policy,
                &ToolKey {
                    tool: "t",
                    origin: "p@1",
                    generation: 1
                },
                &CallEnd {
                    outcome: Outcome::Ok,
                    duration: d,
                    text: ""
                }
            ),
            Change::None
        );
        assert_eq!(
            h.record(
                &policy,
                &ToolKey {
                    tool: "t",
                    origin: "p@1",
                    generation: 1
                },
                &CallEnd {
                    outcome: Outcome::TimedOut,
                    duration: d,
                    text: "slow"
                }
            ),
            Change::None
        );
        let Change::Quarantined(reason) = h.record(
            &policy,
            &ToolKey {
                tool: "t",
                origin: "p@1",
                generation: 1,
            },
            &CallEnd {
                outcome: Outcome::Crashed,
                duration: d,
                text: "bang",
            },
        ) else {
            panic!("not quarantined");
        };
        assert_eq!(
            reason,
            "tool `t` (p@1) is quarantined after 2 crash(es) and 1 timeout(s) within 300 s; last failure: crashed: bang"
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
