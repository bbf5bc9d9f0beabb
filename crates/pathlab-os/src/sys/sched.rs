//! The scheduler's calls: a thread's class and priority, the CPUs it may run on, and the
//! process's memory locked in RAM.

use std::io;
use std::mem::zeroed;

use super::cvt;

/// The scheduling class of a thread, as the kernel names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// `SCHED_OTHER`: the fair scheduler, shared with every other normal thread.
    Normal,
    /// `SCHED_FIFO` with its priority (1-99): runs as soon as it is runnable, ahead of every
    /// normal thread, until it sleeps (the kernel's RT throttling caps the class's share).
    Fifo(u32),
    /// Any other class (`SCHED_RR`, `SCHED_BATCH`, `SCHED_IDLE`, `SCHED_DEADLINE`), by its
    /// number.
    Other(i32),
}

/// Puts the calling thread in `SCHED_FIFO` at `priority` (1-99), with `SCHED_RESET_ON_FORK`
/// so that nothing it starts inherits the class. Fails with EPERM without CAP_SYS_NICE or
/// an `RLIMIT_RTPRIO` that allows it.
pub fn set_thread_fifo(priority: u32) -> io::Result<()> {
    if !(1..=99).contains(&priority) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("real-time priority {priority} is not within 1-99"),
        ));
    }
    let param = libc::sched_param {
        sched_priority: priority as libc::c_int,
    };
    // SAFETY: pid 0 is the calling thread; param is a valid sched_param for the call.
    cvt(unsafe {
        libc::sched_setscheduler(
            0,
            libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK,
            &raw const param,
        )
    })?;
    Ok(())
}

/// Puts the calling thread back in the fair scheduler (`SCHED_OTHER`, nice unchanged),
/// from whatever class it was in. Lowering needs no privilege.
pub fn set_thread_normal() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; param is a valid sched_param for the call.
    cvt(unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &raw const param) })?;
    Ok(())
}

/// The calling thread's scheduling class.
pub fn thread_policy() -> io::Result<Policy> {
    // SAFETY: pid 0 is the calling thread.
    let policy = cvt(unsafe { libc::sched_getscheduler(0) })? & !libc::SCHED_RESET_ON_FORK;
    // SAFETY: a zeroed sched_param is a valid out-parameter.
    let mut param: libc::sched_param = unsafe { zeroed() };
    // SAFETY: pid 0 is the calling thread; param is writable.
    cvt(unsafe { libc::sched_getparam(0, &raw mut param) })?;
    Ok(match policy {
        libc::SCHED_OTHER => Policy::Normal,
        libc::SCHED_FIFO => Policy::Fifo(param.sched_priority.max(0) as u32),
        other => Policy::Other(other),
    })
}

/// The most CPUs a set here holds (the kernel's `cpu_set_t`: 1,024).
pub const MAX_CPUS: usize = libc::CPU_SETSIZE as usize;

/// The CPUs the calling thread may run on, in order.
pub fn thread_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { zeroed() };
    // SAFETY: pid 0 is the calling thread; the size is that of `set`.
    cvt(unsafe { libc::sched_getaffinity(0, size_of_cpu_set(), &raw mut set) })?;
    Ok((0..MAX_CPUS)
        // SAFETY: cpu is below CPU_SETSIZE.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// Lets the calling thread run only on `cpus` (each below [`MAX_CPUS`]).
pub fn set_thread_cpus(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { zeroed() };
    for &cpu in cpus {
        if cpu >= MAX_CPUS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("CPU {cpu} is past the largest set the kernel takes"),
            ));
        }
        // SAFETY: cpu is below CPU_SETSIZE.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: pid 0 is the calling thread; the size is that of `set`.
    cvt(unsafe { libc::sched_setaffinity(0, size_of_cpu_set(), &raw const set) })?;
    Ok(())
}

fn size_of_cpu_set() -> usize {
    std::mem::size_of::<libc::cpu_set_t>()
}

/// Locks every page the process has and will have in RAM (`mlockall(MCL_CURRENT |
/// MCL_FUTURE)`), so a thread with a deadline never waits for a page to come back. Needs
/// CAP_IPC_LOCK or an `RLIMIT_MEMLOCK` as large as the process.
pub fn lock_memory() -> io::Result<()> {
    // SAFETY: mlockall takes flags only.
    cvt(unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) })?;
    Ok(())
}

/// Undoes [`lock_memory`].
pub fn unlock_memory() -> io::Result<()> {
    // SAFETY: munlockall takes no arguments.
    cvt(unsafe { libc::munlockall() })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_may_be_pinned_to_one_of_its_cpus_and_back() {
        std::thread::spawn(|| {
            let cpus = thread_cpus().expect("affinity reads");
            assert!(!cpus.is_empty());
            set_thread_cpus(&cpus[..1]).expect("pins to one of its own");
            assert_eq!(thread_cpus().unwrap(), cpus[..1]);
            set_thread_cpus(&cpus).expect("and back");
            assert_eq!(thread_cpus().unwrap(), cpus);
            assert!(set_thread_cpus(&[MAX_CPUS]).is_err());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_fifo_thread_reads_back_its_class_or_is_refused_with_eperm() {
        std::thread::spawn(|| {
            assert_eq!(thread_policy().unwrap(), Policy::Normal);
            match set_thread_fifo(10) {
                Ok(()) => assert_eq!(thread_policy().unwrap(), Policy::Fifo(10)),
                Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}"),
            }
            assert!(set_thread_fifo(0).is_err());
            assert!(set_thread_fifo(100).is_err());
        })
        .join()
        .unwrap();
    }
}
