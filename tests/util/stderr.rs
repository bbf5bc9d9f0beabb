//! A child's standard error read as it comes, on a thread of its own (a full pipe would
//! stop the child), for the tests that wait for what a pathlab process says: the address
//! it listens on, what it logged.

use std::io::{BufRead as _, BufReader};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The lines a child has written to stderr so far.
#[derive(Clone)]
pub struct StderrLog(Arc<Mutex<Vec<String>>>);

impl StderrLog {
    /// Reads `child`'s piped stderr until it closes.
    pub fn follow(child: &mut Child) -> StderrLog {
        let stderr = child.stderr.take().expect("stderr is piped");
        let log = StderrLog(Arc::default());
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                lines.0.lock().unwrap().push(line);
            }
        });
        log
    }

    /// Every line so far.
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    /// The first answer `find` gives for a line, waiting up to 10 s for a line it answers;
    /// panics with the log after that.
    pub fn wait_for<T>(&self, what: &str, find: impl Fn(&str) -> Option<T>) -> T {
        let started = Instant::now();
        loop {
            if let Some(found) = self.0.lock().unwrap().iter().find_map(|l| find(l)) {
                return found;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "no {what} within 10 s in {:?}",
                self.lines()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The `HOST:PORT` of the first `http://HOST:PORT/...` the child printed.
    pub fn http_address(&self) -> String {
        self.wait_for("http:// address", |line| {
            let rest = &line[line.find("http://")? + "http://".len()..];
            Some(rest[..rest.find('/').unwrap_or(rest.len())].to_owned())
        })
    }
}
