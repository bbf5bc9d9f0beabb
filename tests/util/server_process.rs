//! `pathlab server` as a child process on loopback, with its log read as it comes.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The server as a child process; killed when dropped.
pub struct ServerProcess {
    pub child: Child,
    pub address: SocketAddr,
    pub log: mpsc::Receiver<String>,
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
        let (lines, log) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        let first = log
            .recv_timeout(Duration::from_secs(10))
            .expect("the server says where it listens");
        let address = first
            .strip_prefix("pathlab server listening on ")
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|address| address.parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line: {first}"));
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
                return (status, signalled.elapsed());
            }
            assert!(
                signalled.elapsed() < within,
                "the server still runs {within:?} after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The log until a line containing `what` (failing the test if none comes `within`).
    pub fn wait_for_log(&self, what: &str, within: Duration) -> Vec<String> {
        let deadline = std::time::Instant::now() + within;
        let mut log = Vec::new();
        while std::time::Instant::now() < deadline {
            log.extend(self.drain_log());
            if log.iter().any(|line| line.contains(what)) {
                return log;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("no '{what}' in the server's log within {within:?}: {log:?}");
    }

    /// Every log line so far.
    pub fn drain_log(&self) -> Vec<String> {
        self.log.try_iter().collect()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
