//! The emulator under loads it cannot follow, a lab of 200 links, and the scheduling it asked
//! for and got: each needs the machine to itself.
use crate::util;
use crate::util::emulated::{pathlab, privileged, Lab, PATHLAB};
use crate::util::lab_spec::LabSpec;
use crate::util::TempDir;
use pathlab_emulator::emulator::EmulatorStats;
use pathlab_os::topology::{Line, R_PORT_H1, R_PORT_H2};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::*;
use crate::emulate::*;

/// The fidelity guard (issue 16): an emulator given a rate it cannot follow warns once, with
/// the figure and the direction, says when it is on time again, and counts late seconds.
///
/// The load must make it late whatever the machine's speed. A plain `rate 40gbit` under
/// TCP is not enough for that: the model sees a frame when the emulator reads it, so a
/// backlog in the receive ring is not lateness, and what is measured is how long the
/// emulator takes to send one read batch, which depends on the batch size and the cost per
/// frame (measured here: a worst second's p99 of 1.3 to 8 ms from run to run). Instead
/// the spec makes the model itself demand the impossible: its rate alternates every 500 ms
/// between 10 Mbit/s and 40 Gbit/s, and a UDP load of 300 Mbit/s (which does not back off)
/// fills the 5000-packet queue during the slow half. At 40 Gbit/s the model sends those
/// 7.2 MB in 1.4 ms; a forwarder at 5 Gbit/s needs 12 ms, one at 20 Gbit/s 3 ms, so
/// thousands of the packets of every second leave more than 1 ms late (over 1% of the
/// second's ~20,000) on any forwarder that cannot do nearly 40 Gbit/s.
#[test]
fn an_emulator_that_cannot_follow_its_rate_warns_once_and_counts_the_late_seconds() {
    let Some(_serial) = privileged(
        "an_emulator_that_cannot_follow_its_rate_warns_once_and_counts_the_late_seconds",
    ) else {
        return;
    };
    let bound_ns = 1_000_000;
    let mut lab = Lab::start_with(
        "late",
        "schedule 500ms 10mbit 40gbit loop limit 5000",
        &["--late-warn", "1ms"],
        true,
        false,
    );
    let (peak_ns, text) = std::thread::scope(|scope| {
        let line = &lab.line;
        let load =
            scope.spawn(move || line.udp_one_way_delays(5301, 300e6, 1400, Duration::from_secs(5)));
        let mut peak_ns = 0;
        let mut text = String::new();
        while !load.is_finished() {
            std::thread::sleep(Duration::from_millis(250));
            let live = lab.stats();
            peak_ns = peak_ns.max(live.directions[0].lateness.last_second_p99_ns);
            if text.is_empty() && live.directions[0].lateness.late_seconds > 0 {
                let output = pathlab(&["emulate", "stats", "--name", &lab.name]);
                text = String::from_utf8_lossy(&output.stdout).into_owned();
            }
        }
        let delays = load.join().expect("load thread").expect("UDP load");
        assert!(!delays.is_empty(), "the load crossed");
        (peak_ns, text)
    });
    // Idle: what is left in the queue leaves at the next fast half, then the window
    // empties and the emulator is on time again.
    std::thread::sleep(Duration::from_millis(2_500));
    let child = lab.emulator.take().expect("running");
    pathlab_os::kill(child.id(), util::emulated::libc_sigterm()).expect("signal");
    let output = child.wait_with_output().expect("emulator exits");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let stats: EmulatorStats = serde_json::from_slice(&output.stdout).expect("final stats");
    let late = &stats.directions[0].lateness;
    eprintln!(
        "{}: p99 over a second up to {:.2} ms (live peak {:.2} ms), {} of {} s late; \
         run p50/p99/max {:.3}/{:.3}/{:.3} ms over {} packets\n{text}{stderr}",
        stats.directions[0].spec,
        late.worst_second_p99_ns as f64 / 1e6,
        peak_ns as f64 / 1e6,
        late.late_seconds,
        late.seconds,
        late.p50_ns as f64 / 1e6,
        late.p99_ns as f64 / 1e6,
        late.max_ns as f64 / 1e6,
        late.packets,
    );
    // The stats: the live window saw it, whole seconds were judged late against the bound,
    // and the text table says so.
    assert!(
        peak_ns > bound_ns,
        "live p99 over the last second {peak_ns} ns"
    );
    assert_eq!(late.bound_ns, Some(bound_ns));
    assert!(late.seconds >= 7, "{late:?}");
    assert!((1..=late.seconds).contains(&late.late_seconds), "{late:?}");
    assert!(late.worst_second_p99_ns > bound_ns, "{late:?}");
    assert!(
        text.contains("  guard      last second p99 ") && text.contains(" s (p99 over 1 ms)"),
        "{text}"
    );
    // The warnings: the first says it with the figure and the direction; within 10 s no
    // second one (the run is shorter); one line when it is over.
    let forward = format!("'{}': {R_PORT_H1} -> {R_PORT_H2} ", lab.name);
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains(&forward)).collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(
        lines[0].contains(" sends late: p99 ")
            && lines[0].contains(" ms over the last second, over the 1 ms bound"),
        "{stderr}"
    );
    assert!(lines[1].contains(" sends on time again: p99 "), "{stderr}");
}

/// The fidelity guard in a lab: the same link the emulator cannot follow (see the test
/// above), under the lab's own `owd` workload at 200 Mbit/s (UDP, which fills the queue in
/// the slow halves), is marked in result.json (its lateness, its late seconds), in the
/// terminal summary and in the report, with the figure.
#[test]
fn a_lab_run_whose_emulator_cannot_follow_its_link_is_marked_late() {
    let Some(_serial) =
        privileged("a_lab_run_whose_emulator_cannot_follow_its_link_is_marked_late")
    else {
        return;
    };
    let dir = TempDir::new("lab-late");
    let spec = dir.path("late.toml");
    LabSpec::new("late", "4s")
        .with("late_warn", "1ms")
        .node("h1")
        .node("h2")
        .link("h1", "h2")
        .with("spec", "schedule 500ms 10mbit 40gbit loop limit 5000")
        .workload("load", "owd", "h1", "h2")
        .with("rate", "200mbit")
        .with_number("size", 1400)
        .with("duration", "3s")
        .write(&spec);
    let out = dir.path("out");
    let output = Command::new(PATHLAB)
        .arg("lab")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("pathlab lab runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!("{stdout}");
    let run = read_lab_run(&out.join("result.json"));
    // Late although its forwarding threads had real-time scheduling, and the result says so.
    let scheduling = run
        .scheduling
        .as_ref()
        .expect("the run says how it was scheduled");
    assert_eq!(
        (scheduling.policy.as_str(), scheduling.priority),
        ("fifo", 50)
    );
    let lateness = &run.links[0].lateness;
    assert_eq!(lateness.len(), 2, "both directions: {lateness:?}");
    let forward = &lateness[0];
    assert_eq!((forward.from.as_str(), forward.to.as_str()), ("h1", "h2"));
    assert_eq!(forward.bound_ns, Some(1_000_000));
    assert!(forward.seconds >= 3, "{forward:?}");
    assert!(
        (1..=forward.seconds).contains(&forward.late_seconds),
        "{forward:?}"
    );
    assert!(forward.worst_second_p99_ns > 1_000_000, "{forward:?}");
    let warning = forward.warning("h1-h2").expect("a late direction warns");
    assert!(
        warning.starts_with("link h1-h2 sent late (h1 to h2): p99 up to ")
            && warning.ends_with("results may reflect the emulator, not the link"),
        "{warning}"
    );
    assert!(
        stdout.contains(&format!("  warning: {warning}")),
        "{stdout}"
    );
    let html = std::fs::read_to_string(out.join("report.html")).expect("the lab wrote its report");
    assert!(
        html.contains(&format!("<p class=\"late\">{warning}</p>")),
        "the report marks the run"
    );
}

#[test]
fn a_lab_of_200_links_pings_across_its_hub_with_the_links_delays_and_leaves_nothing() {
    let Some(_serial) = privileged(
        "a_lab_of_200_links_pings_across_its_hub_with_the_links_delays_and_leaves_nothing",
    ) else {
        return;
    };
    // A star: router r, hosts h1..h200 each on an emulated link; h1's is `delay 2ms`,
    // h2's `delay 3ms`, the others `delay 1ms`. A ping h1 -> h2 crosses both ways of both.
    let hosts = 200;
    let mut lab = LabSpec::new("star200", "4s").router("r");
    for host in 1..=hosts {
        lab = lab.node(&format!("h{host}"));
    }
    for host in 1..=hosts {
        let delay = match host {
            1 => 2,
            2 => 3,
            _ => 1,
        };
        lab = lab
            .link("r", &format!("h{host}"))
            .with("spec", &format!("delay {delay}ms"));
    }
    let spec = lab
        .workload("across", "ping", "h1", "h2")
        .with("interval", "50ms")
        .with("duration", "3s");
    let dir = TempDir::new("lab-200");
    let spec_path = dir.path("star200.toml");
    spec.write(&spec_path);
    let out = dir.path("out");
    let named_before = named_netns();
    let mut child = Command::new(PATHLAB)
        .arg("lab")
        .arg(&spec_path)
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path("stderr")).unwrap())
        .spawn()
        .expect("pathlab lab starts");
    // Built once every emulator has opened its recording: then the lab's namespaces are
    // the ones it holds (201 nodes and the switchboard holding the 200 links' ports).
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let recordings = || {
        std::fs::read_dir(&out).map_or(0, |entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("link-"))
                .count()
        })
    };
    while recordings() < hosts
        && std::time::Instant::now() < deadline
        && child.try_wait().unwrap().is_none()
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let held = netns_held_by(child.id());
    let status = child.wait().expect("pathlab lab ends");
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(dir.path("stderr")).unwrap_or_default()
    );
    assert!(hosts > pathlab_lab::topology::SWITCHBOARD_FROM);
    assert_eq!(held.len(), hosts + 2, "namespaces held: {held:?}");

    let run = read_lab_run(&out.join("result.json"));
    let pathlab_results::lab::LabOutcome::Ping(report) = &run.workloads[0].outcome else {
        panic!("{:?}", run.workloads[0].outcome);
    };
    assert_eq!(report.sent, 60, "3 s every 50 ms");
    assert_eq!(report.received, report.sent, "{report:?}");
    // (2 + 3 ms) each way; the issue asks for the links' delays within 0.5 ms, and 0.5 ms
    // more is allowed for the median on 2 cores shared with 400 emulator threads (a debug
    // build forwarding four times per ping).
    let (min, p50) = (
        report.rtt.min_ns as f64 / 1e6,
        report.rtt.p50_ns as f64 / 1e6,
    );
    eprintln!("200 links: ping h1 -> h2 min {min:.3} ms, p50 {p50:.3} ms (theory 10 ms)");
    assert!((10.0..10.5).contains(&min), "{report:?}");
    assert!((10.0..11.0).contains(&p50), "{report:?}");

    // Torn down: no process holds any of the lab's namespaces, none was named, and no
    // interface of it reached this namespace.
    let live = live_netns_inodes();
    let left: Vec<&String> = held.intersection(&live).collect();
    assert!(left.is_empty(), "namespaces still alive: {left:?}");
    assert!(
        named_netns().is_subset(&named_before),
        "{:?}",
        named_netns()
    );
    let strays: Vec<String> = root_interfaces()
        .into_iter()
        .filter(|name| {
            name.starts_with("to-")
                || name == "a"
                || name == "b"
                || (name.starts_with('c')
                    && name[1..]
                        .trim_end_matches(['a', 'b'])
                        .parse::<u32>()
                        .is_ok())
        })
        .collect();
    assert!(strays.is_empty(), "{strays:?}");
}

/// The scheduling of the forwarding threads (issue 43), read back from the kernel: by
/// default each is SCHED_FIFO at 50 with the process's memory locked, on the CPUs given,
/// and the emulator says so at start, in `stats` and in its final JSON; without
/// CAP_SYS_NICE it says once why it runs at normal priority, and does.
#[test]
fn the_emulator_reports_the_scheduling_it_asked_for_and_got() {
    let Some(_serial) = privileged("the_emulator_reports_the_scheduling_it_asked_for_and_got")
    else {
        return;
    };
    let cpu = pathlab_os::scheduling::machine_cpus()[0].to_string();
    let mut lab = Lab::start_with("sched", "delay 1ms", &["--cpus", &cpu], false, false);
    let emulator_pid = lab.emulator.as_ref().expect("running").id();
    let threads = forwarding_threads(emulator_pid);
    assert_eq!(threads.len(), 2, "a thread per direction: {threads:?}");
    for thread in &threads {
        assert_eq!(
            (thread.policy, thread.rt_priority),
            (libc::SCHED_FIFO as u32, 50),
            "{thread:?}"
        );
    }
    let status = std::fs::read_to_string(format!("/proc/{emulator_pid}/status")).unwrap();
    let locked_kb = status_kb(&status, "VmLck:");
    assert!(locked_kb > 0, "memory locked: VmLck {locked_kb} kB");
    let live = lab
        .stats()
        .scheduling
        .expect("stats say how it is scheduled");
    assert_eq!(
        (live.asked.as_str(), live.policy.as_str(), live.priority),
        ("realtime", "fifo", 50)
    );
    assert!(live.memory_locked && live.notes.is_empty(), "{live:?}");
    assert_eq!((live.cpus.as_str(), live.threads), (cpu.as_str(), 2));
    let text = pathlab(&["emulate", "stats", "--name", &lab.name]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!(
            "forwarding threads: real-time (SCHED_FIFO 50), memory locked, CPUs {cpu}, 2 \
             forwarding threads"
        )),
        "{text}"
    );
    let (stats, stderr) = stop_with_stderr(&mut lab);
    assert_eq!(stats.scheduling, Some(live));
    assert!(
        stderr.contains("forwarding threads: real-time (SCHED_FIFO 50)"),
        "{stderr}"
    );
    drop(lab);

    // The same emulator without CAP_SYS_NICE: normal priority, said once, and true.
    let line = Line::build(pathlab_os::topology::Middle::Emulator, false).expect("namespaces");
    let name = format!("t{}-sched-nonice", std::process::id());
    let mut command = line.r.command(PATHLAB);
    command
        .args(["emulate", "--between", R_PORT_H1, R_PORT_H2, "delay 1ms"])
        .args(["--name", &name, "-J"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    pathlab_os::sys::command_without_capability(&mut command, 23 /* CAP_SYS_NICE */);
    let mut lab = Lab {
        line,
        emulator: Some(command.spawn().expect("pathlab emulate starts")),
        name,
        dir: TempDir::new("sched-nonice"),
    };
    lab.wait_ready();
    let threads = forwarding_threads(lab.emulator.as_ref().unwrap().id());
    assert!(
        threads.iter().all(|t| t.policy == libc::SCHED_OTHER as u32),
        "{threads:?}"
    );
    let (stats, stderr) = stop_with_stderr(&mut lab);
    let got = stats
        .scheduling
        .expect("final stats say how it was scheduled");
    assert_eq!(
        (got.asked.as_str(), got.policy.as_str()),
        ("realtime", "normal")
    );
    let refusal = "no permission for real-time scheduling";
    assert!(got.notes.iter().any(|n| n.contains(refusal)), "{got:?}");
    assert_eq!(stderr.matches(refusal).count(), 1, "said once: {stderr}");
}

/// The network-namespace inodes process `pid` holds open (`net:[...]`).
fn netns_held_by(pid: u32) -> std::collections::HashSet<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .map(|target| target.to_string_lossy().into_owned())
        .filter(|target| target.starts_with("net:["))
        .collect()
}

/// The named namespaces (`ip netns list`).
fn named_netns() -> std::collections::BTreeSet<String> {
    std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// The `pathlab-forward` threads of process `pid`, with their scheduling class and
/// real-time priority from /proc (stat fields 40 and 41).
fn forwarding_threads(pid: u32) -> Vec<ThreadClass> {
    let mut threads = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks") {
        let path = task.expect("task").path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if comm.trim() != "pathlab-forward" {
            continue;
        }
        let stat = std::fs::read_to_string(path.join("stat")).expect("stat");
        // Fields after the command name's closing parenthesis, from field 3 on.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .collect();
        threads.push(ThreadClass {
            rt_priority: fields[40 - 3].parse().unwrap(),
            policy: fields[41 - 3].parse().unwrap(),
        });
    }
    threads
}

/// A `kB` figure of /proc/PID/status.
fn status_kb(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Stops a lab's emulator with SIGTERM; returns its final stats and what it said.
fn stop_with_stderr(lab: &mut Lab) -> (EmulatorStats, String) {
    let child = lab.emulator.take().expect("running");
    pathlab_os::kill(child.id(), util::emulated::libc_sigterm()).expect("signal");
    let output = child.wait_with_output().expect("emulator exits");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    (
        serde_json::from_slice(&output.stdout).expect("final stats"),
        stderr,
    )
}

/// A forwarding thread of a process as the kernel reports it.
#[derive(Debug)]
struct ThreadClass {
    policy: u32,
    rt_priority: u32,
}
