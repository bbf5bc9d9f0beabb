//! What every measurement client command shares: the key, JSON output, saving, connecting.

use std::time::Duration;

use pathlab_probe::session::SessionError;
use pathlab_probe_driver::{MeasureError, Partial, ServerTarget};

use crate::cmd::args::{ClientKey, JsonOutput};
use crate::usage;

/// Options of every client command.
#[derive(Debug, clap::Args)]
pub struct ClientOptions {
    #[command(flatten)]
    pub key: ClientKey,
    #[command(flatten)]
    pub output: JsonOutput,
    /// Save the whole result (every sample) to FILE, for later plots. A run that fails
    /// part way (a server that stops answering is given up 10 s after the test's time, one
    /// that closes the connection at once) saves what it measured until then, marked
    /// "incomplete" with the error.
    #[arg(long, value_name = "FILE")]
    pub save: Option<std::path::PathBuf>,
}

/// A measurement's run of its configuration `C`, told how long its test runs once it
/// starts; a run that fails part way returns what it measured with the error.
pub type Measurement<C, T> = fn(&C, &mut dyn FnMut(Duration)) -> Result<T, Partial<T>>;

impl ClientOptions {
    /// The server at `host`, with the key read from its file, if any (a usage error when
    /// the file will not do).
    pub fn target(&self, host: &str) -> anyhow::Result<ServerTarget> {
        Ok(ServerTarget::new(host, self.key.read()?))
    }

    /// The error a run that failed ends the command with, after saving what it measured
    /// (`partial.measured`, which holds what `what` says, made a result by `result`) as
    /// [`ClientOptions::save_partial`] does.
    pub fn failed<T>(
        &self,
        partial: Partial<T>,
        what: &str,
        result: impl FnOnce(Box<T>) -> pathlab_results::RunResult,
    ) -> anyhow::Error {
        let error = measure_error(partial.error);
        match partial.measured {
            Some(measured) => self.save_partial(error, what, result(measured)),
            None => error,
        }
    }

    /// Runs measurement `name` (`run` of `config`, told how long its test runs once it
    /// starts, shows a progress line meanwhile) and saves its report to `--save` as
    /// `result` makes it a result; a run that fails saves what it measured (`partial`: which
    /// part) instead and returns the error.
    pub fn measure<C, T: Clone>(
        &self,
        (name, partial): (&str, &str),
        result: fn(Box<T>) -> pathlab_results::RunResult,
        config: &C,
        run: Measurement<C, T>,
    ) -> anyhow::Result<T> {
        let mut progress = None;
        let report = run(config, &mut |length| {
            progress = Progress::start(name, length);
        })
        .map_err(|failed| self.failed(failed, partial, result))?;
        drop(progress);
        self.save(|| result(Box::new(report.clone())))?;
        Ok(report)
    }

    /// Writes `result` to `--save`, if given.
    pub fn save(&self, result: impl FnOnce() -> pathlab_results::RunResult) -> anyhow::Result<()> {
        let Some(path) = &self.save else {
            return Ok(());
        };
        std::fs::write(path, result_file(result()).to_json())?;
        Ok(())
    }

    /// Writes what a run that failed with `error` had measured (`result`, which holds
    /// what `partial` says) to `--save`, marked incomplete, and says so on stderr; returns
    /// `error` for the command to end with.
    pub fn save_partial(
        &self,
        error: anyhow::Error,
        partial: &str,
        result: pathlab_results::RunResult,
    ) -> anyhow::Error {
        let Some(path) = &self.save else {
            return error;
        };
        let file = result_file(result).with_incomplete(pathlab_results::Incomplete {
            error: format!("{error:#}"),
            partial: partial.to_owned(),
        });
        match std::fs::write(path, file.to_json()) {
            Ok(()) => eprintln!(
                "pathlab: saved what was measured before the failure to {} (marked incomplete)",
                path.display()
            ),
            Err(write) => eprintln!(
                "pathlab: could not save what was measured to {}: {write}",
                path.display()
            ),
        }
        error
    }
}

pub(crate) fn result_file(result: pathlab_results::RunResult) -> pathlab_results::ResultFile {
    pathlab_results::ResultFile::new(
        result,
        std::env::args().collect(),
        Some(pathlab_os::unix_now_secs()),
    )
}

/// A measurement error as the CLI reports it: the user's input (refused, unknown host,
/// wrong key) is a usage error.
pub fn measure_error(error: MeasureError) -> anyhow::Error {
    match error {
        MeasureError::Session(SessionError::Refused(_) | SessionError::Auth(_))
        | MeasureError::Resolve(_) => usage(error),
        other => anyhow::Error::new(other),
    }
}

/// Runs shorter than this show no progress line.
const PROGRESS_AFTER: Duration = Duration::from_secs(2);

/// A line on stderr saying how far a run is (`owd up: 3.2 s of 10.0 s [######......]`),
/// redrawn five times a second; only for runs over 2 s and when stderr is a terminal, so
/// pipes and files get none. Erased when dropped.
#[derive(Debug)]
pub struct Progress {
    stop: std::sync::mpsc::Sender<()>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    /// Starts the line for a run of `what` expected to last `total`.
    pub fn start(what: &str, total: Duration) -> Option<Progress> {
        use std::io::IsTerminal as _;
        if total <= PROGRESS_AFTER || !std::io::stderr().is_terminal() {
            return None;
        }
        let what = what.to_owned();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let start = std::time::Instant::now();
            loop {
                let elapsed = start.elapsed();
                eprint!("\r\x1b[2K{}", progress_line(&what, elapsed, total));
                match stopped.recv_timeout(Duration::from_millis(200)) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    _ => break,
                }
            }
            eprint!("\r\x1b[2K");
        });
        Some(Progress {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        let _ = self.stop.send(());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// `what: 3.2 s of 10.0 s [######..............]`; past the end it says it is finishing.
fn progress_line(what: &str, elapsed: Duration, total: Duration) -> String {
    const WIDTH: usize = 20;
    let share = (elapsed.as_secs_f64() / total.as_secs_f64()).clamp(0.0, 1.0);
    let done = (share * WIDTH as f64).round() as usize;
    let bar = format!("[{}{}]", "#".repeat(done), ".".repeat(WIDTH - done));
    if elapsed >= total {
        format!(
            "{what}: {:.1} s {bar} collecting the results",
            elapsed.as_secs_f64()
        )
    } else {
        format!(
            "{what}: {:.1} s of {:.1} s {bar}",
            elapsed.as_secs_f64(),
            total.as_secs_f64()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_line_fills_with_time_and_says_when_it_waits() {
        assert_eq!(
            progress_line(
                "owd up",
                Duration::from_millis(2500),
                Duration::from_secs(10)
            ),
            "owd up: 2.5 s of 10.0 s [#####...............]"
        );
        assert_eq!(
            progress_line("tcp", Duration::from_secs(11), Duration::from_secs(10)),
            "tcp: 11.0 s [####################] collecting the results"
        );
    }

    #[test]
    fn short_runs_get_no_line() {
        assert!(Progress::start("rtt", Duration::from_secs(2)).is_none());
    }
}
