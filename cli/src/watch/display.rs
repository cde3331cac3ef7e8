//! Where a watch shows its events: plain lines with a health table, or the live view.

use std::time::Duration;

use rho_runtime::Event;

use crate::live::Live;
use crate::render::{self, Detail};
use crate::view::Health;

/// Where a watch shows its events: plain lines (with a health table every `every` seconds), or
/// the live view redrawn in place on a terminal.
pub enum Display {
    Lines {
        detail: Option<Detail>,
        health: Health,
        every: u64,
    },
    Live(Box<Live>),
}

impl Display {
    /// The live view when `live` and the terminal can be taken over, else lines.
    pub fn new(live: bool, source: &str, detail: Option<Detail>, every: u64) -> Display {
        if live {
            match Live::start(source) {
                Ok(view) => return Display::Live(Box::new(view)),
                Err(e) => eprintln!("rho: no live view ({e}); printing lines"),
            }
        }
        Display::Lines {
            detail,
            health: Health::default(),
            every,
        }
    }

    /// Says that the events come from `source` from now on, and why (`note`): a line on stderr,
    /// or the live view's title and notices.
    pub fn source_changed(&mut self, source: &str, note: &str) {
        match self {
            Display::Lines { .. } => eprintln!("rho: {note}"),
            Display::Live(view) => view.set_source(source, note),
        }
    }

    /// Shows one event; `false` once stdout is gone.
    pub fn show(&mut self, event: &Event) -> bool {
        match self {
            Display::Lines { detail, health, .. } => {
                health.observe(event);
                let line = match detail {
                    None => serde_json::to_string(event).ok(),
                    Some(detail) => render::event_line(event, *detail),
                };
                line.is_none_or(|l| render::print_line(&l))
            }
            Display::Live(view) => {
                view.observe(event);
                true
            }
        }
    }

    /// How often [`Display::tick`] runs: the live view redraws four times a second.
    pub fn ticker(&self) -> tokio::time::Interval {
        match self {
            Display::Lines { every, .. } => ticker(Duration::from_secs(*every)),
            Display::Live(..) => ticker(Duration::from_millis(250)),
        }
    }

    pub fn tick(&mut self) {
        match self {
            Display::Lines { detail, health, .. } => {
                if health.changed() && detail.is_some() {
                    render::print_line(&format!("\n{}", health.table()));
                }
            }
            Display::Live(view) => view.draw(),
        }
    }

    /// Leaves the live view and prints the health table once more.
    pub fn finish(self) {
        match self {
            Display::Lines {
                detail, mut health, ..
            } => {
                if health.changed() && detail.is_some() {
                    render::print_line(&format!("\n{}", health.table()));
                }
            }
            Display::Live(mut view) => {
                let table = view.table();
                drop(view);
                render::print_line(&table);
            }
        }
    }
}

/// Ticks every `period` (never for zero), the first after one period.
fn ticker(period: Duration) -> tokio::time::Interval {
    let period = if period.is_zero() {
        Duration::from_secs(86_400 * 365)
    } else {
        period
    };
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick
}
