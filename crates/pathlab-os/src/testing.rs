//! What namespace tests share, the crates' own and the end-to-end tests in `tests/`: the
//! privileged-test gate and the lock that keeps timing tests apart ([`TestLock`]), the TCP
//! sockets they measure with (made by [`tcp_socket`]), and a scratch directory for the tests
//! of files.

use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};

use crate::tcp_socket::{self, BufferLimit, TcpSocketOptions};

/// The file the tests' lock is a `flock` on: one path for every test process on the
/// machine, so the lock holds across processes (two `cargo test` runs, two checkouts,
/// nextest's process per test) as it does between the threads of one test binary (each
/// guard opens the file anew, and flocks on two open files exclude each other).
///
/// It is in pathlab's runtime directory, but always `/run/pathlab`, never
/// `$PATHLAB_RUNTIME_DIR`: two processes with different environments must still meet at one
/// file. Not the cargo target directory, which two checkouts (worktrees) of the repository
/// do not share, and not `/tmp`, where any user may put a link for root to follow. Root
/// cannot be tricked into writing through it: `/run/pathlab` must be root's (or this
/// user's) and writable by no one else, or the lock refuses to be taken; the file is made
/// only with `O_CREAT|O_EXCL` (which follows no link) and otherwise opened read-only with
/// `O_NOFOLLOW`; a flock needs no write access, so nothing is ever written to it.
pub const TEST_LOCK_PATH: &str = "/run/pathlab/tests.lock";

/// A hold on the tests' lock ([`TEST_LOCK_PATH`]), released when dropped (or when the
/// process dies: the kernel drops a dead process's flocks).
///
/// Exclusive for a test that judges timing (the default, [`privileged`]): nothing else that
/// takes the lock runs meanwhile, in this process or another. Paired for a timing test
/// shown to hold beside another ([`privileged_paired`]): at most [`TIMING_SLOTS`] such
/// tests run at once. Shared for a test that judges no timing ([`privileged_shared`]:
/// refusals, clean-ups, hostile input, config checks): such tests run beside each other and
/// beside paired ones. Every test but one held exclusively must name its namespaces,
/// interfaces, emulators and files uniquely for its process and itself, since another may
/// be building its own at the same time.
#[must_use = "the lock is held only while the guard lives"]
#[derive(Debug)]
pub struct TestLock {
    /// The open lock file; `None` where the file does not exist and this process may not
    /// make it (no test with CAP_NET_ADMIN has run on this machine since boot, so none
    /// runs now either).
    _file: Option<std::fs::File>,
    /// The timing slots held beside the shared lock: one for [`TestLock::paired`], all for
    /// [`TestLock::heavy`].
    _slots: Vec<std::fs::File>,
}

/// How many paired timing tests run at once ([`TestLock::paired`]). Two: the emulator's
/// forwarding threads are real-time (issue 43), and a timing test judges against the
/// emulator's recording and the lateness it measured of itself in that very test, so a
/// second test beside it is one more load of the kind `scripts/test --busy` puts on the
/// whole suite.
pub const TIMING_SLOTS: usize = 2;

/// How a test holds the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    /// Alone: nothing else that takes the lock runs meanwhile.
    Alone,
    /// Beside non-timing tests and one other timing test: shared, plus a slot.
    Paired,
    /// Beside non-timing tests only: shared, plus every slot.
    Heavy,
    /// Beside anything but a test that holds it alone.
    Shared,
}

impl TestLock {
    /// Waits for the lock alone: for a test that judges timing.
    pub fn exclusive() -> TestLock {
        TestLock::take(Hold::Alone)
    }

    /// Waits for the lock beside one other timing test ([`TIMING_SLOTS`]) and any number of
    /// tests that judge no timing: for a test that judges timing against the emulator's
    /// own recording and lateness.
    pub fn paired() -> TestLock {
        TestLock::take(Hold::Paired)
    }

    /// Waits for the lock beside tests that judge no timing, with every timing slot: for a
    /// timing test whose lab is a load of its own (many emulators, a tunnel, a dozen TCP
    /// flows), which a second such test beside it made late.
    pub fn heavy() -> TestLock {
        TestLock::take(Hold::Heavy)
    }

    /// Waits for the lock beside other shared holders: for a test that judges no timing.
    pub fn shared() -> TestLock {
        TestLock::take(Hold::Shared)
    }

    fn take(hold: Hold) -> TestLock {
        let asked = std::time::Instant::now();
        let path = std::path::Path::new(TEST_LOCK_PATH);
        let lock = TestLock::take_at(path, hold, timing_slots())
            .unwrap_or_else(|error| panic!("the tests' lock {TEST_LOCK_PATH}: {error}"));
        log_wait(asked.elapsed());
        lock
    }

    /// The lock on the file `path` ([`open_lock_file`]), waited for. A test that waits to
    /// hold it alone is not starved by shared holders that keep coming: every taker
    /// passes a gate (`path.gate`, held exclusively only while taking), and the one that
    /// wants it alone holds the gate until it has it, so no new shared holder gets in.
    /// A paired test then takes one of the slots `path.slotN`.
    fn take_at(path: &std::path::Path, hold: Hold, slots: usize) -> std::io::Result<TestLock> {
        let Some(file) = open_lock_file(path)? else {
            return Ok(TestLock {
                _file: None,
                _slots: Vec::new(),
            });
        };
        let gate = open_lock_file(&sibling(path, "gate"))?;
        if let Some(gate) = &gate {
            gate.lock()?;
        }
        if hold == Hold::Alone {
            file.lock()?;
        } else {
            file.lock_shared()?;
        }
        drop(gate);
        let slots = match hold {
            Hold::Paired => take_slot(path, slots)?.into_iter().collect(),
            Hold::Heavy => take_every_slot(path, slots)?,
            Hold::Alone | Hold::Shared => Vec::new(),
        };
        Ok(TestLock {
            _file: Some(file),
            _slots: slots,
        })
    }
}

/// `path` with `.suffix` added to its file name.
fn sibling(path: &std::path::Path, suffix: &str) -> std::path::PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(".");
    name.push(suffix);
    path.with_file_name(name)
}

/// How many paired tests run at once: `PATHLAB_TEST_SLOTS` (1 to 8) if set, else
/// [`TIMING_SLOTS`]. `scripts/test --busy` sets 1: its busy loop on every core is the load
/// under test, and a second test beside each would be another.
fn timing_slots() -> usize {
    std::env::var("PATHLAB_TEST_SLOTS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| (1..=8).contains(n))
        .unwrap_or(TIMING_SLOTS)
}

/// One of the `count` slot files beside `path` ([`timing_slots`]), locked: the first free one, or
/// whichever frees first (looked at every 20 ms).
fn take_slot(path: &std::path::Path, count: usize) -> std::io::Result<Option<std::fs::File>> {
    let mut slots = Vec::with_capacity(count);
    for index in 0..count {
        match open_lock_file(&sibling(path, &format!("slot{index}")))? {
            Some(file) => slots.push(file),
            None => return Ok(None),
        }
    }
    loop {
        for (index, slot) in slots.iter().enumerate() {
            match slot.try_lock() {
                Ok(()) => return Ok(Some(slots.swap_remove(index))),
                Err(std::fs::TryLockError::WouldBlock) => {}
                Err(std::fs::TryLockError::Error(error)) => return Err(error),
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Every one of the `count` slot files beside `path`, locked in their order (so that two
/// tests that want them all never hold one each): whichever paired tests hold one finish
/// first. Empty where the files are missing and this process may not make them.
fn take_every_slot(path: &std::path::Path, count: usize) -> std::io::Result<Vec<std::fs::File>> {
    let mut slots = Vec::with_capacity(count);
    for index in 0..count {
        let Some(slot) = open_lock_file(&sibling(path, &format!("slot{index}")))? else {
            return Ok(Vec::new());
        };
        slot.lock()?;
        slots.push(slot);
    }
    Ok(slots)
}

/// Appends how long this test waited for the lock to the file `PATHLAB_LOCK_LOG` names,
/// if any, as `WAITED BINARY TEST SECONDS`: `scripts/test` takes it off the test's time
/// when it lists the slowest tests. The test is the thread's name, which libtest sets to
/// the test's; the binary tells apart tests of the same name in two crates.
fn log_wait(waited: std::time::Duration) {
    use std::io::Write as _;
    let Some(path) = std::env::var_os("PATHLAB_LOCK_LOG") else {
        return;
    };
    let binary = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.file_name()?.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "?".into());
    let test = std::thread::current().name().unwrap_or("?").to_owned();
    let line = format!("WAITED {binary} {test} {:.3}\n", waited.as_secs_f64());
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = file.write_all(line.as_bytes());
    }
}

/// Opens the lock file `path` read-only, making it (and its directory) first if missing;
/// `None` if it is missing and this process may not make it. Its directory must be root's
/// or this user's and writable by no one else; a link at `path` is refused (`ELOOP`).
fn open_lock_file(path: &std::path::Path) -> std::io::Result<Option<std::fs::File>> {
    let dir = path.parent().expect("the lock file has a directory");
    let open = || {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
    };
    match std::fs::DirBuilder::new().mode(0o755).create(dir) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => {
            return match open() {
                Ok(file) => Ok(Some(file)),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(error) => Err(error),
            };
        }
        Err(error) => return Err(error),
    }
    let metadata = std::fs::symlink_metadata(dir)?;
    let owner_ok = metadata.uid() == 0 || metadata.uid() == crate::sys::effective_uid();
    if !metadata.is_dir() || !owner_ok || metadata.mode() & 0o022 != 0 {
        return Err(std::io::Error::other(format!(
            "{} must be a directory of root's (or this user's) that no one else may write \
             (uid {}, mode {:o})",
            dir.display(),
            metadata.uid(),
            metadata.mode() & 0o7777
        )));
    }
    match open() {
        Ok(file) => return Ok(Some(file)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)
    {
        Ok(_) => {}
        // Another test made it meanwhile.
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => return Ok(None),
        Err(error) => return Err(error),
    }
    open().map(Some)
}

/// Whether the test may run, holding the tests' lock alone ([`TestLock::exclusive`]): the
/// gate of a namespace test that judges timing. CAP_NET_ADMIN is needed; without it the
/// test panics in CI and is skipped elsewhere.
pub fn privileged(test: &str) -> Option<TestLock> {
    has_net_admin(test).then(TestLock::exclusive)
}

/// [`privileged`] for a timing test that runs beside one other such test
/// ([`TestLock::paired`]): one whose emulators and hosts stayed on time beside every
/// other paired test, run after run. Its namespaces, interfaces, emulators and files must
/// have names unique to its process and itself.
///
/// Not every timing test is one (issue 43): beside another test, an emulator was seen
/// 26-140 ms late with frames waiting in the kernel before it read them (a lab of 200
/// links, an interface deleted under an emulator, nearby), and a VXLAN underlay 6 ms
/// slower. Until that is understood, a test pairs only once it has held beside the others.
pub fn privileged_paired(test: &str) -> Option<TestLock> {
    has_net_admin(test).then(TestLock::paired)
}

/// [`privileged`] for a timing test whose lab is a load of its own ([`TestLock::heavy`]):
/// it runs beside tests that judge no timing, never beside another timing test. The bond
/// recipes are: beside each other their emulators were sent late by p99 10-25 ms, 5-10
/// alone (two namespaces' tunnels, 14 TCP flows, a line of 1 Mbit/s).
pub fn privileged_heavy(test: &str) -> Option<TestLock> {
    has_net_admin(test).then(TestLock::heavy)
}

/// [`privileged`] for a namespace test that judges no timing, holding the lock shared
/// ([`TestLock::shared`]): it runs beside other such tests, never beside a timing test.
/// Its namespaces, interfaces, emulators and files must have names unique to its process
/// and itself.
pub fn privileged_shared(test: &str) -> Option<TestLock> {
    has_net_admin(test).then(TestLock::shared)
}

/// Whether this process has CAP_NET_ADMIN; if not, panics in CI and says `test` skipped
/// elsewhere.
fn has_net_admin(test: &str) -> bool {
    if crate::require_net_admin("the namespace tests").is_ok() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test}: CI=true but this process lacks CAP_NET_ADMIN; CI must run the tests as root"
    );
    skipped(test, "needs CAP_NET_ADMIN (run the tests as root; CI does)");
    false
}

/// Says that `test` skipped and why: straight to stderr, past the test harness's capture,
/// so it is seen; and appended to the file `PATHLAB_SKIP_LOG` names, if any, which
/// `scripts/test` counts at the end of the run.
pub fn skipped(test: &str, why: &str) {
    use std::io::Write as _;
    let line = format!("SKIPPED {test}: {why}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Some(path) = std::env::var_os("PATHLAB_SKIP_LOG") {
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = file.write_all(line.as_bytes());
        }
    }
}

/// A TCP connection to `server` from the local address `source` (a loopback address of
/// 127/8, say, to look like many clients).
pub fn tcp_connect_from(
    source: std::net::IpAddr,
    server: std::net::SocketAddr,
) -> std::io::Result<std::net::TcpStream> {
    tcp_socket::connect(server, Some(source), &TcpSocketOptions::default())
}

/// A TCP listener on `address` whose connections get a receive buffer of `receive` bytes
/// (as SO_RCVBUF: the kernel doubles it; past `rmem_max` with CAP_NET_ADMIN), set before
/// the handshake so the window scale follows it.
pub fn tcp_listen_with_receive_buffer(
    address: std::net::SocketAddr,
    receive: Option<usize>,
) -> std::io::Result<std::net::TcpListener> {
    let options = TcpSocketOptions {
        receive_buffer_bytes: receive,
        buffer_limit: BufferLimit::Forced,
        ..TcpSocketOptions::default()
    };
    tcp_socket::listen(address, &options)
}

/// A TCP connection to `server` with a send buffer of `send` bytes (as SO_SNDBUF; past
/// `wmem_max` with CAP_NET_ADMIN) and the congestion control `congestion`, where given,
/// set before it connects.
pub fn tcp_connect_with(
    server: std::net::SocketAddr,
    send: Option<usize>,
    congestion: Option<&str>,
) -> std::io::Result<std::net::TcpStream> {
    let options = TcpSocketOptions {
        send_buffer_bytes: send,
        buffer_limit: BufferLimit::Forced,
        congestion: congestion.map(str::to_owned),
        ..TcpSocketOptions::default()
    };
    tcp_socket::connect(server, None, &options)
}

pub use crate::sys::{raise_open_files_limit, send_signal};

/// A new network namespace with its loopback up (a fresh one has it down): what a test
/// that runs a program on 127.0.0.1 in a namespace of its own needs.
pub fn netns_with_loopback() -> std::io::Result<crate::netns::Netns> {
    let netns = crate::netns::Netns::new()?;
    netns.run(|| {
        let mut netlink = crate::netlink::Netlink::open()?;
        let lo = netlink
            .link_by_name("lo")?
            .ok_or_else(|| std::io::Error::other("no loopback"))?;
        netlink.set_up(lo.index, true)
    })??;
    Ok(netns)
}

/// A named network namespace, `/run/netns/NAME`, made as `ip netns add` makes one (a new
/// namespace bind-mounted on a file there) and deleted when dropped: something of
/// someone else's that `lab clean` must leave alone.
#[derive(Debug)]
pub struct NamedNetns {
    path: std::path::PathBuf,
}

impl NamedNetns {
    /// Makes `/run/netns/NAME`.
    pub fn add(name: &str) -> std::io::Result<NamedNetns> {
        let dir = std::path::Path::new("/run/netns");
        std::fs::create_dir_all(dir)?;
        let path = dir.join(name);
        std::fs::File::create_new(&path)?;
        let named = NamedNetns { path };
        let target = named.path.to_string_lossy().into_owned();
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    crate::sys::unshare_netns()?;
                    crate::sys::bind_mount("/proc/thread-self/ns/net", &target)
                })
                .join()
                .expect("namespace thread does not panic")
        })?;
        Ok(named)
    }

    /// Its file.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Whether it is still a namespace: its file is there with a namespace mounted on it
    /// (nsfs, another device than the directory's).
    pub fn exists(&self) -> bool {
        use std::os::unix::fs::MetadataExt as _;
        let device = |path: &std::path::Path| std::fs::metadata(path).map(|m| m.dev());
        match (device(&self.path), self.path.parent().map(device)) {
            (Ok(file), Some(Ok(dir))) => file != dir,
            _ => false,
        }
    }
}

impl Drop for NamedNetns {
    fn drop(&mut self) {
        let _ = crate::sys::unmount_detach(&self.path.to_string_lossy());
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A scratch directory for one test, under the system's temporary directory, removed
/// when dropped: the crates' unit tests and the end-to-end tests (as `util::TempDir`) use
/// this one.
#[derive(Debug)]
pub struct ScratchDir(std::path::PathBuf);

impl ScratchDir {
    /// A fresh, empty directory named after `name` and this process. Two tests of one
    /// process that ask for the same name at once would share it (the second emptying the
    /// first's: the bond MTU tests, TUN and TAP, did so when they ran side by side), so
    /// that panics, naming it.
    pub fn new(name: &str) -> ScratchDir {
        let dir = std::env::temp_dir().join(format!("pathlab-test-{name}-{}", std::process::id()));
        let fresh = IN_USE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(dir.clone());
        assert!(
            fresh,
            "two tests of this process use the scratch directory '{name}' at once: give each \
             its own name"
        );
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("can create a temp dir");
        ScratchDir(dir)
    }

    /// Its path.
    pub fn root(&self) -> &std::path::Path {
        &self.0
    }

    /// The path of `file` inside it.
    pub fn path(&self, file: &str) -> std::path::PathBuf {
        self.0.join(file)
    }
}

impl Drop for ScratchDir {
    /// Removes it; but a failing test's with `PATHLAB_KEEP_FAILED=1` set, or any test's
    /// with `PATHLAB_KEEP=1`, is kept, and where it is said, for a look at what the run
    /// left (a lab's logs and results, a twin check's record).
    fn drop(&mut self) {
        let keep = std::env::var_os("PATHLAB_KEEP").is_some()
            || (std::thread::panicking() && std::env::var_os("PATHLAB_KEEP_FAILED").is_some());
        if keep {
            eprintln!("PATHLAB_KEEP: kept {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
        IN_USE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.0);
    }
}

/// The scratch directories of this process's tests that are in use.
static IN_USE: std::sync::Mutex<std::collections::BTreeSet<std::path::PathBuf>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn a_scratch_directory_in_use_is_not_handed_out_twice() {
        let first = ScratchDir::new("twice");
        let again = std::panic::catch_unwind(|| ScratchDir::new("twice"));
        assert!(again.is_err(), "the same name twice at once");
        assert!(first.root().exists(), "the first is left as it was");
        drop(first);
        let later = ScratchDir::new("twice");
        assert!(later.root().exists(), "free again once dropped");
    }

    /// Whether another open file of `path` could take the lock now (exclusively, or
    /// shared): what a second process would see.
    fn free(path: &std::path::Path, exclusive: bool) -> bool {
        let other = std::fs::File::open(path).expect("the lock file exists");
        let taken = if exclusive {
            other.try_lock()
        } else {
            other.try_lock_shared()
        };
        taken.is_ok()
    }

    #[test]
    fn an_exclusive_hold_keeps_every_other_out_and_shared_ones_keep_out_only_the_exclusive() {
        let dir = ScratchDir::new("test-lock");
        let path = dir.path("tests.lock");
        let alone = TestLock::take_at(&path, Hold::Alone, TIMING_SLOTS).expect("takes it");
        assert!(!free(&path, true) && !free(&path, false), "held alone");
        drop(alone);
        let beside = TestLock::take_at(&path, Hold::Shared, TIMING_SLOTS).expect("shared");
        let other = TestLock::take_at(&path, Hold::Shared, TIMING_SLOTS).expect("shared beside it");
        assert!(free(&path, false), "shared beside shared");
        assert!(!free(&path, true), "no timing test beside them");
        drop((beside, other));
        assert!(free(&path, true), "released when dropped");
        // Only read: a flock needs no write access, and root writes nothing to it.
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o644, "{mode:o}");
    }

    /// The thread `taken` hears of has not got its lock within [`WAITS`]: `why` it waits.
    fn assert_waiting(taken: &std::sync::mpsc::Receiver<()>, why: &str) {
        assert!(taken.recv_timeout(WAITS).is_err(), "{why}");
    }

    /// Takes the lock at `path` as `hold` on a thread; the receiver hears once it has it,
    /// and the thread holds it until `release` is dropped.
    fn take_on_thread(
        path: &std::path::Path,
        hold: Hold,
    ) -> (
        std::sync::mpsc::Receiver<()>,
        std::sync::mpsc::Sender<()>,
        std::thread::JoinHandle<()>,
    ) {
        let (got_tx, got) = std::sync::mpsc::channel();
        let (release, release_rx) = std::sync::mpsc::channel::<()>();
        let path = path.to_owned();
        let thread = std::thread::spawn(move || {
            let lock = TestLock::take_at(&path, hold, TIMING_SLOTS).expect("takes it");
            got_tx.send(()).unwrap();
            let _ = release_rx.recv();
            drop(lock);
        });
        (got, release, thread)
    }

    const WAITS: std::time::Duration = std::time::Duration::from_millis(200);

    #[test]
    fn two_timing_tests_run_together_a_third_waits_and_one_alone_is_not_starved() {
        let dir = ScratchDir::new("test-lock-slots");
        let path = dir.path("tests.lock");
        let first = TestLock::take_at(&path, Hold::Paired, TIMING_SLOTS).expect("a slot");
        let second = TestLock::take_at(&path, Hold::Paired, TIMING_SLOTS).expect("the other slot");
        let shared = TestLock::take_at(&path, Hold::Shared, TIMING_SLOTS).expect("beside them");
        assert!(!free(&path, true), "none alone beside them");
        let (third, release_third, third_thread) = take_on_thread(&path, Hold::Paired);
        assert_waiting(&third, "no third slot");
        drop(first);
        third.recv_timeout(WAITS * 10).expect("a slot freed");
        // One waiting to be alone keeps new holders out until it has been.
        let (alone, release_alone, alone_thread) = take_on_thread(&path, Hold::Alone);
        std::thread::sleep(WAITS);
        let (late, release_late, late_thread) = take_on_thread(&path, Hold::Shared);
        assert_waiting(&late, "behind the one alone");
        drop((second, shared));
        release_third.send(()).unwrap();
        alone
            .recv_timeout(WAITS * 10)
            .expect("alone once they are done");
        assert_waiting(&late, "not beside the one alone");
        release_alone.send(()).unwrap();
        late.recv_timeout(WAITS * 10).expect("after it");
        release_late.send(()).unwrap();
        for thread in [third_thread, alone_thread, late_thread] {
            thread.join().unwrap();
        }
    }

    #[test]
    fn a_heavy_test_waits_for_every_slot_and_holds_them_all() {
        let dir = ScratchDir::new("test-lock-heavy");
        let path = dir.path("tests.lock");
        let paired = TestLock::take_at(&path, Hold::Paired, TIMING_SLOTS).expect("a slot");
        let (heavy, release_heavy, heavy_thread) = take_on_thread(&path, Hold::Heavy);
        assert_waiting(&heavy, "not beside a timing test");
        // A test that judges no timing runs beside either.
        let shared = TestLock::take_at(&path, Hold::Shared, TIMING_SLOTS).expect("beside");
        drop(paired);
        heavy
            .recv_timeout(WAITS * 10)
            .expect("every slot once it is free");
        let (second, release_second, second_thread) = take_on_thread(&path, Hold::Heavy);
        let (light, release_light, light_thread) = take_on_thread(&path, Hold::Paired);
        assert_waiting(&second, "nor beside another heavy one");
        assert_waiting(&light, "nor beside a paired one");
        release_heavy.send(()).unwrap();
        heavy_thread.join().unwrap();
        // The second heavy one and the paired one, one after the other, either first.
        let waiting = [
            (&second, &release_second, "heavy"),
            (&light, &release_light, "paired"),
        ];
        let first = loop {
            if let Some(i) = (0..2).find(|&i| waiting[i].0.recv_timeout(WAITS / 10).is_ok()) {
                break i;
            }
        };
        let ((_, release, name), (other, release_other, other_name)) =
            (waiting[first], waiting[1 - first]);
        assert_waiting(
            other,
            &format!("the {other_name} one waits beside the {name} one"),
        );
        release.send(()).unwrap();
        other.recv_timeout(WAITS * 10).expect("then the other");
        release_other.send(()).unwrap();
        drop(shared);
        second_thread.join().unwrap();
        light_thread.join().unwrap();
    }

    #[test]
    fn a_link_at_the_lock_or_a_directory_others_may_write_is_refused() {
        let dir = ScratchDir::new("test-lock-link");
        let victim = dir.path("victim");
        std::fs::write(&victim, "KEEP\n").unwrap();
        let link = dir.path("tests.lock");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let error = TestLock::take_at(&link, Hold::Alone, TIMING_SLOTS)
            .expect_err("a link is not followed");
        assert_eq!(error.raw_os_error(), Some(libc::ELOOP), "{error}");
        let dangling = dir.path("dangling.lock");
        std::os::unix::fs::symlink(dir.path("made-through-the-link"), &dangling).unwrap();
        TestLock::take_at(&dangling, Hold::Alone, TIMING_SLOTS).expect_err("nor made through");
        assert!(!dir.path("made-through-the-link").exists());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "KEEP\n");

        let open_dir = dir.path("open");
        std::fs::create_dir(&open_dir).unwrap();
        std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let error = TestLock::take_at(&open_dir.join("tests.lock"), Hold::Alone, TIMING_SLOTS)
            .expect_err("anyone could put a link there");
        assert!(
            error.to_string().contains("no one else may write"),
            "{error}"
        );
    }
}
