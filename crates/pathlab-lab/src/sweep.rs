//! A whole `pathlab lab` run: an experiment read from a recipe or a spec file, every point
//! of its sweep checked before anything is built, then each point run in turn ([`run`],
//! one [`crate::run::run`] each) with its result saved beside its recordings.
//!
//! The command line builds a [`RunConfig`] from what the user typed, binds what it serves
//! and handles the signals ([`RunControls`]), and prints what [`run`] tells it through its
//! observer ([`SweepEvent`]); this module never prints. The report of the saved points is
//! the command line's too: it is made from the saved files, as `pathlab report` makes it.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use pathlab_results::lab::LabRun;

use crate::recipes::{recipe, RECIPES};
use crate::run::{RunError, RunOptions};
use crate::spec::{expand, Experiment, SpecFileError, SweepPoint};

/// The recipes' names, comma-separated, as the messages that list them write them.
pub fn recipe_names() -> String {
    RECIPES
        .iter()
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// An experiment's spec text, and the file it came from (none for a recipe): what `pathlab
/// lab`, `lab export` and `lab collect` take as `RECIPE|SPEC.toml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExperimentSource {
    /// The name as given: a recipe's, or a file's path.
    pub name: String,
    /// The spec text, before its sweep is expanded.
    pub text: String,
    /// The file it was read from; `None` for a built-in recipe.
    pub file: Option<String>,
}

/// Why an experiment's text could not be had.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A name that is no recipe and does not look like a file name either.
    #[error(
        "no recipe '{name}' (recipes: {}); a spec file's name ends in .toml",
        recipe_names()
    )]
    NoRecipe {
        /// The name given.
        name: String,
    },
    /// The spec file could not be read.
    #[error("cannot read '{name}'")]
    Read {
        /// The file's name as given.
        name: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// One run of an experiment: its sweep point and the experiment parsed from it (with
/// `--quick` applied where asked).
#[derive(Debug, Clone)]
pub struct PlannedRun {
    /// The sweep point: its label, parameters and text (kept in the result).
    pub point: SweepPoint,
    /// The experiment the point's text describes.
    pub experiment: Experiment,
}

/// Why one point of a sweep could not be chosen (`lab export`, `lab collect`: an engine
/// runs one topology at a time).
#[derive(Debug, thiserror::Error)]
pub enum PointError {
    /// The spec is not an experiment.
    #[error(transparent)]
    Spec(#[from] SpecFileError),
    /// A sweep, and no point chosen.
    #[error(
        "{name} is a sweep of {count} runs ({runs}); an engine runs one topology: export \
         one with --point N"
    )]
    Unchosen {
        /// The experiment's name as given.
        name: String,
        /// How many runs the sweep has.
        count: usize,
        /// Each run, numbered from 1, with its label.
        runs: String,
    },
    /// A point chosen of a spec that is no sweep.
    #[error("--point {chosen}: {name} is one run, not a sweep")]
    NotASweep {
        /// The experiment's name as given.
        name: String,
        /// The point asked for.
        chosen: usize,
    },
    /// A point beyond the sweep's runs.
    #[error("--point {chosen}: {name} is a sweep of {count} runs ({runs})")]
    OutOfRange {
        /// The experiment's name as given.
        name: String,
        /// The point asked for.
        chosen: usize,
        /// How many runs the sweep has.
        count: usize,
        /// Each run, numbered from 1, with its label.
        runs: String,
    },
}

/// Why a twin file could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ReadTwinError {
    /// It could not be opened or read (or is not a regular file, or is too long).
    #[error(transparent)]
    File(#[from] pathlab_os::files::FileError),
    /// Its bytes are not text.
    #[error("{0}: a twin file is UTF-8 text")]
    NotText(String),
    /// It is not a twin (the line and field at fault; in the message, not a source, so
    /// that a printed chain says it once).
    #[error("{path}: {error}")]
    Twin {
        /// The file.
        path: String,
        /// What is wrong in it.
        error: pathlab_twin::file::TwinError,
    },
}

/// Reads the twin file at `path`: a regular file of at most
/// [`pathlab_twin::file::MAX_TWIN_BYTES`], parsed and checked. The one reader of twin
/// files (`spec`/`emulate`/`shell --twin`, `twin check`, a lab link's `twin`).
pub fn read_twin(path: &std::path::Path) -> Result<pathlab_twin::file::TwinFile, ReadTwinError> {
    use pathlab_twin::file::{TwinFile, MAX_TWIN_BYTES};
    let bytes = pathlab_os::files::read_regular(path, MAX_TWIN_BYTES)?;
    let shown = || path.display().to_string();
    let text = String::from_utf8(bytes).map_err(|_| ReadTwinError::NotText(shown()))?;
    TwinFile::parse(&text).map_err(|error| ReadTwinError::Twin {
        path: shown(),
        error,
    })
}

/// A link's `twin = "FILE"`: the twin file `name` (relative to the spec file's directory
/// `dir`), its up and down specs with a trace each names read beside it.
fn link_twin(
    dir: &std::path::Path,
    name: &str,
) -> Result<(pathlab_core::spec::LinkSpec, pathlab_core::spec::LinkSpec), String> {
    let path = dir.join(name);
    let twin = read_twin(&path).map_err(|e| e.to_string())?;
    let twin_dir = path.parent().unwrap_or(dir);
    let spec = |text: String| {
        pathlab_core::spec::LinkSpec::parse(&text).map_err(|e| format!("spec '{text}': {e}"))
    };
    Ok((
        spec(twin.up.spec_beside(twin_dir))?,
        spec(twin.down.spec_beside(twin_dir))?,
    ))
}

impl ExperimentSource {
    /// Reads `name`: the recipe of that name, else the spec file at that path. A name
    /// without a dot or a slash is taken for a recipe's, so a mistyped recipe is said to
    /// be one rather than a file not found.
    pub fn read(name: &str) -> Result<ExperimentSource, SourceError> {
        if let Some(text) = recipe(name) {
            return Ok(ExperimentSource {
                name: name.to_owned(),
                text: text.to_owned(),
                file: None,
            });
        }
        if !name.contains('.') && !name.contains('/') {
            return Err(SourceError::NoRecipe {
                name: name.to_owned(),
            });
        }
        let text = std::fs::read_to_string(name).map_err(|source| SourceError::Read {
            name: name.to_owned(),
            source,
        })?;
        Ok(ExperimentSource {
            name: name.to_owned(),
            text,
            file: Some(name.to_owned()),
        })
    }

    /// A spec error, naming the file it came from.
    fn named(&self, mut error: SpecFileError) -> SpecFileError {
        error.file.clone_from(&self.file);
        error
    }

    /// Every point of the sweep (the experiment itself without one), each parsed, with
    /// `quick` applied: all are checked before any is run.
    pub fn sweep(&self, quick: bool) -> Result<Vec<PlannedRun>, SpecFileError> {
        let points = expand(&self.text, quick).map_err(|e| self.named(e))?;
        points
            .into_iter()
            .map(|point| self.planned(point, quick))
            .collect()
    }

    /// Point `chosen` (1-based) of the sweep, `quick` applied; a sweep without a choice,
    /// or a choice out of range, is refused with the runs listed.
    pub fn point(&self, quick: bool, chosen: Option<usize>) -> Result<PlannedRun, PointError> {
        let mut points = expand(&self.text, quick).map_err(|e| self.named(e))?;
        let name = self.name.clone();
        let count = points.len();
        let runs = || {
            points
                .iter()
                .enumerate()
                .map(|(i, point)| format!("{}: {}", i + 1, point.label))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let point = match chosen {
            None if count == 1 => points.remove(0),
            None => {
                let runs = runs();
                return Err(PointError::Unchosen { name, count, runs });
            }
            Some(n) if (1..=count).contains(&n) => points.remove(n - 1),
            Some(chosen) if count == 1 => return Err(PointError::NotASweep { name, chosen }),
            Some(chosen) => {
                let runs = runs();
                return Err(PointError::OutOfRange {
                    name,
                    chosen,
                    count,
                    runs,
                });
            }
        };
        Ok(self.planned(point, quick)?)
    }

    /// The run of `point`, its text parsed (a link's `twin` read beside the spec file),
    /// `quick` applied.
    fn planned(&self, point: SweepPoint, quick: bool) -> Result<PlannedRun, SpecFileError> {
        let experiment = match &self.file {
            Some(file) => {
                let dir = std::path::Path::new(file)
                    .parent()
                    .unwrap_or(std::path::Path::new("."));
                Experiment::parse_with(&point.text, &|name: &str| link_twin(dir, name))
            }
            None => Experiment::parse(&point.text),
        }
        .map_err(|e| self.named(e))?;
        let experiment = if quick {
            experiment.quick()
        } else {
            experiment
        };
        Ok(PlannedRun { point, experiment })
    }
}

/// Where a run of experiment `name` goes when the user names no directory:
/// `lab-NAME-UNIXTIME`, in the current directory.
pub fn default_out(name: &str) -> PathBuf {
    PathBuf::from(format!("lab-{name}-{}", pathlab_os::unix_now_secs()))
}

/// The directory of sweep point `point` in `out`: `out` itself without a sweep, else a
/// directory named after its label (`queue=10, delay=5ms` gives `queue-10_delay-5ms`).
pub fn point_dir(out: &Path, point: &SweepPoint) -> PathBuf {
    if point.label.is_empty() {
        out.to_owned()
    } else {
        out.join(point.label.replace('=', "-").replace(", ", "_"))
    }
}

/// Why a run's result could not be saved.
#[derive(Debug, thiserror::Error)]
#[error("writing {}", .path.display())]
pub struct SaveError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

/// Saves `run` as `dir/result.json`, a versioned result file that records `command_line`
/// (what was typed to make it), so that plots and reports can be made from it later.
pub fn save_result(dir: &Path, run: &LabRun, command_line: Vec<String>) -> Result<(), SaveError> {
    let file = pathlab_results::ResultFile::new(
        pathlab_results::RunResult::Lab(Box::new(run.clone())),
        command_line,
        Some(run.started_unix_ns / 1_000_000_000),
    );
    let path = dir.join("result.json");
    pathlab_os::files::Dir::output(dir)
        .and_then(|dir| dir.write_file("result.json", file.to_json().as_bytes()))
        .map_err(|e| SaveError {
            path,
            source: e.into_io(),
        })
}

/// A whole run of an experiment, every sweep point of it, as `pathlab lab` makes it.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The runs, in order: one per sweep point, each already parsed and checked.
    pub runs: Vec<PlannedRun>,
    /// The directory of the results; a sweep's points each get one in it ([`point_dir`]).
    pub out: PathBuf,
    /// Seed of the emulators' random choices.
    pub seed: u64,
    /// How the emulators' forwarding threads are scheduled (`--priority`, `--cpus`).
    pub scheduling: pathlab_os::scheduling::Request,
    /// The command line that asked for the run, recorded in every result file.
    pub command_line: Vec<String>,
}

/// What a run of a [`RunConfig`] shares with the process: the stop flag its signal handler
/// sets, and the control address the command line bound (`--control`).
#[derive(Debug, Clone)]
pub struct RunControls {
    /// Set (by a signal) to end the run early: the point under way stops, its recordings
    /// and finished workloads are saved, and no further point starts.
    pub stop: Arc<AtomicBool>,
    /// Where to serve the links' HTTP API and metrics while each point runs.
    pub control: Option<Arc<pathlab_http::HttpServer>>,
    /// Where a spec sent to the control address may name trace files, by file name.
    pub trace_dir: Option<Arc<pathlab_os::files::Dir>>,
}

/// What a run tells its observer as it goes, for the command line to print.
#[derive(Debug, Clone, Copy)]
pub enum SweepEvent<'a> {
    /// A point is about to be built and run, its results to go in `dir`.
    Starting {
        /// The point.
        run: &'a PlannedRun,
        /// Its directory.
        dir: &'a Path,
    },
    /// A point has run and its result is saved in `dir` (interrupted or not).
    Finished {
        /// The point.
        run: &'a PlannedRun,
        /// What it recorded.
        result: &'a LabRun,
        /// Its directory.
        dir: &'a Path,
    },
}

/// What a run saved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepOutcome {
    /// The directory of each point run, in order; the last is the interrupted one if the
    /// run was interrupted.
    pub saved: Vec<PathBuf>,
    /// A stop signal ended the run before its last point was over.
    pub interrupted: bool,
}

/// Why a run of a [`RunConfig`] ended in failure (the points saved before it stay on disk).
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// A point could not be built or run.
    #[error(transparent)]
    Run(#[from] RunError),
    /// A point's result could not be saved.
    #[error(transparent)]
    Save(#[from] SaveError),
    /// The observer failed (the command line could not print): the run stops there.
    #[error(transparent)]
    Observer(std::io::Error),
}

/// Runs every point of `config` in turn, each in its own directory with its result saved
/// there, telling `observe` when each starts and ends. Stops after the point a stop signal
/// interrupted. Fails at the first point that fails, or when `observe` does.
pub fn run(
    config: &RunConfig,
    controls: &RunControls,
    observe: &mut dyn FnMut(SweepEvent<'_>) -> std::io::Result<()>,
) -> Result<SweepOutcome, SweepError> {
    let mut saved = Vec::new();
    for planned in &config.runs {
        let dir = point_dir(&config.out, &planned.point);
        observe(SweepEvent::Starting {
            run: planned,
            dir: &dir,
        })
        .map_err(SweepError::Observer)?;
        let result = crate::run::run(
            &planned.experiment,
            &planned.point,
            &RunOptions {
                out: dir.clone(),
                seed: config.seed,
                stop: Arc::clone(&controls.stop),
                control: controls.control.clone(),
                trace_dir: controls.trace_dir.clone(),
                scheduling: config.scheduling.clone(),
            },
        )?;
        save_result(&dir, &result, config.command_line.clone())?;
        saved.push(dir.clone());
        observe(SweepEvent::Finished {
            run: planned,
            result: &result,
            dir: &dir,
        })
        .map_err(SweepError::Observer)?;
        if result.interrupted {
            return Ok(SweepOutcome {
                saved,
                interrupted: true,
            });
        }
    }
    Ok(SweepOutcome {
        saved,
        interrupted: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bufferbloat recipe, a sweep of three queue limits, as if read from a file.
    fn source(text: &str) -> ExperimentSource {
        ExperimentSource {
            name: "s.toml".to_owned(),
            text: text.to_owned(),
            file: Some("s.toml".to_owned()),
        }
    }

    fn bufferbloat() -> &'static str {
        recipe("bufferbloat").expect("a recipe")
    }

    #[test]
    fn a_recipe_is_read_and_a_name_that_is_no_file_is_said_to_be_no_recipe() {
        let (name, _) = RECIPES[0];
        let read = ExperimentSource::read(name).unwrap();
        assert_eq!((read.file, read.text.as_str()), (None, RECIPES[0].1));
        let error = ExperimentSource::read("bufferblot").unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "no recipe 'bufferblot' (recipes: {}); a spec file's name ends in .toml",
                recipe_names()
            )
        );
        let error = ExperimentSource::read("/nonexistent/x.toml").unwrap_err();
        assert!(matches!(error, SourceError::Read { .. }), "{error}");
        assert_eq!(error.to_string(), "cannot read '/nonexistent/x.toml'");
    }

    #[test]
    fn every_point_of_a_sweep_is_parsed_and_an_error_names_the_file() {
        let runs = source(bufferbloat()).sweep(false).unwrap();
        let labels: Vec<_> = runs.iter().map(|r| r.point.label.as_str()).collect();
        assert_eq!(labels, ["queue=10", "queue=50", "queue=100"]);
        let quick = source(bufferbloat()).sweep(true).unwrap();
        assert!(quick[0].experiment.duration < runs[0].experiment.duration);
        let error = source("name = \"s\"\nduration = \"x\"\n")
            .sweep(false)
            .unwrap_err();
        assert_eq!(error.file.as_deref(), Some("s.toml"));
    }

    #[test]
    fn one_point_is_chosen_of_a_sweep_and_a_wrong_choice_lists_the_runs() {
        let sweep = source(bufferbloat());
        assert_eq!(sweep.point(false, Some(2)).unwrap().point.label, "queue=50");
        let runs = "1: queue=10, 2: queue=50, 3: queue=100";
        assert_eq!(
            sweep.point(false, None).unwrap_err().to_string(),
            format!(
                "s.toml is a sweep of 3 runs ({runs}); an engine runs one topology: export \
                 one with --point N"
            )
        );
        for chosen in [0, 4] {
            assert_eq!(
                sweep.point(false, Some(chosen)).unwrap_err().to_string(),
                format!("--point {chosen}: s.toml is a sweep of 3 runs ({runs})")
            );
        }
        let single = source(
            &bufferbloat()
                .replace("{queue}", "10")
                .replace("[sweep]\nqueue = [10, 50, 100]\n", ""),
        );
        assert_eq!(single.point(false, None).unwrap().point.label, "");
        assert_eq!(
            single.point(false, Some(1)).unwrap().point.label,
            "",
            "point 1 of one run is that run"
        );
        assert_eq!(
            single.point(false, Some(2)).unwrap_err().to_string(),
            "--point 2: s.toml is one run, not a sweep"
        );
    }

    #[test]
    fn a_point_has_its_own_directory_only_in_a_sweep() {
        let out = Path::new("out");
        let mut point = SweepPoint {
            label: String::new(),
            parameters: Vec::new(),
            text: String::new(),
        };
        assert_eq!(point_dir(out, &point), out);
        point.label = "queue=10, delay=5ms".to_owned();
        assert_eq!(point_dir(out, &point), out.join("queue-10_delay-5ms"));
    }

    /// A spec file's link `twin = "FILE"` is read beside the spec file (bounded, a regular
    /// file), its trace beside the twin; a missing twin names itself.
    #[test]
    fn a_spec_files_twin_is_read_beside_it() {
        let dir = std::env::temp_dir().join(format!("pathlab-lab-twin-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("twins")).unwrap();
        let twin = pathlab_twin::file::EXAMPLE.replacen(
            "spec = \"delay 10ms\"",
            "spec = \"delay 10ms trace down.trace\"",
            1,
        );
        std::fs::write(dir.join("twins/office.toml"), twin).unwrap();
        let spec = dir.join("lab.toml");
        let text = "name = \"office\"\nduration = \"10s\"\n[[node]]\nname = \"h1\"\n\
                    [[node]]\nname = \"h2\"\n[[link]]\nbetween = [\"h1\", \"h2\"]\n\
                    twin = \"twins/office.toml\"\n";
        std::fs::write(&spec, text).unwrap();
        let run = ExperimentSource::read(spec.to_str().unwrap())
            .unwrap()
            .sweep(false);
        std::fs::write(&spec, text.replace("twins/office", "twins/absent")).unwrap();
        let absent = ExperimentSource::read(spec.to_str().unwrap())
            .unwrap()
            .sweep(false);
        std::fs::remove_dir_all(&dir).unwrap();
        let run = run.expect("parses").remove(0);
        let link = &run.experiment.links[0];
        assert_eq!(
            link.forward.to_string(),
            "delay 10ms quantiles 0ms 1ms 3ms loss 1%"
        );
        let trace = dir.join("twins/down.trace");
        assert_eq!(
            link.reverse.to_string(),
            format!("delay 10ms trace {}", trace.display())
        );
        let error = absent.expect_err("no such twin");
        assert!(error.to_string().contains("twins/absent.toml"), "{error}");
    }
}
