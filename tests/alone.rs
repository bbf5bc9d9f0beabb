//! The tests that need the machine to themselves: timing tests not shown to hold beside
//! another (`util::emulated::privileged`), and tests that look at the whole host (every
//! namespace, `lab clean`). They live here, one module per area as in the rest of the
//! suite, so that they run first and back to back: libtest starts tests in the order of
//! their names, and each exclusive test met among paired ones waits for both timing slots
//! to drain while the other test thread waits behind it. Spread over the areas, the 39 of
//! them drained the slots 39 times: gathered, the end-to-end tests took 657 s instead of
//! 765 on the development machine, idle (2026-11-29).

mod control;
mod docker;
mod emulate;
mod engines;
mod hostile;
mod inspect;
mod lab_kill;
mod lab_scale;
mod measure;
mod metrics;
mod shaped;
mod twin_bond;
