//! Where running emulators leave their control sockets and locks, and the records of what
//! pathlab made that would outlive a killed run (what a killed run left is found by
//! [`crate::clean`]).
//!
//! Everything lives under one directory (`/run/pathlab`, or `$PATHLAB_RUNTIME_DIR`):
//! `emulate/NAME.sock` is an emulator's control socket, `locks/` holds one lock file per
//! interface an emulator forwards, `owned/` one record per kernel object a live or killed
//! run made ([`record_table`]). Locks are `flock`s, which the kernel releases when the
//! process dies, so a killed emulator never keeps an interface busy.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The directory for sockets and locks.
pub fn runtime_dir() -> PathBuf {
    std::env::var_os("PATHLAB_RUNTIME_DIR")
        .map_or_else(|| PathBuf::from("/run/pathlab"), PathBuf::from)
}

/// The control socket of the emulator called `name`.
pub fn control_socket_path(name: &str) -> PathBuf {
    runtime_dir().join("emulate").join(format!("{name}.sock"))
}

/// Checks that an emulator name is usable in a file name: 1 to 32 letters, digits, `-`, `_`.
pub fn validate_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "emulator name '{name}' must be 1 to 32 letters, digits, '-' or '_'"
        ))
    }
}

/// Takes the lock of interface `ifindex` in the calling thread's namespace. Returns the
/// open lock file, or `None` if another process holds it, with the lock's path.
pub fn lock_interface(ifindex: u32) -> io::Result<(Option<File>, PathBuf)> {
    let netns = current_netns()?;
    let dir = runtime_dir().join("locks");
    fs::create_dir_all(&dir)?;
    let path = dir.join(format!("netns-{netns}-if-{ifindex}.lock"));
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    match file.try_lock() {
        Ok(()) => Ok((Some(file), path)),
        Err(fs::TryLockError::WouldBlock) => Ok((None, path)),
        Err(fs::TryLockError::Error(error)) => Err(error),
    }
}

/// The inode of the calling thread's network namespace: what names a namespace in records
/// and lock files (two namespaces alive at once never share one).
pub fn current_netns() -> io::Result<u64> {
    Ok(fs::metadata("/proc/thread-self/ns/net")?.ino())
}

/// A process, known by its pid and when it started, so that a pid the kernel has since
/// given to another process does not pass for the owner of what the first one made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Owner {
    /// Its pid.
    pub pid: u32,
    /// When it started, clock ticks after boot (`/proc/PID/stat`, field 22).
    pub start_ticks: u64,
    /// The inode of its pid namespace: a pid means that process only in that namespace.
    pub pid_namespace: u64,
}

impl Owner {
    /// This process.
    pub fn this_process() -> io::Result<Owner> {
        let stat = fs::read_to_string("/proc/self/stat")?;
        let (_, start_ticks) = parse_stat(&stat).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "unreadable /proc/self/stat")
        })?;
        Ok(Owner {
            pid: std::process::id(),
            start_ticks,
            pid_namespace: fs::metadata("/proc/self/ns/pid")?.ino(),
        })
    }

    /// Whether the owner may still be running. Only a definite "gone" is false: no
    /// such pid, a zombie, or the pid now held by a process that started at another
    /// time. An owner in another pid namespace cannot be looked up from here, so it is
    /// taken as alive.
    pub fn is_alive(&self) -> bool {
        let same_namespace =
            fs::metadata("/proc/self/ns/pid").is_ok_and(|m| m.ino() == self.pid_namespace);
        if !same_namespace {
            return true;
        }
        match fs::read_to_string(format!("/proc/{}/stat", self.pid)) {
            Ok(stat) => match parse_stat(&stat) {
                Some((state, start_ticks)) => {
                    start_ticks == self.start_ticks && state != 'Z' && state != 'X'
                }
                None => true,
            },
            Err(error) => error.kind() != io::ErrorKind::NotFound,
        }
    }
}

/// The state and start time of a `/proc/PID/stat` line. The command name (field 2) is in
/// parentheses and may hold spaces and parentheses itself, so fields are counted from
/// the last `)`: the state is field 3, the start time field 22.
fn parse_stat(stat: &str) -> Option<(char, u64)> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let start_ticks = fields.nth(22 - 4)?.parse().ok()?;
    Some((state, start_ticks))
}

/// The record of an nftables table pathlab made (a shell's NAT): who made it and in which
/// network namespace. It is what lets `lab clean` delete the table after its owner was
/// killed, and only then: a table of the same name without a record is not pathlab's.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TableRecord {
    /// The process that made the table.
    pub owner: Owner,
    /// The network namespace the table is in ([`current_netns`]).
    pub netns: u64,
    /// The table's name (IPv4 family).
    pub table: String,
}

/// A record this process wrote, removed when dropped: keep it until what it records is
/// gone.
#[derive(Debug)]
pub struct Recorded {
    path: Option<PathBuf>,
}

impl Recorded {
    /// Leaves the record in place, for `lab clean` (when deleting what it records failed).
    pub fn keep(mut self) {
        self.path = None;
    }
}

impl Drop for Recorded {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            let _ = fs::remove_file(path);
        }
    }
}

/// The directory of records. Only its owner may write in it (0700): a record there was
/// written by a process with the rights to make what it records, not forged by a user
/// who can only name something alike.
fn records_dir() -> PathBuf {
    runtime_dir().join("owned")
}

/// Records that this process is about to make nftables table `table` in the calling
/// thread's namespace. Written before the table is made, so a run killed at any instant
/// after leaves a record of it; drop the returned value once the table is deleted.
pub fn record_table(table: &str) -> io::Result<Recorded> {
    let record = TableRecord {
        owner: Owner::this_process()?,
        netns: current_netns()?,
        table: table.to_owned(),
    };
    // The table's name is pathlab's own (`pathlab-PID-N`): a file name as it is.
    let dir = private_dir(&records_dir())?;
    let name = format!("nft-{}-{table}.json", record.netns);
    let path = dir.join(&name);
    let text = serde_json::to_string(&record).map_err(io::Error::other)?;
    crate::files::Dir::output(&dir)
        .and_then(|dir| dir.write_file(&name, text.as_bytes()))
        .map_err(crate::files::FileError::into_io)?;
    Ok(Recorded { path: Some(path) })
}

/// Every table record (with its file), for `lab clean`, and the files refused
/// ([`trusted_records`]).
pub fn table_records() -> io::Result<Records<TableRecord>> {
    trusted_records(&records_dir())
}

/// Makes `dir` (under the runtime directory) if it is not there, only its owner may
/// write in it, and returns it.
pub(crate) fn private_dir(dir: &Path) -> io::Result<PathBuf> {
    fs::create_dir_all(runtime_dir())?;
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(error) if error.kind() != io::ErrorKind::AlreadyExists => Err(error),
        _ => Ok(dir.to_owned()),
    }
}

/// The records of a directory: those read, and the files refused.
#[derive(Debug)]
pub struct Records<T> {
    /// Each record with its file, in file-name order.
    pub found: Vec<(PathBuf, T)>,
    /// The files that looked like records but were not taken.
    pub refused: Vec<Refused>,
}

/// A file that was not taken as a record, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The file.
    pub path: PathBuf,
    /// Why (a symbolic link, another user's, writable by others, not a record).
    pub why: String,
}

/// The records of kind `T` (JSON files of at most [`MAX_RECORD_BYTES`], `*.json`) in `dir`,
/// under the runtime directory. Each file is opened without following a link and checked
/// on the opened descriptor: a regular file owned by root or this user that no one else
/// may write; any other is refused (with the reason), as is one that is no record. The
/// runtime directory and `dir` must be directories (not links) owned by root or this user
/// that no one else may write in, else nothing in them is taken (an error); no directory
/// is no records.
pub(crate) fn trusted_records<T: serde::de::DeserializeOwned>(
    dir: &Path,
) -> io::Result<Records<T>> {
    let mut records = Records {
        found: Vec::new(),
        refused: Vec::new(),
    };
    for checked in [runtime_dir().as_path(), dir] {
        match check_trusted_dir(checked) {
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(records),
            other => other?,
        }
    }
    for entry in fs::read_dir(dir)?.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        match read_record(&path) {
            Ok(record) => records.found.push((path, record)),
            Err(why) => records.refused.push(Refused { path, why }),
        }
    }
    records.found.sort_by(|a, b| a.0.cmp(&b.0));
    records.refused.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(records)
}

/// Whether a file or directory's owner may be trusted: root or this user.
fn trusted_owner(uid: u32) -> bool {
    uid == 0 || uid == crate::sys::effective_uid()
}

/// Checks that `dir` is a directory, not a symbolic link, owned by root or this user, that
/// neither its group nor others may write in: where a record may be trusted.
fn check_trusted_dir(dir: &Path) -> io::Result<()> {
    let meta = fs::symlink_metadata(dir)?;
    let mode = meta.permissions().mode();
    let why = if !meta.is_dir() {
        "is not a directory"
    } else if !trusted_owner(meta.uid()) {
        "belongs to another user"
    } else if mode & 0o022 != 0 {
        "is writable by group or others"
    } else {
        return Ok(());
    };
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "{} {why} (mode {:04o}, uid {}); its records are not trusted",
            dir.display(),
            mode & 0o7777,
            meta.uid()
        ),
    ))
}

/// The largest record file read: records are pathlab's own and small (an interface's
/// addresses and routes), so a bigger file is not one.
pub const MAX_RECORD_BYTES: u64 = 1 << 20;

/// Reads the record at `path`, opened without following a link or blocking, if the opened
/// file is a regular file owned by root or this user that no one else may write; else
/// why not.
fn read_record<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, String> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|error| match error.raw_os_error() {
            Some(libc::ELOOP) => "a symbolic link".to_owned(),
            _ => format!("unreadable ({error})"),
        })?;
    let meta = file.metadata().map_err(|error| error.to_string())?;
    let mode = meta.permissions().mode() & 0o7777;
    if !meta.is_file() {
        return Err("not a regular file".to_owned());
    }
    if !trusted_owner(meta.uid()) {
        return Err(format!(
            "owned by uid {}, neither root nor this user",
            meta.uid()
        ));
    }
    if mode & 0o022 != 0 {
        return Err(format!("writable by group or others (mode {mode:04o})"));
    }
    let mut text = String::new();
    file.take(MAX_RECORD_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|error| format!("unreadable ({error})"))?;
    if text.len() as u64 > MAX_RECORD_BYTES {
        return Err(format!("larger than {MAX_RECORD_BYTES} bytes"));
    }
    serde_json::from_str(&text).map_err(|error| format!("not a record ({error})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_are_read_past_the_command_name() {
        // Field 22 is the start time; a command name may hold ") " itself.
        let stat = "4242 (a) b (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    987654 1000 200";
        assert_eq!(parse_stat(stat), Some(('S', 987_654)));
        assert_eq!(parse_stat("4242 (x"), None);
        let own = fs::read_to_string("/proc/self/stat").unwrap();
        assert!(parse_stat(&own).is_some(), "{own}");
    }

    #[test]
    fn an_owner_is_gone_when_its_pid_is_another_process_or_none() {
        let me = Owner::this_process().unwrap();
        assert!(me.is_alive());
        let reused = Owner {
            start_ticks: me.start_ticks + 1,
            ..me
        };
        assert!(!reused.is_alive(), "the pid now belongs to another process");
        // pid_max is at most 2^22: this pid cannot exist.
        let never = Owner { pid: 1 << 23, ..me };
        assert!(!never.is_alive());
        let elsewhere = Owner {
            pid: 1 << 23,
            pid_namespace: 1,
            ..me
        };
        assert!(
            elsewhere.is_alive(),
            "another pid namespace cannot be checked"
        );
    }

    #[test]
    fn a_zombie_owner_is_gone() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let stat_path = format!("/proc/{}/stat", child.id());
        let stat = loop {
            let stat = fs::read_to_string(&stat_path).unwrap();
            if parse_stat(&stat).unwrap().0 == 'Z' {
                break stat;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        let owner = Owner {
            pid: child.id(),
            start_ticks: parse_stat(&stat).unwrap().1,
            pid_namespace: Owner::this_process().unwrap().pid_namespace,
        };
        assert!(!owner.is_alive(), "exited, not reaped yet");
        child.wait().unwrap();
        assert!(!owner.is_alive());
    }

    #[test]
    fn a_record_is_read_only_when_its_owners_alone_can_write_it() {
        let dir = crate::testing::ScratchDir::new("runtime-records");
        let path = dir.path("r.json");
        fs::write(&path, "[1]").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_record::<Vec<u32>>(&path), Ok(vec![1]));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o620)).unwrap();
        let refused = read_record::<Vec<u32>>(&path).unwrap_err();
        assert!(refused.contains("writable by group or others"), "{refused}");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.path("l.json");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert_eq!(
            read_record::<Vec<u32>>(&link),
            Err("a symbolic link".to_owned())
        );
        fs::write(&path, "{").unwrap();
        assert!(read_record::<Vec<u32>>(&path)
            .unwrap_err()
            .starts_with("not a record"));
        if crate::sys::effective_uid() == 0 {
            fs::write(&path, "[1]").unwrap();
            std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
            let refused = read_record::<Vec<u32>>(&path).unwrap_err();
            assert!(refused.contains("owned by uid 65534"), "{refused}");
        }
        fs::set_permissions(dir.root(), fs::Permissions::from_mode(0o777)).unwrap();
        assert!(check_trusted_dir(dir.root()).is_err());
        fs::set_permissions(dir.root(), fs::Permissions::from_mode(0o755)).unwrap();
        assert!(check_trusted_dir(dir.root()).is_ok());
        assert!(check_trusted_dir(&link).is_err(), "not a directory");
    }

    #[test]
    fn names_are_checked() {
        assert!(validate_name("wan-1").is_ok());
        assert!(validate_name("").is_err());
        assert!(validate_name("../x").is_err());
        assert!(validate_name(&"a".repeat(33)).is_err());
    }
}
