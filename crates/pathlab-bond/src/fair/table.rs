//! The fair queue's tables: flows (each holding a wire stream id, its packet numbers, its
//! queue and CoDel state) and the users they belong to, with the rules that hand ids out,
//! take them back and bound both tables.

use std::collections::{HashMap, VecDeque};

use pathlab_core::queue::{CodelQueue, CodelState};
use pathlab_core::{Duration, Instant, Packet};

use super::FairCounters;
use crate::wire::Coding;

/// Stream ids are the wire's 16 bits: at most this many flows hold one at once.
pub const MAX_STREAM_IDS: usize = 1 << 16;

/// Flows one user may hold at once. A user past it (a scanner, a peer-to-peer client: more
/// than 1,024 flows active within `stream_idle`) has its further flows share one of its
/// own, ordered together as all its flows were when order was per user, and counted
/// ([`FairCounters::flows_merged`]); so no user takes more than 1/64 of the id space.
pub const MAX_FLOWS_PER_USER: usize = 1024;

/// Which of its owner's round-robin lists an entry is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum List {
    /// Became active this round: served first (RFC 8290's new flows).
    New,
    /// Served in turn.
    Old,
}

/// A packet being sent, fragment by fragment.
#[derive(Debug)]
pub(super) struct Head {
    pub number: u32,
    pub data: Vec<u8>,
    pub offset: usize,
    pub coding: Coding,
}

/// A flow's packets not yet started, as CoDel sees them.
#[derive(Debug, Default)]
pub(super) struct Waiting {
    pub queue: VecDeque<Packet>,
    pub queued_bytes: u64,
}

impl CodelQueue for Waiting {
    fn pop(&mut self) -> Option<Packet> {
        let packet = self.queue.pop_front()?;
        self.queued_bytes -= packet.data.len() as u64;
        Some(packet)
    }

    fn bytes(&self) -> u64 {
        self.queued_bytes
    }
}

/// A flow: a wire stream id, the packets numbered under it, its queue.
#[derive(Debug)]
pub(super) struct Flow {
    pub id: u16,
    /// The (user, flow) keys holding the id (`None`: free, waiting in `free_ids`).
    pub owner: Option<(u64, u64)>,
    /// Its user's index (meaningful while `owner` is set).
    pub user: usize,
    /// Its place in its user's `held`.
    pub slot: usize,
    /// When a packet last came or a byte last left.
    pub last_active: Instant,
    /// Survives a change of owner: see the module's doc.
    pub next_number: u32,
    pub waiting: Waiting,
    pub head: Option<Head>,
    pub deficit: i64,
    pub codel: CodelState,
    pub list: Option<List>,
    /// On its user's list of flows served at once.
    pub urgent: bool,
}

impl Flow {
    fn new(id: u16, now: Instant) -> Flow {
        Flow {
            id,
            owner: None,
            user: 0,
            slot: 0,
            last_active: now,
            next_number: 1,
            waiting: Waiting::default(),
            head: None,
            deficit: 0,
            codel: CodelState::default(),
            list: None,
            urgent: false,
        }
    }

    pub fn backlog(&self) -> u64 {
        self.waiting.queued_bytes
            + self
                .head
                .as_ref()
                .map_or(0, |head| (head.data.len() - head.offset) as u64)
    }

    /// Whether the flow holds nothing and has not for `idle`.
    fn is_idle(&self, now: Instant, idle: Duration) -> bool {
        self.list.is_none()
            && !self.urgent
            && self.head.is_none()
            && self.waiting.queue.is_empty()
            && now.saturating_since(self.last_active) >= idle
    }
}

/// A user of the site: its flows share its quantum.
#[derive(Debug, Default)]
pub(super) struct User {
    pub key: u64,
    /// Flows holding an id for this user.
    pub held: Vec<usize>,
    pub deficit: i64,
    pub list: Option<List>,
    /// On the queue's list of users with a flow to serve at once.
    pub prompt: bool,
    pub new_flows: VecDeque<usize>,
    pub old_flows: VecDeque<usize>,
    /// Active flows whose queue was empty when a packet came, with credit left.
    pub urgent_flows: VecDeque<usize>,
    /// Bytes of its flows' packets not yet started (what an overflow may drop).
    pub waiting_bytes: u64,
}

impl User {
    /// Whether it has a flow that may be served at once (a new or an urgent one) and the
    /// credit to serve it.
    pub fn has_prompt_flow(&self) -> bool {
        self.deficit > 0 && !(self.urgent_flows.is_empty() && self.new_flows.is_empty())
    }
}

/// Flows indexed by stream id, users by slot, and the maps from keys to both.
#[derive(Debug, Default)]
pub(super) struct Table {
    pub flows: Vec<Flow>,
    pub users: Vec<User>,
    flows_by_key: HashMap<(u64, u64), usize>,
    users_by_key: HashMap<u64, usize>,
    /// Ids freed by idle flows (each idle for `stream_idle` already).
    free_ids: Vec<usize>,
    /// Slots of users gone.
    free_users: Vec<usize>,
    /// When idle flows are next looked for.
    next_sweep: Instant,
}

impl Table {
    /// The flow of `(user_key, flow_key)`, claimed if it holds no id. A flow not seen
    /// within `idle` claims a freed id, a new one, or (its user at [`MAX_FLOWS_PER_USER`],
    /// or all 65,536 ids held) one already held.
    pub fn flow_of(
        &mut self,
        now: Instant,
        user_key: u64,
        flow_key: u64,
        idle: Duration,
        counters: &mut FairCounters,
    ) -> usize {
        if let Some(&index) = self.flows_by_key.get(&(user_key, flow_key)) {
            return index;
        }
        if now >= self.next_sweep {
            self.reclaim_idle(now, idle, counters);
        }
        let user = self.users_by_key.get(&user_key).copied();
        let sibling = |table: &Table, user: usize| {
            let held = &table.users[user].held;
            held[(flow_key % held.len() as u64) as usize]
        };
        if let Some(user) = user {
            if self.users[user].held.len() >= MAX_FLOWS_PER_USER {
                counters.flows_merged += 1;
                return sibling(self, user);
            }
        }
        let index = if let Some(index) = self.free_ids.pop() {
            // The id's packet numbers go on: see the module's doc.
            let next_number = self.flows[index].next_number;
            self.flows[index] = Flow::new(index as u16, now);
            self.flows[index].next_number = next_number;
            index
        } else if self.flows.len() < MAX_STREAM_IDS {
            let index = self.flows.len();
            self.flows.push(Flow::new(index as u16, now));
            index
        } else {
            counters.streams_shared += 1;
            // Not mapped: the flow gets an id of its own once one is freed. One of its
            // user's own flows if it has one (ordered with it), else anyone's.
            return match user {
                Some(user) if !self.users[user].held.is_empty() => sibling(self, user),
                _ => ((user_key ^ flow_key) % MAX_STREAM_IDS as u64) as usize,
            };
        };
        let user = user.unwrap_or_else(|| self.add_user(user_key));
        let flow = &mut self.flows[index];
        flow.owner = Some((user_key, flow_key));
        flow.user = user;
        flow.slot = self.users[user].held.len();
        self.users[user].held.push(index);
        self.flows_by_key.insert((user_key, flow_key), index);
        index
    }

    fn add_user(&mut self, key: u64) -> usize {
        let user = User {
            key,
            ..User::default()
        };
        let slot = match self.free_users.pop() {
            Some(slot) => {
                self.users[slot] = user;
                slot
            }
            None => {
                self.users.push(user);
                self.users.len() - 1
            }
        };
        self.users_by_key.insert(key, slot);
        slot
    }

    /// Forgets user `user` if it holds no flow and is on no list.
    pub fn free_user_if_done(&mut self, user: usize) {
        let entry = &self.users[user];
        if entry.held.is_empty() && entry.list.is_none() && !entry.prompt {
            let key = entry.key;
            if self.users_by_key.get(&key) == Some(&user) {
                self.users_by_key.remove(&key);
                self.users[user] = User::default();
                self.free_users.push(user);
            }
        }
    }

    /// Frees the ids of flows idle for `idle`. A sweep of the table, at most four times
    /// per `idle` and only when a new flow comes: the cost stays a few operations per
    /// packet however many flows churn.
    fn reclaim_idle(&mut self, now: Instant, idle: Duration, counters: &mut FairCounters) {
        self.next_sweep = now + Duration::from_nanos(idle.as_nanos() / 4);
        for index in 0..self.flows.len() {
            let flow = &mut self.flows[index];
            if flow.owner.is_none() || !flow.is_idle(now, idle) {
                continue;
            }
            let keys = flow.owner.take().expect("checked");
            let (user, slot) = (flow.user, flow.slot);
            // Its queue's memory goes back now, not when the id is taken again.
            flow.waiting = Waiting::default();
            self.flows_by_key.remove(&keys);
            let held = &mut self.users[user].held;
            held.swap_remove(slot);
            if let Some(&moved) = held.get(slot) {
                self.flows[moved].slot = slot;
            }
            self.free_user_if_done(user);
            self.free_ids.push(index);
            counters.streams_reclaimed += 1;
        }
    }

    /// Flows holding an id.
    pub fn flow_count(&self) -> usize {
        self.flows_by_key.len()
    }

    /// Users holding a flow (or still on a list).
    pub fn user_count(&self) -> usize {
        self.users_by_key.len()
    }

    /// The user of key `key`, if it holds a flow.
    pub fn user_of(&self, key: u64) -> Option<usize> {
        self.users_by_key.get(&key).copied()
    }

    /// Adds its entries to `sizes` ([`crate::sizes`]): flows and users (slots, free slots
    /// and the keys' maps), the users' lists and the packets waiting.
    pub fn state_sizes(&self, sizes: &mut crate::sizes::StateSizes) {
        sizes.add("fair.flows", self.flows.len());
        sizes.add("fair.flows_by_key", self.flows_by_key.len());
        sizes.add("fair.free_ids", self.free_ids.len());
        sizes.add("fair.users", self.users.len());
        sizes.add("fair.users_by_key", self.users_by_key.len());
        sizes.add("fair.free_users", self.free_users.len());
        for user in &self.users {
            sizes.add("fair.user_flows", user.held.len());
            sizes.add(
                "fair.user_lists",
                user.new_flows.len() + user.old_flows.len() + user.urgent_flows.len(),
            );
        }
        for flow in &self.flows {
            sizes.add("fair.waiting_packets", flow.waiting.queue.len());
        }
    }
}
