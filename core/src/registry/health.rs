//! Per-tool accounting: call counts by outcome, durations, and quarantine after repeated crashes
//! or timeouts within a window.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::registry::origin::Origin;
use rho_protocol::Outcome;

/// When a tool is quarantined, and how it comes back: `max_failures` crashes or timeouts within
/// `window` quarantine it (its calls end `quarantined`); once `cool_down` has passed, its next
/// call is a probe (other calls meanwhile still end `quarantined`): a probe the tool answers
/// (`ok` or `error`) lifts the quarantine; one that crashes or times out quarantines it again for
/// `cool_down_growth` times as long, up to `max_cool_down`. A probe that never reached the tool
/// (blocked by the gate, invalid arguments) decides nothing: the next call probes. A new build of
/// the tool's plugin, or [`Host::lift_quarantine`](crate::Host::lift_quarantine), lifts it at
/// once.
///
/// ```
/// use std::time::Duration;
/// use rho_runtime::QuarantinePolicy;
///
/// let policy = QuarantinePolicy {
///     cool_down: Duration::from_secs(30),
///     ..QuarantinePolicy::default()
/// };
/// assert_eq!(policy.cool_down_after(2), Duration::from_secs(120));
/// assert_eq!(policy.cool_down_after(20), policy.max_cool_down);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuarantinePolicy {
    /// Crashes plus timeouts that quarantine a tool (0 disables quarantine).
    pub max_failures: u32,
    /// The window they must fall within.
    #[serde(with = "crate::millis", rename = "window_ms")]
    pub window: Duration,
    /// How long a first quarantine lasts before a call probes the tool (zero: until a new build
    /// or the host lifts it).
    #[serde(with = "crate::millis", rename = "cool_down_ms")]
    pub cool_down: Duration,
    /// What each failed probe multiplies the cool-down by (1: the same each time).
    pub cool_down_growth: u32,
    /// The longest cool-down.
    #[serde(with = "crate::millis", rename = "max_cool_down_ms")]
    pub max_cool_down: Duration,
}

impl Default for QuarantinePolicy {
    /// 3 crashes or timeouts within 5 minutes; a probe after 2 minutes, then 4, 8 and 16, and
    /// every 30 minutes from there on: an agent's session gets a tool back within minutes of
    /// its recovery.
    fn default() -> Self {
        QuarantinePolicy {
            max_failures: 3,
            window: Duration::from_secs(300),
            cool_down: Duration::from_secs(120),
            cool_down_growth: 2,
            max_cool_down: Duration::from_secs(1800),
        }
    }
}

impl QuarantinePolicy {
    /// The cool-down after `failed_probes` failed probes: `cool_down` times
    /// `cool_down_growth` to that power, at most `max_cool_down`.
    pub fn cool_down_after(&self, failed_probes: u32) -> Duration {
        let growth = self.cool_down_growth.max(1);
        let factor = growth.checked_pow(failed_probes).unwrap_or(u32::MAX);
        self.cool_down
            .checked_mul(factor)
            .unwrap_or(Duration::MAX)
            .min(self.max_cool_down.max(self.cool_down))
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
    /// Ended `rate_limited` (over a limit of the host's; the tool did not run).
    #[serde(default)]
    pub rate_limited: u64,
    /// Median duration of recent calls, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile duration of recent calls, milliseconds.
    pub p99_ms: f64,
    /// Blocking threads still running calls the host gave up on.
    pub runaway_threads: usize,
    /// Why the tool is quarantined, if it is.
    pub quarantine: Option<String>,
    /// While quarantined: when its next call probes it (Unix time, milliseconds); `None` when
    /// it is not quarantined or has no cool-down.
    #[serde(default)]
    pub probe_after_ms: Option<u64>,
    /// Whether a probe call of it is running.
    #[serde(default)]
    pub probing: bool,
}

impl ToolStats {
    /// Calls that ended otherwise than `ok`, `error`, `crashed` or `timed_out`: blocked,
    /// refused for their arguments, refused while quarantined, unavailable or over a limit (a
    /// view's "other").
    pub fn other(&self) -> u64 {
        self.blocked
            + self.invalid_arguments
            + self.quarantined_calls
            + self.unavailable
            + self.rate_limited
    }
}

/// How many recent durations the percentiles are computed from.
const RECENT: usize = 1024;

/// One tool's counts and recent durations: the one fold of call ends, used by the registry (from
/// its own accounting) and by [`HealthView`] (from events).
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) stats: ToolStats,
    recent: VecDeque<f64>,
}

impl Tally {
    /// Counts one call's end.
    pub(crate) fn count(&mut self, outcome: Outcome, duration_ms: f64) {
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
            Outcome::RateLimited => s.rate_limited += 1,
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
                | Outcome::RateLimited
        ) {
            if self.recent.len() == RECENT {
                self.recent.pop_front();
            }
            self.recent.push_back(duration_ms);
        }
    }

    /// The figures, with percentiles computed now.
    pub(crate) fn snapshot(&self) -> ToolStats {
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
    /// Its quarantine, if it is quarantined.
    quarantine: Option<Quarantine>,
}

/// A tool's quarantine.
struct Quarantine {
    /// The generation quarantined.
    generation: u64,
    /// Why: counts and the last failure.
    reason: String,
    /// Probes that failed so far.
    failed_probes: u32,
    /// When a call may probe it (`None`: no cool-down), as an instant and in Unix milliseconds.
    probe_after: Option<(Instant, u64)>,
    /// The token of the call probing it now.
    probe: Option<u64>,
}

impl Quarantine {
    fn new(generation: u64, reason: String, failed_probes: u32, policy: &QuarantinePolicy) -> Self {
        let cool_down = policy.cool_down_after(failed_probes);
        // A cool-down too long to add to now is none: quarantined until a build or a lift.
        let probe_after = Instant::now()
            .checked_add(cool_down)
            .filter(|_| !policy.cool_down.is_zero())
            .map(|at| {
                let wall = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .saturating_add(cool_down);
                (at, crate::millis::of(wall))
            });
        Quarantine {
            generation,
            reason,
            failed_probes,
            probe_after,
            probe: None,
        }
    }

    /// What its event says.
    fn state(&self, tool: &str) -> QuarantineState {
        QuarantineState {
            tool: tool.to_owned(),
            reason: self.reason.clone(),
            probe_after_ms: self.probe_after.map(|(_, ms)| ms),
            failed_probes: self.failed_probes,
        }
    }
}

/// A quarantine begun (or begun again after a failed probe), as its event tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QuarantineState {
    pub tool: String,
    pub reason: String,
    /// When a call may probe it (Unix milliseconds); `None`: no cool-down.
    pub probe_after_ms: Option<u64>,
    /// Probes that failed before this quarantine.
    pub failed_probes: u32,
}

/// Whether a call of a tool may run.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// It runs.
    Serve,
    /// It runs as the probe of the tool's quarantine, under this token (its end decides it,
    /// [`Health::record`], or gives it back, [`Health::release_probe`]).
    Probe(u64),
    /// It ends `quarantined`, for this reason.
    Refused(String),
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
    /// The probe token its call was admitted under, if it was one.
    pub probe: Option<u64>,
    pub outcome: Outcome,
    pub duration: Duration,
    pub text: &'a str,
}

/// Whom a call's end is charged to, for quarantine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Charge {
    /// The tool called (a crash or timeout counts toward its quarantine; it may decide its
    /// probe).
    Tool,
    /// Another tool of the same origin, named (it hung, and the process serving both was
    /// restarted).
    Culprit(String),
    /// No one: the client or the host ended the call.
    Nobody,
}

/// What recording a call's end changed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Change {
    None,
    /// Quarantined, quarantined again by a failed probe, or still quarantined after a probe
    /// that decided nothing (the next call probes).
    Quarantined(QuarantineState),
    /// Its probe answered: the quarantine is lifted, for this reason.
    Restored(String),
}

/// Stats and quarantine for every tool of a registry.
#[derive(Default)]
pub(crate) struct Health {
    /// Ordered by name: a lookup is a few string comparisons, cheaper on every call than
    /// hashing the name.
    entries: BTreeMap<String, Entry>,
    /// The last probe token handed out.
    probes: u64,
}

impl Health {
    /// Whether a call of `tool` of `generation` may run now: quarantined tools refuse calls
    /// until their cool-down has passed, then take one call as their probe.
    pub fn admit(&mut self, tool: &str, generation: u64) -> Admission {
        self.probes += 1;
        let token = self.probes;
        let Some(quarantine) = self
            .entries
            .get_mut(tool)
            .and_then(|e| e.quarantine.as_mut())
            .filter(|q| q.generation == generation)
        else {
            return Admission::Serve;
        };
        let reason = &quarantine.reason;
        if quarantine.probe.is_some() {
            return Admission::Refused(format!("{reason}; a call is probing it now"));
        }
        match quarantine.probe_after {
            None => Admission::Refused(reason.clone()),
            Some((at, _)) => {
                let now = Instant::now();
                if now < at {
                    let secs = (at - now).as_secs_f64().ceil();
                    return Admission::Refused(format!(
                        "{reason}; a call in {secs} s will probe it"
                    ));
                }
                quarantine.probe = Some(token);
                Admission::Probe(token)
            }
        }
    }

    /// Gives back the probe `token` of `tool` without deciding anything (its call ended without
    /// being recorded): the next call probes. Returns the quarantine as it stands, if the probe
    /// was still running.
    pub fn release_probe(&mut self, tool: &str, token: u64) -> Option<QuarantineState> {
        let quarantine = self
            .entries
            .get_mut(tool)
            .and_then(|e| e.quarantine.as_mut())
            .filter(|q| q.probe == Some(token))?;
        quarantine.probe = None;
        Some(quarantine.state(tool))
    }

    /// Records the end of a call of `tool` of `generation`: counted in its figures; the probe of
    /// its quarantine decided; a crash or timeout charged to it (see [`Health::charge`]) unless
    /// `charged` is `false` (another tool caused it, and is charged instead).
    pub fn record(
        &mut self,
        policy: &QuarantinePolicy,
        tool: &ToolKey<'_>,
        end: &CallEnd<'_>,
        charged: bool,
    ) -> Change {
        let CallEnd {
            outcome,
            duration,
            probe,
            text,
        } = *end;
        let Some(entry) = self.entry(tool) else {
            return Change::None;
        };
        entry.tally.count(outcome, duration.as_secs_f64() * 1000.0);
        let probing =
            probe.is_some() && entry.quarantine.as_ref().is_some_and(|q| q.probe == probe);
        if probing && let Some(quarantine) = entry.quarantine.as_mut() {
            quarantine.probe = None;
            if !charged {
                // The client, the host, the gate or another tool ended it: the next call probes.
                return Change::Quarantined(quarantine.state(tool.tool));
            }
            match outcome {
                Outcome::Ok | Outcome::Error => {
                    entry.quarantine = None;
                    entry.failures.clear();
                    return Change::Restored(format!("its probe call ended `{outcome}`"));
                }
                Outcome::Crashed | Outcome::TimedOut => {
                    let failed = quarantine.failed_probes.saturating_add(1);
                    let reason = format!(
                        "tool `{}` ({}) is quarantined again: its probe call ended {outcome}: {text}",
                        tool.tool, tool.origin
                    );
                    let again = Quarantine::new(tool.generation, reason, failed, policy);
                    let state = again.state(tool.tool);
                    *quarantine = again;
                    return Change::Quarantined(state);
                }
                // It never reached the tool: the next call probes.
                _ => return Change::Quarantined(quarantine.state(tool.tool)),
            }
        }
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
        if entry.failures.len() < policy.max_failures as usize || entry.quarantine.is_some() {
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
        let quarantine = Quarantine::new(generation, reason, 0, policy);
        let state = quarantine.state(tool);
        entry.quarantine = Some(quarantine);
        Change::Quarantined(state)
    }

    /// Lifts the quarantine of `tool`; returns whether it was quarantined.
    pub fn lift(&mut self, tool: &str) -> bool {
        match self.entries.get_mut(tool) {
            Some(entry) => {
                entry.failures.clear();
                entry.quarantine.take().is_some()
            }
            None => false,
        }
    }

    /// Tools quarantined under a generation other than the one now serving them.
    pub fn stale_quarantines(&self, current: &HashMap<String, u64>) -> Vec<String> {
        self.entries
            .iter()
            .filter(|(tool, e)| {
                e.quarantine
                    .as_ref()
                    .is_some_and(|q| current.get(*tool).is_some_and(|c| *c != q.generation))
            })
            .map(|(tool, _)| tool.clone())
            .collect()
    }

    /// The figures of `tool`, with percentiles computed now.
    pub fn stats(&self, tool: &str) -> Option<ToolStats> {
        let entry = self.entries.get(tool)?;
        let mut stats = entry.tally.snapshot();
        if let Some(quarantine) = &entry.quarantine {
            stats.quarantine = Some(quarantine.reason.clone());
            stats.probe_after_ms = quarantine.probe_after.map(|(_, ms)| ms);
            stats.probing = quarantine.probe.is_some();
        }
        Some(stats)
    }
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

    fn origin() -> Origin {
        Origin::Plugin {
            plugin: "p".into(),
            version: "1".into(),
            file: "libp.so".into(),
        }
    }

    /// Records the end of a call of tool `t` (generation 1), charged to it, admitted as the probe
    /// `probe` if given.
    fn end(
        h: &mut Health,
        policy: &QuarantinePolicy,
        probe: Option<u64>,
        outcome: Outcome,
    ) -> Change {
        end_charged(h, policy, probe, outcome, true)
    }

    /// The quarantine that the end of a call of `t` charged to it begins.
    fn quarantines(h: &mut Health, policy: &QuarantinePolicy, outcome: Outcome) -> QuarantineState {
        match end(h, policy, None, outcome) {
            Change::Quarantined(state) => state,
            other => panic!("not quarantined: {other:?}"),
        }
    }

    /// The same, charged to it or to no one.
    fn end_charged(
        h: &mut Health,
        policy: &QuarantinePolicy,
        probe: Option<u64>,
        outcome: Outcome,
        charged: bool,
    ) -> Change {
        let origin = origin();
        let key = ToolKey {
            tool: "t",
            origin: &origin,
            generation: 1,
        };
        let end = CallEnd {
            probe,
            outcome,
            duration: Duration::from_millis(5),
            text: "boom",
        };
        h.record(policy, &key, &end, charged)
    }

    #[test]
    fn quarantines_after_three_failures_and_new_generation_resets() {
        let policy = QuarantinePolicy::default();
        let mut h = Health::default();
        assert_eq!(end(&mut h, &policy, None, Outcome::Crashed), Change::None);
        assert_eq!(end(&mut h, &policy, None, Outcome::Ok), Change::None);
        assert_eq!(end(&mut h, &policy, None, Outcome::TimedOut), Change::None);
        let state = quarantines(&mut h, &policy, Outcome::Crashed);
        assert_eq!(
            state.reason,
            "tool `t` (p@1 (libp.so)) is quarantined after 2 crash(es) and 1 timeout(s) within 300 s; last failure: crashed: boom"
        );
        assert!(state.probe_after_ms.is_some());
        assert!(matches!(h.admit("t", 1), Admission::Refused(r) if r.contains("will probe it")));
        assert_eq!(h.admit("t", 2), Admission::Serve);
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
    fn a_cooled_down_quarantine_takes_one_probe_that_lifts_or_rearms_it() {
        let policy = QuarantinePolicy {
            max_failures: 1,
            cool_down: Duration::from_millis(1),
            cool_down_growth: 3,
            max_cool_down: Duration::from_millis(5),
            ..QuarantinePolicy::default()
        };
        let mut h = Health::default();
        assert!(matches!(
            end(&mut h, &policy, None, Outcome::Crashed),
            Change::Quarantined(_)
        ));
        std::thread::sleep(Duration::from_millis(2));
        // One probe at a time; the others are refused while it runs.
        let Admission::Probe(probe) = h.admit("t", 1) else {
            panic!("no probe");
        };
        assert!(matches!(h.admit("t", 1), Admission::Refused(r) if r.contains("probing it now")));
        assert!(h.stats("t").unwrap().probing);
        // A call that started before the quarantine ends: it decides nothing.
        assert_eq!(end(&mut h, &policy, None, Outcome::Ok), Change::None);
        // The probe crashes: quarantined again, for three times as long.
        let Change::Quarantined(again) = end(&mut h, &policy, Some(probe), Outcome::Crashed) else {
            panic!("not quarantined again");
        };
        assert_eq!(again.failed_probes, 1);
        assert!(
            again.reason.contains("its probe call ended crashed"),
            "{}",
            again.reason
        );
        assert!(matches!(h.admit("t", 1), Admission::Refused(_)));
        std::thread::sleep(Duration::from_millis(4));
        // A probe that never reached the tool, that the client ended, or whose call died,
        // decides nothing: still quarantined, the next call probes.
        let Admission::Probe(blocked) = h.admit("t", 1) else {
            panic!("no probe");
        };
        let undecided = end(&mut h, &policy, Some(blocked), Outcome::Blocked);
        assert!(matches!(undecided, Change::Quarantined(s) if s.failed_probes == 1));
        let Admission::Probe(cancelled) = h.admit("t", 1) else {
            panic!("no probe");
        };
        let undecided = end_charged(&mut h, &policy, Some(cancelled), Outcome::Error, false);
        assert!(matches!(undecided, Change::Quarantined(_)));
        let Admission::Probe(died) = h.admit("t", 1) else {
            panic!("no probe");
        };
        assert!(h.release_probe("t", died).is_some());
        assert!(h.release_probe("t", died).is_none());
        // A stale token (an earlier probe's) decides nothing either.
        let Admission::Probe(answered) = h.admit("t", 1) else {
            panic!("no probe");
        };
        assert_eq!(end(&mut h, &policy, Some(died), Outcome::Ok), Change::None);
        assert!(matches!(
            end(&mut h, &policy, Some(answered), Outcome::Error),
            Change::Restored(_)
        ));
        assert_eq!(h.admit("t", 1), Admission::Serve);
        assert!(h.stats("t").unwrap().quarantine.is_none());
    }

    #[test]
    fn cool_downs_grow_to_their_cap_and_zero_means_none() {
        let policy = QuarantinePolicy::default();
        let minutes = |n: u64| Duration::from_secs(60 * n);
        let grown: Vec<_> = (0..6).map(|n| policy.cool_down_after(n)).collect();
        assert_eq!(
            grown,
            [
                minutes(2),
                minutes(4),
                minutes(8),
                minutes(16),
                minutes(30),
                minutes(30)
            ]
        );
        assert_eq!(policy.cool_down_after(u32::MAX), minutes(30));
        let never = QuarantinePolicy {
            max_failures: 1,
            cool_down: Duration::ZERO,
            ..policy
        };
        let mut h = Health::default();
        let state = quarantines(&mut h, &never, Outcome::TimedOut);
        assert_eq!(state.probe_after_ms, None);
        assert_eq!(h.admit("t", 1), Admission::Refused(state.reason));
        // A cool-down too long to add to now is none, not a panic.
        let endless = QuarantinePolicy {
            cool_down: Duration::MAX,
            max_cool_down: Duration::MAX,
            ..never
        };
        let mut h = Health::default();
        let state = quarantines(&mut h, &endless, Outcome::Crashed);
        assert_eq!(state.probe_after_ms, None);
    }

    #[test]
    fn percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
