//! Helpers shared by the end-to-end tests.

pub mod bond_site;
pub mod browser;
pub mod emulated;
pub mod lab_fixture;
pub mod lab_results;
pub mod lab_spec;
pub mod late;
pub mod output;
pub mod recorded;
pub mod server_process;
pub mod tunnel;

/// The median of `values` (in any order) by pathlab's one definition of a quantile,
/// nearest rank (`pathlab_core::quantile`; of an even count, the lower middle value).
pub fn median(values: &[f64]) -> f64 {
    quantile(values, 0.5)
}

/// The nearest-rank `q`-quantile of `values` (in any order; at least one).
pub fn quantile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    pathlab_core::quantile::of_sorted(&sorted, q).expect("at least one value")
}

/// A scratch directory removed when the test ends.
pub use pathlab_os::testing::ScratchDir as TempDir;

/// The tests' lock, for a test that needs no privilege but judges timing (exclusive) or
/// loads the machine (shared): it keeps them from running beside a timing test.
pub use pathlab_os::testing::TestLock;

/// Runs the built `pathlab` with `args`, which must refuse them as bad input: exit code 2,
/// `reason` in what it says on stderr.
pub fn assert_refused(args: &[&str], reason: &str) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_pathlab"))
        .args(args)
        .output()
        .expect("pathlab runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(stderr.contains(reason), "{args:?}: stderr was {stderr}");
}

/// Writes a key or token file as pathlab takes them: its owner's only (`0600`).
pub fn write_secret(path: &std::path::Path, contents: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, contents).expect("can write the secret file");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .expect("can make it the owner's only");
}

/// A pathlab server on an ephemeral port of `ip` (loopback), in this process; stopped
/// when dropped.
pub struct LoopbackServer {
    pub address: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LoopbackServer {
    pub fn start(
        limits: pathlab_probe::control::Limits,
        key: Option<pathlab_probe::auth::Key>,
        ip: &str,
    ) -> LoopbackServer {
        LoopbackServer::start_with(pathlab_probe_driver::ServerConfig::new(
            format!("{ip}:0").parse().unwrap(),
            limits,
            key,
        ))
    }

    /// A server with `config` (its port 0: an ephemeral one).
    pub fn start_with(config: pathlab_probe_driver::ServerConfig) -> LoopbackServer {
        use std::sync::atomic::Ordering;
        let server = pathlab_probe_driver::Server::bind(config).expect("server binds");
        let address = server.local_addr().unwrap().to_string();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&stop);
        let thread = std::thread::spawn(move || server.run(|| flag.load(Ordering::SeqCst)));
        LoopbackServer {
            address,
            stop,
            thread: Some(thread),
        }
    }

    /// Limits no test here comes near: 1 Gbit/s, 60 s, 64 tests at once.
    pub fn generous() -> pathlab_probe::control::Limits {
        pathlab_probe::control::Limits {
            max_rate_bps: 1_000_000_000,
            max_duration_ns: 60_000_000_000,
            max_tests: 64,
            max_test_memory: pathlab_probe::control::DEFAULT_MAX_TEST_MEMORY,
        }
    }
}

impl Drop for LoopbackServer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
