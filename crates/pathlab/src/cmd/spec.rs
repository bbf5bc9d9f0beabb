//! `pathlab spec`: check a link spec and print its canonical form.

use pathlab_core::LinkSpec;

use crate::usage;

/// Arguments of `pathlab spec`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The spec, netem syntax plus pathlab's additions, e.g. 'delay 20ms loss 1% rate 10mbit'.
    #[arg(value_name = "SPEC", required = true, num_args = 1..)]
    pub spec: Vec<String>,
    /// Print the parsed spec as JSON.
    #[arg(short = 'J', long)]
    pub json: bool,
}

/// Parses a spec given as one or several words, loading any trace file it names.
pub fn parse_spec(words: &[String]) -> anyhow::Result<LinkSpec> {
    pathlab_io::load_spec(&words.join(" ")).map_err(usage)
}

/// Runs `pathlab spec`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let spec = parse_spec(&args.spec)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&spec)?);
    } else {
        println!("{spec}");
    }
    Ok(())
}
