//! The emulator's life with the machine to itself: killed and cleaned up, refused, interrupted,
//! its interface going down or away.
use crate::util;
use crate::util::emulated::{pathlab, privileged, Lab, PATHLAB};
use crate::util::lab_spec::LabSpec;
use crate::util::TempDir;
use pathlab_emulator::emulator::EmulatorStats;
use pathlab_os::topology::{Line, H1_V4, H2_V4, H2_V6, HOST_PORT, R_PORT_H1, R_PORT_H2};
use pathlab_probe_driver::ping::PingResult;
use pathlab_results::recording::read_recording;
use std::io::{BufRead, Write};
use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::*;
use crate::emulate::*;

#[test]
fn a_killed_emulator_leaves_nothing_once_lab_clean_ran() {
    let Some(_serial) = privileged("a_killed_emulator_leaves_nothing_once_lab_clean_ran") else {
        return;
    };
    let interfaces_before = root_interfaces();
    let mut lab = Lab::start("kill", "delay 5ms", &[], false);
    let inodes: Vec<String> = [&lab.line.h1, &lab.line.r, &lab.line.h2]
        .iter()
        .map(|ns| format!("net:[{}]", ns.inode().expect("inode")))
        .collect();
    let socket = pathlab_os::runtime::control_socket_path(&lab.name);
    assert!(
        socket.exists(),
        "control socket {} while running",
        socket.display()
    );
    let mut child = lab.emulator.take().expect("running");
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    assert!(socket.exists(), "SIGKILL leaves the socket file");
    let stale = pathlab(&["emulate", "stats", "--name", &lab.name]);
    assert_eq!(
        stale.status.code(),
        Some(2),
        "a dead emulator is reported as not running"
    );
    assert!(String::from_utf8_lossy(&stale.stderr).contains("no emulator named"));
    let clean = pathlab(&["lab", "clean"]);
    assert!(
        clean.status.success(),
        "{}",
        String::from_utf8_lossy(&clean.stderr)
    );
    assert!(
        String::from_utf8_lossy(&clean.stdout).contains(&socket.display().to_string()),
        "clean names what it removed"
    );
    assert!(!socket.exists(), "lab clean removed the stale socket");
    let locks = pathlab_os::runtime::runtime_dir().join("locks");
    let r_inode = lab.line.r.inode().expect("inode");
    let leftover_locks: Vec<_> = std::fs::read_dir(&locks)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("netns-{r_inode}-"))
        })
        .collect();
    assert!(
        leftover_locks.is_empty(),
        "locks of the killed emulator: {leftover_locks:?}"
    );
    drop(lab);
    let live = live_netns_inodes();
    for inode in &inodes {
        assert!(!live.contains(inode), "namespace {inode} is still held");
    }
    assert_eq!(
        root_interfaces(),
        interfaces_before,
        "no interface was left in the root namespace"
    );
    let named = std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("pathlab"))
        .count();
    assert_eq!(named, 0, "no named namespace");
}

#[test]
fn bad_interfaces_busy_interfaces_and_bad_specs_exit_2_and_leave_nothing() {
    let Some(_serial) =
        privileged("bad_interfaces_busy_interfaces_and_bad_specs_exit_2_and_leave_nothing")
    else {
        return;
    };
    let lab = Lab::start("busy", "delay 1ms", &[], false);
    let sockets_before = std::fs::read_dir(pathlab_os::runtime::runtime_dir().join("emulate"))
        .map_or(0, Iterator::count);
    check_each_bad_start_exits_2(&lab);

    let sockets_after = std::fs::read_dir(pathlab_os::runtime::runtime_dir().join("emulate"))
        .map_or(0, Iterator::count);
    assert_eq!(
        sockets_after, sockets_before,
        "failed starts leave no control socket"
    );
    // The running emulator was not disturbed.
    assert!(lab
        .ping(IpAddr::V4(H2_V4), 3, Duration::from_millis(10), 56)
        .iter()
        .skip(1)
        .all(|r| r.rtt.is_some()));
}

/// Runs in r six starts that must be refused as bad input (an interface missing, busy,
/// twice or loopback; a bad spec; the name of `lab`'s running emulator): each exits 2
/// saying why.
fn check_each_bad_start_exits_2(lab: &Lab) {
    let run_in_r = |args: &[&str]| {
        lab.line
            .r
            .command(PATHLAB)
            .args(args)
            .output()
            .expect("runs")
    };
    let cases: [(&[&str], &str); 6] = [
        (
            &[
                "emulate",
                "--between",
                "nosuch0",
                R_PORT_H2,
                "delay 1ms",
                "--name",
                "bad1",
            ],
            "no interface named 'nosuch0'",
        ),
        (
            &[
                "emulate",
                "--between",
                R_PORT_H1,
                R_PORT_H2,
                "delay 1ms",
                "--name",
                "bad2",
            ],
            "is busy",
        ),
        (
            &[
                "emulate",
                "--between",
                R_PORT_H1,
                R_PORT_H2,
                "delay fast",
                "--name",
                "bad3",
            ],
            "expected a time like 25ms",
        ),
        (
            &[
                "emulate",
                "--between",
                R_PORT_H1,
                R_PORT_H1,
                "delay 1ms",
                "--name",
                "bad4",
            ],
            "two different interfaces",
        ),
        (
            &[
                "emulate",
                "--between",
                "lo",
                R_PORT_H2,
                "delay 1ms",
                "--name",
                "bad5",
            ],
            "loopback",
        ),
        (
            &[
                "emulate",
                "--between",
                "x",
                "y",
                "delay 1ms",
                "--name",
                &lab.name,
            ],
            "already running",
        ),
    ];
    for (args, message) in cases {
        let output = run_in_r(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(message),
            "{args:?}: stderr {stderr:?} should say {message:?}"
        );
    }
}

#[test]
fn shell_runs_a_program_behind_the_link_and_nested_shells_reach_out_through_nat() {
    let Some(_serial) =
        privileged("shell_runs_a_program_behind_the_link_and_nested_shells_reach_out_through_nat")
    else {
        return;
    };
    // Everything in a namespace of the test's own: the shells' outside ends and the server.
    let outer = pathlab_os::netns::Netns::new().expect("namespace");
    // A new namespace takes IPv4 forwarding from the host's (net.core.devconf_inherit_init_net
    // 0), which a container engine turns on: off here, so turning it back off is seen.
    outer
        .set_sysctl("net/ipv4/ip_forward", "0")
        .expect("forwarding off in the test's namespace");
    let listener = outer
        .run(|| std::net::TcpListener::bind("0.0.0.0:7007"))
        .unwrap()
        .expect("listen");
    let server = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for _ in 0..2 {
            let (stream, _) = listener.accept().expect("accept");
            let mut reader = std::io::BufReader::new(&stream);
            let mut line = String::new();
            reader.read_line(&mut line).expect("read");
            (&stream).write_all(b"pong\n").expect("reply");
            lines.push(line.trim().to_owned());
        }
        lines
    });
    let dir = TempDir::new("shell");
    let record = dir.path("shell.jsonl");
    // The nested shell runs behind a measured path (`--twin`): 5 ms up, 2 ms down.
    let twin = dir.path("twin.toml");
    let inner_record = dir.path("inner.jsonl");
    std::fs::write(
        &twin,
        pathlab_twin::file::EXAMPLE
            .replace("delay 10ms quantiles 0 1ms 3ms loss 1%", "delay 5ms")
            .replace("spec = \"delay 10ms\"", "spec = \"delay 2ms\""),
    )
    .expect("write the twin");
    // One shell talks to the server; inside it, a nested shell does too, through two links
    // and the outer shell's NAT. Each prints the reply; the exit code comes back out.
    let script = r#"
        exec 3<>/dev/tcp/$PATHLAB_SHELL_OUTSIDE/7007; echo outer >&3; read reply <&3; echo "outer got $reply"
        export SERVER=$PATHLAB_SHELL_OUTSIDE
        "$PATHLAB" shell --twin "$TWIN" --record "$INNER_RECORD" -- bash -c 'exec 3<>/dev/tcp/$SERVER/7007; echo inner >&3; read reply <&3; echo "inner got $reply"; exit 3'
        exit $(( $? + 4 ))
    "#;
    let output = outer
        .command(PATHLAB)
        .args(["shell", "delay 10ms", "--record"])
        .arg(&record)
        .args(["--", "bash", "-c", script])
        .env("PATHLAB", PATHLAB)
        .env("TWIN", &twin)
        .env("INNER_RECORD", &inner_record)
        .output()
        .expect("pathlab shell runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(7),
        "exit code of the program (3 + 4); stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("outer got pong") && stdout.contains("inner got pong"),
        "{stdout}"
    );
    assert_eq!(server.join().expect("server"), vec!["outer", "inner"]);
    // The recorded truth: every packet spent exactly 10 ms in the outer link; in the
    // nested one the twin's up spec outwards (direction 0, as SPEC's), its down spec back.
    let [up, down] = recorded_delays(&record);
    assert!(
        up.iter().chain(&down).all(|&d| d == 10_000_000),
        "{up:?} {down:?}"
    );
    assert!(
        up.len() + down.len() >= 20,
        "both connections crossed the outer link: {} packets",
        up.len() + down.len()
    );
    let [up, down] = recorded_delays(&inner_record);
    assert!(
        up.len() >= 4 && up.iter().all(|&d| d == 5_000_000),
        "twin up: {up:?}"
    );
    assert!(
        down.len() >= 4 && down.iter().all(|&d| d == 2_000_000),
        "twin down: {down:?}"
    );
    assert_left_clean(&outer);
}

/// The time each packet of a recording spent in the link, per direction (packets still
/// inside when the program exited have no departure); nothing may have been dropped.
fn recorded_delays(path: &std::path::Path) -> [Vec<u64>; 2] {
    let recording = read_recording(std::io::BufReader::new(
        std::fs::File::open(path).expect("recording"),
    ))
    .expect("reads");
    [0, 1].map(|dir| {
        recording
            .packets(dir)
            .inspect(|r| assert!(r.dropped.is_none(), "nothing is dropped: {r:?}"))
            .filter_map(|r| r.departed.map(|d| (d - r.arrived).as_nanos()))
            .collect()
    })
}

/// Nothing of a shell is left in `outer`: no TUN device, no NAT table, forwarding off.
fn assert_left_clean(outer: &pathlab_os::netns::Netns) {
    let interfaces: Vec<String> = outer
        .run(|| pathlab_os::netlink::Netlink::open().and_then(|mut n| n.links()))
        .unwrap()
        .expect("links")
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert_eq!(interfaces, vec!["lo"], "only loopback is left");
    assert!(
        outer
            .run(pathlab_os::nat::tables)
            .unwrap()
            .expect("tables")
            .is_empty(),
        "NAT tables removed"
    );
    let forwarding = outer
        .run(|| std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward"))
        .unwrap()
        .expect("sysctl");
    assert_eq!(forwarding.trim(), "0", "forwarding restored");
}

#[test]
fn a_bad_lab_spec_is_refused_with_its_line_and_nothing_is_built() {
    let Some(_serial) = privileged("a_bad_lab_spec_is_refused_with_its_line_and_nothing_is_built")
    else {
        return;
    };
    let dir = TempDir::new("lab-bad-spec");
    let before = live_netns_inodes();
    let spec = dir.path("bad.toml");
    let out = dir.path("out");
    let two_nodes = || LabSpec::new("x", "5s").node("h1").node("h2");
    for (lab, expected) in [
        (
            two_nodes().link("h1", "h3"),
            "line 8: link end 'h3' is not a node",
        ),
        (
            two_nodes()
                .link("h1", "h2")
                .with("spec", "delay 5ms rate 10 mbit"),
            "line 9: bad SPEC 'delay 5ms rate 10 mbit'",
        ),
    ] {
        lab.write(&spec);
        let output = Command::new(PATHLAB)
            .arg("lab")
            .arg(&spec)
            .arg("--out")
            .arg(&out)
            .output()
            .expect("pathlab lab runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert!(stderr.contains("bad.toml"), "names the file: {stderr}");
        assert!(!out.exists(), "nothing created");
    }
    assert_eq!(live_netns_inodes(), before, "no namespace was made");
}

#[test]
fn ctrl_c_in_a_lab_run_keeps_the_recording_and_leaves_no_namespace() {
    let Some(_serial) =
        privileged("ctrl_c_in_a_lab_run_keeps_the_recording_and_leaves_no_namespace")
    else {
        return;
    };
    let dir = TempDir::new("lab-ctrl-c");
    let before = live_netns_inodes();
    let spec = dir.path("line.toml");
    LabSpec::new("line", "60s")
        .node("h1")
        .node("h2")
        .link("h1", "h2")
        .with("spec", "delay 5ms")
        .workload("probes", "rtt", "h1", "h2")
        .write(&spec);
    let out = dir.path("out");
    let child = Command::new(PATHLAB)
        .arg("lab")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pathlab lab starts");
    // Wait until the emulator has recorded traffic, then Ctrl-C.
    let recording = out.join("link-h1-h2.jsonl");
    for _ in 0..300 {
        if std::fs::metadata(&recording).is_ok_and(|m| m.len() > 10_000) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    pathlab_os::kill(child.id(), 2).expect("SIGINT");
    let output = child.wait_with_output().expect("pathlab lab exits");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "an interrupted run says so");
    assert!(stdout.contains("interrupted"), "{stdout}");
    let run = read_lab_run(&out.join("result.json"));
    assert!(run.interrupted);
    assert!(run.duration_ns < 60_000_000_000);
    assert_eq!(run.workloads.len(), 1, "the cut-off workload is listed");
    let recorded = read_recording(std::io::BufReader::new(
        std::fs::File::open(&recording).expect("recording kept"),
    ))
    .expect("the recording reads to its last line");
    assert!(recorded.packets(0).count() > 0, "probes were recorded");
    assert_eq!(live_netns_inodes(), before, "no namespace is left");
}

#[test]
fn an_interface_that_goes_down_pauses_without_cpu_and_one_that_disappears_ends_the_emulator() {
    let Some(_serial) = privileged("an_interface_that_goes_down_pauses_without_cpu") else {
        return;
    };
    let mut lab = Lab::start("if-down", "delay 1ms", &[], true);
    let pid = lab.emulator.as_ref().unwrap().id();
    let answered = |results: &[PingResult]| results.iter().filter(|r| r.rtt.is_some()).count();
    assert_eq!(
        answered(&lab.ping(IpAddr::V4(H2_V4), 5, Duration::from_millis(20), 56)),
        5
    );

    // Down: the direction waits, and the process sleeps. A loop spinning on the socket's
    // pending error used all of a core (200 ticks in 2 s, measured before the fix); a
    // sleeping one wakes once a second to see whether the interface is gone.
    in_r(&lab, R_PORT_H2, |netlink, index| {
        netlink.set_up(index, false).unwrap();
    });
    std::thread::sleep(Duration::from_millis(200));
    let before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_ticks(pid) - before;
    eprintln!("CPU while {R_PORT_H2} was down: {used} ticks in 2 s");
    assert!(used <= 20, "{used} ticks of 200 in 2 s: the emulator spins");
    assert_eq!(
        answered(&lab.ping(IpAddr::V4(H2_V4), 3, Duration::from_millis(20), 56)),
        0
    );

    // Up again: forwarding resumes by itself, the outage counted.
    in_r(&lab, R_PORT_H2, |netlink, index| {
        netlink.set_up(index, true).unwrap();
    });
    std::thread::sleep(Duration::from_millis(500));
    let results = lab.ping(IpAddr::V4(H2_V4), 10, Duration::from_millis(20), 56);
    assert!(answered(&results) >= 9, "{results:?}");
    let stats = lab.stats();
    assert_eq!(stats.directions[1].from, R_PORT_H2);
    assert_eq!(stats.directions[1].went_down, 1, "{stats:?}");
    assert_eq!(stats.directions[0].went_down, 0);

    // Gone (the veth pair deleted): the emulator ends, exit 1, naming the interface.
    in_r(&lab, R_PORT_H2, |netlink, index| {
        netlink.delete_link(index).unwrap();
    });
    let mut child = lab.emulator.take().unwrap();
    let mut status = None;
    for _ in 0..150 {
        status = child.try_wait().unwrap();
        if status.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let Some(status) = status else {
        let _ = child.kill();
        panic!("the emulator still runs 3 s after {R_PORT_H2} disappeared");
    };
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("interface {R_PORT_H2} disappeared")),
        "{stderr}"
    );
}

#[test]
fn with_wait_an_interface_that_disappears_is_waited_for_without_cpu_and_reopened() {
    let Some(_serial) = privileged("with_wait_an_interface_that_disappears_is_waited_for") else {
        return;
    };
    let mut lab = Lab::start("if-wait", "delay 1ms", &["--wait"], true);
    let pid = lab.emulator.as_ref().unwrap().id();
    let mac = |netns| Line::interface(netns, HOST_PORT).expect("eth0").mac;
    let (h1_mac, h2_mac) = (mac(&lab.line.h1), mac(&lab.line.h2));
    assert_eq!(
        answered(&lab.ping(IpAddr::V4(H2_V4), 5, Duration::from_millis(20), 56)),
        5
    );

    unplug_h2_and_check_the_emulator_waits_without_cpu(&mut lab, pid);
    replug_h2_and_check_forwarding_resumes(&lab, &h2_mac, &h1_mac);
    stop_and_check_each_state_change_was_said_once(&mut lab);
}

/// How many of `results` were answered.
fn answered(results: &[PingResult]) -> usize {
    results.iter().filter(|r| r.rtt.is_some()).count()
}

/// Gone (the veth pair deleted): with --wait `lab`'s emulator (process `pid`) keeps
/// running, and sleeps while it waits (a check a second, and the recording's 10 ms queue
/// samples).
fn unplug_h2_and_check_the_emulator_waits_without_cpu(lab: &mut Lab, pid: u32) {
    in_r(lab, R_PORT_H2, |netlink, index| {
        netlink.delete_link(index).unwrap();
    });
    std::thread::sleep(Duration::from_millis(1500));
    let child = lab.emulator.as_mut().unwrap();
    assert!(
        child.try_wait().unwrap().is_none(),
        "the emulator ended although it was told to wait"
    );
    let stats = lab.stats();
    assert_eq!(stats.directions[1].from, R_PORT_H2);
    assert_eq!(stats.directions[1].disappeared, 1, "{stats:?}");
    assert_eq!(stats.directions[1].reopened, 0, "{stats:?}");
    let wall = std::time::Instant::now();
    let before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(2));
    // /proc/PID/stat counts in USER_HZ, 100 per second on Linux.
    let used_s = (cpu_ticks(pid) - before) as f64 / 100.0;
    let wall_s = wall.elapsed().as_secs_f64();
    eprintln!(
        "CPU while waiting for {R_PORT_H2}: {used_s:.2} s in {wall_s:.2} s ({:.1}%)",
        used_s / wall_s * 100.0
    );
    assert!(
        used_s < 0.1 * wall_s,
        "{used_s:.2} s of CPU in {wall_s:.2} s while waiting: the emulator spins"
    );
    assert!(lab.emulator.as_mut().unwrap().try_wait().unwrap().is_none());
}

/// Back (same name, new index, h2's end with `h2_mac`, h1's neighbour entry `h1_mac`):
/// reopened within a check, and forwarding resumes.
fn replug_h2_and_check_forwarding_resumes(lab: &Lab, h2_mac: &[u8], h1_mac: &[u8]) {
    let up = replug_h2(lab, h2_mac, h1_mac, Duration::from_millis(1200));
    let mut reopened_after = None;
    while up.elapsed() < Duration::from_secs(3) {
        if lab.stats().directions[1].reopened == 1 {
            reopened_after = Some(up.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let reopened_after = reopened_after.expect("reopened within 3 s of the interface coming up");
    let results = lab.ping(IpAddr::V4(H2_V4), 10, Duration::from_millis(20), 56);
    let pings_done = up.elapsed();
    eprintln!(
        "{R_PORT_H2} back up: reopened after {:.0} ms, 10 pings done {:.0} ms after it came up",
        reopened_after.as_secs_f64() * 1e3,
        pings_done.as_secs_f64() * 1e3
    );
    assert!(answered(&results) >= 9, "{results:?}");
    let text = pathlab(&["emulate", "stats", "--name", &lab.name]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!(
            "gone       {R_PORT_H2} disappeared 1 time(s), reopened 1 time(s)"
        )),
        "{text}"
    );
}

/// Stopped as usual: exit 0, each state change said once, the final stats counting one
/// disappearance and one reopening of r's port to h2 only.
fn stop_and_check_each_state_change_was_said_once(lab: &mut Lab) {
    let child = lab.emulator.take().unwrap();
    pathlab_os::kill(child.id(), util::emulated::libc_sigterm()).unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    for (said, times) in [
        (
            format!("interface {R_PORT_H2} disappeared; waiting for it to reappear"),
            1,
        ),
        (
            format!("named {R_PORT_H2} is back but cannot be opened yet"),
            1,
        ),
        (
            format!("interface {R_PORT_H2} is back; forwarding through it resumed"),
            1,
        ),
    ] {
        assert_eq!(
            stderr.matches(&said).count(),
            times,
            "'{said}' in: {stderr}"
        );
    }
    let stats: EmulatorStats = serde_json::from_slice(&output.stdout).expect("final stats");
    assert_eq!(
        (
            stats.directions[1].disappeared,
            stats.directions[1].reopened
        ),
        (1, 1)
    );
    assert_eq!(
        (
            stats.directions[0].disappeared,
            stats.directions[0].reopened
        ),
        (0, 0)
    );
    assert!(stats.failure.is_none());
    assert_conservation(&stats);
}

/// CPU time (user + system) process `pid` has used, in clock ticks (100 per second).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the process runs");
    // After the command name in parentheses: state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// Puts back h2's wire to r after it was deleted, as a NIC plugged in again: a new veth
/// pair of the same names, h2's end with the old MAC address (so h1's neighbour entry
/// stays right), h2's addresses and its neighbour entry for h1 again, and r's end left
/// down for `before_up` (an interface that is back but down cannot be opened yet) before
/// it is brought up. Returns when r's end was brought up.
fn replug_h2(lab: &Lab, h2_mac: &[u8], h1_mac: &[u8], before_up: Duration) -> std::time::Instant {
    use pathlab_os::netlink::Netlink;
    use pathlab_os::topology::H1_V6;
    let r = lab.line.r.fd();
    lab.line
        .h2
        .run(|| {
            let mut netlink = Netlink::open().unwrap();
            netlink
                .create_veth(HOST_PORT, R_PORT_H2, Some(r))
                .expect("a new veth pair of the old names");
            let eth = netlink.link_by_name(HOST_PORT).unwrap().expect("h2's eth0");
            netlink.set_mac(eth.index, h2_mac).unwrap();
            netlink
                .add_address(eth.index, IpAddr::V4(H2_V4), 24, None)
                .unwrap();
            netlink
                .add_address(eth.index, IpAddr::V6(H2_V6), 64, None)
                .unwrap();
            netlink.set_up(eth.index, true).unwrap();
            netlink
                .add_neighbor(eth.index, IpAddr::V4(H1_V4), h1_mac)
                .unwrap();
            netlink
                .add_neighbor(eth.index, IpAddr::V6(H1_V6), h1_mac)
                .unwrap();
        })
        .unwrap();
    std::thread::sleep(before_up);
    in_r(lab, R_PORT_H2, |netlink, index| {
        netlink.set_up(index, true).unwrap();
    });
    std::time::Instant::now()
}
