//! Source NAT for a shell, through nftables over netlink (no `nft` or `iptables` binary).
//!
//! A shell's packets leave its namespace from its inside address. To reach past the
//! namespace its outside end lives in (the host's network, or an outer shell's
//! namespace), that namespace forwards them and rewrites their source to its own address:
//! an nftables table `pathlab-PID` with one postrouting NAT chain and the rule
//! `ip saddr INSIDE masquerade`. The table is deleted when the [`Masquerade`] is dropped.
//! It is the one thing a shell makes that outlives a killed shell, so a record of it is
//! written first ([`crate::runtime::record_table`]) and `lab clean` deletes the tables of
//! records whose owner is gone: never a table by its name alone. IPv4 only: turning on
//! IPv6 forwarding on a host makes it stop accepting router advertisements, which can cut
//! its own IPv6 connectivity, so a shell's IPv6 reaches this namespace's addresses only.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::net::Ipv4Addr;
use std::path::PathBuf;

use crate::netlink::{Message, Netlink};

const NETLINK_NETFILTER: libc::c_int = 12;
const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NFT_MSG_NEWTABLE: u16 = 0;
const NFT_MSG_GETTABLE: u16 = 1;
const NFT_MSG_DELTABLE: u16 = 2;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_NEWRULE: u16 = 6;
const NFPROTO_IPV4: u8 = 2;
const NLA_F_NESTED: u16 = 0x8000;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_APPEND: u16 = 0x800;

const NFTA_TABLE_NAME: u16 = 1;
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_CHAIN_TYPE: u16 = 7;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_HOOK_PRIORITY: u16 = 2;
const NF_INET_POST_ROUTING: u32 = 4;
const NF_IP_PRI_NAT_SRC: i32 = 100;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_PAYLOAD_DREG: u16 = 1;
const NFTA_PAYLOAD_BASE: u16 = 2;
const NFTA_PAYLOAD_OFFSET: u16 = 3;
const NFTA_PAYLOAD_LEN: u16 = 4;
const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
const NFTA_CMP_SREG: u16 = 1;
const NFTA_CMP_OP: u16 = 2;
const NFTA_CMP_DATA: u16 = 3;
const NFTA_DATA_VALUE: u16 = 1;
const NFT_REG_1: u32 = 1;
const NFT_CMP_EQ: u32 = 0;

/// Table names pathlab makes start with this, followed by the owner's pid (for a reader
/// of `nft list tables`; `lab clean` goes by the records, not the names).
const TABLE_PREFIX: &str = "pathlab-";

fn message(kind: u16, flags: u16, family: u8) -> Message {
    Message::new(
        (NFNL_SUBSYS_NFTABLES << 8) | kind,
        flags,
        &[family, 0, 0, 0],
    )
}

fn batch_marker(kind: u16) -> Message {
    let res_id = NFNL_SUBSYS_NFTABLES.to_be_bytes();
    Message::new(kind, 0, &[libc::AF_UNSPEC as u8, 0, res_id[0], res_id[1]])
}

fn be32(value: u32) -> [u8; 4] {
    value.to_be_bytes()
}

fn run_batch(messages: Vec<Message>) -> io::Result<()> {
    let mut all = vec![batch_marker(NFNL_MSG_BATCH_BEGIN)];
    all.extend(messages);
    all.push(batch_marker(NFNL_MSG_BATCH_END));
    Netlink::open_protocol(NETLINK_NETFILTER)?.batch(all)
}

/// Masquerading of one source address, for as long as the value lives.
#[derive(Debug)]
pub struct Masquerade {
    table: String,
    /// Removed once the table is deleted; kept for `lab clean` if deleting it failed.
    record: Option<crate::runtime::Recorded>,
    _forwarding: ForwardingGuard,
}

impl Masquerade {
    /// Turns on IPv4 forwarding in the calling thread's namespace (restored when the last
    /// pathlab shell there ends) and masquerades packets from `source`.
    pub fn add(source: Ipv4Addr) -> io::Result<Masquerade> {
        let forwarding = ForwardingGuard::enable()?;
        let table = format!(
            "{TABLE_PREFIX}{}-{}",
            std::process::id(),
            source.octets()[2]
        );
        let chain = "postrouting";
        let mut new_table = message(NFT_MSG_NEWTABLE, NLM_F_ACK | NLM_F_CREATE, NFPROTO_IPV4);
        new_table.attr_str(NFTA_TABLE_NAME, &table);
        let mut new_chain = message(NFT_MSG_NEWCHAIN, NLM_F_ACK | NLM_F_CREATE, NFPROTO_IPV4);
        new_chain
            .attr_str(NFTA_CHAIN_TABLE, &table)
            .attr_str(NFTA_CHAIN_NAME, chain);
        new_chain
            .begin_nest(NFTA_CHAIN_HOOK | NLA_F_NESTED)
            .attr(NFTA_HOOK_HOOKNUM, &be32(NF_INET_POST_ROUTING))
            .attr(NFTA_HOOK_PRIORITY, &be32(NF_IP_PRI_NAT_SRC as u32))
            .end_nest();
        new_chain.attr_str(NFTA_CHAIN_TYPE, "nat");
        let mut rule = message(
            NFT_MSG_NEWRULE,
            NLM_F_ACK | NLM_F_CREATE | NLM_F_APPEND,
            NFPROTO_IPV4,
        );
        rule.attr_str(NFTA_RULE_TABLE, &table)
            .attr_str(NFTA_RULE_CHAIN, chain);
        rule.begin_nest(NFTA_RULE_EXPRESSIONS | NLA_F_NESTED);
        // payload: the IPv4 source address (network header, offset 12, 4 bytes) -> reg 1
        rule.begin_nest(NFTA_LIST_ELEM | NLA_F_NESTED)
            .attr_str(NFTA_EXPR_NAME, "payload");
        rule.begin_nest(NFTA_EXPR_DATA | NLA_F_NESTED)
            .attr(NFTA_PAYLOAD_DREG, &be32(NFT_REG_1))
            .attr(NFTA_PAYLOAD_BASE, &be32(NFT_PAYLOAD_NETWORK_HEADER))
            .attr(NFTA_PAYLOAD_OFFSET, &be32(12))
            .attr(NFTA_PAYLOAD_LEN, &be32(4))
            .end_nest()
            .end_nest();
        // cmp: reg 1 == source
        rule.begin_nest(NFTA_LIST_ELEM | NLA_F_NESTED)
            .attr_str(NFTA_EXPR_NAME, "cmp");
        rule.begin_nest(NFTA_EXPR_DATA | NLA_F_NESTED)
            .attr(NFTA_CMP_SREG, &be32(NFT_REG_1))
            .attr(NFTA_CMP_OP, &be32(NFT_CMP_EQ));
        rule.begin_nest(NFTA_CMP_DATA | NLA_F_NESTED)
            .attr(NFTA_DATA_VALUE, &source.octets())
            .end_nest();
        rule.end_nest().end_nest();
        // masq
        rule.begin_nest(NFTA_LIST_ELEM | NLA_F_NESTED)
            .attr_str(NFTA_EXPR_NAME, "masq")
            .end_nest();
        rule.end_nest();
        let record = crate::runtime::record_table(&table)?;
        run_batch(vec![new_table, new_chain, rule])?;
        Ok(Masquerade {
            table,
            record: Some(record),
            _forwarding: forwarding,
        })
    }
}

/// Deletes the nftables table `name` (IPv4 family) in the calling thread's namespace.
pub fn delete_table(name: &str) -> io::Result<()> {
    let mut delete = message(NFT_MSG_DELTABLE, NLM_F_ACK, NFPROTO_IPV4);
    delete.attr_str(NFTA_TABLE_NAME, name);
    run_batch(vec![delete])
}

/// The names of the IPv4 nftables tables in the calling thread's namespace.
pub fn tables() -> io::Result<Vec<String>> {
    let mut netlink = Netlink::open_protocol(NETLINK_NETFILTER)?;
    let replies = netlink.dump_raw(
        (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETTABLE,
        &[NFPROTO_IPV4, 0, 0, 0],
    )?;
    Ok(replies
        .iter()
        .filter_map(|reply| crate::netlink::string_attribute(reply.get(4..)?, NFTA_TABLE_NAME))
        .collect())
}

impl Drop for Masquerade {
    fn drop(&mut self) {
        if let Err(error) = delete_table(&self.table) {
            eprintln!(
                "pathlab: could not delete nftables table {} (`pathlab lab clean` will): {error}",
                self.table
            );
            if let Some(record) = self.record.take() {
                record.keep();
            }
        }
    }
}

/// IPv4 forwarding turned on while any pathlab shell of this namespace needs it.
///
/// Each shell holds a shared lock on `forwarding-NETNS.lock`, whose content is the value
/// `ip_forward` had before the first shell. The last shell to leave gets the exclusive
/// lock and writes that value back.
#[derive(Debug)]
struct ForwardingGuard {
    lock: File,
    path: std::path::PathBuf,
}

const IP_FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";

/// The lock of the shells of namespace `netns`.
fn forwarding_lock_path(netns: u64) -> PathBuf {
    crate::runtime::runtime_dir().join(format!("forwarding-{netns}.lock"))
}

/// Undoes what killed shells left of IPv4 forwarding: a forwarding lock no shell holds
/// any more is one whose last shell was killed before it wrote back the value
/// `ip_forward` had. In this namespace that value is written back and the lock removed;
/// the lock of another namespace is removed once `namespace_gone` says that namespace
/// went (with its setting). Returns the locks removed.
pub fn restore_forwarding_of_killed_shells(
    namespace_gone: impl Fn(u64) -> bool,
) -> io::Result<Vec<PathBuf>> {
    let here = crate::runtime::current_netns()?;
    let mut removed = Vec::new();
    let Ok(entries) = fs::read_dir(crate::runtime::runtime_dir()) else {
        return Ok(removed);
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(netns) = name
            .to_str()
            .and_then(|n| n.strip_prefix("forwarding-")?.strip_suffix(".lock"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        let path = forwarding_lock_path(netns);
        let Ok(lock) = OpenOptions::new().read(true).write(true).open(&path) else {
            continue;
        };
        if lock.try_lock().is_err() {
            continue; // a live shell holds it
        }
        if netns == here {
            let original = fs::read_to_string(&path)?;
            if !original.trim().is_empty() {
                fs::write(IP_FORWARD, original.trim())?;
            }
        } else if !namespace_gone(netns) {
            continue;
        }
        fs::remove_file(&path)?;
        removed.push(path);
    }
    Ok(removed)
}

impl ForwardingGuard {
    fn enable() -> io::Result<ForwardingGuard> {
        let netns = crate::runtime::current_netns()?;
        fs::create_dir_all(crate::runtime::runtime_dir())?;
        let path = forwarding_lock_path(netns);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)?;
        // Exclusive while deciding, so two shells starting together agree on the original.
        lock.lock()?;
        let recorded = fs::read_to_string(&path)?;
        if recorded.trim().is_empty() {
            let original = fs::read_to_string(IP_FORWARD)?;
            fs::write(&path, original.trim())?;
        }
        fs::write(IP_FORWARD, "1")?;
        lock.unlock()?;
        lock.lock_shared()?;
        Ok(ForwardingGuard { lock, path })
    }
}

impl Drop for ForwardingGuard {
    fn drop(&mut self) {
        let _ = self.lock.unlock();
        if self.lock.try_lock().is_ok() {
            if let Ok(original) = fs::read_to_string(&self.path) {
                if !original.trim().is_empty() {
                    let _ = fs::write(IP_FORWARD, original.trim());
                }
            }
            let _ = fs::remove_file(&self.path);
        }
    }
}
