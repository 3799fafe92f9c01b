//! A one-line progress bar on stderr. Drawn only on a terminal; elsewhere (CI
//! logs, pipes) each phase start is one plain line instead of a stream of `\r`s.

use crate::args::show;
use std::io::{IsTerminal, Write};
use std::time::Duration;
use tokio::time::Instant;

const WIDTH: usize = 30;

#[derive(Debug)]
pub struct Progress {
    total: Duration,
    done_before_phase: Duration,
    phase: &'static str,
    phase_started: Instant,
    terminal: bool,
}

impl Progress {
    pub fn new(total: Duration) -> Self {
        Progress {
            total,
            done_before_phase: Duration::ZERO,
            phase: "",
            phase_started: Instant::now(),
            terminal: std::io::stderr().is_terminal(),
        }
    }

    /// Starts a phase expected to take `planned`.
    pub fn phase(&mut self, name: &'static str, planned: Duration) {
        if !self.phase.is_empty() {
            self.done_before_phase += self.phase_started.elapsed();
        }
        self.phase = name;
        self.phase_started = Instant::now();
        if !self.terminal {
            eprintln!("bench: {name} for {}", show(planned));
        }
        self.draw();
    }

    pub fn draw(&self) {
        if !self.terminal {
            return;
        }
        let done = self.done_before_phase + self.phase_started.elapsed();
        let fraction = (done.as_secs_f64() / self.total.as_secs_f64().max(1e-9)).clamp(0.0, 1.0);
        let filled = (fraction * WIDTH as f64).round() as usize;
        let bar = format!("{}{}", "#".repeat(filled), "-".repeat(WIDTH - filled));
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r[{bar}] {:>3.0}%  {:<16} {:>5.1}s / {:.0}s ",
            fraction * 100.0,
            self.phase,
            done.as_secs_f64(),
            self.total.as_secs_f64()
        );
        let _ = err.flush();
    }

    /// Clears the bar so the table starts on a clean line.
    pub fn finish(&self) {
        if self.terminal {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r{}\r", " ".repeat(WIDTH + 48));
            let _ = err.flush();
        }
    }
}
