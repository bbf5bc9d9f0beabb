//! `emulate --iface` killed at any instant of its swap (issue 39, N3 and N4): every step is
//! recorded before it is taken, the emulator's guardian puts the interface back after a
//! SIGKILL within a second, `lab clean` does when there was no guardian, from any step;
//! and a record `lab clean` must not trust (its holder elsewhere, another user's, writable
//! by others) is reported while the others are still restored.
//!
//! Each test has a runtime directory of its own (`PATHLAB_RUNTIME_DIR`), so that "nothing
//! left" is checked on what it alone made. The kill points are the binary's test hooks
//! (`PATHLAB_TEST_DIE_AT_STEP`, `PATHLAB_TEST_NO_GUARDIAN`: pathlab-os's `test-hooks`
//! feature, which this crate's dev-dependency turns on). `PATHLAB_TEST_BINARY` runs these
//! tests against another build of pathlab (an older one, to see them fail).

use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use pathlab_os::interpose::{InterfaceView, Step};
use pathlab_os::netlink::{Netlink, Route, RT_TABLE_MAIN};
use pathlab_os::netns::Netns;
use pathlab_os::testing::NamedNetns;

use super::iface::{configure, decorate, settled};
use crate::emulate::iface::{ping_ms, seen};
use crate::util::emulated::{link_index, privileged, privileged_shared, PATHLAB};
use crate::util::TempDir;

/// The bound: a killed emulator's interface is back within this.
const RESTORED_WITHIN: Duration = Duration::from_secs(1);

fn binary() -> String {
    std::env::var("PATHLAB_TEST_BINARY").unwrap_or_else(|_| PATHLAB.to_owned())
}

/// Namespace A (named, so `--netns` can name it) whose interfaces are wired to B's, each
/// with addresses of both families (the first also with routes in two tables, a permanent
/// neighbour and a sysctl); a runtime directory of the test's own. Dropped, it runs `lab
/// clean` there, so that a failing test leaves no holder mounted.
struct Wired {
    named: NamedNetns,
    a: Netns,
    _b: Netns,
    before: Vec<(String, InterfaceView)>,
    runtime: PathBuf,
    scratch: TempDir,
}

impl Wired {
    fn new(test: &str, pairs: &[(&str, &str)]) -> Wired {
        let pid = std::process::id();
        let named = NamedNetns::add(&format!("plt{pid}-{test}")).expect("named namespace");
        let a = Netns::open(named.path()).expect("opens");
        let b = Netns::new().expect("namespace");
        for (k, (ours, theirs)) in pairs.iter().enumerate() {
            a.run(|| Netlink::open()?.create_veth(ours, theirs, Some(b.fd())))
                .unwrap()
                .expect("veth");
            let k = 50 + k;
            configure(
                &a,
                ours,
                &format!("198.18.{k}.1"),
                Some(&format!("2001:2:0:{k}::1")),
            );
            configure(
                &b,
                theirs,
                &format!("198.18.{k}.2"),
                Some(&format!("2001:2:0:{k}::2")),
            );
            if k == 50 {
                decorate(&a, ours, "198.18.50.2", "2001:2:0:50::2");
            }
        }
        let before = pairs
            .iter()
            .map(|(ours, _)| (ours.to_string(), settled(&a, ours)))
            .collect();
        let scratch = TempDir::new(test);
        let runtime = scratch.path("run");
        std::fs::create_dir(&runtime).expect("runtime directory");
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o755)).unwrap();
        Wired {
            named,
            a,
            _b: b,
            before,
            runtime,
            scratch,
        }
    }

    fn before(&self, iface: &str) -> &InterfaceView {
        &self
            .before
            .iter()
            .find(|(name, _)| name == iface)
            .unwrap()
            .1
    }

    /// `pathlab ARGS` with this test's runtime directory.
    fn pathlab(&self, args: &[&str]) -> Output {
        Command::new(binary())
            .args(args)
            .env("PATHLAB_RUNTIME_DIR", &self.runtime)
            .output()
            .expect("pathlab runs")
    }

    /// `pathlab emulate --netns A --iface IFACE` called `name`, with `env`; its standard
    /// error (and its guardian's) in the file [`Wired::stderr`] reads.
    fn emulator(&self, iface: &str, name: &str, env: &[(&str, &str)]) -> Child {
        let stderr = std::fs::File::create(self.scratch.path(&format!("{name}.err"))).unwrap();
        Command::new(binary())
            .args(["emulate", "--netns"])
            .arg(self.named.path())
            .args(["--iface", iface, "delay 1ms", "--name", name])
            .env("PATHLAB_RUNTIME_DIR", &self.runtime)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("pathlab emulate starts")
    }

    fn stderr(&self, name: &str) -> String {
        std::fs::read_to_string(self.scratch.path(&format!("{name}.err"))).unwrap_or_default()
    }

    /// Waits until emulator `name` answers on its control socket (its swap done).
    fn wait_started(&self, child: &mut Child, name: &str) {
        for _ in 0..400 {
            if self
                .pathlab(&["emulate", "stats", "--name", name])
                .status
                .success()
            {
                return;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("emulator {name} ended ({status}): {}", self.stderr(name));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("emulator {name} did not come up: {}", self.stderr(name));
    }

    /// The files under the runtime directory's `interpose/` (records, holders).
    fn swap_files(&self) -> Vec<String> {
        files_under(&self.runtime.join("interpose"))
    }

    /// Waits until `iface` is back as it was and no record, holder or control socket is
    /// left; how long that took from `since`.
    fn wait_restored(&self, iface: &str, since: Instant, name: &str) -> Duration {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let now = self.a.run(|| pathlab_os::interpose::view(iface)).unwrap();
            if now.as_ref().ok().and_then(Option::as_ref) == Some(self.before(iface))
                && self.swap_files().is_empty()
                && files_under(&self.runtime.join("emulate")).is_empty()
            {
                return since.elapsed();
            }
            // What was seen, not `seen` (which panics on an interface not there, and once
            // hid this message and the guardian's words: 'move+', 2026-12-07).
            assert!(
                Instant::now() < deadline,
                "{iface} not back 5 s after its emulator died: now {now:?}, want {:?}, left {:?}; \
                 emulator and guardian said: {}",
                self.before(iface),
                self.swap_files(),
                self.stderr(name)
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Nothing of the swaps is left under the runtime directory: no record, holder or
    /// control socket, and no lock anyone holds (`lab clean` removes those no one does).
    fn assert_nothing_left(&self) {
        for file in files_under(&self.runtime) {
            let held = file.starts_with("locks/")
                && std::fs::File::open(self.runtime.join(&file))
                    .is_ok_and(|lock| lock.try_lock().is_err());
            assert!(
                file.starts_with("locks/") && !held,
                "{file} is left under the runtime directory"
            );
        }
    }
}

impl Drop for Wired {
    fn drop(&mut self) {
        let _ = self.pathlab(&["lab", "clean"]);
    }
}

/// The files under `dir`, as paths relative to it, sorted.
fn files_under(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(at) = pending.pop() {
        for entry in std::fs::read_dir(&at).into_iter().flatten().flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                pending.push(path);
            } else {
                let relative = path.strip_prefix(dir).unwrap_or(&path);
                found.push(relative.to_string_lossy().into_owned());
            }
        }
    }
    found.sort();
    found
}

/// Waits up to `timeout` for `child` to end.
fn wait_for_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// Every point the hooks can kill the emulator at: each step once recorded and before it
/// is taken (`STEP`), and once taken before the next is recorded (`STEP+`).
fn kill_points() -> Vec<String> {
    let mut points = Vec::new();
    for step in Step::ALL {
        points.push(step.name().to_owned());
        if step != Step::Running {
            points.push(format!("{}+", step.name()));
        }
    }
    points
}

#[test]
fn an_emulator_killed_at_any_step_of_the_swap_leaves_the_interface_as_it_was() {
    let Some(_guard) = privileged("an_emulator_killed_at_any_step_of_the_swap") else {
        return;
    };
    let wired = Wired::new("swap-steps", &[("va", "vb")]);
    let name = format!("t{}-steps", std::process::id());
    for point in kill_points() {
        for guardian in [true, false] {
            let mut env = vec![("PATHLAB_TEST_DIE_AT_STEP", point.as_str())];
            if !guardian {
                env.push(("PATHLAB_TEST_NO_GUARDIAN", "1"));
            }
            let mut child = wired.emulator("va", &name, &env);
            let status = wait_for_exit(&mut child, Duration::from_secs(20)).unwrap_or_else(|| {
                panic!(
                    "the emulator did not kill itself at '{point}' (a build without test hooks?)"
                )
            });
            let died = Instant::now();
            assert_eq!(
                status.signal(),
                Some(libc::SIGKILL),
                "at '{point}': {status}: {}",
                wired.stderr(&name)
            );
            if guardian {
                let took = wired.wait_restored("va", died, &name);
                eprintln!("killed at '{point}': va back {took:.1?} later, by the guardian");
            } else {
                assert!(
                    !wired.swap_files().is_empty(),
                    "killed at '{point}' without a guardian: the record is left for lab clean"
                );
                let output = wired.pathlab(&["lab", "clean"]);
                let stdout = String::from_utf8_lossy(&output.stdout);
                assert!(
                    output.status.success(),
                    "lab clean after '{point}': {stdout} {}",
                    String::from_utf8_lossy(&output.stderr)
                );
                assert!(stdout.contains("restored interface va in"), "{stdout}");
                assert_eq!(&seen(&wired.a, "va"), wired.before("va"), "after '{point}'");
                eprintln!("killed at '{point}': va back by lab clean");
            }
            wired.assert_nothing_left();
        }
    }
}

#[test]
fn a_sigkill_of_emulate_on_the_hosts_nic_is_undone_within_a_second() {
    let Some(_guard) = privileged("a_sigkill_of_emulate_on_the_hosts_nic") else {
        return;
    };
    let pid = std::process::id();
    // The host: eth0 (a veth, its peer the network's side), both families, a default route
    // each, and the emulator run in it without --netns, as on a real host.
    let named = NamedNetns::add(&format!("plt{pid}-host")).expect("named namespace");
    let host = Netns::open(named.path()).expect("opens");
    let network = Netns::new().expect("namespace");
    host.run(|| Netlink::open()?.create_veth("eth0", "net0", Some(network.fd())))
        .unwrap()
        .expect("veth");
    configure(&host, "eth0", "198.18.60.1", Some("2001:2:0:60::1"));
    configure(&network, "net0", "198.18.60.2", Some("2001:2:0:60::2"));
    let index = link_index(&host, "eth0");
    host.run(|| -> std::io::Result<()> {
        let mut netlink = Netlink::open()?;
        for gateway in ["198.18.60.2", "2001:2:0:60::2"] {
            netlink.new_route(&Route {
                destination: None,
                gateway: Some(gateway.parse().unwrap()),
                interface: index,
                ipv6: gateway.contains(':'),
                table: RT_TABLE_MAIN,
                metric: None,
            })?;
        }
        Ok(())
    })
    .unwrap()
    .expect("default routes");
    let before = settled(&host, "eth0");
    let scratch = TempDir::new("swap-host");
    let runtime = scratch.path("run");
    std::fs::create_dir(&runtime).expect("runtime directory");
    let name = format!("t{pid}-host");
    let mut child = host
        .command(binary())
        .args(["emulate", "--iface", "eth0", "delay 5ms", "--name", &name])
        .env("PATHLAB_RUNTIME_DIR", &runtime)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("pathlab emulate starts");
    let stats = || {
        Command::new(binary())
            .args(["emulate", "stats", "--name", &name])
            .env("PATHLAB_RUNTIME_DIR", &runtime)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let started = Instant::now();
    while !stats() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "emulator did not come up"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
    assert!(
        ping_ms(&host, "198.18.60.2") > 4.0,
        "the emulator is in front of eth0"
    );
    let killed = Instant::now();
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    loop {
        let now = host.run(|| pathlab_os::interpose::view("eth0")).unwrap();
        if now.ok().flatten().as_ref() == Some(&before)
            && files_under(&runtime.join("interpose")).is_empty()
        {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "eth0 not back 5 s after SIGKILL: {:?}, want {before:?}",
            seen(&host, "eth0")
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let took = killed.elapsed();
    eprintln!("eth0 back with its addresses and routes {took:.1?} after SIGKILL");
    assert!(
        took < RESTORED_WITHIN,
        "eth0 back {took:?} after SIGKILL, over {RESTORED_WITHIN:?}"
    );
    assert!(ping_ms(&host, "198.18.60.2") < 1.0, "a plain wire again");
    drop(scratch);
    drop(named);
}

/// How a test spoils a record, and how it mends it.
#[derive(Debug, Clone, Copy)]
enum Spoiled {
    /// Its holder is a file outside the runtime directory.
    HolderElsewhere,
    /// Anyone may write it.
    WorldWritable,
    /// Another user owns it.
    AnotherUsers,
}

#[test]
fn lab_clean_reports_a_record_it_cannot_trust_and_restores_the_others() {
    let Some(_guard) = privileged_shared("lab_clean_reports_a_record_it_cannot_trust") else {
        return;
    };
    let wired = Wired::new("swap-bad", &[("va", "vb"), ("vc", "vd")]);
    let pid = std::process::id();
    // What a holder path outside the runtime directory would have had root unlink.
    let victim = wired.scratch.path("victim");
    std::fs::write(&victim, "keep").unwrap();
    let inode = wired.a.inode().unwrap();
    let bad_record = wired.runtime.join(format!(
        "interpose/netns-{inode}-if-{}.json",
        link_index(&wired.a, "vc")
    ));
    for spoiled in [
        Spoiled::HolderElsewhere,
        Spoiled::WorldWritable,
        Spoiled::AnotherUsers,
    ] {
        let no_guardian = [("PATHLAB_TEST_NO_GUARDIAN", "1")];
        for (iface, name) in [
            ("va", format!("t{pid}-good")),
            ("vc", format!("t{pid}-bad")),
        ] {
            let mut child = wired.emulator(iface, &name, &no_guardian);
            wired.wait_started(&mut child, &name);
            child.kill().expect("SIGKILL");
            child.wait().expect("reaped");
        }
        let original = std::fs::read(&bad_record).expect("the record of vc's swap");
        let why = match spoiled {
            Spoiled::HolderElsewhere => {
                let mut record: serde_json::Value = serde_json::from_slice(&original).unwrap();
                record["holder"] = serde_json::Value::from(victim.to_string_lossy().as_ref());
                std::fs::write(&bad_record, record.to_string()).unwrap();
                "is not"
            }
            Spoiled::WorldWritable => {
                set_mode(&bad_record, 0o666);
                "writable by group or others"
            }
            Spoiled::AnotherUsers => {
                std::os::unix::fs::chown(&bad_record, Some(65534), None).unwrap();
                "owned by uid 65534"
            }
        };
        let output = wired.pathlab(&["lab", "clean"]);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
        );
        eprintln!("{spoiled:?}: lab clean said: {stdout}{stderr}");
        assert_eq!(
            output.status.code(),
            Some(1),
            "{spoiled:?}: {stdout} {stderr}"
        );
        assert!(
            stdout.contains("restored interface va in"),
            "{spoiled:?}: {stdout}"
        );
        assert!(
            stderr.contains(&bad_record.display().to_string()) && stderr.contains(why),
            "{spoiled:?}: {stderr}"
        );
        assert!(
            !stdout.contains("restored interface vc"),
            "{spoiled:?}: {stdout}"
        );
        assert_eq!(&seen(&wired.a, "va"), wired.before("va"), "{spoiled:?}");
        assert!(
            bad_record.exists(),
            "{spoiled:?}: the record refused is left"
        );
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "keep",
            "{spoiled:?}"
        );
        // Mended, it is trusted again and vc comes back.
        std::fs::write(&bad_record, &original).unwrap();
        set_mode(&bad_record, 0o600);
        std::os::unix::fs::chown(&bad_record, Some(0), None).unwrap();
        let output = wired.pathlab(&["lab", "clean"]);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{spoiled:?} mended: {stdout}");
        assert!(stdout.contains("restored interface vc in"), "{stdout}");
        assert_eq!(&seen(&wired.a, "vc"), wired.before("vc"), "{spoiled:?}");
        wired.assert_nothing_left();
    }
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}
