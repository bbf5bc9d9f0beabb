//! The h1 - r - h2 line with `pathlab emulate` in r, and a pathlab server in h2: what the
//! tests through the emulator share.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use pathlab_emulator::emulator::EmulatorStats;
use pathlab_os::topology::{Line, Middle, R_PORT_H1, R_PORT_H2};
use pathlab_probe_driver::ping::{PingResult, Pinger};
use pathlab_results::recording::{read_recording, Recording};

use super::TempDir;

/// The binary under test.
pub const PATHLAB: &str = env!("CARGO_BIN_EXE_pathlab");

/// Whether the test may run: CAP_NET_ADMIN is needed; without it the test panics in CI
/// and is skipped elsewhere. `privileged` holds the tests' lock alone (a timing test: the
/// tests measure timing on a 2-core machine, one at a time, across processes),
/// `privileged_shared` beside other tests that judge no timing (pathlab_os::testing).
pub use pathlab_os::testing::{privileged, privileged_heavy, privileged_paired, privileged_shared};

/// h1 - r - h2 with `pathlab emulate` running in r. Dropping it stops the emulator and
/// destroys the namespaces.
pub struct Lab {
    pub line: Line,
    pub emulator: Option<Child>,
    pub name: String,
    pub dir: TempDir,
}

impl Lab {
    /// Builds the line and starts `pathlab emulate --between r-h1 r-h2 SPEC [extra...]`
    /// with a recording, and waits until its control socket answers.
    pub fn start(test: &str, spec: &str, extra: &[&str], static_neighbors: bool) -> Lab {
        Lab::start_with(test, spec, extra, static_neighbors, true)
    }

    /// [`Lab::start`], with a recording or not (a recording of a multi-gigabit load is
    /// hundreds of MB).
    pub fn start_with(
        test: &str,
        spec: &str,
        extra: &[&str],
        static_neighbors: bool,
        record: bool,
    ) -> Lab {
        let line = Line::build(Middle::Emulator, static_neighbors).expect("namespaces build");
        let name = format!("t{}-{test}", std::process::id());
        let dir = TempDir::new(test);
        let mut command = line.r.command(PATHLAB);
        command
            .args([
                "emulate",
                "--between",
                R_PORT_H1,
                R_PORT_H2,
                spec,
                "--name",
                &name,
                "-J",
            ])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if record {
            command.arg("--record").arg(dir.path("record.jsonl"));
        }
        let emulator = command.spawn().expect("pathlab emulate starts");
        let lab = Lab {
            line,
            emulator: Some(emulator),
            name,
            dir,
        };
        lab.wait_ready();
        lab
    }

    pub fn wait_ready(&self) {
        for _ in 0..200 {
            if pathlab(&["emulate", "stats", "--name", &self.name])
                .status
                .success()
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("emulator {} did not come up", self.name);
    }

    pub fn stats(&self) -> EmulatorStats {
        let output = pathlab(&["emulate", "stats", "--name", &self.name, "-J"]);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).expect("stats are JSON")
    }

    pub fn set(&self, spec: &str) {
        let output = pathlab(&["emulate", "set", "--name", &self.name, spec]);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// The recording `--record` wrote, read once it ended (stopped over the control API).
    pub fn recording(&self) -> Recording {
        let file = std::fs::File::open(self.dir.path("record.jsonl")).expect("recording exists");
        read_recording(std::io::BufReader::new(file)).expect("recording reads")
    }

    /// Stops the emulator with SIGTERM (as Ctrl-C would) and returns its final counters
    /// and recording.
    pub fn stop(&mut self) -> (EmulatorStats, Recording) {
        let child = self.emulator.take().expect("running");
        pathlab_os::kill(child.id(), libc_sigterm()).expect("signal");
        let output = child.wait_with_output().expect("emulator exits");
        assert!(
            output.status.success(),
            "emulator failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let stats: EmulatorStats =
            serde_json::from_slice(&output.stdout).expect("final stats are JSON");
        (stats, self.recording())
    }

    pub fn ping(
        &self,
        target: IpAddr,
        count: usize,
        interval: Duration,
        payload: usize,
    ) -> Vec<PingResult> {
        let mut pinger = self
            .line
            .h1
            .run(|| Pinger::new(target, payload))
            .unwrap()
            .expect("raw ICMP socket");
        pinger
            .run(count, interval, Duration::from_secs(2))
            .expect("ping runs")
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // As Ctrl-C would: the emulator removes its socket and lock on the way out.
        if let Some(mut child) = self.emulator.take() {
            let _ = pathlab_os::kill(child.id(), libc_sigterm());
            for _ in 0..100 {
                if child.try_wait().ok().flatten().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs `pathlab ARGS` as nobody (uid 65534, no capabilities) and checks it exits 2 saying
/// it needs CAP_NET_ADMIN and changed nothing.
pub fn refused_without_cap_net_admin(args: &[&str]) {
    use std::os::unix::process::CommandExt;
    let output = Command::new(PATHLAB)
        .args(args)
        .uid(65534)
        .gid(65534)
        .output()
        .expect("runs as nobody");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(
        stderr.contains("needs CAP_NET_ADMIN") && stderr.contains("Nothing was changed"),
        "{args:?}: {stderr}"
    );
}

/// Ends a child the test started: SIGTERM, as Ctrl-C, so it puts back what it changed;
/// SIGKILL if it has not ended 5 s later.
pub fn end(mut child: Child) {
    let _ = pathlab_os::kill(child.id(), libc_sigterm());
    for _ in 0..250 {
        if child.try_wait().ok().flatten().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The index of interface `name` in `netns`.
pub fn link_index(netns: &pathlab_os::netns::Netns, name: &str) -> u32 {
    netns
        .run(|| pathlab_os::netlink::Netlink::open()?.link_by_name(name))
        .unwrap()
        .expect("netlink")
        .unwrap_or_else(|| panic!("interface {name}"))
        .index
}

pub fn libc_sigterm() -> i32 {
    15
}

pub fn pathlab(args: &[&str]) -> Output {
    Command::new(PATHLAB)
        .args(args)
        .output()
        .expect("pathlab runs")
}

/// Runs `pathlab lab RECIPE --quick --out OUT`, which must succeed; returns what it printed.
pub fn run_quick_recipe(recipe: &str, out: &std::path::Path) -> String {
    let output = Command::new(PATHLAB)
        .args(["lab", recipe, "--quick", "--out"])
        .arg(out)
        .output()
        .expect("pathlab lab runs");
    eprintln!("{}", String::from_utf8_lossy(&output.stdout));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // A lab run ends with its report.
    let report = out.join("report.html");
    assert!(
        String::from_utf8_lossy(&output.stdout).contains(&format!("report: {}", report.display())),
        "the lab did not say where its report is"
    );
    let html = std::fs::read_to_string(&report).expect("the lab wrote its report");
    assert!(html.contains("<img src=\"data:image/png;base64,"));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// [`run_quick_recipe`] of built-in recipe `recipe` with its quick sweep thinned to the
/// points a test judges: `points` (`("queue", "[10, 100]")`, TOML values) is the
/// `[quick_sweep]` in place of the recipe's own (a key it leaves out runs its `[sweep]`
/// values). The recipe is otherwise as shipped; the spec is written beside `out`, as `out`
/// + `.toml`. Users' `--quick` keeps every point.
pub fn run_quick_recipe_points(
    recipe: &str,
    points: &[(&str, &str)],
    out: &std::path::Path,
) -> String {
    let text = pathlab_lab::recipes::recipe(recipe).unwrap_or_else(|| panic!("no recipe {recipe}"));
    // The recipe's own [quick_sweep], if any, goes: up to the next table.
    let mut spec = String::new();
    let mut in_quick_sweep = false;
    for line in text.lines() {
        if line.starts_with('[') {
            in_quick_sweep = line.trim() == "[quick_sweep]";
        }
        if !in_quick_sweep {
            writeln!(spec, "{line}").unwrap();
        }
    }
    spec.push_str("\n[quick_sweep]\n");
    for (key, values) in points {
        writeln!(spec, "{key} = {values}").unwrap();
    }
    let file = out.with_extension("toml");
    std::fs::write(&file, spec).expect("writes the spec");
    run_quick_recipe(file.to_str().expect("UTF-8 path"), out)
}

/// A `pathlab server` process in h2; killed when dropped.
pub struct ServerInH2(Child);

impl ServerInH2 {
    pub fn start(line: &Line) -> ServerInH2 {
        let child = line
            .h2
            .command(PATHLAB)
            .args(["server", "--listen", "198.18.0.2:4920"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pathlab server starts");
        let server = ServerInH2(child);
        // Ready when its port takes a connection.
        for _ in 0..200 {
            let up = line
                .h1
                .run(|| {
                    std::net::TcpStream::connect_timeout(
                        &"198.18.0.2:4920".parse().unwrap(),
                        Duration::from_millis(200),
                    )
                    .is_ok()
                })
                .unwrap();
            if up {
                return server;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("pathlab server did not come up in h2");
    }
}

impl Drop for ServerInH2 {
    fn drop(&mut self) {
        let _ = pathlab_os::kill(self.0.id(), libc_sigterm());
        let _ = self.0.wait();
    }
}

/// Runs `test` from h1 against a pathlab server in h2, through the emulator.
pub fn with_server_in_h2<T: Send>(
    lab: &Lab,
    test: impl FnOnce(pathlab_probe_driver::Client) -> Result<T, pathlab_probe_driver::MeasureError>
        + Send,
) -> T {
    use pathlab_probe_driver::{Client, Server, ServerConfig};
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let (ready, bound) = std::sync::mpsc::channel();
        let stop = &stop;
        let serving = scope.spawn(move || {
            // The server's threads create the tests' UDP sockets: they must live in h2.
            lab.line.h2.enter().expect("enter h2");
            let server = Server::bind(ServerConfig::new(
                "198.18.0.2:4920".parse().unwrap(),
                pathlab_probe::control::Limits {
                    max_rate_bps: 1_000_000_000,
                    max_duration_ns: 60_000_000_000,
                    max_tests: 4,
                    max_test_memory: pathlab_probe::control::DEFAULT_MAX_TEST_MEMORY,
                },
                None,
            ))
            .expect("server in h2");
            ready.send(()).expect("test waits");
            server.run(|| stop.load(Ordering::SeqCst));
        });
        bound.recv().expect("server bound");
        let result = lab
            .line
            .h1
            .run(|| Client::connect("198.18.0.2", None, Duration::from_secs(5)).and_then(test))
            .unwrap()
            .expect("measurement through the emulator");
        stop.store(true, Ordering::SeqCst);
        serving.join().expect("server thread");
        result
    })
}
