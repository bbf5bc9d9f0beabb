//! Files pathlab opens on someone else's word: secret files (keys and tokens), files read
//! with a bound, and the directories given at start inside which a remote client may name
//! files (`--trace-dir`, `--record-dir`).
//!
//! Every read here opens first and then looks at what it opened (`fstat` on the descriptor,
//! never `stat` then `open`, which a swapped file defeats), opens without blocking (a FIFO
//! with no writer would otherwise hold the reader forever), refuses anything but a regular
//! file (`/dev/zero` never ends) and reads at most a bound. No error here quotes what a file
//! holds: the messages name the file and what is wrong with it, so a refusal cannot be used
//! to read a file one may not.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{
    DirBuilderExt as _, FileTypeExt as _, MetadataExt as _, OpenOptionsExt as _,
    PermissionsExt as _,
};
use std::path::{Path, PathBuf};

use crate::sys;

/// The largest key or token file read: a key is 32 bytes, a token a line; anything far
/// larger was not meant as one.
pub const MAX_SECRET_BYTES: u64 = 64 * 1024;

/// The longest file name a directory entry can have on Linux (`NAME_MAX`).
const MAX_NAME_BYTES: usize = 255;

/// Why a file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// A name given for a file inside a directory is not a plain file name.
    #[error("{name:?} is not a plain file name: {why}")]
    NotAName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// Opening or reading failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: io::Error,
    },
    /// It is something other than a regular file (a FIFO, a device, a directory, a link).
    #[error("{path} is {kind}, not a regular file")]
    NotRegular {
        /// The file.
        path: String,
        /// What it is instead.
        kind: &'static str,
    },
    /// It is larger than the bound of its kind.
    #[error("{path} is larger than {limit_bytes} bytes, the most taken for it")]
    TooLarge {
        /// The file.
        path: String,
        /// The bound.
        limit_bytes: u64,
    },
    /// A directory to write in that someone else could change under the writer: a link,
    /// another user's, or one others may write in.
    #[error(
        "{path} {why}: pathlab writes only in a directory it made, or one its user owns and \
         no one else may write in (give another directory, or make it so)"
    )]
    NotOurs {
        /// The directory.
        path: String,
        /// What is wrong with it.
        why: String,
    },
    /// A key or token file that users other than its owner may read or write.
    #[error(
        "{path} is open to other users (mode {mode:04o}); a key or token must be its owner's \
         only, as ssh asks of its keys: chmod 600 {path}"
    )]
    OpenToOthers {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
}

/// The mode of the files an output directory's owner writes there (less the umask):
/// results and recordings others may read, as `File::create` would make them.
const OUTPUT_FILE_MODE: libc::mode_t = 0o644;

impl FileError {
    /// As an I/O error, for a caller whose message already names the file: the system's
    /// own error where it is one, else this one.
    pub fn into_io(self) -> io::Error {
        match self {
            FileError::Io { source, .. } => source,
            other => io::Error::other(other),
        }
    }
}

/// Checks that `name` names a file directly inside a directory: 1 to 255 bytes, no `/`,
/// not `.` or `..`, no control characters (the name reaches logs). Anything else could
/// reach outside the directory or hide in a log line.
pub fn check_plain_name(name: &str) -> Result<(), FileError> {
    let refuse = |why| {
        Err(FileError::NotAName {
            name: name.to_owned(),
            why,
        })
    };
    if name.is_empty() {
        return refuse("it is empty");
    }
    if name.len() > MAX_NAME_BYTES {
        return refuse("it is longer than 255 bytes");
    }
    if name.contains('/') {
        return refuse("give a file name, without '/' (no path: the directory is set at start)");
    }
    if name == "." || name == ".." {
        return refuse("'.' and '..' are not files");
    }
    if name.chars().any(char::is_control) {
        return refuse("it has control characters");
    }
    Ok(())
}

/// Reads the regular file at `path`, at most `max_bytes` of it.
pub fn read_regular(path: &Path, max_bytes: u64) -> Result<Vec<u8>, FileError> {
    let (file, shown) = open_without_blocking(path)?;
    read_opened(file, &shown, max_bytes)
}

/// Reads a key or token file: a regular file of at most [`MAX_SECRET_BYTES`] that no user
/// but its owner may read or write (mode `0600` or tighter), else refused as ssh refuses
/// a private key other users can read.
pub fn read_secret(path: &Path) -> Result<Vec<u8>, FileError> {
    let (file, shown) = open_without_blocking(path)?;
    let mode = regular_metadata(&file, &shown)?.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(FileError::OpenToOthers { path: shown, mode });
    }
    read_opened(file, &shown, MAX_SECRET_BYTES)
}

/// A directory opened at start, inside which files are later named by plain file names
/// only, opened relative to it (`openat`): renaming or replacing the directory's path
/// afterwards changes nothing, and no name reaches outside it.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

impl Dir {
    /// Opens the directory at `path`, if one is given (an optional `--record-dir`, say).
    pub fn open_optional(path: Option<&Path>) -> Result<Option<Dir>, FileError> {
        path.map(Dir::open).transpose()
    }

    /// Opens the directory at `path`.
    pub fn open(path: &Path) -> Result<Dir, FileError> {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
        let io_error = |source| FileError::Io {
            path: path.display().to_string(),
            source,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY)
            .open(&path)
            .map_err(io_error)?;
        Ok(Dir {
            fd: file.into(),
            path,
        })
    }

    /// Its path, as it was opened (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of `name` inside it (for messages).
    pub fn shown(&self, name: &str) -> String {
        self.path.join(name).display().to_string()
    }

    /// Reads the regular file `name` (a plain name, see [`check_plain_name`]), at most
    /// `max_bytes`. A symbolic link is refused, not followed: what the directory holds is
    /// what may be read.
    pub fn read(&self, name: &str, max_bytes: u64) -> Result<Vec<u8>, FileError> {
        check_plain_name(name)?;
        let shown = self.shown(name);
        let fd = sys::openat(
            self.fd.as_fd(),
            name,
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOFOLLOW,
            0,
        )
        .map_err(|source| symlink_or_io(&shown, source))?;
        read_opened(File::from(fd), &shown, max_bytes)
    }

    /// The output directory at `path`: made (with its parents) if it is not there, else
    /// taken only if it is a directory (not a link to one), this user's, and writable by
    /// no one else. What is in it was then put there by this user, so a file written
    /// there can be one this process made ([`Dir::replace`]): a link planted at a file's
    /// name before the run (`/tmp/out/link-a.jsonl -> /root/x`) is never written through.
    pub fn output(path: &Path) -> Result<Dir, FileError> {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
        let shown = path.display().to_string();
        let io_error = |source| FileError::Io {
            path: shown.clone(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io_error)?;
        }
        match std::fs::DirBuilder::new().mode(0o755).create(&path) {
            Err(error) if error.kind() != io::ErrorKind::AlreadyExists => {
                return Err(io_error(error))
            }
            _ => {}
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|source| not_ours_if_link(&shown, source))?;
        check_ours(&file, &shown)?;
        Ok(Dir {
            fd: file.into(),
            path,
        })
    }

    /// Makes the file `name` (a plain name) anew for writing: whatever had the name (a
    /// file of an earlier run, a link) is removed first, itself and never what a link
    /// points to, and the file is then created with `O_CREAT|O_EXCL|O_NOFOLLOW`, so what
    /// is written is always a file this call made. Mode `0644` less the umask.
    pub fn replace(&self, name: &str) -> Result<File, FileError> {
        Ok(self.make(name)?.0)
    }

    /// As [`Dir::replace`], with what identifies the file made, to reopen it later with
    /// [`Dir::reopen`] and find that very file or nothing.
    pub fn make(&self, name: &str) -> Result<(File, Made), FileError> {
        check_plain_name(name)?;
        let shown = self.shown(name);
        match sys::unlinkat(self.fd.as_fd(), name) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => {
                return Err(FileError::Io {
                    path: shown,
                    source: error,
                })
            }
            _ => {}
        }
        let fd = sys::openat(
            self.fd.as_fd(),
            name,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
            OUTPUT_FILE_MODE,
        )
        .map_err(|source| symlink_or_io(&shown, source))?;
        let file = File::from(fd);
        let metadata = regular_metadata(&file, &shown)?;
        let made = Made {
            name: name.to_owned(),
            device: metadata.dev(),
            inode: metadata.ino(),
        };
        Ok((file, made))
    }

    /// Writes `bytes` as the file `name`, made anew ([`Dir::replace`]).
    pub fn write_file(&self, name: &str, bytes: &[u8]) -> Result<(), FileError> {
        let mut file = self.replace(name)?;
        io::Write::write_all(&mut file, bytes).map_err(|source| FileError::Io {
            path: self.shown(name),
            source,
        })
    }

    /// Opens a file [`Dir::make`] made, to append to it; refused if the name now holds
    /// anything else (a link, another file, one with other names too).
    pub fn reopen(&self, made: &Made) -> Result<File, FileError> {
        let shown = self.shown(&made.name);
        let fd = sys::openat(
            self.fd.as_fd(),
            &made.name,
            libc::O_WRONLY | libc::O_APPEND | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            0,
        )
        .map_err(|source| symlink_or_io(&shown, source))?;
        let file = File::from(fd);
        let metadata = regular_metadata(&file, &shown)?;
        if (metadata.dev(), metadata.ino()) != (made.device, made.inode) || metadata.nlink() != 1 {
            return Err(FileError::NotOurs {
                path: shown,
                why: "is no longer the file this run made there".to_owned(),
            });
        }
        Ok(file)
    }

    /// Creates the new file `name` (a plain name) for writing, readable and writable by
    /// this user only (`0600`). An existing file, a symbolic link included, is never
    /// opened: `O_CREAT|O_EXCL|O_NOFOLLOW` make the kernel refuse it.
    pub fn create_new(&self, name: &str) -> Result<File, FileError> {
        check_plain_name(name)?;
        let shown = self.shown(name);
        let fd = sys::openat(
            self.fd.as_fd(),
            name,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
            0o600,
        )
        .map_err(|source| symlink_or_io(&shown, source))?;
        Ok(File::from(fd))
    }
}

/// Makes the file at `path` anew for writing, in its directory as given: what had its
/// name (an earlier file, a link planted there) is removed first, and the file is created
/// with `O_CREAT|O_EXCL|O_NOFOLLOW` ([`Dir::replace`]), so a file a privileged command
/// writes where its user said (`emulate --record FILE`) is always one it made.
pub fn create_replacing(path: &Path) -> Result<File, FileError> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| FileError::NotAName {
            name: path.display().to_string(),
            why: "it does not end in a file name",
        })?;
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    Dir::open(parent)?.replace(name)
}

/// Opens `path` for reading with `O_NONBLOCK` (a FIFO with no writer opens at once instead
/// of waiting), with its name for messages.
fn open_without_blocking(path: &Path) -> Result<(File, String), FileError> {
    let shown = path.display().to_string();
    match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
    {
        Ok(file) => Ok((file, shown)),
        Err(source) => Err(FileError::Io {
            path: shown,
            source,
        }),
    }
}

/// A file [`Dir::make`] made: its name and identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Made {
    name: String,
    device: u64,
    inode: u64,
}

impl Made {
    /// Its name in its directory.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Refuses an opened directory that is not this user's, or that others may write in.
fn check_ours(file: &File, path: &str) -> Result<(), FileError> {
    let metadata = file.metadata().map_err(|source| FileError::Io {
        path: path.to_owned(),
        source,
    })?;
    let not_ours = |why: String| {
        Err(FileError::NotOurs {
            path: path.to_owned(),
            why,
        })
    };
    let me = sys::effective_uid();
    if metadata.uid() != me {
        return not_ours(format!("belongs to user {}, not to {me}", metadata.uid()));
    }
    let mode = metadata.permissions().mode() & 0o7777;
    if mode & 0o022 != 0 {
        return not_ours(format!("may be written by others (mode {mode:04o})"));
    }
    Ok(())
}

/// A directory opened with `O_DIRECTORY|O_NOFOLLOW` that was a link (`ENOTDIR`, or
/// `ELOOP`) is refused as such.
fn not_ours_if_link(path: &str, source: io::Error) -> FileError {
    let link = source.raw_os_error() == Some(libc::ELOOP)
        || (source.raw_os_error() == Some(libc::ENOTDIR)
            && std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()));
    if link {
        FileError::NotOurs {
            path: path.to_owned(),
            why: "is a symbolic link".to_owned(),
        }
    } else {
        FileError::Io {
            path: path.to_owned(),
            source,
        }
    }
}

/// `O_NOFOLLOW` on a link answers `ELOOP` ("too many levels of symbolic links"); say what
/// it means.
fn symlink_or_io(path: &str, source: io::Error) -> FileError {
    if source.raw_os_error() == Some(libc::ELOOP) {
        FileError::NotRegular {
            path: path.to_owned(),
            kind: "a symbolic link",
        }
    } else {
        FileError::Io {
            path: path.to_owned(),
            source,
        }
    }
}

/// The metadata of an opened file (`fstat`), if it is a regular file.
fn regular_metadata(file: &File, path: &str) -> Result<std::fs::Metadata, FileError> {
    let metadata = file.metadata().map_err(|source| FileError::Io {
        path: path.to_owned(),
        source,
    })?;
    let kind = metadata.file_type();
    let what = if kind.is_file() {
        return Ok(metadata);
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "a special file"
    };
    Err(FileError::NotRegular {
        path: path.to_owned(),
        kind: what,
    })
}

/// Reads an opened file whole if it is a regular file of at most `max_bytes` (a file
/// that grows while read is cut at the bound and refused).
fn read_opened(file: File, path: &str, max_bytes: u64) -> Result<Vec<u8>, FileError> {
    let too_large = || FileError::TooLarge {
        path: path.to_owned(),
        limit_bytes: max_bytes,
    };
    let length = regular_metadata(&file, path)?.len();
    if length > max_bytes {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(length).unwrap_or(0));
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|source| FileError::Io {
            path: path.to_owned(),
            source,
        })?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_large());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::ScratchDir;

    /// Writes `contents` into `name` of `dir` with permissions `mode`.
    fn file(dir: &ScratchDir, name: &str, contents: &str, mode: u32) -> PathBuf {
        let path = dir.path(name);
        std::fs::write(&path, contents).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn only_plain_file_names_are_taken() {
        for good in ["a.trace", "x", ".hidden", "a..b", "名前.jsonl"] {
            assert!(check_plain_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "/etc/shadow",
            "../x",
            "a/b",
            "x/",
            "a\nb",
            "a\u{1b}[2Jb",
            &"a".repeat(256),
        ] {
            assert!(
                matches!(check_plain_name(bad), Err(FileError::NotAName { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_secret_file_others_may_read_or_write_is_refused_without_its_contents() {
        let scratch = ScratchDir::new("files-secret");
        let ok = file(&scratch, "ok", "a secret line\n", 0o600);
        assert_eq!(read_secret(&ok).unwrap(), b"a secret line\n");
        let owner_read_only = file(&scratch, "ro", "x", 0o400);
        assert!(read_secret(&owner_read_only).is_ok());
        for mode in [0o644, 0o640, 0o604, 0o620, 0o602] {
            let path = file(&scratch, &format!("m{mode:o}"), "THE SECRET", mode);
            let error = read_secret(&path).unwrap_err();
            assert!(
                matches!(error, FileError::OpenToOthers { mode: m, .. } if m == mode),
                "{mode:o}: {error}"
            );
            let text = error.to_string();
            assert!(
                text.contains("chmod 600") && !text.contains("THE SECRET"),
                "{text}"
            );
        }
        let large = file(
            &scratch,
            "large",
            &"x".repeat(MAX_SECRET_BYTES as usize + 1),
            0o600,
        );
        assert!(matches!(
            read_secret(&large),
            Err(FileError::TooLarge { .. })
        ));
        assert!(matches!(
            read_secret(scratch.root()),
            Err(FileError::NotRegular { .. })
        ));
    }

    #[test]
    fn a_fifo_or_a_device_is_refused_at_once_and_a_large_file_at_its_bound() {
        let scratch = ScratchDir::new("files-regular");
        let fifo = scratch.path("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // With no writer, a blocking open would wait here forever.
        assert!(matches!(
            read_regular(&fifo, 100),
            Err(FileError::NotRegular { kind: "a FIFO", .. })
        ));
        assert!(matches!(
            read_regular(Path::new("/dev/zero"), 100),
            Err(FileError::NotRegular {
                kind: "a device",
                ..
            })
        ));
        let file = file(&scratch, "f", "0123456789", 0o644);
        assert_eq!(read_regular(&file, 10).unwrap(), b"0123456789");
        assert!(matches!(
            read_regular(&file, 9),
            Err(FileError::TooLarge { limit_bytes: 9, .. })
        ));
        let dir = Dir::open(scratch.root()).unwrap();
        assert!(matches!(
            dir.read("fifo", 100),
            Err(FileError::NotRegular { kind: "a FIFO", .. })
        ));
        assert_eq!(dir.read("f", 100).unwrap(), b"0123456789");
    }

    #[test]
    fn a_directory_reads_and_creates_only_its_own_entries_and_follows_no_link() {
        let scratch = ScratchDir::new("files-dir");
        let outside = ScratchDir::new("files-dir-outside");
        let target = file(&outside, "target", "KEEP", 0o644);
        std::os::unix::fs::symlink(&target, scratch.path("link")).unwrap();
        let dir = Dir::open(scratch.root()).unwrap();
        assert!(matches!(
            dir.read("link", 100),
            Err(FileError::NotRegular {
                kind: "a symbolic link",
                ..
            })
        ));
        assert!(matches!(
            dir.read("../dir-outside/target", 100),
            Err(FileError::NotAName { .. })
        ));
        // A link pre-placed at the name: not followed, nothing written through it.
        assert!(dir.create_new("link").is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "KEEP");
        let mut file = dir.create_new("new.jsonl").unwrap();
        std::io::Write::write_all(&mut file, b"x").unwrap();
        let mode = std::fs::metadata(scratch.path("new.jsonl"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(dir.create_new("new.jsonl").is_err(), "never overwritten");
        assert!(Dir::open(&target).is_err(), "a file is not a directory");
    }

    #[test]
    fn an_output_directory_is_made_or_taken_only_when_no_one_else_can_change_it() {
        let scratch = ScratchDir::new("files-output");
        let fresh = Dir::output(&scratch.path("a/b/fresh")).unwrap();
        assert!(fresh.path().ends_with("a/b/fresh"));
        assert!(
            Dir::output(&scratch.path("a/b/fresh")).is_ok(),
            "ours, again"
        );
        let open = scratch.path("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let error = Dir::output(&open).unwrap_err();
        assert!(
            matches!(&error, FileError::NotOurs { why, .. } if why.contains("0777")),
            "{error}"
        );
        std::os::unix::fs::symlink(scratch.path("a"), scratch.path("link")).unwrap();
        let error = Dir::output(&scratch.path("link")).unwrap_err();
        assert!(
            matches!(&error, FileError::NotOurs { why, .. } if why.contains("symbolic link")),
            "{error}"
        );
        if sys::effective_uid() == 0 {
            let theirs = scratch.path("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
            let error = Dir::output(&theirs).unwrap_err();
            assert!(
                matches!(&error, FileError::NotOurs { why, .. } if why.contains("65534")),
                "{error}"
            );
        }
    }

    #[test]
    fn a_file_written_in_an_output_directory_is_always_one_it_made() {
        let scratch = ScratchDir::new("files-replace");
        let outside = ScratchDir::new("files-replace-outside");
        let target = file(&outside, "target", "KEEP", 0o644);
        let dir = Dir::output(&scratch.path("out")).unwrap();
        std::os::unix::fs::symlink(&target, scratch.path("out/link-a.jsonl")).unwrap();
        std::fs::write(scratch.path("out/result.json"), "an earlier run's").unwrap();
        dir.write_file("link-a.jsonl", b"written").unwrap();
        dir.write_file("result.json", b"this run's").unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "KEEP");
        let written = scratch.path("out/link-a.jsonl");
        assert!(std::fs::symlink_metadata(&written).unwrap().is_file());
        assert_eq!(std::fs::read_to_string(&written).unwrap(), "written");
        assert_eq!(
            std::fs::read_to_string(scratch.path("out/result.json")).unwrap(),
            "this run's"
        );
        assert!(dir.replace("../x").is_err());
    }

    #[test]
    fn a_made_file_reopens_only_while_it_is_that_file_alone() {
        let scratch = ScratchDir::new("files-reopen");
        let outside = ScratchDir::new("files-reopen-outside");
        let target = file(&outside, "target", "KEEP", 0o644);
        let dir = Dir::output(&scratch.path("out")).unwrap();
        let (mut file, made) = dir.make("rec.jsonl").unwrap();
        std::io::Write::write_all(&mut file, b"a").unwrap();
        std::io::Write::write_all(&mut dir.reopen(&made).unwrap(), b"b").unwrap();
        assert_eq!(
            std::fs::read_to_string(scratch.path("out/rec.jsonl")).unwrap(),
            "ab"
        );
        // A second name for it: refused (it could be reached and changed through that).
        std::fs::hard_link(scratch.path("out/rec.jsonl"), scratch.path("out/other")).unwrap();
        assert!(matches!(dir.reopen(&made), Err(FileError::NotOurs { .. })));
        std::fs::remove_file(scratch.path("out/other")).unwrap();
        // Swapped for a link, or for another file: refused, nothing written through.
        std::fs::remove_file(scratch.path("out/rec.jsonl")).unwrap();
        std::os::unix::fs::symlink(&target, scratch.path("out/rec.jsonl")).unwrap();
        assert!(dir.reopen(&made).is_err());
        std::fs::remove_file(scratch.path("out/rec.jsonl")).unwrap();
        std::fs::write(scratch.path("out/rec.jsonl"), "new").unwrap();
        assert!(matches!(dir.reopen(&made), Err(FileError::NotOurs { .. })));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "KEEP");
    }

    #[test]
    fn a_file_named_by_its_path_is_made_anew_and_no_planted_link_is_followed() {
        let scratch = ScratchDir::new("files-create-replacing");
        let target = file(&scratch, "target", "KEEP", 0o644);
        let planted = scratch.path("record.jsonl");
        std::os::unix::fs::symlink(&target, &planted).unwrap();
        let mut made = create_replacing(&planted).unwrap();
        std::io::Write::write_all(&mut made, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "KEEP");
        assert!(std::fs::symlink_metadata(&planted).unwrap().is_file());
        assert_eq!(std::fs::read_to_string(&planted).unwrap(), "new");
        assert!(create_replacing(&scratch.path("missing/x")).is_err());
        assert!(create_replacing(Path::new("/")).is_err());
    }
}
