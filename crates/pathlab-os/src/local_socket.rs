//! The Unix sockets a running pathlab answers local tools on (the emulator's control
//! socket, the bond's stats socket): the owner's only whatever the umask, and answered only
//! for root or the user the process runs as, checked on each connection (`SO_PEERCRED`).

use std::io;
use std::os::fd::AsFd as _;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

use crate::sys;

/// Binds a non-blocking Unix socket at `path` for its owner only (mode 0600, set after
/// the bind, whatever the umask gave), replacing a stale socket of a process that is gone.
/// `None` if a live process answers there (the name is taken).
pub fn bind_private(path: &Path) -> io::Result<Option<UnixListener>> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if UnixStream::connect(path).is_ok() {
        return Ok(None);
    }
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    let listener = UnixListener::bind(path)?;
    // Between the bind and this, the umask's mode holds: a peer who connects in that
    // moment is still refused by `trusted_peer`.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    listener.set_nonblocking(true)?;
    Ok(Some(listener))
}

/// Whether the peer of `stream` may use a private socket: root, or the user this process
/// runs as.
pub fn trusted_peer(stream: &UnixStream) -> bool {
    sys::peer_credentials(stream.as_fd())
        .is_ok_and(|peer| peer.uid == 0 || peer.uid == sys::effective_uid())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt as _;

    #[test]
    fn a_private_socket_is_the_owners_whatever_the_umask_and_its_name_is_taken_while_live() {
        let dir = crate::testing::ScratchDir::new("private-socket");
        let path = dir.path("s.sock");
        // A stale file from a process that is gone is replaced.
        std::fs::write(&path, b"stale").unwrap();
        let listener = bind_private(&path).unwrap().expect("bound");
        let meta = std::fs::metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert!(bind_private(&path).unwrap().is_none(), "taken while live");
        let client = UnixStream::connect(&path).unwrap();
        let (served, _) = loop {
            match listener.accept() {
                Ok(accepted) => break accepted,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => panic!("{error}"),
            }
        };
        assert!(trusted_peer(&served), "this process's own user");
        drop(client);
    }
}
