//! One module per subcommand: its arguments and what it runs.

pub mod client;
pub mod emulate;
pub mod lab;
pub mod owd;
pub mod rtt;
pub mod server;
pub mod shell;
pub mod sim;
pub mod spec;
pub mod tcp;
