//! `pathlab spec`: check a link spec and print its canonical form.

use anyhow::Context as _;
use pathlab_core::spec::RateSpec;
use pathlab_core::stage::rate::Trace;
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
    let text = words.join(" ");
    let mut spec = LinkSpec::parse(&text).map_err(usage)?;
    if let Some(RateSpec::Trace(trace)) = &mut spec.rate {
        let contents = std::fs::read_to_string(&trace.path)
            .with_context(|| format!("cannot read trace file '{}'", trace.path))
            .map_err(usage)?;
        let parsed = Trace::parse(&contents)
            .with_context(|| format!("bad trace file '{}'", trace.path))
            .map_err(usage)?;
        trace.trace = Some(std::sync::Arc::new(parsed));
    }
    Ok(spec)
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
