//! `pathlab node` and `pathlab lab collect` refusing bad input, and what the engines' tests
//! share: a `pathlab node` process in a pod. The lab played across two machines needs the
//! machine to itself: tests/alone/engines.rs.

use crate::util;

use std::os::unix::fs::PermissionsExt as _;
use std::process::{Child, Stdio};

use crate::util::emulated::{end, libc_sigterm, link_index, PATHLAB};
use crate::util::TempDir;
use pathlab_os::netlink::Netlink;
use pathlab_os::netns::Netns;

/// A running `pathlab node` in a pod, stopped with SIGTERM when dropped.
pub(crate) struct NodeProcess {
    pub(crate) name: &'static str,
    pub(crate) child: Option<Child>,
    pub(crate) stderr: std::path::PathBuf,
}

/// Where each node serves its emulators' metrics alone, in plain HTTP, on its pod's
/// loopback (`--metrics`).
pub(crate) const METRICS_PORT: u16 = 9464;

/// `GET PATH` in plain HTTP from `pod` to its node's metrics address: the status line
/// and the body.
pub(crate) fn get_metrics(pod: &Netns, path: &str) -> (String, String) {
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{METRICS_PORT}\r\nConnection: close\r\n\r\n"
    );
    pod.run(move || {
        use std::io::{Read, Write};
        let mut stream =
            std::net::TcpStream::connect(("127.0.0.1", METRICS_PORT)).expect("metrics address");
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        (
            head.lines().next().unwrap_or("").to_owned(),
            body.to_owned(),
        )
    })
    .unwrap()
}

impl NodeProcess {
    /// Starts node `name` of the export in `DIR/export`, with its own token, certificate
    /// and key from there.
    pub(crate) fn start(pod: &Netns, name: &'static str, dir: &TempDir) -> Self {
        let stderr = dir.path(&format!("{name}.stderr"));
        let child = pod
            .command(PATHLAB)
            .arg("node")
            .arg(dir.path(&format!("export/{name}.toml")))
            .args(node_credentials(dir, name))
            .arg("--out")
            .arg(dir.path(&format!("node-{name}")))
            .args(["--wait", "60"])
            .args(["--metrics", &format!("127.0.0.1:{METRICS_PORT}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("pathlab node starts");
        NodeProcess {
            name,
            child: Some(child),
            stderr,
        }
    }

    /// SIGTERM: it must put its interfaces back and exit 0.
    pub(crate) fn stop(mut self) -> String {
        let mut child = self.child.take().expect("running");
        pathlab_os::kill(child.id(), libc_sigterm()).expect("signal");
        let status = child.wait().expect("node exits");
        let stderr = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        assert!(status.success(), "node {} failed: {stderr}", self.name);
        stderr
    }
}

/// The options that give `pathlab node` the credentials the export in `DIR/export` made
/// for node `name`: its own token, certificate and key.
pub(crate) fn node_credentials(dir: &TempDir, name: &str) -> Vec<std::ffi::OsString> {
    let file = |ext: &str| dir.path(&format!("export/{name}.{ext}")).into_os_string();
    vec![
        "--control-token".into(),
        file("token"),
        "--tls-cert".into(),
        file("crt"),
        "--tls-key".into(),
        file("key"),
    ]
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            end(child);
        }
    }
}

/// The three-node lab the engines' tests play, named `name`, lasting `duration`, with
/// `workloads` (TOML `[[workload]]` tables): h1 - r1 - h2, `delay 2ms` both ways, then
/// `rate 50mbit delay 5ms` and `delay 1ms` back, so a ping across is 10 ms plus the
/// underlay.
pub(crate) fn three_node_lab(name: &str, duration: &str, workloads: &str) -> String {
    format!(
        r#"
name = "{name}"
duration = "{duration}"

[[node]]
name = "h1"

[[node]]
name = "r1"
kind = "router"

[[node]]
name = "h2"

[[link]]
between = ["h1", "r1"]
spec = "delay 2ms"

[[link]]
between = ["r1", "h2"]
spec = "rate 50mbit delay 5ms"
reverse = "delay 1ms"
{workloads}"#
    )
}

/// Gives `name` in `netns` an IPv4 address and brings it and loopback up.
pub(crate) fn address(netns: &Netns, name: &str, v4: &str, len: u8) {
    let at = link_index(netns, name);
    netns
        .run(|| -> std::io::Result<()> {
            let mut netlink = Netlink::open()?;
            netlink.add_address(at, v4.parse().unwrap(), len, None)?;
            netlink.set_up(at, true)?;
            netlink.set_up(1, true)
        })
        .unwrap()
        .expect("addressed");
}

/// The kinds of a pod's interfaces, by name.
pub(crate) fn kinds(pod: &Netns) -> Vec<(String, Option<String>)> {
    let mut links: Vec<_> = pod
        .run(|| Netlink::open()?.links())
        .unwrap()
        .expect("links")
        .into_iter()
        .map(|l| (l.name, l.kind))
        .collect();
    links.sort();
    links
}

/// Bad input to `pathlab node` and `lab collect` exits 2 with the reason, before anything
/// is touched or reached.
#[test]
fn node_and_collect_refuse_bad_input_with_the_reason() {
    let dir = TempDir::new("engines-refusals");
    let garbage = dir.path("garbage.toml");
    std::fs::write(&garbage, "version = 1\nnode = 7\n").unwrap();
    let other = dir.path("v9.toml");
    std::fs::write(&other, "version = 9\n").unwrap();
    let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
    util::assert_refused(&["node", "/nonexistent/node.toml"], "cannot read");
    util::assert_refused(&["node", &path(&garbage)], "garbage.toml");
    util::assert_refused(&["node", &path(&other)], "version 9");
    // Read with a bound, and only a regular file: not read without end first.
    util::assert_refused(&["node", "/dev/zero"], "a device, not a regular file");
    util::assert_refused(
        &["lab", "collect", "bufferbloat", "--address", "{node}:8080"],
        "is a sweep of 3 runs",
    );
    util::assert_refused(
        &[
            "lab",
            "collect",
            "bufferbloat",
            "--point",
            "1",
            "--address",
            "zz=198.18.0.1:8080",
        ],
        "the lab has no node 'zz'",
    );
    util::assert_refused(
        &[
            "lab",
            "collect",
            "bufferbloat",
            "--point",
            "1",
            "--address",
            "h1=198.18.0.1:8080",
        ],
        "no address for node",
    );
    util::assert_refused(
        &[
            "lab",
            "collect",
            "bufferbloat",
            "--point",
            "1",
            "--export",
            "/nonexistent/export",
        ],
        "--export: /nonexistent/export/ca.crt",
    );
}

/// Without CAP_SYS_ADMIN (a container given only NET_ADMIN and NET_RAW), `pathlab node`
/// says at start what it needs, what for, and the lines that ask an engine for it (exit
/// 2), before it touches anything.
#[test]
fn node_without_sys_admin_says_at_start_what_it_needs() {
    let test = "node_without_sys_admin_says_at_start_what_it_needs";
    let Some(_lock) = crate::util::emulated::privileged_shared(test) else {
        return;
    };
    let dir = TempDir::new("engines-capabilities");
    let config = export_owd_probe(&dir);
    let name = config.file_stem().unwrap().to_string_lossy().into_owned();
    // The bounding set without CAP_SYS_ADMIN: root's program gets every other capability.
    let node = std::process::Command::new("setpriv")
        .args([
            "--bounding-set=-sys_admin",
            "--inh-caps=-sys_admin",
            PATHLAB,
            "node",
        ])
        .arg(&config)
        .args(node_credentials(&dir, &name))
        .args(["--out"])
        .arg(dir.path("node"))
        .output()
        .expect("setpriv runs (util-linux)");
    let said = String::from_utf8_lossy(&node.stderr);
    assert_eq!(node.status.code(), Some(2), "{said}");
    for needed in [
        "pathlab node needs CAP_SYS_ADMIN: a network namespace of its own",
        "`cap-add: [NET_ADMIN, NET_RAW, SYS_ADMIN]`",
        "--cap-add SYS_ADMIN",
        "Nothing was changed",
    ] {
        assert!(said.contains(needed), "{needed} in: {said}");
    }
    assert!(!dir.path("node").exists(), "it wrote nothing");
}

/// `pathlab node` writes only in a directory no one else can change (N1): one others may
/// write in, or a link to one, is refused at start with the reason (exit 2), before
/// anything is written there; without `--out` it writes under the runtime directory,
/// never in a shared one such as `/tmp`.
#[test]
fn node_refuses_an_output_directory_others_could_change() {
    let test = "node_refuses_an_output_directory_others_could_change";
    let Some(_lock) = crate::util::emulated::privileged_shared(test) else {
        return;
    };
    let dir = TempDir::new("engines-out");
    let config = export_owd_probe(&dir);
    let name = config.file_stem().unwrap().to_string_lossy().into_owned();
    let open = dir.path("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let elsewhere = dir.path("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, dir.path("link")).unwrap();
    for (out, why) in [
        (open.clone(), "may be written by others (mode 0777)"),
        (dir.path("link"), "is a symbolic link"),
    ] {
        let node = std::process::Command::new(PATHLAB)
            .arg("node")
            .arg(&config)
            .args(node_credentials(&dir, &name))
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&node.stderr);
        assert_eq!(node.status.code(), Some(2), "{said}");
        assert!(said.contains(why), "{why} in: {said}");
    }
    for left in [&open, &elsewhere] {
        assert_eq!(
            std::fs::read_dir(left).unwrap().count(),
            0,
            "nothing written"
        );
    }
    let help = std::process::Command::new(PATHLAB)
        .args(["node", "--help"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("/run/pathlab/node/NODE"));
}

/// Exports the owd-probe recipe's first point into `DIR/export`; returns a node's config.
fn export_owd_probe(dir: &TempDir) -> std::path::PathBuf {
    let export = std::process::Command::new(PATHLAB)
        .args([
            "lab",
            "export",
            "containerlab",
            "owd-probe",
            "--point",
            "1",
            "--out",
        ])
        .arg(dir.path("export"))
        .output()
        .unwrap();
    assert!(export.status.success(), "{export:?}");
    std::fs::read_dir(dir.path("export"))
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|e| e == "toml"))
        .expect("a node config")
}
