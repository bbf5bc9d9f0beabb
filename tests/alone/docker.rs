//! A lab exported for containerlab and played by `pathlab node` in Docker containers, wired
//! as containerlab wires them: the image `scripts/image` imports (no registry), containers
//! started with `--network none`, the capabilities and sysctls the export's topology file
//! names and nothing more (not privileged: `/proc/sys` read-only), then a veth per link
//! moved into the two containers' namespaces after they start, and a management veth for
//! each (containerlab's eth0), from a namespace of the test's own where `lab collect`
//! runs. Checked: the ping across the lab against the specs plus the underlay the nodes
//! reported, both directions of each link recorded, a node killed with `docker kill`
//! leaving nothing on the host, and every interface back as the engine made it when the
//! others stop.
//!
//! It needs the machine to itself (see `alone.rs`) and Docker: without `docker info`
//! answering it fails in CI and says SKIPPED elsewhere.

use crate::engines::{address, kinds};
use crate::util::emulated::{privileged, PATHLAB};
use crate::util::late::{Lateness, Quantile};
use crate::util::TempDir;
use pathlab_engines::export::node::NodeConfig;
use pathlab_os::netlink::Netlink;
use pathlab_os::netns::Netns;
use pathlab_results::lab::{LabOutcome, LabRun};
use std::process::{Command, Stdio};
use std::time::Duration;

const TEST: &str = "pathlab_node_runs_in_docker_containers_wired_as_containerlab_wires_them";

#[test]
fn pathlab_node_runs_in_docker_containers_wired_as_containerlab_wires_them() {
    let Some(_guard) = privileged(TEST) else {
        return;
    };
    if !docker_answers() {
        return;
    }
    let pid = std::process::id();
    let dir = TempDir::new("docker");
    let spec = dir.path("dk.toml");
    std::fs::write(&spec, crate::engines::three_node_lab("dk", "6s", PING)).unwrap();
    let options = export_for_containerlab(&spec, &dir);
    let image = Image::import(&format!("pathlab-test-{pid}:latest"));
    let host_before = HostState::now();

    let mut lab = Lab::start(&image, &dir, &options, pid);
    lab.wire(&dir);
    let made: Vec<_> = lab.pods.iter().map(kinds).collect();
    let out = dir.path("collected");
    let collect = lab
        .collect(&spec, &dir, &out, 60)
        .output()
        .expect("collect runs");
    let said = String::from_utf8_lossy(&collect.stdout).into_owned();
    eprintln!("{said}{}", String::from_utf8_lossy(&collect.stderr));
    assert!(collect.status.success(), "collect failed");
    let run = collected_run(&out);
    check_the_ping_across(&run, &out);
    // The nodes stop as the engine stops them (SIGTERM), each exits 0, and every
    // interface is as the engine made it.
    let logs = lab.stop_all();
    let after: Vec<_> = lab.pods.iter().map(kinds).collect();
    assert_eq!(
        after, made,
        "the interfaces after the nodes stopped ({logs})"
    );
    drop(lab);
    assert_eq!(HostState::now(), host_before, "the host after the lab");

    // Again, and a node killed mid-run (`docker kill`: its links swapped, its emulators
    // running): its namespaces and mounts go with the container, nothing stays on the
    // host, and the collector ends saying which node it lost.
    let mut lab = Lab::start(&image, &dir, &options, pid);
    lab.wire(&dir);
    let mut collect = lab
        .collect(&spec, &dir, &dir.path("again"), 8)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("collect runs");
    let mut said = std::io::BufReader::new(collect.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("started all 3 nodes") {
        line.clear();
        let read = std::io::BufRead::read_line(&mut said, &mut line).expect("collect's output");
        assert!(read > 0, "collect ended before the run started");
    }
    std::thread::sleep(Duration::from_secs(1));
    lab.kill("h2");
    let ended = collect.wait_with_output().expect("collect ends");
    eprintln!(
        "after h2 was killed: {}",
        String::from_utf8_lossy(&ended.stderr)
    );
    assert!(!ended.status.success(), "collect did not notice h2's end");
    drop(lab);
    assert_eq!(HostState::now(), host_before, "the host after docker kill");
}

/// Whether Docker answers `docker info`; if not, fails in CI and says the test skipped
/// elsewhere.
fn docker_answers() -> bool {
    let answers = Command::new("docker")
        .args(["info", "--format", "{{.ServerVersion}}"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !answers {
        let why = "Docker does not answer `docker info` (the Docker test needs the engine)";
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI must run the Docker test: {why}"
        );
        pathlab_os::testing::skipped(TEST, why);
    }
    answers
}

/// Exports the lab at `spec` for containerlab into `DIR/export` and returns the `docker
/// run` options its topology file gives every node: the capabilities (`cap-add`) and
/// sysctls, each as containerlab passes it to Docker. Checks the command and the binds
/// the test starts each node with are the file's.
fn export_for_containerlab(spec: &std::path::Path, dir: &TempDir) -> Vec<String> {
    let export = Command::new(PATHLAB)
        .args(["lab", "export", "containerlab"])
        .arg(spec)
        .arg("--out")
        .arg(dir.path("export"))
        .output()
        .unwrap();
    assert!(export.status.success(), "{export:?}");
    let topology = std::fs::read_to_string(dir.path("export/dk.clab.yml")).unwrap();
    for line in [
        r#"cmd: "pathlab node /etc/pathlab/node.toml --control-token /etc/pathlab/token --tls-cert /etc/pathlab/tls.crt --tls-key /etc/pathlab/tls.key""#,
        r#"- "h1.toml:/etc/pathlab/node.toml:ro""#,
        r#"- "h1.token:/etc/pathlab/token:ro""#,
        r#"- "h1.crt:/etc/pathlab/tls.crt:ro""#,
        r#"- "h1.key:/etc/pathlab/tls.key:ro""#,
    ] {
        assert!(topology.contains(line), "{line} in {topology}");
    }
    // The first node's lists (keys six spaces in, items eight): `cap-add:` items and
    // `sysctls:` entries.
    let mut options = Vec::new();
    let mut list = "";
    for line in topology
        .lines()
        .skip_while(|l| !l.contains("\"h1\":"))
        .skip(1)
    {
        let text = line.trim();
        if !line.starts_with("      ") {
            break;
        }
        if !line.starts_with("        ") {
            list = text.strip_suffix(':').unwrap_or("");
        } else if list == "cap-add" {
            options.push(format!(
                "--cap-add={}",
                text.trim_start_matches("- ").trim_matches('"')
            ));
        } else if list == "sysctls" {
            let (key, value) = text.split_once(':').expect("a sysctl entry");
            let (key, value) = (key.trim_matches('"'), value.trim().trim_matches('"'));
            options.push(format!("--sysctl={key}={value}"));
        }
    }
    eprintln!("the topology's docker options: {options:?}");
    assert!(
        options.iter().any(|o| o == "--cap-add=NET_ADMIN"),
        "{topology}"
    );
    options
}

/// An image of the binary under test, imported by `scripts/image --binary`; removed when
/// dropped.
struct Image(String);

impl Image {
    fn import(name: &str) -> Image {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/image");
        let made = Command::new(script)
            .args(["--binary", PATHLAB, name])
            .output()
            .expect("scripts/image runs");
        assert!(made.status.success(), "scripts/image: {made:?}");
        Image(name.to_owned())
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = docker(&["rmi", "--force", &self.0]);
    }
}

/// What of the host a lab could leave behind: the host's interfaces, its named
/// namespaces, the mounts of pathlab's (a holder namespace's, a runtime directory's) and
/// the processes of the binary under test. The containers' own mounts (their root
/// filesystems) are Docker's and come and go with them.
#[derive(Debug, PartialEq, Eq)]
struct HostState {
    links: Vec<String>,
    netns: Vec<String>,
    mounts: Vec<String>,
    pathlab_processes: usize,
}

impl HostState {
    fn now() -> HostState {
        let mut links: Vec<String> = Netlink::open()
            .and_then(|mut n| n.links())
            .expect("the host's interfaces")
            .into_iter()
            .map(|l| l.name)
            .collect();
        links.sort();
        let mut netns: Vec<String> = std::fs::read_dir("/run/netns")
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        netns.sort();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo")
            .expect("the host's mounts")
            .lines()
            .filter(|line| line.contains("pathlab"))
            .map(String::from)
            .collect();
        HostState {
            links,
            netns,
            mounts,
            pathlab_processes: pathlab_processes(),
        }
    }
}

/// The processes running the binary under test, the test's own excepted.
fn pathlab_processes() -> usize {
    let ours = std::fs::canonicalize(PATHLAB).expect("the binary");
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|entry| std::fs::read_link(entry.path().join("exe")).is_ok_and(|exe| exe == ours))
        .count()
}

/// Runs `docker ARGS`, returning its standard output; panics with its error if it fails.
fn docker(args: &[&str]) -> String {
    let output = Command::new("docker").args(args).output().expect("docker");
    assert!(
        output.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// The nodes h1, r1 and h2 in their containers, each container's namespace held open (so
/// its interfaces can be looked at after it stops), and the management namespace from
/// which the collector reaches each node's eth0. Every container is removed when dropped.
struct Lab {
    names: Vec<String>,
    pods: Vec<Netns>,
    cluster: Netns,
}

const NODES: [&str; 3] = ["h1", "r1", "h2"];

impl Lab {
    /// Starts a container per node, as containerlab does for the export's `linux` nodes:
    /// `--network none`, the topology's capabilities and sysctls (`options`), the node's
    /// config and its own token, certificate and key bind-mounted read-only, the command
    /// the topology names.
    fn start(image: &Image, dir: &TempDir, options: &[String], pid: u32) -> Lab {
        let mut lab = Lab {
            names: Vec::new(),
            pods: Vec::new(),
            cluster: Netns::new().expect("the management namespace"),
        };
        for node in NODES {
            let name = format!("pathlab-test-{pid}-{node}");
            let config = dir.path(&format!("export/{node}.toml"));
            let mut args: Vec<String> = ["run", "--detach", "--name", &name, "--network", "none"]
                .map(String::from)
                .to_vec();
            args.extend(options.iter().cloned());
            args.extend([format!(
                "--volume={}:/etc/pathlab/node.toml:ro",
                config.display()
            )]);
            for (ext, in_container) in [("token", "token"), ("crt", "tls.crt"), ("key", "tls.key")]
            {
                let file = dir.path(&format!("export/{node}.{ext}"));
                args.push(format!(
                    "--volume={}:/etc/pathlab/{in_container}:ro",
                    file.display()
                ));
            }
            args.push(image.0.clone());
            args.extend(
                "pathlab node /etc/pathlab/node.toml --control-token /etc/pathlab/token \
                 --tls-cert /etc/pathlab/tls.crt --tls-key /etc/pathlab/tls.key"
                    .split_whitespace()
                    .map(String::from),
            );
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            docker(&args);
            lab.names.push(name.clone());
            let pid = docker(&["inspect", "--format", "{{.State.Pid}}", &name]);
            assert_ne!(pid, "0", "{name} is not running: {}", Lab::logs(&name));
            lab.pods
                .push(Netns::open(format!("/proc/{pid}/ns/net").as_ref()).expect("its namespace"));
        }
        lab
    }

    /// The pod of `node`.
    fn pod(&self, node: &str) -> &Netns {
        &self.pods[NODES.iter().position(|n| *n == node).unwrap()]
    }

    /// The links, as containerlab makes them after the containers start: a veth per link
    /// with the ends' names from the node configs, and each node's eth0 on the management
    /// network.
    fn wire(&mut self, dir: &TempDir) {
        for (k, pod) in self.pods.iter().enumerate() {
            let there = format!("m{k}");
            self.cluster
                .run(|| Netlink::open()?.create_veth(&there, "eth0", Some(pod.fd())))
                .unwrap()
                .expect("management veth");
            address(&self.cluster, &there, &format!("198.19.21{k}.1"), 24);
            address(pod, "eth0", &format!("198.19.21{k}.2"), 24);
        }
        for node in ["h1", "r1"] {
            let text = std::fs::read_to_string(dir.path(&format!("export/{node}.toml"))).unwrap();
            let config = NodeConfig::parse(&text).unwrap();
            for interface in &config.interfaces {
                if NODES.iter().position(|n| *n == interface.peer)
                    <= NODES.iter().position(|n| *n == node)
                {
                    continue;
                }
                let peer = self.pod(&interface.peer);
                self.pod(node)
                    .run(|| {
                        Netlink::open()?.create_veth(
                            &interface.name,
                            &interface.peer_interface,
                            Some(peer.fd()),
                        )
                    })
                    .unwrap()
                    .expect("the link's veth");
            }
        }
    }

    /// `pathlab lab collect` from the management namespace, with the export's token, its
    /// results into `out`, waiting `wait` seconds for a node that does not answer.
    fn collect(
        &self,
        spec: &std::path::Path,
        dir: &TempDir,
        out: &std::path::Path,
        wait: u32,
    ) -> Command {
        let addresses: Vec<String> = NODES
            .iter()
            .enumerate()
            .map(|(k, node)| format!("{node}=198.19.21{k}.2:8080"))
            .collect();
        let mut command = self.cluster.command(PATHLAB);
        command
            .args(["lab", "collect"])
            .arg(spec)
            .args(["--address", &addresses.join(",")])
            .arg("--export")
            .arg(dir.path("export"))
            .arg("--out")
            .arg(out)
            .args(["--wait", &wait.to_string()]);
        command
    }

    /// `docker kill` of `node`'s container (SIGKILL, nothing run after), and its namespace
    /// let go of.
    fn kill(&mut self, node: &str) {
        let at = NODES.iter().position(|n| *n == node).unwrap();
        docker(&["kill", &self.names[at]]);
        docker(&["wait", &self.names[at]]);
        self.pods[at] = Netns::new().expect("a namespace in its place");
    }

    /// `docker stop` of the containers still running (SIGTERM); each node must exit 0.
    /// Returns their logs.
    fn stop_all(&self) -> String {
        let mut logs = String::new();
        for name in &self.names {
            if docker(&["inspect", "--format", "{{.State.Running}}", name]) != "true" {
                continue;
            }
            docker(&["stop", "--time", "20", name]);
            let code = docker(&["inspect", "--format", "{{.State.ExitCode}}", name]);
            let log = Lab::logs(name);
            assert_eq!(code, "0", "{name} exited {code}: {log}");
            logs.push_str(&log);
        }
        logs
    }

    /// What the container `name` wrote.
    fn logs(name: &str) -> String {
        Command::new("docker")
            .args(["logs", name])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            .unwrap_or_default()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for name in &self.names {
            let _ = Command::new("docker")
                .args(["rm", "--force", "--volumes", name])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// The collected result in `out`: both links, each recorded both ways, both ends'
/// underlay measured.
fn collected_run(out: &std::path::Path) -> Box<LabRun> {
    let text = std::fs::read_to_string(out.join("result.json")).expect("result.json");
    let file = pathlab_results::ResultFile::from_json(&text).expect("reads back");
    let pathlab_results::RunResult::Lab(run) = file.result else {
        panic!("not a lab result");
    };
    assert_eq!(run.links.len(), 2);
    for link in &run.links {
        let recording = out.join(link.recording.as_ref().expect("recorded"));
        let recording = pathlab_results::recording::read_recording(std::io::BufReader::new(
            std::fs::File::open(&recording).expect("recording"),
        ))
        .expect("reads");
        for direction in [0, 1] {
            assert!(
                recording.packets(direction).count() > 0,
                "{}: direction {direction} recorded nothing",
                link.name
            );
        }
        assert_eq!(link.underlay.len(), 2, "both ends measured {}", link.name);
    }
    run
}

/// The ping across: the specs (2 + 5 + 1 + 2 ms) plus each link's underlay round trip as
/// both its ends reported it, within 0.5 ms and the links' emulators' median lateness.
fn check_the_ping_across(run: &LabRun, out: &std::path::Path) {
    let ping = run.workloads.iter().find(|w| w.name == "ping").unwrap();
    let LabOutcome::Ping(ping) = &ping.outcome else {
        panic!("ping: {:?}", ping.outcome);
    };
    let underlay: f64 = run
        .links
        .iter()
        .map(|link| {
            let u = &link.underlay;
            u.iter().map(|u| u.rtt_p50_ns as f64 * 1e-6).sum::<f64>() / u.len() as f64
        })
        .sum();
    let measured = ping.rtt.p50_ns as f64 * 1e-6;
    let theory = 10.0 + underlay;
    let slack: f64 = run
        .links
        .iter()
        .map(|link| {
            Lateness::of_lab_link(&out.join("result.json"), &link.name)
                .slack(Quantile::P50, &[0, 1], Duration::from_millis(1))
                .as_secs_f64()
                * 1e3
        })
        .sum();
    eprintln!(
        "ping across the containers: median {measured:.3} ms, specs plus underlay \
         {theory:.3} ms, the links' emulators late by {slack:.3} ms (sum of their medians)"
    );
    assert!(ping.received >= ping.sent - 1, "{ping:?}");
    assert!(
        (-0.5..=0.5 + slack).contains(&(measured - theory)),
        "ping across: median {measured:.3} ms, specs plus underlay {theory:.3} ms"
    );
}

/// The engines' three-node lab (a ping across is 10 ms plus the underlay) with a ping.
const PING: &str = r#"
[[workload]]
name = "ping"
kind = "ping"
from = "h1"
to = "h2"
start = "500ms"
duration = "5s"
interval = "50ms"
"#;
