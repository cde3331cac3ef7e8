//! The live view of `rho watch` on a terminal: redrawn in place (ratatui), it shows the calls
//! running now with their elapsed time, the last calls with outcome and duration, every tool's
//! health, and the latest reloads (with each build's identity), quarantines and warnings.
//! `Ctrl-C` leaves it; the final health table is printed as plain text after.

use std::collections::{BTreeMap, VecDeque};
use std::io::Stdout;

use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::{cursor, execute, terminal};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table};
use rho_runtime::{Event, EventKind, Outcome};

use crate::render::{self, Detail};

/// How many finished calls and notices the view keeps.
const KEPT: usize = 12;

/// A call that ended, as the view lists it.
struct Ended {
    tool: String,
    call_id: String,
    who: String,
    outcome: Outcome,
    duration_ms: f64,
    text: String,
}

/// A call that runs, as the view lists it.
struct Running {
    tool: String,
    who: String,
    /// When it started, in ms since the epoch.
    started: u64,
}

/// Who a call is made for, as the views say it: the principal's id, `-` when unknown.
fn who(principal: Option<&rho_runtime::Principal>) -> String {
    principal.map_or_else(|| "-".to_owned(), |p| p.id.clone())
}

/// What the view shows, folded from events; drawing reads it.
#[derive(Default)]
pub struct LiveState {
    /// Calls started and not ended: call id -> the call.
    running: BTreeMap<String, Running>,
    ended: VecDeque<Ended>,
    health: crate::view::Health,
    notices: VecDeque<String>,
}

impl LiveState {
    /// Takes one event into account.
    pub fn observe(&mut self, event: &Event) {
        self.health.observe(event);
        match &event.kind {
            EventKind::ToolExecutionStart {
                call_id,
                tool,
                principal,
                ..
            } => {
                let call = Running {
                    tool: tool.clone(),
                    who: who(principal.as_deref()),
                    started: event.ts_ms,
                };
                self.running.insert(call_id.clone(), call);
            }
            EventKind::ToolExecutionEnd {
                call_id,
                tool,
                outcome,
                output,
                duration_ms,
                principal,
                decision,
                ..
            } => {
                self.running.remove(call_id);
                if self.ended.len() == KEPT {
                    self.ended.pop_back();
                }
                self.ended.push_front(Ended {
                    tool: tool.clone(),
                    call_id: call_id.clone(),
                    who: who(principal.as_deref()),
                    outcome: *outcome,
                    duration_ms: *duration_ms,
                    text: format!(
                        "{}{}",
                        output.text.lines().next().unwrap_or(""),
                        render::decision_note(decision.as_ref())
                    ),
                });
            }
            EventKind::AgentStart { .. } | EventKind::AgentEnd { .. } => {}
            // Notices: what is about no call, and a tool's log lines of warning and worse (its
            // lower lines stay in the journal).
            kind if kind.call_id().is_none()
                || matches!(kind, EventKind::ToolExecutionLog { level, .. }
                    if *level >= rho_runtime::LogLevel::Warning) =>
            {
                if let Some(line) = render::event_line(event, Detail::All) {
                    if self.notices.len() == KEPT {
                        self.notices.pop_back();
                    }
                    self.notices.push_front(line);
                }
            }
            _ => {}
        }
    }

    fn draw(&self, frame: &mut ratatui::Frame<'_>, source: &str, now_ms: u64) {
        let running = self.running.len();
        let areas = Layout::vertical([
            Constraint::Length(1),
            Constraint::Length(running.clamp(1, 6) as u16 + 3),
            Constraint::Length(KEPT as u16 + 3),
            Constraint::Min(5),
            Constraint::Length(8),
        ])
        .split(frame.area());
        let bold = Style::default().add_modifier(Modifier::BOLD);
        frame.render_widget(
            Paragraph::new(Line::styled(
                format!("rho watch · {source} · {running} running · Ctrl-C to leave"),
                bold,
            )),
            areas[0],
        );
        let mut by_start: Vec<_> = self.running.iter().collect();
        by_start.sort_by_key(|(_, call)| call.started);
        let rows = by_start.into_iter().map(|(call_id, call)| {
            let elapsed = now_ms.saturating_sub(call.started) as f64 / 1000.0;
            Row::new(vec![
                safe(&call.tool),
                safe(call_id),
                safe(&call.who),
                format!("{elapsed:.1} s"),
            ])
        });
        frame.render_widget(
            Table::new(
                rows,
                [
                    Constraint::Min(20),
                    Constraint::Min(20),
                    Constraint::Length(16),
                    Constraint::Length(10),
                ],
            )
            .header(Row::new(["tool", "call", "who", "elapsed"]).style(bold))
            .block(
                Block::default()
                    .borders(Borders::ALL)
                    .title(" running now "),
            ),
            areas[1],
        );
        let rows = self.ended.iter().map(|e| {
            Row::new(vec![
                e.outcome.to_string(),
                safe(&e.tool),
                safe(&e.call_id),
                safe(&e.who),
                format!("{:.1} ms", e.duration_ms),
                safe(&e.text),
            ])
        });
        frame.render_widget(
            Table::new(
                rows,
                [
                    Constraint::Length(17),
                    Constraint::Length(18),
                    Constraint::Length(16),
                    Constraint::Length(12),
                    Constraint::Length(11),
                    Constraint::Min(10),
                ],
            )
            .header(Row::new(["outcome", "tool", "call", "who", "duration", "text"]).style(bold))
            .block(Block::default().borders(Borders::ALL).title(" last calls ")),
            areas[2],
        );
        // Tools that were called (or are quarantined) first, the busiest on top.
        let mut tools = self.health.stats();
        tools.sort_by_key(|t| {
            (
                t.calls == 0 && t.quarantine.is_none(),
                std::cmp::Reverse(t.calls),
            )
        });
        let rows = tools.into_iter().map(|t| {
            Row::new(vec![
                safe(&t.tool),
                safe(&t.origin.release()),
                t.calls.to_string(),
                t.ok.to_string(),
                t.errors.to_string(),
                t.crashed.to_string(),
                t.timed_out.to_string(),
                t.other().to_string(),
                format!("{:.1}", t.p50_ms),
                format!("{:.1}", t.p99_ms),
                crate::render::quarantine_state(&t, now_ms),
            ])
        });
        frame.render_widget(
            Table::new(
                rows,
                [
                    Constraint::Length(18),
                    Constraint::Length(16),
                    Constraint::Length(6),
                    Constraint::Length(6),
                    Constraint::Length(6),
                    Constraint::Length(6),
                    Constraint::Length(6),
                    Constraint::Length(6),
                    Constraint::Length(9),
                    Constraint::Length(9),
                    Constraint::Min(11),
                ],
            )
            .header(
                Row::new([
                    "tool", "origin", "calls", "ok", "error", "crash", "t/out", "other", "p50 ms",
                    "p99 ms", "state",
                ])
                .style(bold),
            )
            .block(Block::default().borders(Borders::ALL).title(" tools ")),
            areas[3],
        );
        let lines: Vec<Line<'_>> = self.notices.iter().map(|n| Line::raw(safe(n))).collect();
        frame.render_widget(
            Paragraph::new(lines).block(
                Block::default()
                    .borders(Borders::ALL)
                    .title(" reloads, quarantines, warnings "),
            ),
            areas[4],
        );
    }
}

/// Plugin text on a terminal: control sequences escaped.
fn safe(text: &str) -> String {
    render::terminal_safe(text).into_owned()
}

/// The view on the terminal: the alternate screen while it lives, the normal one back after.
pub struct Live {
    terminal: Terminal<CrosstermBackend<Stdout>>,
    state: LiveState,
    source: String,
}

impl Live {
    /// Takes over the terminal (alternate screen, hidden cursor) to show events from `source`.
    pub fn start(source: &str) -> std::io::Result<Live> {
        execute!(
            std::io::stdout(),
            terminal::EnterAlternateScreen,
            cursor::Hide
        )?;
        let terminal = Terminal::new(CrosstermBackend::new(std::io::stdout()))?;
        Ok(Live {
            terminal,
            state: LiveState::default(),
            source: source.to_owned(),
        })
    }

    /// The health table as text, for after the view has gone.
    pub fn table(&mut self) -> String {
        self.state.health.table()
    }

    /// Takes one event into account (drawn at the next [`Live::draw`]).
    pub fn observe(&mut self, event: &Event) {
        self.state.observe(event);
    }

    /// Shows events from `source` from now on, with `notice` among the notices.
    pub fn set_source(&mut self, source: &str, notice: &str) {
        self.source = source.to_owned();
        if self.state.notices.len() == KEPT {
            self.state.notices.pop_front();
        }
        self.state.notices.push_back(notice.to_owned());
    }

    /// Redraws the screen (elapsed times move on).
    pub fn draw(&mut self) {
        let now_ms = crate::render::now_ms();
        let (state, source) = (&self.state, self.source.as_str());
        if let Err(e) = self
            .terminal
            .draw(|frame| state.draw(frame, source, now_ms))
        {
            tracing::warn!(error = %e, "drawing the live view");
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        let _ = execute!(
            std::io::stdout(),
            terminal::LeaveAlternateScreen,
            cursor::Show
        );
    }
}
