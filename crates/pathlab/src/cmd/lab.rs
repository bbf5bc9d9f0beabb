//! `pathlab lab`: experiments on namespaced topologies. Today: `lab clean`.

use std::io::Write as _;

/// Arguments of `pathlab lab`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub action: Action,
}

/// Lab actions.
#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Remove what killed pathlab runs left behind: stale control sockets and locks, named
    /// namespaces called pathlab-*, pl-* interfaces and pathlab-* nftables tables whose
    /// process is gone. Running
    /// emulators and shells are left alone.
    Clean,
}

/// Runs `pathlab lab`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    match args.action {
        Action::Clean => {
            pathlab_io::require_net_admin("pathlab lab clean").map_err(crate::usage)?;
            let cleaned = pathlab_io::runtime::clean()?;
            let mut out = std::io::stdout().lock();
            let total = cleaned.sockets.len()
                + cleaned.locks.len()
                + cleaned.namespaces.len()
                + cleaned.interfaces.len()
                + cleaned.nat_tables.len();
            for path in &cleaned.sockets {
                writeln!(out, "removed stale control socket {}", path.display())?;
            }
            for path in &cleaned.locks {
                writeln!(out, "removed unheld lock {}", path.display())?;
            }
            for name in &cleaned.namespaces {
                writeln!(out, "removed namespace {name}")?;
            }
            for name in &cleaned.interfaces {
                writeln!(out, "removed interface {name}")?;
            }
            for name in &cleaned.nat_tables {
                writeln!(out, "removed nftables table {name}")?;
            }
            if total == 0 {
                writeln!(out, "nothing to clean")?;
            }
            Ok(())
        }
    }
}
