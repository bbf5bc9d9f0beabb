//! The tests of `hostile::local` that need the machine to themselves (see `alone.rs`).

use crate::util;
use crate::util::emulated::{privileged, PATHLAB};
use pathlab_os::netlink::Netlink;
use pathlab_os::netns::Netns;
use pathlab_os::testing::NamedNetns;
use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use crate::hostile::local::*;

#[test]
fn lab_clean_leaves_a_named_namespace_pathlab_did_not_make() {
    let Some(_serial) = privileged("lab_clean_leaves_a_named_namespace_pathlab_did_not_make")
    else {
        return;
    };
    // The name pathlab's clean used to take for its own.
    let theirs = NamedNetns::add(&format!("pathlab-foo-{}", std::process::id()))
        .expect("makes a named namespace");
    assert!(theirs.exists());
    let output = util::emulated::pathlab(&["lab", "clean"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        theirs.exists(),
        "lab clean removed {} ({stdout})",
        theirs.path().display()
    );
    assert!(!stdout.contains("pathlab-foo"), "{stdout}");
}

#[test]
fn lab_clean_deletes_a_killed_shells_table_and_nothing_only_named_like_it() {
    let Some(_serial) =
        privileged("lab_clean_deletes_a_killed_shells_table_and_nothing_only_named_like_it")
    else {
        return;
    };
    let outer = Netns::new().expect("namespace");
    // A new namespace takes IPv4 forwarding from the host's (net.core.devconf_inherit_init_net
    // 0), which a container engine turns on: off here, so turning it back off is seen.
    outer
        .set_sysctl("net/ipv4/ip_forward", "0")
        .expect("forwarding off in the test's namespace");
    // A shell killed with its NAT table in place: the crash case, which clean must undo.
    let (killed, table) = shell_with_nat(&outer);
    let dead_pid = killed.id();
    kill(killed);
    assert!(tables_in(&outer).contains(&table), "SIGKILL leaves {table}");
    let record = record_of(&outer, &table).expect("and its record");
    // A second killed shell's table without its record, and interfaces named as a shell's
    // (`pl-PID-o`) of a dead pid: names alone, which anyone could choose.
    let (unrecorded, lookalike_table) = shell_with_nat(&outer);
    kill(unrecorded);
    std::fs::remove_file(record_of(&outer, &lookalike_table).expect("recorded")).unwrap();
    let lookalike_link = format!("pl-{dead_pid}-o");
    outer
        .run(|| Netlink::open()?.create_veth(&lookalike_link, &format!("pl-{dead_pid}-i"), None))
        .unwrap()
        .expect("makes a veth pair named like a shell's");

    let said = lab_clean_in(&outer);

    let tables = tables_in(&outer);
    assert!(!tables.contains(&table), "the killed shell's table: {said}");
    assert!(
        said.contains(&format!("removed nftables table {table}")),
        "{said}"
    );
    assert!(!record.exists(), "its record went with it");
    assert!(
        tables.contains(&lookalike_table),
        "a table pathlab has no record of is left: {said}"
    );
    assert!(
        links_in(&outer).contains(&lookalike_link),
        "an interface named like a shell's is left: {said}"
    );
    // The killed shells turned IPv4 forwarding on in `outer`, where it was off.
    let forwarding = outer
        .run(|| std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward"))
        .unwrap()
        .unwrap();
    assert_eq!(
        forwarding.trim(),
        "0",
        "forwarding restored: {said}\nlocks: {}\nruntime dir: {:?}",
        std::fs::read_to_string("/proc/locks").unwrap_or_default(),
        std::fs::read_dir("/run/pathlab")
            .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
            .unwrap_or_default()
    );
}

#[test]
fn lab_clean_forgets_the_record_of_a_table_whose_namespace_is_gone() {
    let Some(_serial) =
        privileged("lab_clean_forgets_the_record_of_a_table_whose_namespace_is_gone")
    else {
        return;
    };
    let gone = Netns::new().expect("namespace");
    let (killed, table) = shell_with_nat(&gone);
    kill(killed);
    let record = record_of(&gone, &table).expect("recorded");
    drop(gone); // the table and the forwarding setting go with it
                // The shell's program gets its SIGKILL as the shell dies, and holds the namespace
                // until it has exited: give it a moment.
    let waited = Instant::now();
    let said = loop {
        let output = util::emulated::pathlab(&["lab", "clean"]);
        assert!(output.status.success());
        let said = String::from_utf8_lossy(&output.stdout).into_owned();
        if !record.exists() || waited.elapsed() > Duration::from_secs(5) {
            break said;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!record.exists(), "{said}");
    assert!(
        said.contains(&format!("removed record {}", record.display())),
        "{said}"
    );
}

/// `pathlab lab clean` run inside `netns`, which must succeed; its output.
fn lab_clean_in(netns: &Netns) -> String {
    let output: Output = netns
        .command(PATHLAB)
        .args(["lab", "clean"])
        .output()
        .expect("pathlab runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn links_in(netns: &Netns) -> Vec<String> {
    netns
        .run(|| Netlink::open()?.links())
        .expect("enters the namespace")
        .expect("lists links")
        .into_iter()
        .map(|l| l.name)
        .collect()
}

/// The file of pathlab's record of table `table` in namespace `netns`. (By name too: the
/// kernel gives a new namespace the inode of one gone, and a record of a killed run may
/// name it until a clean sees that namespace gone.)
fn record_of(netns: &Netns, table: &str) -> Option<PathBuf> {
    let inode = netns.inode().expect("inode");
    pathlab_os::runtime::table_records()
        .expect("records readable")
        .found
        .into_iter()
        .find(|(_, record)| record.netns == inode && record.table == table)
        .map(|(path, _)| path)
}

/// `pathlab shell` with NAT in `netns`, running `sleep`, once its table is made; the
/// table's name.
/// Whether the shell `pid` has a child (of any of its threads) that runs `sleep`: its
/// program, exec'd.
fn runs_its_program(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|task| {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        children.split_whitespace().any(|child| {
            std::fs::read_to_string(format!("/proc/{child}/comm"))
                .is_ok_and(|comm| comm.trim() == "sleep")
        })
    })
}

fn shell_with_nat(netns: &Netns) -> (Shell, String) {
    let shell = Shell(
        netns
            .command(PATHLAB)
            .args(["shell", "delay 1ms", "--", "sleep", "60"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pathlab shell starts"),
    );
    let prefix = format!("pathlab-{}-", shell.id());
    let waited = Instant::now();
    loop {
        // Its table, and its program running: a shell killed while it starts its program
        // leaves the forked child holding the shell's descriptors (its share of the
        // forwarding lock among them) until the child execs, and `lab clean` run in that
        // moment rightly takes the lock for a live shell's.
        if let Some(table) = tables_in(netns)
            .into_iter()
            .find(|t| t.starts_with(&prefix))
            .filter(|_| runs_its_program(shell.id()))
        {
            return (shell, table);
        }
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "the shell made no table {prefix}* or did not start its program"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
