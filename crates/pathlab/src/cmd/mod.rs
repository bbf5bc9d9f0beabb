//! One module per subcommand: its arguments and what it runs.

pub mod sim;
pub mod spec;
