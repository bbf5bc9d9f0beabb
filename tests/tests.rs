//! pathlab's end-to-end tests: the built binary and the driver crates on loopback and on
//! network namespaces. One test binary (ripgrep's layout: `tests/tests.rs` with a module
//! per area and one helper module), so the helpers and the crates are compiled and linked
//! once, not once per file. A test's name is its module and function:
//! `cargo test --test e2e emulate::` runs the emulator's, `cargo test --test e2e --
//! --exact emulate::delay_20ms_each_way_gives_a_40ms_ping` one of them.
//!
//! The tests that need CAP_NET_ADMIN take `util::emulated::privileged` (timing tests, one at
//! a time across processes) or its shared form; without the capability they fail when
//! `CI=true` and say SKIPPED elsewhere.

#![forbid(unsafe_code)]

mod util;

// First in name order: see its documentation.
mod alone;
mod analyze;
mod bloat;
mod bond;
mod bond_chaos;
mod bond_classes;
mod bond_headers;
mod bond_mtu;
mod bond_pps;
mod bond_rekey;
mod bond_sessions;
mod bond_tap;
mod cli;
mod client_failures;
mod docs;
mod emulate;
mod engines;
mod hostile;
mod inspect;
mod lab_export;
mod lab_scale;
mod layers;
mod measure;
mod metrics;
mod modem_pps;
mod path;
mod report_browser;
mod rfc6349;
mod server_abuse;
mod shaped;
mod tune;
mod twin;
