//! What a child prints on stderr, read as it comes, on a thread of its own (a full pipe
//! would stop the child): the one helper for the tests that wait for what a pathlab
//! process says, the address it listens on, what it logged.

use std::io::{BufRead as _, BufReader, Read};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long [`OutputLog::wait_for`] waits for a line.
const WAIT: Duration = Duration::from_secs(10);

/// The lines a child has written to one of its outputs so far.
#[derive(Clone)]
pub struct OutputLog {
    lines: Arc<Mutex<Vec<String>>>,
    /// Whether the child closed the output (it exited): no line will come.
    closed: Arc<AtomicBool>,
}

impl OutputLog {
    /// Reads `child`'s piped stderr until it closes.
    pub fn follow(child: &mut Child) -> OutputLog {
        OutputLog::read(child.stderr.take().expect("stderr is piped"))
    }

    fn read(output: impl Read + Send + 'static) -> OutputLog {
        let log = OutputLog {
            lines: Arc::default(),
            closed: Arc::default(),
        };
        let (lines, closed) = (Arc::clone(&log.lines), Arc::clone(&log.closed));
        std::thread::spawn(move || {
            for line in BufReader::new(output).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
            closed.store(true, Ordering::SeqCst);
        });
        log
    }

    /// Every line so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// The first answer `find` gives for a line, waiting up to 10 s for a line it answers;
    /// panics with the log after that.
    pub fn wait_for<T>(&self, what: &str, find: impl Fn(&str) -> Option<T>) -> T {
        self.wait_for_within(what, WAIT, find)
    }

    /// [`OutputLog::wait_for`], waiting up to `within`; it also stops waiting once the
    /// child has closed the output without such a line.
    pub fn wait_for_within<T>(
        &self,
        what: &str,
        within: Duration,
        find: impl Fn(&str) -> Option<T>,
    ) -> T {
        let started = Instant::now();
        loop {
            // Read before looking: a line the child wrote just before closing is seen.
            let closed = self.closed.load(Ordering::SeqCst);
            if let Some(found) = self.lines.lock().unwrap().iter().find_map(|l| find(l)) {
                return found;
            }
            assert!(
                !closed && started.elapsed() < within,
                "no {what} within {within:?}{} in {:?}",
                if closed { " (the output closed)" } else { "" },
                self.lines()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The first line that contains `text`, waiting up to `within`.
    pub fn wait_for_line(&self, text: &str, within: Duration) -> String {
        self.wait_for_within(&format!("'{text}'"), within, |line| {
            line.contains(text).then(|| line.to_owned())
        })
    }

    /// Every line, once the child has closed the output (waiting up to `within`).
    pub fn wait_closed(&self, within: Duration) -> Vec<String> {
        let started = Instant::now();
        while !self.closed.load(Ordering::SeqCst) && started.elapsed() < within {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.lines()
    }

    /// The `HOST:PORT` of the first `http://HOST:PORT/...` the child printed.
    pub fn http_address(&self) -> String {
        self.wait_for("http:// address", |line| {
            let rest = &line[line.find("http://")? + "http://".len()..];
            Some(rest[..rest.find('/').unwrap_or(rest.len())].to_owned())
        })
    }
}
