//! How the emulator's forwarding threads ask for the CPU, and what they got.
//!
//! A forwarding thread at normal priority shares its core with whatever else runs: with a
//! busy loop on each core its packets left 5 ms late at p99 (issue 43), where the kernel
//! wakes a real-time thread within tens of microseconds. So by default each forwarding
//! thread asks for `SCHED_FIFO` ([`REALTIME_PRIORITY`]) and the process locks its memory;
//! the kernel's RT throttling (95% of each second by default) keeps such threads from
//! starving the machine, and they sleep between deadlines, never spin. Without the
//! privilege the thread says why once and stays at normal priority.

use std::sync::OnceLock;

use crate::sys::{self, Policy};

/// The `SCHED_FIFO` priority of a forwarding thread: ahead of every normal thread, level
/// with the kernel's threaded interrupt handlers (50), below its watchdog and migration
/// threads (99).
pub const REALTIME_PRIORITY: u32 = 50;

/// The `SCHED_FIFO` priority a probe sender takes for a back-to-back burst
/// ([`burst`]): ahead of normal threads, behind the emulator's forwarding threads.
pub const BURST_PRIORITY: u32 = 40;

/// Runs `send` (a burst of back-to-back packets: a packet pair, a train) with the calling
/// thread in `SCHED_FIFO` at [`BURST_PRIORITY`] where the process may, then back in the
/// fair scheduler (a thread that was already real-time is left as it was).
///
/// A capacity estimate takes the spacing a burst leaves the narrowest link with; that is
/// the link's only if the burst reached it back to back. `sendmmsg` may give the CPU away
/// between datagrams when another thread wants it (`cond_resched`): on a busy machine (a
/// busy loop per core) 200 Mbit/s once measured 11% low (issue 43). For the microseconds
/// of the call nothing at normal priority takes the CPU. Without the privilege the burst
/// goes as before.
pub fn burst<T>(send: impl FnOnce() -> T) -> T {
    let raised = matches!(sys::thread_policy(), Ok(Policy::Normal))
        && sys::set_thread_fifo(BURST_PRIORITY).is_ok();
    let sent = send();
    if raised {
        let _ = sys::set_thread_normal();
    }
    sent
}

/// What a forwarding thread asks of the scheduler (`--priority`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Priority {
    /// `SCHED_FIFO` at [`REALTIME_PRIORITY`], memory locked, where the process may.
    #[default]
    Realtime,
    /// The fair scheduler, as every other program.
    Normal,
}

impl Priority {
    /// The values `--priority` takes, as its error lists them.
    pub const CHOICES: &'static str = "realtime, normal";

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Priority::Realtime => "realtime",
            Priority::Normal => "normal",
        }
    }
}

impl std::str::FromStr for Priority {
    type Err = String;

    fn from_str(text: &str) -> Result<Priority, String> {
        match text {
            "realtime" | "rt" => Ok(Priority::Realtime),
            "normal" => Ok(Priority::Normal),
            other => Err(format!(
                "unknown priority '{other}': the choices are {}",
                Priority::CHOICES
            )),
        }
    }
}

impl std::fmt::Display for Priority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How forwarding threads are to be scheduled.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Request {
    /// Their class.
    pub priority: Priority,
    /// The CPUs they may run on (`None`: those the process may).
    pub cpus: Option<Vec<usize>>,
}

/// The CPUs this process may run on (its affinity), in order.
pub fn machine_cpus() -> Vec<usize> {
    sys::thread_cpus().unwrap_or_else(|_| {
        (0..std::thread::available_parallelism().map_or(1, std::num::NonZero::get)).collect()
    })
}

/// Parses a CPU list as `taskset -c` takes it (`0`, `0,2`, `1-3`, `0-1,3`) and checks each
/// CPU against those the process may run on: a CPU outside them is refused, naming them.
pub fn parse_cpus(text: &str) -> Result<Vec<usize>, String> {
    parse_cpus_within(text, &machine_cpus())
}

fn parse_cpus_within(text: &str, allowed: &[usize]) -> Result<Vec<usize>, String> {
    let number = |part: &str| -> Result<usize, String> {
        part.trim()
            .parse::<usize>()
            .ok()
            .filter(|&cpu| cpu < sys::MAX_CPUS)
            .ok_or_else(|| format!("'{part}' in the CPU list '{text}' is not a CPU number"))
    };
    let mut cpus = Vec::new();
    for part in text.split(',') {
        let (first, last) = match part.split_once('-') {
            Some((first, last)) => (number(first)?, number(last)?),
            None => (number(part)?, number(part)?),
        };
        if first > last {
            return Err(format!("the range '{part}' in '{text}' runs backwards"));
        }
        cpus.extend(first..=last);
    }
    cpus.sort_unstable();
    cpus.dedup();
    if let Some(outside) = cpus.iter().find(|cpu| !allowed.contains(cpu)) {
        return Err(format!(
            "CPU {outside} is not one of this machine's: it has {}",
            cpu_list_text(allowed)
        ));
    }
    Ok(cpus)
}

/// A CPU list in `taskset`'s form, ranges joined: `0-3,6`.
pub fn cpu_list_text(cpus: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut index = 0;
    while index < cpus.len() {
        let first = cpus[index];
        let mut last = first;
        while index + 1 < cpus.len() && cpus[index + 1] == last + 1 {
            index += 1;
            last = cpus[index];
        }
        parts.push(if first == last {
            first.to_string()
        } else {
            format!("{first}-{last}")
        });
        index += 1;
    }
    parts.join(",")
}

/// What one thread got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    /// Its class, read back from the kernel.
    pub policy: Policy,
    /// The CPUs it may run on, read back.
    pub cpus: Vec<usize>,
    /// What it asked for and did not get, and why.
    pub notes: Vec<String>,
}

/// Applies `request` to the calling thread and reads back what the kernel gave it.
pub fn apply_to_this_thread(request: &Request) -> Granted {
    let mut notes = Vec::new();
    if let Some(cpus) = &request.cpus {
        if let Err(error) = sys::set_thread_cpus(cpus) {
            notes.push(format!(
                "could not keep to CPUs {}: {error}",
                cpu_list_text(cpus)
            ));
        }
    }
    if request.priority == Priority::Realtime {
        if let Err(error) = sys::set_thread_fifo(REALTIME_PRIORITY) {
            notes.push(realtime_refused(&error));
        }
    }
    Granted {
        policy: sys::thread_policy().unwrap_or(Policy::Normal),
        cpus: sys::thread_cpus().unwrap_or_default(),
        notes,
    }
}

/// Why real-time scheduling was refused, in words.
fn realtime_refused(error: &std::io::Error) -> String {
    if error.raw_os_error() == Some(libc::EPERM) {
        format!(
            "no permission for real-time scheduling (it needs CAP_SYS_NICE, or an \
             RLIMIT_RTPRIO of {REALTIME_PRIORITY}, and a cgroup with real-time time): \
             forwarding at normal priority, so other programs can delay it"
        )
    } else {
        format!("real-time scheduling refused ({error}): forwarding at normal priority")
    }
}

/// Locks the process's memory, once per process whatever asks how often; the outcome is
/// remembered (`Err`: why it is not locked).
pub fn lock_memory_once() -> Result<(), String> {
    static LOCKED: OnceLock<Result<(), String>> = OnceLock::new();
    LOCKED
        .get_or_init(|| {
            sys::lock_memory().map_err(|error| {
                format!(
                    "memory not locked ({error}; it needs CAP_IPC_LOCK or a large enough \
                     RLIMIT_MEMLOCK): a deadline may wait on a page fault"
                )
            })
        })
        .clone()
}

/// The kernel's cap on real-time threads, as a note when it is off (`-1`): a forwarding
/// thread that never slept could then take a whole core.
pub fn rt_throttling_note() -> Option<String> {
    let runtime = std::fs::read_to_string("/proc/sys/kernel/sched_rt_runtime_us").ok()?;
    (runtime.trim() == "-1").then(|| {
        "the kernel's RT throttling is off (sched_rt_runtime_us = -1): real-time threads \
         have no cap on this machine"
            .to_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_list_takes_taskset_forms_and_refuses_what_the_machine_has_not() {
        let allowed = [0, 1, 2, 3];
        assert_eq!(parse_cpus_within("1", &allowed), Ok(vec![1]));
        assert_eq!(parse_cpus_within("3,0-1,1", &allowed), Ok(vec![0, 1, 3]));
        let outside = parse_cpus_within("2-5", &allowed).unwrap_err();
        assert!(
            outside.contains("CPU 4 is not one of this machine's: it has 0-3"),
            "{outside}"
        );
        for bad in ["", "a", "1-", "-1", "3-1", "99999999999999999999"] {
            assert!(parse_cpus_within(bad, &allowed).is_err(), "{bad}");
        }
        assert!(parse_cpus_within("1024", &allowed).is_err());
    }

    #[test]
    fn a_cpu_list_is_written_with_ranges() {
        assert_eq!(cpu_list_text(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
        assert_eq!(cpu_list_text(&[5]), "5");
        assert_eq!(cpu_list_text(&[]), "");
    }

    #[test]
    fn an_unknown_priority_names_the_choices() {
        assert_eq!("realtime".parse(), Ok(Priority::Realtime));
        assert_eq!("normal".parse(), Ok(Priority::Normal));
        let error = "fast".parse::<Priority>().unwrap_err();
        assert!(
            error.contains("'fast'") && error.contains("realtime, normal"),
            "{error}"
        );
    }

    #[test]
    fn a_thread_gets_what_it_asked_or_says_why_not() {
        std::thread::spawn(|| {
            let cpus = machine_cpus();
            let request = Request {
                priority: Priority::Realtime,
                cpus: Some(cpus[..1].to_vec()),
            };
            let granted = apply_to_this_thread(&request);
            assert_eq!(granted.cpus, cpus[..1]);
            match granted.policy {
                Policy::Fifo(priority) => {
                    assert_eq!(priority, REALTIME_PRIORITY);
                    assert!(granted.notes.is_empty(), "{:?}", granted.notes);
                }
                _ => assert!(granted.notes[0].contains("real-time"), "{granted:?}"),
            }
        })
        .join()
        .unwrap();
        let normal = std::thread::spawn(|| apply_to_this_thread(&Request::default().normal()))
            .join()
            .unwrap();
        assert_eq!(normal.policy, Policy::Normal);
    }

    impl Request {
        fn normal(mut self) -> Request {
            self.priority = Priority::Normal;
            self
        }
    }
}
