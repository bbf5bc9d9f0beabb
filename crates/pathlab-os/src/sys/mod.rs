//! Every libc call pathlab makes, behind safe functions.
//!
//! This is the only module of the workspace that may use `unsafe`. Each function checks its
//! arguments (lengths, bounds) before it hands pointers to the kernel, and turns `-1` into
//! an [`io::Error`]. Nothing here knows about links or packets.

#![allow(unsafe_code)]

mod epoll;
mod packet_batch;
mod ring;
mod sched;
mod share_filter;
mod timestamping;
mod vlan_filter;

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

pub use epoll::Epoll;
pub use packet_batch::{enable_packet_auxdata, packet_drops, PacketBatch};
pub use ring::RxRing;
pub use sched::{
    lock_memory, set_thread_cpus, set_thread_fifo, set_thread_normal, thread_cpus, thread_policy,
    unlock_memory, Policy, MAX_CPUS,
};
pub use share_filter::attach_share_filter;
pub use timestamping::{
    enable_timestamping, recv_error_queue, ErrorQueued, TransmitLog, TransmitPoint, TransmitStamp,
};
pub use vlan_filter::{attach_vlan_filter, VlanFilter};

/// `PACKET_IGNORE_OUTGOING` (Linux 4.20): don't show a packet socket what it sent itself.
pub const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// `PACKET_VNET_HDR`: prefix every received frame with a `virtio_net_hdr`.
pub const PACKET_VNET_HDR: libc::c_int = 15;
/// Length of `struct virtio_net_hdr`, which `PACKET_VNET_HDR` puts before each frame.
pub const VNET_HDR_LEN: usize = 10;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cvt_size(ret: isize) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// Opens a socket with `SOCK_CLOEXEC`.
pub fn socket(
    domain: libc::c_int,
    kind: libc::c_int,
    protocol: libc::c_int,
) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with integer arguments; the result is a fresh descriptor we own.
    let fd = cvt(unsafe { libc::socket(domain, kind | libc::SOCK_CLOEXEC, protocol) })?;
    // SAFETY: `fd` was just returned by socket(2) and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `setsockopt` with a plain-old-data value.
pub fn setsockopt<T: Copy>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    let len = size_of::<T>();
    // SAFETY: `value` points to `size_of::<T>()` readable bytes for the duration of the call.
    unsafe { setsockopt_raw(fd, (level, name), std::ptr::from_ref(value).cast(), len) }
}

/// `setsockopt(fd, level, name, value, len)`.
///
/// # Safety
/// `value` points to `len` readable bytes.
unsafe fn setsockopt_raw(
    fd: BorrowedFd<'_>,
    (level, name): (libc::c_int, libc::c_int),
    value: *const libc::c_void,
    len: usize,
) -> io::Result<()> {
    // SAFETY: the caller's promise on `value`.
    cvt(unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, value, len as libc::socklen_t) })
        .map(drop)
}

/// Binds a packet socket to one interface, receiving every protocol.
pub fn bind_packet(fd: BorrowedFd<'_>, ifindex: u32) -> io::Result<()> {
    bind_packet_protocol(fd, ifindex, (libc::ETH_P_ALL as u16).to_be())
}

/// Binds a packet socket to one interface and one protocol (network byte order; 0 receives
/// nothing, for a socket that only sends).
pub fn bind_packet_protocol(fd: BorrowedFd<'_>, ifindex: u32, protocol_be: u16) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
    let mut addr: libc::sockaddr_ll = unsafe { zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = protocol_be;
    addr.sll_ifindex = ifindex as i32;
    bind_to(fd, &addr)
}

/// Puts an interface in promiscuous mode for as long as the packet socket is open
/// (`PACKET_ADD_MEMBERSHIP`; the kernel undoes it when the socket closes, even after a crash).
pub fn packet_promiscuous(fd: BorrowedFd<'_>, ifindex: u32) -> io::Result<()> {
    // SAFETY: packet_mreq is plain data; all-zero is a valid value.
    let mut mreq: libc::packet_mreq = unsafe { zeroed() };
    mreq.mr_ifindex = ifindex as i32;
    mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
    setsockopt(fd, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mreq)
}

/// Binds a netlink socket with a kernel-chosen port id.
pub fn bind_netlink(fd: BorrowedFd<'_>, groups: u32) -> io::Result<()> {
    // SAFETY: sockaddr_nl is plain data; all-zero is a valid value.
    let mut addr: libc::sockaddr_nl = unsafe { zeroed() };
    addr.nl_family = libc::AF_NETLINK as u16;
    addr.nl_groups = groups;
    bind_to(fd, &addr)
}

/// Binds `fd` to `addr`, a `sockaddr_*` of the socket's family (plain data, passed with
/// its own size).
fn bind_to<T>(fd: BorrowedFd<'_>, addr: &T) -> io::Result<()> {
    // SAFETY: `addr` points to a live `T` of the length passed.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            std::ptr::from_ref(addr).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// An IP socket address as the kernel takes it: the storage and the length used.
fn socket_address_to_c(address: std::net::SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
    let len = match address {
        std::net::SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            let sin = unsafe { &mut *std::ptr::from_mut(&mut storage).cast::<libc::sockaddr_in>() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = v4.port().to_be();
            sin.sin_addr.s_addr = u32::from_ne_bytes(v4.ip().octets());
            size_of::<libc::sockaddr_in>()
        }
        std::net::SocketAddr::V6(v6) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            let sin6 =
                unsafe { &mut *std::ptr::from_mut(&mut storage).cast::<libc::sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = v6.port().to_be();
            sin6.sin6_addr.s6_addr = v6.ip().octets();
            sin6.sin6_flowinfo = v6.flowinfo();
            sin6.sin6_scope_id = v6.scope_id();
            size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

/// Connects a socket to an IP address (port 0 for raw sockets).
pub fn connect(fd: BorrowedFd<'_>, address: std::net::SocketAddr) -> io::Result<()> {
    let (storage, len) = socket_address_to_c(address);
    // SAFETY: `storage` holds a valid address of `len` bytes.
    cvt(unsafe { libc::connect(fd.as_raw_fd(), std::ptr::from_ref(&storage).cast(), len) })
        .map(drop)
}

/// Binds a socket to a local IP address and port.
pub fn bind(fd: BorrowedFd<'_>, address: std::net::SocketAddr) -> io::Result<()> {
    let (storage, len) = socket_address_to_c(address);
    // SAFETY: `storage` holds a valid address of `len` bytes.
    cvt(unsafe { libc::bind(fd.as_raw_fd(), std::ptr::from_ref(&storage).cast(), len) }).map(drop)
}

/// Marks a bound stream socket as accepting connections.
pub fn listen(fd: BorrowedFd<'_>, backlog: libc::c_int) -> io::Result<()> {
    // SAFETY: plain syscall with integer arguments.
    cvt(unsafe { libc::listen(fd.as_raw_fd(), backlog) }).map(drop)
}

/// Restricts a socket to one interface (`SO_BINDTODEVICE`): it sends only through it, its
/// route lookups consider only routes through it, and it receives only what arrived on it.
/// The kernel reads at most 15 bytes of `interface` and silently drops the rest, so callers
/// check the name first.
pub fn bind_to_device(fd: BorrowedFd<'_>, interface: &str) -> io::Result<()> {
    setsockopt_bytes(
        fd,
        libc::SOL_SOCKET,
        libc::SO_BINDTODEVICE,
        interface.as_bytes(),
    )
}

/// A blocking, unbound TCP socket of IPv6 or IPv4.
pub fn tcp_socket(ipv6: bool) -> io::Result<OwnedFd> {
    let domain = if ipv6 { libc::AF_INET6 } else { libc::AF_INET };
    self::socket(domain, libc::SOCK_STREAM, 0)
}

/// Lets a listener bind a port whose earlier connections are still in TIME_WAIT
/// (`SO_REUSEADDR`).
pub fn set_reuse_address(fd: BorrowedFd<'_>) -> io::Result<()> {
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, &1i32)
}

/// A non-blocking, unbound UDP socket; an IPv6 one is IPv6 only (`IPV6_V6ONLY`), so it
/// neither takes nor sends IPv4 as v4-mapped addresses.
pub fn udp_socket_nonblocking(ipv6: bool) -> io::Result<OwnedFd> {
    let domain = if ipv6 { libc::AF_INET6 } else { libc::AF_INET };
    let socket = self::socket(domain, libc::SOCK_DGRAM | libc::SOCK_NONBLOCK, 0)?;
    if ipv6 {
        setsockopt(socket.as_fd(), libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, &1i32)?;
    }
    Ok(socket)
}

/// Asks for the destination address and arrival interface of every datagram the socket
/// receives (`IP_PKTINFO` / `IPV6_RECVPKTINFO`), which [`RecvBatch`] reports. On an IPv6
/// socket that also takes IPv4 (not `IPV6_V6ONLY`) the IPv6 option covers its IPv4
/// datagrams too, their addresses IPv4-mapped.
pub fn enable_packet_info(fd: BorrowedFd<'_>, ipv6: bool) -> io::Result<()> {
    if ipv6 {
        setsockopt(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, &1i32)
    } else {
        setsockopt(fd, libc::IPPROTO_IP, libc::IP_PKTINFO, &1i32)
    }
}

/// `send(2)` of one buffer.
pub fn send(fd: BorrowedFd<'_>, data: &[u8], flags: libc::c_int) -> io::Result<usize> {
    // SAFETY: `data` is readable for its length.
    cvt_size(unsafe { libc::send(fd.as_raw_fd(), data.as_ptr().cast(), data.len(), flags) })
}

/// `recv(2)` into one buffer.
pub fn recv(fd: BorrowedFd<'_>, buffer: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
    // SAFETY: `buffer` is writable for its length.
    cvt_size(unsafe {
        libc::recv(
            fd.as_raw_fd(),
            buffer.as_mut_ptr().cast(),
            buffer.len(),
            flags,
        )
    })
}

/// Waits until one of `fds` is readable or `timeout` passes (`None`: forever). Returns the
/// indices of the readable descriptors' entries set in `ready`.
pub fn poll_readable(
    fds: &[BorrowedFd<'_>],
    timeout: Option<Duration>,
    ready: &mut [bool],
) -> io::Result<()> {
    assert!(ready.len() >= fds.len(), "a flag per descriptor");
    let empty = libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    };
    // Up to 20 descriptors on the stack (the hot loops); more (a server's handshakes) on
    // the heap.
    let mut on_stack = [empty; 20];
    let mut on_heap = Vec::new();
    let pollfds: &mut [libc::pollfd] = if fds.len() <= on_stack.len() {
        &mut on_stack[..fds.len()]
    } else {
        on_heap.resize(fds.len(), empty);
        &mut on_heap
    };
    for (slot, fd) in pollfds.iter_mut().zip(fds) {
        slot.fd = fd.as_raw_fd();
        slot.events = libc::POLLIN;
    }
    let timespec = timeout.map(|timeout| libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    });
    let timespec_ptr = timespec
        .as_ref()
        .map_or(std::ptr::null(), std::ptr::from_ref);
    // SAFETY: `pollfds` holds `fds.len()` initialized entries; `timespec_ptr` is null or
    // points to a live timespec; a null sigmask keeps the current one.
    let result = unsafe {
        libc::ppoll(
            pollfds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            timespec_ptr,
            std::ptr::null(),
        )
    };
    if result < 0 {
        let error = io::Error::last_os_error();
        if error.kind() == io::ErrorKind::Interrupted {
            ready.fill(false);
            return Ok(());
        }
        return Err(error);
    }
    for (flag, slot) in ready.iter_mut().zip(pollfds.iter()) {
        *flag = slot.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0;
    }
    Ok(())
}

/// Waits until `fd` can take more data or `timeout` passes; true if it can (or has an
/// error to report, which the next write returns).
pub fn poll_writable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    let mut pollfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    let timespec = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: one initialized pollfd; a live timespec; a null sigmask keeps the current one.
    let result = unsafe { libc::ppoll(&raw mut pollfd, 1, &raw const timespec, std::ptr::null()) };
    if result < 0 {
        let error = io::Error::last_os_error();
        return if error.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(error)
        };
    }
    Ok(pollfd.revents & (libc::POLLOUT | libc::POLLERR | libc::POLLHUP) != 0)
}

/// A non-blocking eventfd, for waking a thread that sleeps in [`poll_readable`].
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the result is a fresh descriptor we own.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
    // SAFETY: `fd` was just returned by eventfd(2) and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The index of a network interface in the calling thread's namespace.
pub fn if_nametoindex(name: &str) -> io::Result<u32> {
    let name = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `name` is a NUL-terminated string.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(index)
    }
}

/// Whether an interface with index `index` exists in the calling thread's namespace.
pub fn interface_exists(index: u32) -> bool {
    let mut name = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: `name` has room for IF_NAMESIZE bytes, as if_indextoname requires.
    !unsafe { libc::if_indextoname(index, name.as_mut_ptr()) }.is_null()
}

/// Moves the calling thread into a new, empty network namespace.
pub fn unshare_netns() -> io::Result<()> {
    // SAFETY: plain syscall; affects only the calling thread's namespace.
    cvt(unsafe { libc::unshare(libc::CLONE_NEWNET) }).map(drop)
}

/// Moves the calling thread into the network namespace `fd` refers to.
pub fn setns_net(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: plain syscall on a descriptor we borrow.
    cvt(unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) }).map(drop)
}

/// Makes `command` enter the network namespace `netns` in the child, before exec.
pub fn command_in_netns(command: &mut Command, netns: RawFd) {
    // SAFETY: the closure only makes async-signal-safe syscalls (setns) between fork and
    // exec; the descriptor stays open in the parent until spawn returns.
    unsafe {
        command.pre_exec(move || cvt(libc::setns(netns, libc::CLONE_NEWNET)).map(drop));
    }
}

/// Makes the child of `command` receive `signal` when the thread that spawned it dies, so
/// a killed pathlab does not leave its programs (and their namespaces) behind.
pub fn command_parent_death_signal(command: &mut Command, signal: libc::c_int) {
    // SAFETY: getpid is async-signal-safe.
    let parent = unsafe { libc::getpid() };
    // SAFETY: prctl, getppid and raise are async-signal-safe; this runs in the child
    // between fork and exec.
    unsafe {
        command.pre_exec(move || {
            cvt(libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong))?;
            // The parent may have died between fork and prctl, which then never fires (a
            // lab SIGKILLed at that instant left a tunnel end running on its own): the
            // child is then an orphan, and takes the signal itself.
            if libc::getppid() != parent {
                libc::raise(signal);
            }
            Ok(())
        });
    }
}

/// Makes the child of `command` start without capability `capability` (a `CAP_*` number):
/// dropped from its bounding set, so root's program gets every capability but that one. How
/// a test runs pathlab as a container without CAP_SYS_NICE runs it.
pub fn command_without_capability(command: &mut Command, capability: libc::c_int) {
    // SAFETY: prctl is async-signal-safe; this runs in the child between fork and exec.
    unsafe {
        command.pre_exec(move || {
            cvt(libc::prctl(
                libc::PR_CAPBSET_DROP,
                capability as libc::c_ulong,
                0,
                0,
                0,
            ))?;
            Ok(())
        });
    }
}

/// Makes the calling thread's sleeps end within 1 ns of their deadline instead of the
/// default 50 us slack.
pub fn set_timer_slack_min() {
    // SAFETY: plain prctl on the calling thread; failure only costs precision.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
}

/// `struct __user_cap_header_struct` of capget(2)/capset(2).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

/// `struct __user_cap_data_struct`; version 3 takes two (capabilities 0-31, 32-63).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
const CAP_NET_ADMIN: u32 = 12;

/// The calling thread's capability sets (capabilities are per thread on Linux).
fn capabilities() -> io::Result<[CapData; 2]> {
    let mut data = [CapData::default(); 2];
    capability_call(libc::SYS_capget, &mut data)?;
    Ok(data)
}

/// Whether the calling thread has CAP_NET_ADMIN in its effective set (as the whole process
/// does, unless a thread dropped it).
pub fn has_cap_net_admin() -> bool {
    has_capability(CAP_NET_ADMIN)
}

/// Whether the calling thread has capability number `capability` (below 32, as every one
/// pathlab asks about) in its effective set.
pub fn has_capability(capability: u32) -> bool {
    capabilities().is_ok_and(|data| data[0].effective & (1 << capability) != 0)
}

/// Removes CAP_NET_ADMIN from the calling thread's effective set (the permitted set keeps
/// it), so a test can see what an unprivileged caller sees without touching other threads.
pub fn drop_cap_net_admin_in_this_thread() -> io::Result<()> {
    let mut data = capabilities()?;
    data[0].effective &= !(1 << CAP_NET_ADMIN);
    capability_call(libc::SYS_capset, &mut data)
}

/// `capget` or `capset` (`call`) of the calling thread's capability sets, version 3:
/// reads them into `data` or sets them from it.
fn capability_call(call: libc::c_long, data: &mut [CapData; 2]) -> io::Result<()> {
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    // SAFETY: version 3 takes a header and two data structs, both valid for reading and
    // writing, which live for the call.
    let result = unsafe { libc::syscall(call, std::ptr::from_mut(&mut header), data.as_mut_ptr()) };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Opens `/dev/net/tun` and creates a TUN device named `name` (`IFF_TUN | IFF_NO_PI`: raw
/// IP datagrams, no packet-info prefix; one queue, no `IFF_MULTI_QUEUE`), or with `tap` a
/// TAP device (`IFF_TAP | IFF_NO_PI`: whole Ethernet frames, VLAN tags in their bytes, one
/// per read and write). `IFF_TUN_EXCL`
/// makes an existing interface of that name an error (`EBUSY`) instead of attaching to it,
/// so the device is always this descriptor's own and disappears when it closes. A `%d` in
/// `name` lets the kernel pick a free number. Returns the descriptor and the device's name.
///
/// With `vnet_header`, every read and write starts with a 10-byte `virtio_net_hdr`
/// (`IFF_VNET_HDR`), which says what offloads (a super-packet, a checksum left to fill) the
/// packet after it carries; [`tun_set_offload`] then says which the device may hand over.
pub fn tun_create(name: &str, tap: bool, vnet_header: bool) -> io::Result<(OwnedFd, String)> {
    if name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name too long",
        ));
    }
    let path = c"/dev/net/tun";
    // SAFETY: `path` is NUL-terminated; the result is a fresh descriptor we own.
    let fd = cvt(unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) })?;
    // SAFETY: `fd` was just returned by open(2) and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut request: libc::ifreq = unsafe { zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(name.bytes()) {
        *slot = byte as libc::c_char;
    }
    let vnet_flag = if vnet_header { libc::IFF_VNET_HDR } else { 0 };
    let mode = if tap { libc::IFF_TAP } else { libc::IFF_TUN };
    request.ifr_ifru.ifru_flags =
        (mode | libc::IFF_NO_PI | libc::IFF_TUN_EXCL | vnet_flag) as libc::c_short;
    // SAFETY: TUNSETIFF reads and writes one ifreq, which lives for the call.
    cvt(unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            libc::TUNSETIFF,
            std::ptr::from_mut(&mut request),
        )
    })?;
    let actual: Vec<u8> = request
        .ifr_name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Ok((fd, String::from_utf8_lossy(&actual).into_owned()))
}

/// The offloads a TUN device with a vnet header takes: checksums left to fill
/// (`TUN_F_CSUM`) and TCP super-packets over IPv4 and IPv6 (`TUN_F_TSO4`, `TUN_F_TSO6`, with
/// ECN). The host's TCP then hands the device 64 KB at a time.
pub fn tun_set_offload(fd: BorrowedFd<'_>) -> io::Result<()> {
    let flags = libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6 | libc::TUN_F_TSO_ECN;
    // SAFETY: TUNSETOFFLOAD takes its flags as the integer argument itself.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETOFFLOAD, flags as libc::c_ulong) })
        .map(drop)
}

/// `writev(2)` of a header and a body, as one write.
pub fn write_two(fd: BorrowedFd<'_>, header: &[u8], body: &[u8]) -> io::Result<usize> {
    write_gather(fd, &[header, body])
}

/// `writev(2)` of `parts`, one after the other, as one write (one datagram or frame on a
/// packet or datagram socket). At most [`GATHER_MAX`] parts.
pub fn write_gather(fd: BorrowedFd<'_>, parts: &[&[u8]]) -> io::Result<usize> {
    let iovecs = gather(parts);
    // SAFETY: the first `parts.len()` iovecs describe readable buffers that live for the
    // call; writev only reads through them.
    cvt_size(unsafe { libc::writev(fd.as_raw_fd(), iovecs.as_ptr(), parts.len() as libc::c_int) })
}

/// `sendmsg(2)` of `parts`, one after the other, as one frame on a packet socket: out of
/// interface `to` (one socket sends on every interface of its namespace this way), or of
/// the interface the socket is bound to (`None`). At most [`GATHER_MAX`] parts.
///
/// It never waits: a frame the socket's send buffer or the interface's queue has no room
/// for is an error at once ([`is_queue_full`]), as a router's full output queue drops.
/// Waiting would hold every packet the calling thread sends, in both directions, behind
/// a qdisc that holds the socket's buffer (a token bucket behind an emulator did: 6 s late).
pub fn send_gather(fd: BorrowedFd<'_>, to: Option<u32>, parts: &[&[u8]]) -> io::Result<usize> {
    let mut iovecs = gather(parts);
    // SAFETY: sockaddr_ll is plain data; all-zero is valid.
    let mut address: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    // SAFETY: msghdr is plain data; all-zero is valid.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    if let Some(ifindex) = to {
        address.sll_family = libc::AF_PACKET as u16;
        address.sll_ifindex = ifindex as i32;
        message.msg_name = (&raw mut address).cast();
        message.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    }
    message.msg_iov = iovecs.as_mut_ptr();
    message.msg_iovlen = parts.len() as _;
    // SAFETY: the message points at the address (if any) and the first `parts.len()`
    // iovecs, which describe readable buffers living for the call; sendmsg only reads
    // through them.
    cvt_size(unsafe { libc::sendmsg(fd.as_raw_fd(), &raw const message, libc::MSG_DONTWAIT) })
}

/// Whether a [`send_gather`] failed for want of room (the send buffer full, or the
/// interface's queue): the frame is dropped there, not lost to a fault.
pub fn is_queue_full(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::WouldBlock || error.raw_os_error() == Some(libc::ENOBUFS)
}

/// The iovecs of `parts` (at most [`GATHER_MAX`]), the rest empty.
fn gather(parts: &[&[u8]]) -> [libc::iovec; GATHER_MAX] {
    assert!(parts.len() <= GATHER_MAX, "at most {GATHER_MAX} parts");
    let empty = libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    };
    let mut iovecs = [empty; GATHER_MAX];
    for (iovec, part) in iovecs.iter_mut().zip(parts) {
        iovec.iov_base = part.as_ptr().cast_mut().cast();
        iovec.iov_len = part.len();
    }
    iovecs
}

/// The most parts [`write_gather`] takes: a vnet header, a super-packet's headers and the
/// payloads of its up to 64 segments, with room to spare.
pub const GATHER_MAX: usize = 72;

/// Makes a descriptor non-blocking.
pub fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: fcntl with integer arguments on a borrowed descriptor.
    let flags = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) }).map(drop)
}

/// `read(2)` into one buffer.
pub fn read(fd: BorrowedFd<'_>, buffer: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buffer` is writable for its length.
    cvt_size(unsafe { libc::read(fd.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len()) })
}

/// `write(2)` of one buffer.
pub fn write(fd: BorrowedFd<'_>, data: &[u8]) -> io::Result<usize> {
    // SAFETY: `data` is readable for its length.
    cvt_size(unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) })
}

/// Bind-mounts `source` on `target` (`mount(MS_BIND)`), as `ip netns add` keeps a namespace
/// under /run/netns.
pub fn bind_mount(source: &str, target: &str) -> io::Result<()> {
    let invalid = |_| io::Error::from(io::ErrorKind::InvalidInput);
    let source = CString::new(source).map_err(invalid)?;
    let target = CString::new(target).map_err(invalid)?;
    // SAFETY: both paths are NUL-terminated; no file system type or data for a bind mount.
    cvt(unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    })
    .map(drop)
}

/// Detaches a mount point (`umount2(MNT_DETACH)`), as `ip netns delete` does for the bind
/// mounts under /run/netns; a symbolic link there is not followed (`UMOUNT_NOFOLLOW`).
pub fn unmount_detach(path: &str) -> io::Result<()> {
    let path = CString::new(path).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `path` is NUL-terminated.
    cvt(unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW) }).map(drop)
}

/// Sends `signal` to process `pid`.
pub fn kill(pid: u32, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: plain syscall with integer arguments.
    cvt(unsafe { libc::kill(pid as libc::pid_t, signal) }).map(drop)
}

/// Whether process `pid` exists.
pub fn process_exists(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let alive = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0;
    alive || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Blocks `SIGINT`, `SIGTERM` and `SIGHUP` in the calling thread (and the threads it spawns
/// after), returning a signalfd that becomes readable when one arrives, so a forwarding
/// loop can notice Ctrl-C in its poll and clean up.
pub fn signalfd_termination() -> io::Result<OwnedFd> {
    // SAFETY: sigset_t is plain data; sigemptyset initializes it.
    let mut set: libc::sigset_t = unsafe { zeroed() };
    // SAFETY: `set` is a valid sigset_t for these calls.
    unsafe {
        libc::sigemptyset(&raw mut set);
        libc::sigaddset(&raw mut set, libc::SIGINT);
        libc::sigaddset(&raw mut set, libc::SIGTERM);
        libc::sigaddset(&raw mut set, libc::SIGHUP);
    }
    // SAFETY: `set` is initialized; the old mask is not needed.
    let result =
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &raw const set, std::ptr::null_mut()) };
    if result != 0 {
        return Err(io::Error::from_raw_os_error(result));
    }
    // SAFETY: `set` is initialized; -1 asks for a new descriptor.
    let fd =
        cvt(unsafe { libc::signalfd(-1, &raw const set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) })?;
    // SAFETY: `fd` was just returned by signalfd(2) and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads which signal a [`signalfd_termination`] descriptor reported, if any.
pub fn signalfd_read(fd: BorrowedFd<'_>) -> Option<i32> {
    let mut buffer = [0u8; size_of::<libc::signalfd_siginfo>()];
    match read(fd, &mut buffer) {
        Ok(n) if n == buffer.len() => {
            Some(i32::from_ne_bytes(buffer[..4].try_into().expect("4 bytes")))
        }
        _ => None,
    }
}

/// Asks the kernel to timestamp every datagram `fd` receives (`SO_TIMESTAMPNS`,
/// CLOCK_REALTIME), for [`recv_timestamped`].
pub fn enable_receive_timestamps(fd: BorrowedFd<'_>) -> io::Result<()> {
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, &1i32)
}

/// Receives one datagram with its source and, if the socket has timestamps on
/// ([`enable_receive_timestamps`] or [`enable_timestamping`]), the kernel's receive time in
/// ns since the Unix epoch. Allocates nothing.
pub fn recv_timestamped(
    fd: BorrowedFd<'_>,
    buffer: &mut [u8],
) -> io::Result<(usize, std::net::SocketAddr, Option<u64>)> {
    // SAFETY: sockaddr_storage is plain data; all-zero is valid.
    let mut source: libc::sockaddr_storage = unsafe { zeroed() };
    let mut control = [0u64; CONTROL_WORDS];
    let mut iov = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: buffer.len(),
    };
    // SAFETY: msghdr is plain data; all-zero is valid.
    let mut message: libc::msghdr = unsafe { zeroed() };
    message.msg_name = std::ptr::from_mut(&mut source).cast();
    message.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    message.msg_iov = &raw mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = size_of::<[u64; CONTROL_WORDS]>() as _;
    // SAFETY: every pointer in `message` refers to live buffers of the lengths given.
    let len = cvt_size(unsafe { libc::recvmsg(fd.as_raw_fd(), &raw mut message, 0) })?;
    // SAFETY: the kernel filled `message`; its control buffer is alive.
    let ancillary = unsafe { ancillary_data(&message) };
    let address = socket_address(&source)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unknown address family"))?;
    Ok((len, address, ancillary.kernel_ns))
}

/// Bytes one control message with a `T` takes in a control buffer, padding included
/// (`CMSG_SPACE`).
const fn control_space<T>() -> usize {
    // SAFETY: CMSG_SPACE is pure arithmetic.
    unsafe { libc::CMSG_SPACE(size_of::<T>() as u32) as usize }
}

/// Room for one received datagram's control messages, every one this module asks for at
/// once: a timestamp of each kind (`SO_TIMESTAMPNS` and `SO_TIMESTAMPING` may both be on),
/// IPv4 and IPv6 packet info (an IPv6 socket may have both on) and a GRO segment size. Too
/// small a buffer would lose the last ones without an error (only `MSG_CTRUNC` says so).
const CONTROL_WORDS: usize = (control_space::<libc::timespec>()
    + timestamping::RECEIVE_STAMP_SPACE
    + control_space::<libc::in_pktinfo>()
    + control_space::<libc::in6_pktinfo>()
    + control_space::<libc::c_int>())
.div_ceil(size_of::<u64>());

/// What the kernel said about a datagram besides its bytes.
#[derive(Debug, Clone, Copy, Default)]
struct Ancillary {
    kernel_ns: Option<u64>,
    interface: Option<u32>,
    destination: Option<std::net::IpAddr>,
    segment_size: Option<usize>,
}

/// The kernel receive time (`SCM_TIMESTAMPNS` or `SCM_TIMESTAMPING`), packet info (`IP_PKTINFO`,
/// `IPV6_PKTINFO`) and GRO segment size (`UDP_GRO`) in a received message's control data.
///
/// # Safety
/// `message` must be a `msghdr` the kernel filled in, its control buffer still alive.
unsafe fn ancillary_data(message: &libc::msghdr) -> Ancillary {
    let mut ancillary = Ancillary::default();
    // SAFETY (caller): CMSG_* walk the control buffer within msg_controllen; each payload
    // is read, by `payload`, with the type its level and type say it holds.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(message);
        while !cmsg.is_null() {
            match ((*cmsg).cmsg_level, (*cmsg).cmsg_type) {
                (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS) => {
                    if let Some(ts) = payload::<libc::timespec>(cmsg) {
                        ancillary.kernel_ns =
                            Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
                    }
                }
                // The same stamp of the same packet as SCM_TIMESTAMPNS's, when both are on.
                (libc::SOL_SOCKET, libc::SCM_TIMESTAMPING) => {
                    if let Some(ns) = timestamping::receive_stamp(cmsg) {
                        ancillary.kernel_ns = Some(ns);
                    }
                }
                (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                    if let Some(info) = payload::<libc::in_pktinfo>(cmsg) {
                        ancillary.interface = Some(info.ipi_ifindex as u32);
                        ancillary.destination = Some(std::net::IpAddr::V4(
                            std::net::Ipv4Addr::from(u32::from_be(info.ipi_addr.s_addr)),
                        ));
                    }
                }
                (libc::SOL_UDP, libc::UDP_GRO) => {
                    if let Some(size) = payload::<libc::c_int>(cmsg) {
                        ancillary.segment_size = usize::try_from(size).ok().filter(|&s| s > 0);
                    }
                }
                (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                    if let Some(info) = payload::<libc::in6_pktinfo>(cmsg) {
                        ancillary.interface = Some(info.ipi6_ifindex);
                        ancillary.destination = Some(std::net::IpAddr::V6(
                            std::net::Ipv6Addr::from(info.ipi6_addr.s6_addr),
                        ));
                    }
                }
                _ => {}
            }
            cmsg = libc::CMSG_NXTHDR(message, cmsg);
        }
    }
    ancillary
}

/// The payload of a received control message as a `T`, if the message holds a whole one:
/// when the buffer is too small the kernel cuts the last message short (`MSG_CTRUNC`), and
/// reading a whole `T` would go past the buffer's end.
///
/// # Safety
/// `cmsg` must point at a control message header inside a buffer the kernel filled, its
/// `cmsg_len` bytes inside that buffer.
unsafe fn payload<T: Copy>(cmsg: *const libc::cmsghdr) -> Option<T> {
    // SAFETY (caller): the header is readable, and so are `cmsg_len` bytes from it, which
    // is checked to cover a whole `T` at CMSG_DATA (read unaligned).
    unsafe {
        ((*cmsg).cmsg_len >= libc::CMSG_LEN(size_of::<T>() as u32) as _)
            .then(|| std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<T>()))
    }
}

/// The most datagrams one `recvmmsg`/`sendmmsg` call handles here: the message headers
/// live on the stack (64 x 64 bytes), so a batch allocates nothing.
pub const MAX_BATCH: usize = 64;

/// One datagram of a [`RecvBatch`].
#[derive(Debug, Clone, Copy)]
pub struct Datagram<'a> {
    /// What arrived (cut at the slot size when `truncated`).
    pub data: &'a [u8],
    /// Where it came from.
    pub source: std::net::SocketAddr,
    /// Kernel receive time in ns since the Unix epoch, when the socket has timestamps on.
    pub kernel_ns: Option<u64>,
    /// The interface it arrived on, when the socket has packet info on.
    pub interface: Option<u32>,
    /// The local address it was sent to, when the socket has packet info on: the address
    /// to answer from ([`Train::from`]) on a socket bound to a wildcard address. An IPv4
    /// datagram on an IPv6 socket that takes IPv4 reports it IPv4-mapped, as its `source`.
    pub destination: Option<std::net::IpAddr>,
    /// It was longer than the slot.
    pub truncated: bool,
    /// On a socket with [`enable_udp_gro`]: the kernel handed several datagrams of one
    /// sender at once, `data` is their concatenation, each this long but the last.
    pub segment_size: Option<usize>,
}

impl<'a> Datagram<'a> {
    /// The datagrams the sender sent: `data` cut at [`Datagram::segment_size`], or whole.
    pub fn segments(&self) -> std::slice::Chunks<'a, u8> {
        let size = self.segment_size.unwrap_or(self.data.len()).max(1);
        self.data.chunks(size)
    }
}

/// What the kernel filled in for one slot of a [`RecvBatch`].
#[derive(Debug, Clone, Copy)]
struct Received {
    len: usize,
    source: Option<std::net::SocketAddr>,
    ancillary: Ancillary,
    truncated: bool,
}

/// Buffers for receiving up to `slots` datagrams in one `recvmmsg(2)`, each with its
/// source, kernel timestamp and packet info: at hundreds of thousands of probes a second,
/// one system call per probe is what loses them.
#[derive(Debug)]
pub struct RecvBatch {
    slot_len: usize,
    data: Vec<u8>,
    sources: Vec<libc::sockaddr_storage>,
    controls: Vec<[u64; CONTROL_WORDS]>,
    received: Vec<Received>,
}

impl RecvBatch {
    /// Room for `slots` datagrams (1 to [`MAX_BATCH`]) of up to `slot_len` bytes each.
    pub fn new(slots: usize, slot_len: usize) -> RecvBatch {
        let slots = slots.clamp(1, MAX_BATCH);
        RecvBatch {
            slot_len,
            data: vec![0; slots * slot_len],
            // SAFETY: sockaddr_storage is plain data; all-zero is valid.
            sources: vec![unsafe { zeroed() }; slots],
            controls: vec![[0; CONTROL_WORDS]; slots],
            received: Vec::with_capacity(slots),
        }
    }

    /// Receives what is waiting, without blocking: the number of datagrams (0 when none).
    /// Allocates nothing.
    pub fn recv(&mut self, fd: BorrowedFd<'_>) -> io::Result<usize> {
        self.received.clear();
        let slots = self.sources.len();
        let mut iovecs = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX_BATCH];
        for (iov, chunk) in iovecs
            .iter_mut()
            .zip(self.data.chunks_exact_mut(self.slot_len))
        {
            iov.iov_base = chunk.as_mut_ptr().cast();
            iov.iov_len = chunk.len();
        }
        // SAFETY: mmsghdr is plain data; all-zero is valid.
        let mut headers: [libc::mmsghdr; MAX_BATCH] = unsafe { zeroed() };
        for (i, header) in headers[..slots].iter_mut().enumerate() {
            header.msg_hdr.msg_name = std::ptr::from_mut(&mut self.sources[i]).cast();
            header.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            header.msg_hdr.msg_iov = &raw mut iovecs[i];
            header.msg_hdr.msg_iovlen = 1;
            header.msg_hdr.msg_control = self.controls[i].as_mut_ptr().cast();
            header.msg_hdr.msg_controllen = size_of::<[u64; CONTROL_WORDS]>() as _;
        }
        // SAFETY: the first `slots` headers point into buffers of `self` and `iovecs` that
        // outlive the call, with the lengths given.
        let result = unsafe { recvmmsg_now(fd, &mut headers[..slots]) }?;
        for header in &headers[..result] {
            // SAFETY: the kernel filled this header; its control buffer is in `self`.
            let ancillary = unsafe { ancillary_data(&header.msg_hdr) };
            let name = header.msg_hdr.msg_name.cast::<libc::sockaddr_storage>();
            // SAFETY: msg_name points at one of `self.sources`.
            let source = socket_address(unsafe { &*name });
            self.received.push(Received {
                len: (header.msg_len as usize).min(self.slot_len),
                source,
                ancillary,
                truncated: header.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
            });
        }
        Ok(self.received.len())
    }

    /// The datagrams of the last [`RecvBatch::recv`] (those of an unknown address family
    /// are left out).
    pub fn datagrams(&self) -> impl Iterator<Item = Datagram<'_>> {
        self.received
            .iter()
            .enumerate()
            .filter_map(|(i, received)| {
                let start = i * self.slot_len;
                Some(Datagram {
                    data: &self.data[start..start + received.len],
                    source: received.source?,
                    kernel_ns: received.ancillary.kernel_ns,
                    interface: received.ancillary.interface,
                    destination: received.ancillary.destination,
                    truncated: received.truncated,
                    segment_size: received.ancillary.segment_size,
                })
            })
    }
}

/// Sends each of `packets` as one datagram on a connected socket, [`MAX_BATCH`] per
/// `sendmmsg(2)`; returns how many the kernel took (from the first). Allocates nothing.
pub fn send_batch(fd: BorrowedFd<'_>, packets: &[&[u8]]) -> io::Result<usize> {
    send_many(fd, packets.len(), |i| (packets[i], None))
}

/// Sends each packet to its own destination, [`MAX_BATCH`] per `sendmmsg(2)`; returns
/// how many the kernel took (from the first). Allocates nothing.
pub fn send_batch_to(
    fd: BorrowedFd<'_>,
    packets: &[(std::net::SocketAddr, &[u8])],
) -> io::Result<usize> {
    send_many(fd, packets.len(), |i| (packets[i].1, Some(packets[i].0)))
}

/// `sendmmsg(2)` over `count` packets, `packet(i)` giving each one's bytes and, on an
/// unconnected socket, its destination. An error after some packets went out is left for
/// the next call to report, as `sendmmsg` itself does.
fn send_many<'a>(
    fd: BorrowedFd<'_>,
    count: usize,
    packet: impl Fn(usize) -> (&'a [u8], Option<std::net::SocketAddr>),
) -> io::Result<usize> {
    let mut sent = 0;
    while sent < count {
        let chunk = (count - sent).min(MAX_BATCH);
        let mut iovecs = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX_BATCH];
        // SAFETY: sockaddr_storage is plain data; all-zero is valid.
        let mut names: [libc::sockaddr_storage; MAX_BATCH] = unsafe { zeroed() };
        // SAFETY: mmsghdr is plain data; all-zero is valid.
        let mut headers: [libc::mmsghdr; MAX_BATCH] = unsafe { zeroed() };
        for i in 0..chunk {
            let (bytes, destination) = packet(sent + i);
            iovecs[i] = libc::iovec {
                iov_base: bytes.as_ptr().cast_mut().cast(),
                iov_len: bytes.len(),
            };
            let header = &mut headers[i].msg_hdr;
            header.msg_iov = &raw mut iovecs[i];
            header.msg_iovlen = 1;
            if let Some(destination) = destination {
                let (storage, len) = socket_address_to_c(destination);
                names[i] = storage;
                header.msg_name = std::ptr::from_mut(&mut names[i]).cast();
                header.msg_namelen = len;
            }
        }
        // SAFETY: each of the first `chunk` headers names one iovec over a packet that is
        // readable for its length (the kernel only reads through msg_iov on send) and, if
        // any, an address in `names` of the length given; all live for the call.
        let result = unsafe {
            libc::sendmmsg(
                fd.as_raw_fd(),
                headers.as_mut_ptr(),
                chunk as libc::c_uint,
                0,
            )
        };
        if result < 0 {
            if sent > 0 {
                break;
            }
            return Err(io::Error::last_os_error());
        }
        sent += result as usize;
        if (result as usize) < chunk {
            break;
        }
    }
    Ok(sent)
}

/// Asks the kernel to hand a UDP socket's datagrams in trains (`UDP_GRO`): consecutive
/// datagrams of one sender, of one size but the last, come as one message whose
/// [`Datagram::segment_size`] says where to cut. A sender's GSO train (see [`send_trains`])
/// then crosses the stack as one packet, not one per datagram.
pub fn enable_udp_gro(fd: BorrowedFd<'_>) -> io::Result<()> {
    setsockopt(fd, libc::SOL_UDP, libc::UDP_GRO, &(1 as libc::c_int))
}

/// The most datagrams in one [`Train`] (the kernel's `UDP_MAX_SEGMENTS` on older kernels).
pub const MAX_TRAIN_SEGMENTS: usize = 64;

/// The most UDP payload bytes in one [`Train`]: one IPv4 packet's.
pub const MAX_TRAIN_BYTES: usize = 65_507;

/// Datagrams `first..first + count` of a [`send_trains`] call, to `to` in one `sendmsg`:
/// with `segment_size` (all that long but the last, which may be shorter) the kernel cuts
/// them apart as late as it can (UDP GSO, `UDP_SEGMENT`), possibly only at the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Train {
    /// The destination.
    pub to: std::net::SocketAddr,
    /// The index of the first datagram.
    pub first: usize,
    /// How many datagrams.
    pub count: usize,
    /// Their size, for a GSO train; `None` sends one datagram (`count` must be 1).
    pub segment_size: Option<u16>,
    /// The local address to send from (`IP_PKTINFO` / `IPV6_PKTINFO`, the interface left
    /// to routing), or `None` to let routing pick it: a server bound to a wildcard address
    /// answers from the [`Datagram::destination`] a client's datagrams came to. It must be
    /// a local address, or the kernel refuses the train (`ENETUNREACH` for IPv4, `EINVAL`
    /// for IPv6, on Linux 6.18). An IPv4 address to an IPv4-mapped `to` (an IPv6 socket
    /// that takes IPv4) is mapped, an IPv4-mapped one to an IPv4 `to` unmapped; an IPv6
    /// address to an IPv4 `to` panics.
    pub from: Option<std::net::IpAddr>,
}

/// Room for one train's control messages: a `UDP_SEGMENT` (`CMSG_SPACE(2)`, 24 bytes) and
/// the larger of the two packet infos (`CMSG_SPACE` of an `in6_pktinfo`, 40).
const TRAIN_CONTROL_WORDS: usize =
    (control_space::<u16>() + control_space::<libc::in6_pktinfo>()).div_ceil(size_of::<u64>());

/// One train's control buffer, filled a message at a time.
struct TrainControl<'a> {
    buffer: &'a mut [u64; TRAIN_CONTROL_WORDS],
    /// Bytes filled, each message padded to the alignment `CMSG_SPACE` keeps.
    used: usize,
}

impl TrainControl<'_> {
    /// Appends a control message of `level` and `kind` carrying `payload`.
    fn push<T: Copy>(&mut self, level: libc::c_int, kind: libc::c_int, payload: T) {
        let space = control_space::<T>();
        assert!(
            self.used + space <= size_of::<[u64; TRAIN_CONTROL_WORDS]>(),
            "a train's control messages fit its buffer"
        );
        #[allow(clippy::cast_ptr_alignment)]
        // `used` is a sum of CMSG_SPACE values, multiples of the header's alignment, and the
        // buffer is u64-aligned, so the header is aligned.
        // SAFETY: byte `used` lies in the buffer (checked above).
        let cmsg =
            unsafe { self.buffer.as_mut_ptr().cast::<u8>().add(self.used) }.cast::<libc::cmsghdr>();
        // SAFETY: the header (aligned, above) and the `space` bytes from it lie in the
        // buffer (checked above); CMSG_LEN(size) <= space, so the payload CMSG_DATA points
        // at is inside too, written unaligned.
        unsafe {
            (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<T>() as u32) as _;
            (*cmsg).cmsg_level = level;
            (*cmsg).cmsg_type = kind;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<T>(), payload);
        }
        self.used += space;
    }

    /// The `IP_PKTINFO` or `IPV6_PKTINFO` that sends from `from`, on the interface
    /// routing picks (index 0).
    fn push_source(&mut self, from: std::net::IpAddr) {
        match from {
            std::net::IpAddr::V4(from) => {
                // SAFETY: in_pktinfo is plain data; all-zero is valid.
                let mut info: libc::in_pktinfo = unsafe { zeroed() };
                info.ipi_spec_dst.s_addr = u32::from(from).to_be();
                self.push(libc::IPPROTO_IP, libc::IP_PKTINFO, info);
            }
            std::net::IpAddr::V6(from) => {
                // SAFETY: in6_pktinfo is plain data; all-zero is valid.
                let mut info: libc::in6_pktinfo = unsafe { zeroed() };
                info.ipi6_addr.s6_addr = from.octets();
                self.push(libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, info);
            }
        }
    }
}

/// `from` in `to`'s family, the one the kernel reads a source address in: an IPv4 address
/// IPv4-mapped for an IPv6 destination, an IPv4-mapped one unmapped for an IPv4
/// destination. Panics for an IPv6 address to an IPv4 destination: a socket that sent
/// that way would never have received from it.
fn source_in_family_of(to: std::net::SocketAddr, from: std::net::IpAddr) -> std::net::IpAddr {
    use std::net::IpAddr;
    match (to, from) {
        (std::net::SocketAddr::V4(_), IpAddr::V6(v6)) => {
            IpAddr::V4(v6.to_ipv4_mapped().unwrap_or_else(|| {
                panic!("a train to {to} cannot be sent from the IPv6 address {from}")
            }))
        }
        (std::net::SocketAddr::V6(_), IpAddr::V4(v4)) => IpAddr::V6(v4.to_ipv6_mapped()),
        (_, from) => from,
    }
}

/// Sends `trains` of `datagrams` (at most [`MAX_BATCH`] datagrams in all), each train one
/// message of one `sendmmsg(2)`; returns how many trains the kernel took, from the first.
/// A device that cannot take a GSO train fails it with `EIO` (no checksum offload) or a
/// kernel without UDP GSO with `EINVAL`: send such trains one datagram each. A train whose
/// [`Train::from`] is not a local address fails too, with `ENETUNREACH` (IPv4) or `EINVAL`
/// (IPv6, which [`is_gso_refusal`] cannot tell from a GSO refusal). Allocates nothing.
pub fn send_trains(fd: BorrowedFd<'_>, datagrams: &[&[u8]], trains: &[Train]) -> io::Result<usize> {
    assert!(
        datagrams.len() <= MAX_BATCH && trains.len() <= MAX_BATCH,
        "send_trains takes at most MAX_BATCH datagrams"
    );
    let mut iovecs = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; MAX_BATCH];
    for (iov, datagram) in iovecs.iter_mut().zip(datagrams) {
        iov.iov_base = datagram.as_ptr().cast_mut().cast();
        iov.iov_len = datagram.len();
    }
    // SAFETY: sockaddr_storage is plain data; all-zero is valid.
    let mut names: [libc::sockaddr_storage; MAX_BATCH] = unsafe { zeroed() };
    let mut controls = [[0u64; TRAIN_CONTROL_WORDS]; MAX_BATCH];
    // SAFETY: mmsghdr is plain data; all-zero is valid.
    let mut headers: [libc::mmsghdr; MAX_BATCH] = unsafe { zeroed() };
    for ((train, header), (name, control)) in trains
        .iter()
        .zip(headers.iter_mut())
        .zip(names.iter_mut().zip(controls.iter_mut()))
    {
        assert!(
            train.count >= 1 && train.first + train.count <= datagrams.len(),
            "a train's datagrams are in the batch"
        );
        let (storage, len) = socket_address_to_c(train.to);
        *name = storage;
        let header = &mut header.msg_hdr;
        header.msg_name = std::ptr::from_mut(name).cast();
        header.msg_namelen = len;
        header.msg_iov = &raw mut iovecs[train.first];
        header.msg_iovlen = train.count as _;
        let mut control = TrainControl {
            buffer: control,
            used: 0,
        };
        if let Some(size) = train.segment_size {
            control.push(libc::SOL_UDP, libc::UDP_SEGMENT, size);
        }
        if let Some(from) = train.from {
            control.push_source(source_in_family_of(train.to, from));
        }
        if control.used > 0 {
            header.msg_controllen = control.used as _;
            header.msg_control = control.buffer.as_mut_ptr().cast();
        }
    }
    // SAFETY: each of the first `trains.len()` headers names iovecs over datagrams that are
    // readable for their lengths (the kernel only reads through msg_iov on send), an address
    // in `names` and a control buffer in `controls` of the lengths given; all live for the
    // call.
    let result = unsafe {
        libc::sendmmsg(
            fd.as_raw_fd(),
            headers.as_mut_ptr(),
            trains.len() as libc::c_uint,
            0,
        )
    };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(result as usize)
}

/// Whether a failed [`send_trains`] of a GSO train says the socket cannot take them.
pub fn is_gso_refusal(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT | libc::EOPNOTSUPP)
    )
}

/// Sets DF on a UDP socket's packets and ignores the kernel's cached path MTU
/// (`IP_PMTUDISC_PROBE`): a datagram longer than the route's MTU fails with EMSGSIZE, a
/// shorter one goes out whole, whatever ICMP said before. What packetization-layer MTU
/// probes need.
pub fn set_df_probe(fd: BorrowedFd<'_>, ipv6: bool) -> io::Result<()> {
    if ipv6 {
        setsockopt(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            &libc::IPV6_PMTUDISC_PROBE,
        )
    } else {
        setsockopt(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            &libc::IP_PMTUDISC_PROBE,
        )
    }
}

/// An integer socket option's current value.
/// Takes the error a socket has pending (`SO_ERROR`, which clears it): 0 when none. A
/// packet socket gets ENETDOWN when its interface goes down and ENODEV when it disappears,
/// and polls with POLLERR until the error is read, which a socket read through a ring
/// never does by itself.
pub fn take_socket_error(fd: BorrowedFd<'_>) -> io::Result<i32> {
    getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_ERROR)
}

fn getsockopt_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<libc::c_int> {
    // SAFETY: an int is plain data.
    unsafe { getsockopt_plain(fd, level, name) }.map(|(value, _)| value)
}

/// `getsockopt` of a plain-data value: the value (zero where the kernel wrote less) and
/// how many bytes the kernel wrote.
///
/// # Safety
/// All-zero bytes are a valid `T`, and so is whatever the kernel writes for `name`.
pub(crate) unsafe fn getsockopt_plain<T>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<(T, usize)> {
    // SAFETY: the caller's promise: all-zero is a valid `T`.
    let mut value: T = unsafe { zeroed() };
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is writable for `len` bytes, and the kernel writes at most that.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            std::ptr::from_mut(&mut value).cast(),
            &raw mut len,
        )
    })?;
    Ok((value, len as usize))
}

/// The MTU of a connected socket's route (`IP_MTU`/`IPV6_MTU`), bytes.
pub fn route_mtu(fd: BorrowedFd<'_>, ipv6: bool) -> io::Result<u32> {
    let mtu = if ipv6 {
        getsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_MTU)?
    } else {
        getsockopt_int(fd, libc::IPPROTO_IP, libc::IP_MTU)?
    };
    Ok(mtu.max(0) as u32)
}

/// Asks for a receive buffer of `bytes`: beyond `rmem_max` with CAP_NET_ADMIN
/// (`SO_RCVBUFFORCE`), else as much as `rmem_max` allows. Returns what the kernel granted.
pub fn grow_receive_buffer(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<usize> {
    grow_buffer(fd, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, bytes)
}

/// Asks for a send buffer of `bytes`: beyond `wmem_max` with CAP_NET_ADMIN
/// (`SO_SNDBUFFORCE`), else as much as `wmem_max` allows. Returns what the kernel granted.
pub fn grow_send_buffer(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<usize> {
    grow_buffer(fd, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, bytes)
}

/// The send and receive buffers the kernel granted a socket, bytes (`SO_SNDBUF`,
/// `SO_RCVBUF`: twice what was asked, the kernel's bookkeeping share included).
pub fn buffer_sizes(fd: BorrowedFd<'_>) -> io::Result<(usize, usize)> {
    let send = getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF)?;
    let receive = getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF)?;
    Ok((send.max(0) as usize, receive.max(0) as usize))
}

/// Asks for a send buffer of `bytes` as any program does (`SO_SNDBUF`): the kernel caps
/// the request at `wmem_max` and doubles it for its bookkeeping.
pub fn set_send_buffer(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<()> {
    let bytes = bytes.min(i32::MAX as usize) as i32;
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &bytes)
}

/// Asks for a receive buffer of `bytes` as any program does (`SO_RCVBUF`): the kernel
/// caps the request at `rmem_max` and doubles it for its bookkeeping.
pub fn set_receive_buffer(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<()> {
    let bytes = bytes.min(i32::MAX as usize) as i32;
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &bytes)
}

/// Sets a buffer with the privileged option `force`, falling back to `plain` (which the
/// kernel caps at its `*mem_max` sysctl); reads back what it granted (twice the request,
/// the kernel's bookkeeping share included).
fn grow_buffer(
    fd: BorrowedFd<'_>,
    force: libc::c_int,
    plain: libc::c_int,
    bytes: usize,
) -> io::Result<usize> {
    let bytes = bytes.min(i32::MAX as usize) as i32;
    if setsockopt(fd, libc::SOL_SOCKET, force, &bytes).is_err() {
        setsockopt(fd, libc::SOL_SOCKET, plain, &bytes)?;
    }
    Ok(getsockopt_int(fd, libc::SOL_SOCKET, plain)?.max(0) as usize)
}

fn socket_address(storage: &libc::sockaddr_storage) -> Option<std::net::SocketAddr> {
    match i32::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin = unsafe { &*std::ptr::from_ref(storage).cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(std::net::SocketAddr::new(
                ip.into(),
                u16::from_be(sin.sin_port),
            ))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6 = unsafe { &*std::ptr::from_ref(storage).cast::<libc::sockaddr_in6>() };
            let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(std::net::SocketAddr::V6(std::net::SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Sends `signal` to process `pid`.
pub fn send_signal(pid: u32, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: kill(2) with integer arguments.
    cvt(unsafe { libc::kill(pid as libc::pid_t, signal) }).map(drop)
}

/// Raises this process's soft limit on open files to its hard limit (a server holds a
/// descriptor per connection; the soft default of 1024 is a fraction of what is allowed).
pub fn raise_open_files_limit() {
    if let Ok((soft, hard)) = open_files_limit() {
        if soft < hard {
            let _ = set_open_files_limit(hard, hard);
        }
    }
}

/// This process's limit on open files: (soft, hard).
pub fn open_files_limit() -> io::Result<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into `limit`.
    cvt(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) })?;
    Ok((limit.rlim_cur, limit.rlim_max))
}

/// Sets this process's limit on open files (raising the hard limit needs
/// CAP_SYS_RESOURCE, and neither may pass [`max_open_files`]).
pub fn set_open_files_limit(soft: u64, hard: u64) -> io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads one rlimit.
    cvt(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const limit) }).map(drop)
}

/// The most open files the kernel lets any process have (`fs.nr_open`).
pub fn max_open_files() -> io::Result<u64> {
    std::fs::read_to_string("/proc/sys/fs/nr_open")?
        .trim()
        .parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "fs.nr_open is not a number"))
}

/// Fills `buffer` with random bytes from the kernel (`getrandom`).
pub fn random_bytes(buffer: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buffer.len() {
        // SAFETY: writes at most the remaining length into `buffer`.
        let n = unsafe {
            libc::getrandom(
                buffer[filled..].as_mut_ptr().cast(),
                buffer.len() - filled,
                0,
            )
        };
        if n < 0 {
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
            continue;
        }
        filled += n as usize;
    }
    Ok(())
}

/// The calling process's effective user id.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// Who is at the other end of a Unix socket: the process, user and group that connected
/// (or called `socketpair`), as the kernel recorded them then (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCredentials {
    /// The peer's process id.
    pub pid: u32,
    /// Its effective user id.
    pub uid: u32,
    /// Its effective group id.
    pub gid: u32,
}

/// The credentials of a Unix socket's peer (`SO_PEERCRED`); the kernel's, not anything the
/// peer says, so it holds against a peer that lies.
pub fn peer_credentials(fd: BorrowedFd<'_>) -> io::Result<PeerCredentials> {
    // SAFETY: ucred is plain data; all-zero is a valid value.
    let (cred, len) =
        unsafe { getsockopt_plain::<libc::ucred>(fd, libc::SOL_SOCKET, libc::SO_PEERCRED) }?;
    if len != size_of::<libc::ucred>() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "SO_PEERCRED answered a short ucred",
        ));
    }
    Ok(PeerCredentials {
        pid: cred.pid as u32,
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// Opens `name` relative to the directory `dir` (`openat`), with `flags` (`O_CLOEXEC` is
/// always added) and, when it creates, `mode`. `name` is taken as given: the caller decides
/// whether it may hold `/` or `..`.
pub fn openat(
    dir: BorrowedFd<'_>,
    name: &str,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> io::Result<OwnedFd> {
    let name = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `name` is a NUL-terminated string; `dir` is a descriptor we borrow.
    let fd = cvt(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_CLOEXEC,
            libc::c_uint::from(mode),
        )
    })?;
    // SAFETY: `fd` was just returned by openat(2) and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Makes the directory `name` inside `dir` (`mkdirat`) with `mode` (less the umask).
pub fn mkdirat(dir: BorrowedFd<'_>, name: &str, mode: libc::mode_t) -> io::Result<()> {
    let name = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `name` is a NUL-terminated string; `dir` is a descriptor we borrow.
    cvt(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) })?;
    Ok(())
}

/// Removes the entry `name` of `dir` (`unlinkat`, a file or a link: a link is removed
/// itself, never what it points to).
pub fn unlinkat(dir: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    let name = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `name` is a NUL-terminated string; `dir` is a descriptor we borrow.
    cvt(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) })?;
    Ok(())
}

/// Sets a TCP socket's congestion control (`TCP_CONGESTION`: `cubic`, `reno`, `bbr`).
pub fn set_congestion_control(fd: BorrowedFd<'_>, algorithm: &str) -> io::Result<()> {
    setsockopt_bytes(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_CONGESTION,
        algorithm.as_bytes(),
    )
}

/// Clamps a TCP socket's maximum segment size (`TCP_MAXSEG`), bytes; set before the
/// handshake, it is the MSS the socket announces.
pub fn set_max_segment(fd: BorrowedFd<'_>, bytes: u32) -> io::Result<()> {
    let bytes = bytes.min(i32::MAX as u32) as i32;
    setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_MAXSEG, &bytes)
}

/// The kernel's `TCP_INFO` for a TCP socket.
pub fn tcp_info(fd: BorrowedFd<'_>) -> io::Result<libc::tcp_info> {
    // SAFETY: tcp_info is plain data; all-zero is valid.
    unsafe { getsockopt_plain(fd, libc::IPPROTO_TCP, libc::TCP_INFO) }.map(|(info, _)| info)
}

/// Sets a string socket option (`TCP_CONGESTION`).
pub fn setsockopt_bytes(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &[u8],
) -> io::Result<()> {
    // SAFETY: `value` is readable for its length.
    unsafe { setsockopt_raw(fd, (level, name), value.as_ptr().cast(), value.len()) }
}

/// CPU time (user and system) the calling thread has used since it started.
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is writable; the clock id is a constant the kernel knows.
    unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut ts);
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// `recvmmsg(2)` into `headers` without waiting: the number of messages received, 0 when
/// none waited (or a signal came).
///
/// # Safety
/// Every header must describe buffers (iovecs, name, control) that are writable for the
/// lengths it gives and live for the call.
unsafe fn recvmmsg_now(fd: BorrowedFd<'_>, headers: &mut [libc::mmsghdr]) -> io::Result<usize> {
    // SAFETY: the caller vouches for the headers; a null timeout with MSG_DONTWAIT
    // returns at once.
    let result = unsafe {
        libc::recvmmsg(
            fd.as_raw_fd(),
            headers.as_mut_ptr(),
            headers.len() as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if result < 0 {
        let error = io::Error::last_os_error();
        return match error.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
            _ => Err(error),
        };
    }
    Ok(result as usize)
}
