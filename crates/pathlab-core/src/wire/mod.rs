//! Checked views over wire bytes: each format's header sizes and code points, defined
//! once, and a view that checks a buffer's length when it is made, then reads its fields
//! by name.
//!
//! A view borrows the caller's buffer and never allocates, so the emulator's per-packet
//! path can use it; no input, however short or odd, makes it panic (smoltcp's `wire`
//! contract).

pub mod ethernet;
