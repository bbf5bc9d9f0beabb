//! The tunnel's ingress: users share it by volume, not by packet (the seed's last section),
//! and each user's flows are queued, and kept in order, apart.
//!
//! Two levels. Inner packets belong to a *user* of the site (the inner source address of
//! what goes up, the inner destination of what comes down, by default; or a flow: the
//! user is the flow; or one FIFO for all: [`FairKey`]) and, within it, to a *flow* (the
//! 5-tuple, `Packet::flow`).
//! Users share each datagram by deficit round robin at the granularity of bytes, so one
//! datagram carries fragments of several users' packets in fair proportion and a user's
//! small packet does not wait behind every other user's full-size one. Within a user its
//! flows take turns the same way, each with its own queue, and every byte a flow sends is
//! charged to its user's credit too: a user that opens many flows gets one user's share.
//! At both levels what just became active is served first (FQ-CoDel's new-flow list, RFC
//! 8290 section 4.1): the seed's pinging user's 100 bytes go into the very next datagram,
//! so on a 1 Mbit/s line it waits one datagram (12 ms), not 14 (168 ms); and a host's own
//! ping goes ahead of its own bulk flow's queue, within the host's credit.
//!
//! Each flow's queue is managed by CoDel (RFC 8289, `pathlab-core`'s state machine; with
//! ECN marking for ECN-capable packets) so a bulk TCP flow in the tunnel keeps a short queue
//! here rather than moving the bufferbloat the line controller removed from the modem into
//! the tunnel. CoDel's target is at least two full-size packets' time at a flow's fair
//! share, as cake scales it on slow links: below that every packet would look late; and,
//! over lines of different delays, long enough for the queue the far lines need (see
//! [`FairQueue::set_path`]): only a bulk flow's queue stands that long, a sparse flow's
//! packet is served when it comes.
//!
//! Each flow is a *stream* on the wire: its own 16-bit id and packet numbers, numbered when
//! a packet's first byte leaves (so every number the receiver sees belongs to a packet that
//! was sent: a packet CoDel dropped leaves no hole to wait on), and the receiver restores
//! order per stream, that is per flow: what TCP needs, and a host's ping no longer waits for
//! its bulk flow's gaps from the slowest line. With [`Order::User`] a user's flows are one
//! flow, queued and ordered together (the order per user of before, for comparison).
//!
//! Stream ids are the wire's 16 bits, so they are reused: a flow idle for
//! [`FairConfig::stream_idle`] gives its id back, and a later flow takes it. Two rules keep
//! flows apart at the far end. An id's packet numbers go on from where its previous owner
//! stopped (they live with the id, not the flow), so no (stream, packet) pair ever names
//! two packets and no fragment can be put into another flow's packet, whatever the far
//! end still remembers. And an id is only freed after its last byte left at least
//! `stream_idle` ago, longer than the far end waits for a gap or a fragment (at most 1 s)
//! plus a line's delay, so a new owner never waits behind its predecessor's gaps. When all
//! 65,536 ids are held by flows active within `stream_idle`, a new flow shares one, of its
//! own user's if it has one (counted in [`FairCounters::streams_shared`]): ordered with
//! it, nothing worse. A user holds at most [`MAX_FLOWS_PER_USER`] ids; its further flows
//! share its own ([`FairCounters::flows_merged`]). The receiver remembers every id (its
//! table is as large as the id space), so a reused id's numbers always follow on there.

mod sizes;
mod table;

use std::collections::VecDeque;
use std::net::IpAddr;

use pathlab_core::packet::flow_hash;
use pathlab_core::spec::CodelConfig;
use pathlab_core::{Duration, Instant, Packet, Verdicts};

use crate::class::TrafficClass;
use crate::wire::{piece_header_bytes, Coding, Fragment, FRAGMENT_HEADER_BYTES};
use table::{Head, List, Table};
pub use table::{MAX_FLOWS_PER_USER, MAX_STREAM_IDS};

/// How inner packets are told apart into users.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FairKey {
    /// By the site's user (the seed's users): the inner source address at the site, the
    /// inner destination at the server (see [`Direction`]), never the internet host at the
    /// other end, which a user multiplies by talking to many.
    #[default]
    Source,
    /// By flow (the 5-tuple): each flow is a user of its own.
    Flow,
    /// Not at all: one FIFO for everything, in one order, whatever [`Order`] says (the
    /// baseline of a tunnel without fair queueing, as `pathlab lab bond-fair` compares).
    Off,
}

/// What the receiver keeps in order, and so what queues apart within a user (except under
/// [`FairKey::Off`]: one queue).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Each flow (5-tuple): a host's ping does not wait for its bulk flow.
    #[default]
    Flow,
    /// Each user: its flows share one queue and one sequence (the order of before).
    User,
}

/// Which way a queue sends, which decides which inner address is the site's user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Direction {
    /// From the site to the server: the user is the inner source.
    #[default]
    Up,
    /// From the server down to the site: the user is the inner destination.
    Down,
}

/// The ingress queue's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FairConfig {
    /// How users are told apart.
    pub key: FairKey,
    /// Whether order (and queueing within a user) is per flow or per user.
    pub order: Order,
    /// Bytes a user, and a flow within its user, may send per round.
    pub quantum_bytes: u32,
    /// Bytes all flows may hold together; beyond it the user holding most loses the head
    /// of its longest flow.
    pub limit_bytes: u64,
    /// CoDel's settings for each flow.
    pub codel: CodelConfig,
    /// How long a flow stays idle (its last byte sent) before its id is freed for
    /// another flow; longer than the far end's reorder and fragment timeouts (at most 1 s
    /// each) plus a line's delay, so no packet of the previous owner is still expected.
    pub stream_idle: Duration,
    /// Whether a datagram carries several inner packets (true), or pieces of one only
    /// (`--packing off`, the comparison: a packet-limited line then carries one small
    /// packet per packet it forwards).
    pub packing: bool,
}

impl Default for FairConfig {
    fn default() -> FairConfig {
        FairConfig {
            key: FairKey::Source,
            order: Order::Flow,
            quantum_bytes: 1514,
            limit_bytes: 4 << 20,
            codel: CodelConfig {
                ecn: true,
                ..CodelConfig::default()
            },
            stream_idle: Duration::from_secs(5),
            packing: true,
        }
    }
}

/// Counters of the ingress queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FairCounters {
    /// Packets accepted.
    pub packets_in: u64,
    /// Packets CoDel dropped.
    pub codel_dropped: u64,
    /// Packets CoDel marked CE instead.
    pub ce_marked: u64,
    /// Packets dropped because the queue was full.
    pub overflow_dropped: u64,
    /// Packets too long for the wire's 16-bit lengths.
    pub oversized_dropped: u64,
    /// Idle flows whose stream id was freed for another flow.
    #[serde(default)]
    pub streams_reclaimed: u64,
    /// Flows that found every stream id held and shared another flow's stream.
    #[serde(default)]
    pub streams_shared: u64,
    /// Flows of a user holding [`MAX_FLOWS_PER_USER`] already, queued and ordered with one
    /// of its others.
    #[serde(default)]
    pub flows_merged: u64,
    /// Packets half sent when a new session began, given up.
    #[serde(default)]
    pub new_session_dropped: u64,
    /// Packets sent in more than one piece (split to fill a datagram, or too long for one).
    #[serde(default)]
    pub split_packets: u64,
}

/// How a user's or a flow's service ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Served {
    /// The datagram has no room left.
    Full,
    /// Nothing left (to serve at once, for [`Scope::Prompt`]).
    Empty,
    /// The user spent its credit for this round.
    OutOfCredit,
    /// The flow spent its credit for this round (its user has some left).
    FlowOutOfCredit,
}

/// Which of a user's flows a service may take from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// Only those that just became active (new or urgent).
    Prompt,
    /// All, in turn.
    All,
}

/// The smallest piece worth a fragment header when a packet has more to send.
const MIN_PIECE_BYTES: usize = 64;

/// The ingress queue: per-flow CoDel queues, served by byte-granular deficit round robin
/// between users and between each user's flows.
#[derive(Debug)]
pub struct FairQueue {
    config: FairConfig,
    direction: Direction,
    table: Table,
    new_users: VecDeque<usize>,
    old_users: VecDeque<usize>,
    /// Users with credit left and a flow that just became active (a new flow, or an
    /// active one whose queue was empty): that flow is served at once, within the credit.
    prompt: VecDeque<usize>,
    /// Flows on a list (for CoDel's two-packet floor).
    active_flows: usize,
    backlog_bytes: u64,
    counters: FairCounters,
    verdicts: Verdicts,
    /// The tunnel's current total rate, to scale CoDel's target on slow links.
    rate_bps: f64,
    /// The standing queue the lines' spread of one-way delays needs (see `set_path`).
    spread: Duration,
    /// Packets of the interactive and redundant classes, in arrival order.
    express: VecDeque<Express>,
    express_bytes: usize,
}

/// A packet of an express class ([`TrafficClass::Interactive`], [`TrafficClass::Redundant`]):
/// numbered in its flow's stream when it comes, so it goes ahead of its flow's and every
/// other flow's queue, and the far end keeps it in order with the rest of its flow.
#[derive(Debug)]
struct Express {
    class: TrafficClass,
    flow: usize,
    head: Head,
    since: Instant,
}

/// Most express packets waiting (they go at once; more wait only while no line is up).
pub const MAX_EXPRESS_PACKETS: usize = 256;
/// Most bytes of express packets waiting.
pub const MAX_EXPRESS_BYTES: usize = 256 << 10;
/// How long an express packet may wait before it is dropped: one that late is no use to a
/// call, and its stream id must not outlive its flow's idle time.
pub const EXPRESS_MAX_WAIT: Duration = Duration::from_secs(1);

impl FairQueue {
    /// An empty queue sending up from the site.
    pub fn new(config: FairConfig) -> FairQueue {
        FairQueue::with_direction(config, Direction::Up)
    }

    /// An empty queue sending `direction`.
    pub fn with_direction(config: FairConfig, direction: Direction) -> FairQueue {
        FairQueue {
            config,
            direction,
            table: Table::default(),
            new_users: VecDeque::new(),
            old_users: VecDeque::new(),
            prompt: VecDeque::new(),
            active_flows: 0,
            backlog_bytes: 0,
            counters: FairCounters::default(),
            verdicts: Verdicts::default(),
            rate_bps: 0.0,
            spread: Duration::ZERO,
            express: VecDeque::new(),
            express_bytes: 0,
        }
    }

    /// A new session: the far end's reassembly starts afresh, so every flow's packet
    /// numbers start again at 1; a packet half sent under the old session is given up (its
    /// first pieces went to a far end that forgot them) and counted as dropped. Returns how
    /// many were given up.
    pub fn new_session(&mut self) -> u64 {
        let mut given_up = 0;
        for flow in &mut self.table.flows {
            if let Some(head) = flow.head.take() {
                self.backlog_bytes -= (head.data.len() - head.offset) as u64;
                given_up += 1;
            }
            flow.next_number = 1;
        }
        // Numbered under the old session: the far end would wait for their predecessors.
        given_up += self.express.len() as u64;
        self.express.clear();
        self.express_bytes = 0;
        self.counters.new_session_dropped += given_up;
        given_up
    }

    /// Bytes waiting (packets not yet sent and the unsent rest of those being sent).
    pub fn backlog_bytes(&self) -> u64 {
        self.backlog_bytes
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.backlog_bytes == 0
    }

    /// The queue's counters.
    pub fn counters(&self) -> FairCounters {
        self.counters
    }

    /// Flows holding a stream id now (idle ones are freed after `stream_idle`).
    pub fn stream_count(&self) -> usize {
        self.table.flow_count()
    }

    /// Users holding a flow now.
    pub fn user_count(&self) -> usize {
        self.table.user_count()
    }

    /// Stream ids ever handed out at once: the size of the flow table, which never
    /// exceeds [`MAX_STREAM_IDS`].
    pub fn stream_slots(&self) -> usize {
        self.table.flows.len()
    }

    /// Tells the queue the tunnel's current rate (scales CoDel's target on slow lines), the
    /// spread of its lines' one-way delays and the fastest line's round trip.
    ///
    /// A backlog that drains over the fast lines in less than the spread never reaches the
    /// slow ones, so CoDel must let a queue of more than the spread stand; and after a
    /// loss-based sender halves or (CUBIC) cuts its window to 0.7, the queue must still
    /// exceed the spread or the slow lines idle until the window grows back (measured in
    /// the `bond` recipe: the 3 Mbit/s line carried 2.4 of 3 with a target of the spread).
    /// With all lines busy the window is the rate times the fast round trip plus the
    /// queue's delay `q`; a cut to 0.7 leaves `q - 0.3 (rtt + q)`, which stays above the
    /// spread from `q = (spread + 0.3 rtt) / 0.7`: CoDel's target is that plus its own.
    /// That queue is the bulk flow's own: each flow has its CoDel, and another flow's
    /// packet (of the same user too) is served in its turn, not behind it.
    pub fn set_path(&mut self, rate_bps: f64, spread: Duration, fast_rtt: Duration) {
        self.rate_bps = rate_bps;
        self.spread = if spread.is_zero() {
            spread
        } else {
            Duration::from_secs_f64((spread.as_secs_f64() + 0.3 * fast_rtt.as_secs_f64()) / 0.7)
        };
    }

    /// Queues an inner packet at `now` for user `key` (from [`FairQueue::key_of`]); its
    /// flow is `packet.flow` under [`Order::Flow`]. `packet.tag` says how its bytes are
    /// coded ([`Coding::to_tag`]; the original is not needed to classify it: the key and the flow
    /// were read from the packet before).
    pub fn enqueue(&mut self, now: Instant, mut packet: Packet, key: u64) {
        if packet.data.is_empty() || packet.data.len() > usize::from(u16::MAX) {
            self.counters.oversized_dropped += 1;
            return;
        }
        packet.enqueued = now;
        let index = self.flow_for(now, &packet, key);
        let len = packet.data.len() as u64;
        let quantum = i64::from(self.config.quantum_bytes);
        let flow = &mut self.table.flows[index];
        let user_index = flow.user;
        let user = &mut self.table.users[user_index];
        flow.last_active = now;
        flow.waiting.queue.push_back(packet);
        flow.waiting.queued_bytes += len;
        user.waiting_bytes += len;
        self.backlog_bytes += len;
        let mut prompt = false;
        if flow.list.is_none() {
            flow.list = Some(List::New);
            flow.deficit = quantum;
            user.new_flows.push_back(index);
            self.active_flows += 1;
            prompt = true;
        } else if flow.waiting.queue.len() == 1
            && flow.head.is_none()
            && flow.deficit > 0
            && !flow.urgent
            && flow.list != Some(List::New)
        {
            // Its queue was empty and it has credit left this round: it need not wait
            // for its turn to spend it.
            flow.urgent = true;
            user.urgent_flows.push_back(index);
            prompt = true;
        }
        if user.list.is_none() {
            user.list = Some(List::New);
            user.deficit = quantum;
            self.new_users.push_back(user_index);
        } else if prompt && user.list != Some(List::New) && !user.prompt && user.deficit > 0 {
            user.prompt = true;
            self.prompt.push_back(user_index);
        }
        while self.backlog_bytes > self.config.limit_bytes {
            self.drop_from_longest();
        }
    }

    /// The flow (its table index) a packet of user `key` is queued and numbered in, claimed
    /// if need be; the packet counted in.
    fn flow_for(&mut self, now: Instant, packet: &Packet, key: u64) -> usize {
        let flow_key = match (self.config.key, self.config.order) {
            (FairKey::Off, _) | (_, Order::User) => 0,
            (FairKey::Source | FairKey::Flow, Order::Flow) => packet.flow,
        };
        self.counters.packets_in += 1;
        self.table.flow_of(
            now,
            key,
            flow_key,
            self.config.stream_idle,
            &mut self.counters,
        )
    }

    /// The user key of an inner IP packet under this queue's [`FairKey`].
    pub fn key_of(&self, packet: &Packet) -> u64 {
        match self.config.key {
            FairKey::Off => 0,
            FairKey::Flow => packet.flow,
            FairKey::Source => match self.direction {
                Direction::Up => source_key(&packet.data),
                Direction::Down => destination_key(&packet.data),
            },
        }
    }

    /// Drops the head of the longest flow of the user holding most.
    fn drop_from_longest(&mut self) {
        let users = &self.table.users;
        let Some(user) = (0..users.len()).max_by_key(|&u| users[u].waiting_bytes) else {
            return;
        };
        let flows = &self.table.flows;
        let user_entry = &users[user];
        let longest = user_entry
            .new_flows
            .iter()
            .chain(&user_entry.old_flows)
            .copied()
            .max_by_key(|&f| flows[f].waiting.queued_bytes);
        let dropped = longest.and_then(|f| {
            use pathlab_core::queue::CodelQueue;
            self.table.flows[f].waiting.pop()
        });
        if let Some(packet) = dropped {
            let len = packet.data.len() as u64;
            self.table.users[user].waiting_bytes -= len;
            self.backlog_bytes -= len;
            self.counters.overflow_dropped += 1;
        } else {
            // Only packets already being sent are left: nothing more can be dropped.
            self.backlog_bytes = self.backlog_bytes.min(self.config.limit_bytes);
        }
    }

    fn codel_config(&self) -> CodelConfig {
        let mut config = self.config.codel;
        let active = self.active_flows.max(1) as f64;
        if self.rate_bps > 0.0 {
            let share = self.rate_bps / active;
            let two_packets = Duration::from_secs_f64(2.0 * 1500.0 * 8.0 / share);
            config.target = config.target.max(two_packets);
        }
        config.target = config.target.max(self.config.codel.target + self.spread);
        config.interval = config.interval.max(config.target.saturating_mul(4));
        config
    }

    /// Whether a flow that just became active waits (a sparse flow: a ping, a DNS query,
    /// a TCP ACK after silence) and its user has the credit to send it now.
    pub fn has_new_streams(&self) -> bool {
        !self.new_users.is_empty()
            || self
                .prompt
                .iter()
                .any(|&user| self.table.users[user].has_prompt_flow())
    }

    /// Hands out pieces of queued packets, fairly between users and between each user's
    /// flows, while `budget` bytes (frame headers included) allow; `emit` writes each
    /// piece. Returns the bytes used.
    pub fn fill(&mut self, now: Instant, budget: usize, emit: impl FnMut(Fragment<'_>)) -> usize {
        self.fill_from(now, budget, false, emit)
    }

    /// As [`FairQueue::fill`], from the flows that just became active only (a new user's
    /// first quantum, another user's new flows within its credit), so a sparse flow's
    /// packet goes alone in a short datagram.
    pub fn fill_new(
        &mut self,
        now: Instant,
        budget: usize,
        emit: impl FnMut(Fragment<'_>),
    ) -> usize {
        self.fill_from(now, budget, true, emit)
    }

    fn fill_from(
        &mut self,
        now: Instant,
        budget: usize,
        new_only: bool,
        mut emit: impl FnMut(Fragment<'_>),
    ) -> usize {
        let mut used = 0;
        let codel = self.codel_config();
        let quantum = i64::from(self.config.quantum_bytes);
        // Users with a flow that just became active and credit left: that flow is served
        // at once, within the user's credit (a ping between two of its user's turns).
        while let Some(&user) = self.prompt.front() {
            match self.serve_user(
                now,
                user,
                Scope::Prompt,
                budget,
                &mut used,
                &codel,
                &mut emit,
            ) {
                Served::Full => return used,
                Served::Empty | Served::OutOfCredit | Served::FlowOutOfCredit => {
                    self.prompt.pop_front();
                    self.table.users[user].prompt = false;
                    self.table.free_user_if_done(user);
                }
            }
        }
        loop {
            let (list, user) = match self.new_users.front() {
                Some(&user) => (List::New, user),
                None if new_only => break,
                None => match self.old_users.front() {
                    Some(&user) => (List::Old, user),
                    None => break,
                },
            };
            if self.table.users[user].deficit <= 0 {
                self.table.users[user].deficit += quantum;
                self.pop_users(list);
                self.table.users[user].list = Some(List::Old);
                self.old_users.push_back(user);
                continue;
            }
            match self.serve_user(now, user, Scope::All, budget, &mut used, &codel, &mut emit) {
                Served::Full => break,
                Served::OutOfCredit | Served::FlowOutOfCredit => {}
                Served::Empty => {
                    // A new user moves to the old list once (so it cannot come back as
                    // new at once and starve the others), an old one leaves.
                    self.pop_users(list);
                    if list == List::New && !self.old_users.is_empty() {
                        self.table.users[user].list = Some(List::Old);
                        self.old_users.push_back(user);
                    } else {
                        self.table.users[user].list = None;
                        self.table.free_user_if_done(user);
                    }
                }
            }
        }
        used
    }

    fn pop_users(&mut self, list: List) {
        match list {
            List::New => self.new_users.pop_front(),
            List::Old => self.old_users.pop_front(),
        };
    }

    /// Serves user `user`'s flows (those `scope` allows) while it has credit, they have
    /// packets and the datagram room: urgent flows, then new ones, then old ones in turn.
    #[allow(clippy::too_many_arguments)]
    fn serve_user(
        &mut self,
        now: Instant,
        user: usize,
        scope: Scope,
        budget: usize,
        used: &mut usize,
        codel: &CodelConfig,
        emit: &mut impl FnMut(Fragment<'_>),
    ) -> Served {
        let quantum = i64::from(self.config.quantum_bytes);
        loop {
            let entry = &self.table.users[user];
            if entry.deficit <= 0 {
                return Served::OutOfCredit;
            }
            let (list, flow) = if let Some(&flow) = entry.urgent_flows.front() {
                (None, flow)
            } else if let Some(&flow) = entry.new_flows.front() {
                (Some(List::New), flow)
            } else if let (Scope::All, Some(&flow)) = (scope, entry.old_flows.front()) {
                (Some(List::Old), flow)
            } else {
                return Served::Empty;
            };
            let started = self.table.flows[flow]
                .head
                .as_ref()
                .is_some_and(|head| head.offset > 0);
            // A packet begun is finished first, on credit: its other pieces must not wait a
            // round of the user's flows (400 flows of 1514 bytes at 10 Mbit/s: 0.5 s, the
            // far end's fragment timeout).
            if self.table.flows[flow].deficit <= 0 && !started {
                match list {
                    None => self.end_urgent(user, flow),
                    Some(list) => {
                        self.table.flows[flow].deficit += quantum;
                        self.rotate_flow(user, flow, list);
                    }
                }
                continue;
            }
            match self.serve_flow(now, flow, budget, used, codel, emit) {
                Served::Full => return Served::Full,
                Served::OutOfCredit => return Served::OutOfCredit,
                Served::FlowOutOfCredit => {
                    if list.is_none() {
                        self.end_urgent(user, flow);
                    }
                    // Else the next pass gives it a quantum and its turn goes on.
                }
                Served::Empty => match list {
                    None => self.end_urgent(user, flow),
                    Some(list) => self.flow_emptied(user, flow, list),
                },
            }
        }
    }

    fn end_urgent(&mut self, user: usize, flow: usize) {
        self.table.users[user].urgent_flows.pop_front();
        self.table.flows[flow].urgent = false;
    }

    /// Moves the flow at the front of `list` to the back of its user's old flows.
    fn rotate_flow(&mut self, user: usize, flow: usize, list: List) {
        let entry = &mut self.table.users[user];
        match list {
            List::New => entry.new_flows.pop_front(),
            List::Old => entry.old_flows.pop_front(),
        };
        entry.old_flows.push_back(flow);
        self.table.flows[flow].list = Some(List::Old);
    }

    /// A flow at the front of `list` has nothing left: a new one moves to the old list
    /// once (so it cannot come back as new at once and starve its siblings), an old one
    /// leaves.
    fn flow_emptied(&mut self, user: usize, flow: usize, list: List) {
        let entry = &self.table.users[user];
        if list == List::New && !entry.old_flows.is_empty() {
            self.rotate_flow(user, flow, list);
        } else {
            let entry = &mut self.table.users[user];
            match list {
                List::New => entry.new_flows.pop_front(),
                List::Old => entry.old_flows.pop_front(),
            };
            self.table.flows[flow].list = None;
            self.active_flows -= 1;
        }
    }

    /// Emits pieces of flow `index` while it has packets, it and its user credit, and the
    /// datagram room. Every byte is charged to both.
    fn serve_flow(
        &mut self,
        now: Instant,
        index: usize,
        budget: usize,
        used: &mut usize,
        codel: &CodelConfig,
        emit: &mut impl FnMut(Fragment<'_>),
    ) -> Served {
        loop {
            let flow = &mut self.table.flows[index];
            let user = &mut self.table.users[flow.user];
            if user.deficit <= 0 {
                return Served::OutOfCredit;
            }
            let started = flow.head.as_ref().is_some_and(|head| head.offset > 0);
            if flow.deficit <= 0 && !started {
                return Served::FlowOutOfCredit;
            }
            if flow.head.is_none() {
                let before = flow.waiting.queued_bytes;
                let packet = flow
                    .codel
                    .dequeue(now, codel, &mut flow.waiting, &mut self.verdicts);
                user.waiting_bytes -= before - flow.waiting.queued_bytes;
                for dropped in self.verdicts.dropped.drain(..) {
                    self.counters.codel_dropped += 1;
                    self.backlog_bytes -= dropped.packet.data.len() as u64;
                }
                self.counters.ce_marked += std::mem::take(&mut self.verdicts.ce_marked);
                let Some(packet) = packet else {
                    return Served::Empty;
                };
                let number = flow.next_number;
                flow.next_number = flow.next_number.wrapping_add(1).max(1);
                flow.head = Some(Head {
                    number,
                    coding: Coding::from_tag(packet.tag),
                    data: packet.data,
                    offset: 0,
                });
            }
            let head = flow.head.as_mut().expect("set above");
            let began = head.offset == 0;
            let Some(take) = emit_piece(head, flow.id, budget, used, emit) else {
                return Served::Full;
            };
            flow.last_active = now;
            if began && head.offset < head.data.len() {
                self.counters.split_packets += 1;
            }
            flow.deficit -= take as i64;
            user.deficit -= take as i64;
            self.backlog_bytes -= take as u64;
            if head.offset == head.data.len() {
                flow.head = None;
                if !self.config.packing {
                    return Served::Full;
                }
            }
        }
    }

    /// Queues a packet of an express `class` at `now` for user `key`: numbered in its
    /// flow's stream now, sent ahead of every queue by [`FairQueue::fill_express`]. Returns
    /// false when it was dropped (the express queue full, or the packet too long).
    pub fn enqueue_express(
        &mut self,
        now: Instant,
        packet: Packet,
        key: u64,
        class: TrafficClass,
    ) -> bool {
        if packet.data.is_empty() || packet.data.len() > usize::from(u16::MAX) {
            self.counters.oversized_dropped += 1;
            return false;
        }
        if self.express.len() >= MAX_EXPRESS_PACKETS
            || self.express_bytes + packet.data.len() > MAX_EXPRESS_BYTES
        {
            return false;
        }
        let index = self.flow_for(now, &packet, key);
        let flow = &mut self.table.flows[index];
        flow.last_active = now;
        let number = flow.next_number;
        flow.next_number = flow.next_number.wrapping_add(1).max(1);
        self.express_bytes += packet.data.len();
        self.express.push_back(Express {
            class,
            flow: index,
            head: Head {
                number,
                coding: Coding::from_tag(packet.tag),
                data: packet.data,
                offset: 0,
            },
            since: now,
        });
        true
    }

    /// The class of the next express packet at `now` (`None`: none waits); packets that
    /// waited longer than [`EXPRESS_MAX_WAIT`] are dropped first, and counted in the
    /// second value.
    pub fn next_express(&mut self, now: Instant) -> (Option<TrafficClass>, u64) {
        let mut dropped = 0;
        while let Some(front) = self.express.front() {
            if now.saturating_since(front.since) < EXPRESS_MAX_WAIT {
                return (Some(front.class), dropped);
            }
            self.drop_express_front();
            dropped += 1;
        }
        (None, dropped)
    }

    fn drop_express_front(&mut self) {
        if let Some(front) = self.express.pop_front() {
            self.express_bytes -= front.head.data.len() - front.head.offset;
        }
    }

    /// Drops every express packet (no line is up); returns how many.
    pub fn drop_express(&mut self) -> u64 {
        let dropped = self.express.len() as u64;
        self.express.clear();
        self.express_bytes = 0;
        dropped
    }

    /// Bytes of express packets waiting.
    pub fn express_bytes(&self) -> usize {
        self.express_bytes
    }

    /// Hands out the express packets of `class` at the front of the express queue while
    /// `budget` bytes allow (a packet longer than the room is split); returns how many
    /// packets began in it.
    pub fn fill_express(
        &mut self,
        now: Instant,
        budget: usize,
        class: TrafficClass,
        mut emit: impl FnMut(Fragment<'_>),
    ) -> u64 {
        let mut used = 0;
        let mut began = 0;
        while let Some(express) = self.express.front_mut() {
            if express.class != class {
                break;
            }
            let head = &mut express.head;
            let stream = self.table.flows[express.flow].id;
            let first = head.offset == 0;
            let Some(take) = emit_piece(head, stream, budget, &mut used, &mut emit) else {
                break;
            };
            self.table.flows[express.flow].last_active = now;
            if first {
                began += 1;
                if head.offset < head.data.len() {
                    self.counters.split_packets += 1;
                }
            }
            self.express_bytes -= take;
            if head.offset < head.data.len() {
                break;
            }
            self.express.pop_front();
        }
        began
    }

    /// Bytes one user has waiting, all its flows together (for tests and stats).
    pub fn user_backlog(&self, key: u64) -> u64 {
        self.table.user_of(key).map_or(0, |user| {
            self.table.users[user]
                .held
                .iter()
                .map(|&flow| self.table.flows[flow].backlog())
                .sum()
        })
    }
}

/// Emits the next piece of `head` as stream `stream`'s, as much as the datagram's
/// `budget` less what is `used` allows, and counts it used; `None` (nothing emitted) when
/// the room left is not worth a fragment header. Returns the packet's bytes it took.
fn emit_piece(
    head: &mut Head,
    stream: u16,
    budget: usize,
    used: &mut usize,
    emit: &mut impl FnMut(Fragment<'_>),
) -> Option<usize> {
    let remaining = head.data.len() - head.offset;
    // A whole packet that fits goes with the shorter header of a Packet frame; one that
    // does not is split to fill the datagram. (Not splitting a packet that would fit a
    // datagram of its own saves two fragment headers per datagram, 1426 inner bytes per
    // 1500 instead of 1408, but in the seed's fairness case it raised the 1 Mbit/s line's
    // queue p50 from 7 to 13 ms and the pinging user's added RTT p95 from 19 to 34 ms, for
    // a reason not found yet.)
    let whole = piece_header_bytes(head.offset, remaining, head.data.len()) + remaining;
    let room = if *used + whole <= budget {
        remaining
    } else {
        budget.saturating_sub(*used + FRAGMENT_HEADER_BYTES)
    };
    // Credit decides whether a packet starts, not where it is cut: a packet begun on
    // positive credit goes whole and is charged whole, the debt carried to the next round
    // (RFC 8290's DRR). Cutting at the credit split nearly every packet of a bulk flow
    // (50,556 of 51,278 in the peer benchmark), 18 bytes of piece headers each.
    let mut take = remaining.min(room);
    if take == 0 || (take < remaining && take < MIN_PIECE_BYTES.min(remaining)) {
        return None;
    }
    if remaining - take < 16 && remaining <= room {
        take = remaining; // do not leave a sliver for another header
    }
    emit(Fragment {
        stream,
        packet: head.number,
        offset: head.offset as u16,
        total_len: head.data.len() as u16,
        coding: head.coding,
        data: &head.data[head.offset..head.offset + take],
    });
    *used += piece_header_bytes(head.offset, take, head.data.len()) + take;
    head.offset += take;
    Some(take)
}

/// A key from an IP packet's source address (0 when it is not IP).
pub fn source_key(packet: &[u8]) -> u64 {
    crate::inner::addresses(packet).map_or(0, |(source, _)| address_key(source))
}

/// A key from an IP packet's destination address (0 when it is not IP).
pub fn destination_key(packet: &[u8]) -> u64 {
    crate::inner::addresses(packet).map_or(0, |(_, destination)| address_key(destination))
}

/// A user's key: the hash of its address's bytes (FNV-1a, the flows' hash: stable, cheap,
/// and the queue needs no defence against chosen collisions beyond sharing a stream).
fn address_key(address: IpAddr) -> u64 {
    crate::inner::with_octets(address, |octets| flow_hash(&[octets]))
}

#[cfg(test)]
mod tests;
