//! `pathlab server` as a child process on loopback, with its log read as it comes.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::output::OutputLog;

/// The server as a child process; killed when dropped.
pub struct ServerProcess {
    pub child: Child,
    pub address: SocketAddr,
    pub log: OutputLog,
}

impl ServerProcess {
    pub fn start(extra: &[&str]) -> ServerProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pathlab"))
            .args(["server", "--listen", "127.0.0.1:0"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("pathlab server starts");
        let log = OutputLog::follow(&mut child);
        let address = log.wait_for("the address it listens on", |line| {
            line.strip_prefix("pathlab server listening on ")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        });
        ServerProcess {
            child,
            address,
            log,
        }
    }

    /// (threads, resident set in KiB) from /proc.
    pub fn threads_and_rss(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|value| value.parse().ok())
                .unwrap_or_else(|| panic!("{name} in /proc/PID/status"))
        };
        (field("Threads:"), field("VmRSS:"))
    }

    pub fn signal(&self, signal: libc::c_int) {
        pathlab_os::testing::send_signal(self.child.id(), signal).unwrap();
    }

    /// Sends SIGTERM and waits for the exit (failing the test if it has not come `within`);
    /// the exit status and how long it took.
    pub fn terminate(&mut self, within: Duration) -> (std::process::ExitStatus, Duration) {
        self.signal(libc::SIGTERM);
        let signalled = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let took = signalled.elapsed();
                // Its last lines (what it says as it stops) are read before the log is.
                self.log.wait_closed(Duration::from_secs(2));
                return (status, took);
            }
            assert!(
                signalled.elapsed() < within,
                "the server still runs {within:?} after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The log, once a line containing `what` is in it (failing the test if none comes
    /// `within`).
    pub fn wait_for_log(&self, what: &str, within: Duration) -> Vec<String> {
        self.log.wait_for_line(what, within);
        self.log.lines()
    }

    /// Every log line so far.
    pub fn log_lines(&self) -> Vec<String> {
        self.log.lines()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
