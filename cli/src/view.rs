//! The live view's per-tool health, built from the events a view sees (a session's bus or a
//! `rho serve` journal): calls by outcome, p50/p99 durations, origins and quarantines.

use std::collections::BTreeMap;

use rho_core::{Event, EventKind, Outcome};

#[derive(Default)]
struct ToolHealth {
    origin: String,
    calls: u64,
    ok: u64,
    errors: u64,
    crashed: u64,
    timed_out: u64,
    other: u64,
    durations: Vec<f64>,
    quarantined: bool,
}

/// Health of every tool seen so far.
#[derive(Default)]
pub struct Health {
    tools: BTreeMap<String, ToolHealth>,
    changed: bool,
}

/// How many recent durations the percentiles use.
const RECENT: usize = 1024;

impl Health {
    /// Takes one event into account.
    pub fn observe(&mut self, event: &Event) {
        match &event.kind {
            EventKind::PluginLoaded {
                plugin,
                version,
                tools,
                ..
            } => {
                for tool in tools {
                    self.tools.entry(tool.clone()).or_default().origin =
                        format!("{plugin}@{version}");
                }
            }
            EventKind::PluginReloaded {
                plugin,
                new_version,
                ..
            } => {
                for t in self.tools.values_mut() {
                    if t.origin.split('@').next() == Some(plugin.as_str()) {
                        t.origin = format!("{plugin}@{new_version}");
                    }
                }
            }
            EventKind::ToolExecutionEnd {
                tool,
                outcome,
                duration_ms,
                ..
            } => {
                let t = self.tools.entry(tool.clone()).or_default();
                t.calls += 1;
                match outcome {
                    Outcome::Ok => t.ok += 1,
                    Outcome::Error => t.errors += 1,
                    Outcome::Crashed => t.crashed += 1,
                    Outcome::TimedOut => t.timed_out += 1,
                    _ => t.other += 1,
                }
                if t.durations.len() == RECENT {
                    t.durations.remove(0);
                }
                t.durations.push(*duration_ms);
            }
            EventKind::ToolQuarantined { tool, .. } => {
                self.tools.entry(tool.clone()).or_default().quarantined = true
            }
            EventKind::ToolRestored { tool, .. } => {
                self.tools.entry(tool.clone()).or_default().quarantined = false
            }
            _ => return,
        }
        self.changed = true;
    }

    /// Whether anything changed since the last table.
    pub fn changed(&self) -> bool {
        self.changed
    }

    /// The table of tools that were called or are quarantined.
    pub fn table(&mut self) -> String {
        self.changed = false;
        let mut out = format!(
            "{:<20} {:<18} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>9} {:>9}  state\n",
            "tool", "origin", "calls", "ok", "error", "crash", "t/out", "other", "p50 ms", "p99 ms"
        );
        for (name, t) in &self.tools {
            if t.calls == 0 && !t.quarantined {
                continue;
            }
            let mut sorted = t.durations.clone();
            sorted.sort_by(f64::total_cmp);
            let pct = |q: f64| rho_core::percentile(&sorted, q);
            out.push_str(&format!(
                "{:<20} {:<18} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>9.1} {:>9.1}  {}\n",
                name,
                t.origin,
                t.calls,
                t.ok,
                t.errors,
                t.crashed,
                t.timed_out,
                t.other,
                pct(0.5),
                pct(0.99),
                if t.quarantined { "QUARANTINED" } else { "" }
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rho_core::OutputView;

    fn end(tool: &str, outcome: Outcome, ms: f64) -> Event {
        Event {
            seq: 1,
            ts_ms: 0,
            session_id: None,
            kind: EventKind::ToolExecutionEnd {
                call_id: "c".into(),
                tool: tool.into(),
                outcome,
                output: OutputView {
                    text: String::new(),
                    images: vec![],
                },
                is_error: outcome.is_error(),
                details: None,
                duration_ms: ms,
            },
        }
    }

    #[test]
    fn counts_and_percentiles() {
        let mut h = Health::default();
        for ms in 1..=100 {
            h.observe(&end("echo", Outcome::Ok, f64::from(ms)));
        }
        h.observe(&end("panic", Outcome::Crashed, 2.0));
        let table = h.table();
        let echo = table.lines().find(|l| l.starts_with("echo")).unwrap();
        assert!(echo.contains("   100    100      0"), "{echo}");
        assert!(echo.contains("50.0") && echo.contains("99.0"), "{echo}");
        assert!(!h.changed());
    }
}
