//! The guardian: a process started before the swap that outlives the emulator and undoes
//! what the emulator leaves swapped when it dies without undoing it (SIGKILL, the OOM
//! killer, a crash), without anyone running `lab clean`.
//!
//! It is this program started again (a re-exec, by [`std::process::Command`], which is
//! safe from a process with threads: nothing is allocated between fork and exec), with a
//! pipe from the emulator as its standard input and in a process group of its own, so a
//! terminal's Ctrl-C (sent to the emulator's group) never reaches it: the emulator undoes
//! the swap itself then. The guardian only reads. The emulator's clean exit writes
//! [`STAND_DOWN`] and closes the pipe, and the guardian ends doing nothing. Any other end
//! of the emulator closes the pipe without it (the kernel closes a dead process's
//! descriptors): the guardian waits until the emulator is gone (its swap's interface lock
//! is released then), never restoring while it lives, and undoes the swaps whose records
//! name it as their owner, from whatever step each reached ([`super::restore_killed`] of
//! that owner only).

use std::io::{self, Read, Write};
use std::os::unix::process::CommandExt as _;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use super::record::{restore_killed_of, Restores};
use crate::runtime::Owner;

/// What the emulator writes to its guardian when it has undone its swap itself.
pub const STAND_DOWN: &[u8] = b"stand down\n";

/// What the guardian writes once it watches: the emulator swaps nothing before.
const READY: &[u8] = b"ready\n";

/// How often a guardian whose pipe closed looks whether the emulator is gone yet: it has
/// closed its descriptors at that point and is ending, within a millisecond or so.
const GONE_POLL: Duration = Duration::from_millis(1);

/// A running guardian, seen from the emulator.
#[derive(Debug)]
pub struct Guardian {
    child: Child,
    pipe: Option<ChildStdin>,
}

impl Guardian {
    /// Starts `command` (this program's hidden guardian command, which calls [`guard`] with
    /// this process as the owner) with a pipe from this process as its standard input, in a
    /// process group of its own, and waits until it says it watches. Call it before the
    /// swap: a swap without a guardian would be left to `lab clean` by a SIGKILL.
    pub fn spawn(mut command: Command) -> io::Result<Guardian> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()?;
        let mut said = [0u8; READY.len()];
        let ready = child
            .stdout
            .take()
            .ok_or_else(|| io::Error::other("no pipe from the guardian"))
            .and_then(|mut stdout| stdout.read_exact(&mut said));
        if ready.is_err() || said != READY {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::other(
                "the guardian did not start (it says nothing on its standard output)",
            ));
        }
        let pipe = child.stdin.take();
        Ok(Guardian { child, pipe })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Tells it the swap is undone, and waits for it to end.
    pub fn stand_down(mut self) -> io::Result<()> {
        if let Some(mut pipe) = self.pipe.take() {
            pipe.write_all(STAND_DOWN)?;
        }
        self.child.wait().map(drop)
    }
}

impl Drop for Guardian {
    /// Closes the pipe without standing it down: it undoes what this process leaves
    /// swapped once this process has ended.
    fn drop(&mut self) {
        self.pipe.take();
    }
}

/// The guardian's work, for the hidden command [`Guardian::spawn`] starts: says `ready` on
/// `ready_out`, then reads `input` (the pipe from the emulator `owner`) to its end. Told
/// to stand down, returns `None`; otherwise waits until `owner` is gone and undoes the
/// swaps it left ([`Restores`]: each restored or reported). Block the termination signals
/// first ([`crate::termination_signals`]): a guardian outlives its terminal.
pub fn guard(owner: &Owner, mut input: impl Read, mut ready_out: impl Write) -> Option<Restores> {
    let _ = ready_out.write_all(READY).and_then(|()| ready_out.flush());
    drop(ready_out);
    let mut heard = Vec::new();
    let mut buffer = [0u8; 64];
    loop {
        match input.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => {
                heard.extend_from_slice(&buffer[..n]);
                if heard.ends_with(STAND_DOWN) {
                    return None;
                }
                // Anything else is no word of the emulator's: keep only what could
                // still become one.
                let keep = heard.len().saturating_sub(STAND_DOWN.len());
                heard.drain(..keep);
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    while owner.is_alive() {
        std::thread::sleep(GONE_POLL);
    }
    Some(restore_killed_of(owner))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn told_to_stand_down_the_guardian_ends_doing_nothing() {
        let me = Owner::this_process().unwrap();
        let mut said = Vec::new();
        assert_eq!(guard(&me, STAND_DOWN, &mut said), None);
        assert_eq!(said, READY, "it says it watches first");
        // In pieces and after noise, as a pipe may deliver it.
        let pieces = Read::chain(&b"xx stand "[..], &b"down\n"[..]);
        assert_eq!(guard(&me, pieces, io::sink()), None);
    }
}
