//! `pathlab emulate --control ADDR`: the emulator's HTTP API, its live page and its
//! Prometheus metrics, served by [`pathlab_http::HttpServer`].
//!
//! | method and path | what |
//! |---|---|
//! | `GET /` | the live page (no data in it; it asks the API with the token) |
//! | `GET /api/v1/stats` | the counters, as `emulate stats -J` |
//! | `GET /api/v1/spec` | each direction's spec |
//! | `PUT /api/v1/spec` | `{"forward": SPEC, "reverse": SPEC}`, either or both; 400 with the parser's message |
//! | `GET /api/v1/about` | the name, the drop reasons' names, the presets |
//! | `GET /api/v1/history?since=T` | per-second samples of the last 10 minutes, after `T` s |
//! | `GET /api/v1/recording` | the recording under way, if any |
//! | `POST /api/v1/recording` | `{"name": NAME}`: start recording into a new file NAME of `--record-dir` |
//! | `DELETE /api/v1/recording` | stop it |
//! | `GET /metrics` | Prometheus text |
//!
//! Every change is logged on stderr with who made it, and written into the recording as
//! `emulate set` does.
//!
//! The API touches no file it was not given at start: a spec names a trace only by a
//! file name inside `--trace-dir` ([`crate::load_spec_in`]), a recording is a new file
//! inside `--record-dir` ([`pathlab_os::files::Dir::create_new`]), and without the
//! directory neither is taken (403). Nothing it made is ever removed.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use pathlab_core::DropReason;
use pathlab_http::{Request, Response};
use pathlab_os::files::Dir;
use serde::{Deserialize, Serialize};

use crate::emulator::{EmulatorHandle, EmulatorStats};

mod lab;
mod metrics;

pub use lab::LabControl;
pub use metrics::metrics;

/// How much history the page gets: 10 minutes of one-second samples.
pub const HISTORY_SECONDS: usize = 600;

/// The live page.
pub const PAGE: &str = include_str!("page.html");

/// One second of one direction, for the page's graphs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DirectionSample {
    /// Bits per second forwarded over the second.
    pub throughput_bps: f64,
    /// Packets per second forwarded.
    pub packets_per_s: f64,
    /// Packets waiting in the queue at the sample.
    pub queue_packets: u64,
    /// Bytes waiting.
    pub queue_bytes: u64,
    /// Queue delay of the last packet out, ms (0 with an empty queue).
    pub queue_delay_ms: f64,
    /// Drops per second over the second, by reason name (reasons without drops left out).
    pub drops_per_s: std::collections::BTreeMap<String, f64>,
    /// p99 of how late packets left over the last second, us.
    pub late_p99_us: f64,
}

/// One sample of both directions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since the emulator started.
    pub t: f64,
    /// Each direction's second.
    pub directions: Vec<DirectionSample>,
}

/// The last [`HISTORY_SECONDS`] seconds, one sample a second, from successive stats.
#[derive(Debug, Default)]
pub struct History {
    samples: VecDeque<Sample>,
    last: Option<EmulatorStats>,
}

impl History {
    /// Nothing yet.
    pub fn new() -> History {
        History::default()
    }

    /// Takes a sample from `stats` if a second has passed since the last one (on the
    /// emulator's own clock, `uptime_ns`).
    pub fn observe(&mut self, stats: &EmulatorStats) {
        let Some(last) = &self.last else {
            self.last = Some(stats.clone());
            return;
        };
        let dt = stats.uptime_ns.saturating_sub(last.uptime_ns) as f64 / 1e9;
        if dt < 1.0 {
            return;
        }
        let directions = stats
            .directions
            .iter()
            .zip(&last.directions)
            .map(|(now, before)| {
                let per_s = |a: u64, b: u64| a.saturating_sub(b) as f64 / dt;
                DirectionSample {
                    throughput_bps: per_s(now.forwarded_bytes, before.forwarded_bytes) * 8.0,
                    packets_per_s: per_s(now.forwarded, before.forwarded),
                    queue_packets: now.queue_packets,
                    queue_bytes: now.queue_bytes,
                    queue_delay_ms: now.queue_delay_ns as f64 / 1e6,
                    drops_per_s: DropReason::ALL
                        .iter()
                        .filter_map(|&reason| {
                            let rate = per_s(now.link.dropped(reason), before.link.dropped(reason));
                            (rate > 0.0).then(|| (reason.name().to_owned(), rate))
                        })
                        .collect(),
                    late_p99_us: now.lateness.last_second_p99_ns as f64 / 1e3,
                }
            })
            .collect();
        self.samples.push_back(Sample {
            t: stats.uptime_ns as f64 / 1e9,
            directions,
        });
        while self.samples.len() > HISTORY_SECONDS {
            self.samples.pop_front();
        }
        self.last = Some(stats.clone());
    }

    /// The samples after `since` seconds.
    pub fn since(&self, since: f64) -> Vec<Sample> {
        self.samples
            .iter()
            .filter(|s| s.t > since)
            .cloned()
            .collect()
    }
}

/// Both directions' specs, as the API reads and writes them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Specs {
    /// First interface to second; absent: unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward: Option<String>,
    /// Second to first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverse: Option<String>,
}

/// What the API needs of the running emulator.
#[derive(Debug)]
pub struct Controlled<'a> {
    /// The emulator.
    pub emulator: &'a EmulatorHandle,
    /// Its history, fed by the caller's loop with [`History::observe`].
    pub history: &'a Mutex<History>,
    /// The command line, for the header of a recording started from the API.
    pub command: Vec<String>,
    /// The presets the page offers: (name, spec text, what it is).
    pub presets: Vec<(String, String, String)>,
    /// `--trace-dir`: where a spec's trace file is read from, by name.
    pub traces: Option<&'a Dir>,
    /// `--record-dir`: where a recording is created, by name.
    pub recordings: Option<&'a Dir>,
}

impl Controlled<'_> {
    /// Answers one request.
    pub fn answer(&self, request: &Request) -> Response {
        let render = || {
            self.emulator
                .stats()
                .map(|stats| metrics(&[stats]))
                .ok_or_else(|| "the emulator has stopped".to_owned())
        };
        if let Some(response) = pathlab_http::metrics::answer(request, &render) {
            return response;
        }
        let route = (request.method.as_str(), request.path.as_str());
        match route {
            ("GET", "/") => Response::new(200, "text/html; charset=utf-8", PAGE),
            ("GET", "/api/v1/stats") => match self.emulator.stats() {
                Some(stats) => Response::json(200, &stats),
                None => Response::error(503, "the emulator has stopped"),
            },
            ("GET", "/api/v1/spec") => specs_of(self.emulator),
            ("PUT", "/api/v1/spec") => set_specs(self.emulator, request, self.traces),
            ("GET", "/api/v1/history") => {
                let since = query_value(&request.query, "since")
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(f64::NEG_INFINITY);
                let history = self.history.lock().unwrap_or_else(PoisonError::into_inner);
                Response::json(200, &history.since(since))
            }
            ("GET", "/api/v1/about") => Response::json(
                200,
                &serde_json::json!({
                    "name": self.emulator.name(),
                    "drop_reasons": DropReason::ALL.map(DropReason::name),
                    "presets": self
                        .presets
                        .iter()
                        .map(|(name, spec, about)| {
                            serde_json::json!({ "name": name, "spec": spec, "about": about })
                        })
                        .collect::<Vec<_>>(),
                }),
            ),
            ("GET", "/api/v1/recording") => Response::json(
                200,
                &serde_json::json!({ "recording": self.recording_text() }),
            ),
            ("POST", "/api/v1/recording") => self.start_recording(request),
            ("DELETE", "/api/v1/recording") => match self.emulator.stop_recording() {
                Ok(path) => {
                    let path = path.map(|p| p.display().to_string());
                    eprintln!(
                        "pathlab emulate '{}': recording stopped by {}{}",
                        self.emulator.name(),
                        who(request),
                        path.as_ref().map(|p| format!(" ({p})")).unwrap_or_default()
                    );
                    Response::json(200, &serde_json::json!({ "stopped": path }))
                }
                Err(error) => Response::error(409, &error),
            },
            (
                _,
                "/" | "/api/v1/stats" | "/api/v1/spec" | "/api/v1/history" | "/api/v1/recording"
                | "/api/v1/about",
            ) => Response::error(405, &format!("{} is not served on {}", route.0, route.1)),
            _ => Response::error(404, &format!("nothing at {}", request.path)),
        }
    }

    fn recording_text(&self) -> Option<String> {
        self.emulator.recording_path().map(|path| {
            path.map_or_else(
                || "the file of --record".to_owned(),
                |p| p.display().to_string(),
            )
        })
    }

    /// `POST .../recording`: a new file of `--record-dir`, by name. It is never removed,
    /// not even when the recording then fails to start: looking the name up again to
    /// remove it could remove whatever was swapped in meanwhile.
    fn start_recording(&self, request: &Request) -> Response {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Start {
            name: String,
        }
        let Some(dir) = self.recordings else {
            return Response::error(
                403,
                "this emulator writes no recordings for the API: start it with --record-dir \
                 DIR, then name a new file of DIR",
            );
        };
        let start: Start = match serde_json::from_slice(&request.body) {
            Ok(start) => start,
            Err(error) => {
                return Response::error(
                    400,
                    &format!(
                        "the body must be {{\"name\": NAME}}, the name of a new file in \
                         --record-dir (a name, not a path): {error}"
                    ),
                )
            }
        };
        if let Err(error) = pathlab_os::files::check_plain_name(&start.name) {
            return Response::error(403, &format!("{error} (--record-dir holds it)"));
        }
        // Before the file is made: a refused recording leaves nothing behind.
        if self.emulator.recording_path().is_some() {
            return Response::error(409, "a recording is already under way; stop it first");
        }
        // A new file only: the API never overwrites what is there, nor follows a link.
        let file = match dir.create_new(&start.name) {
            Ok(file) => file,
            Err(error) => return Response::error(400, &format!("cannot create {error}")),
        };
        let path = std::path::PathBuf::from(dir.shown(&start.name));
        match self
            .emulator
            .start_recording(file, path.clone(), self.command.clone())
        {
            Ok(()) => {
                eprintln!(
                    "pathlab emulate '{}': recording into {} started by {}",
                    self.emulator.name(),
                    path.display(),
                    who(request)
                );
                Response::json(200, &serde_json::json!({ "recording": path }))
            }
            Err(error) => Response::error(
                409,
                &format!("{error} ({} was created and is left empty)", path.display()),
            ),
        }
    }
}

/// `PUT .../spec`: changes either direction or both, answering the specs in force or the
/// parser's error (400); neither changes if either is wrong.
fn set_specs(emulator: &EmulatorHandle, request: &Request, traces: Option<&Dir>) -> Response {
    match change_specs(emulator, request, traces) {
        Ok(_) => specs_of(emulator),
        Err(refused) => refused,
    }
}

/// Applies the specs a `PUT .../spec` body gives and returns them, canonical (only the
/// directions it names), or the 400 that says why not (403 for a trace it may not read:
/// outside `traces`, or any without it).
fn change_specs(
    emulator: &EmulatorHandle,
    request: &Request,
    traces: Option<&Dir>,
) -> Result<Specs, Response> {
    let specs: Specs = serde_json::from_slice(&request.body).map_err(|error| {
        Response::error(
            400,
            &format!(
                "the body must be {{\"forward\": SPEC, \"reverse\": SPEC}} (either or both): \
                 {error}"
            ),
        )
    })?;
    if specs.forward.is_none() && specs.reverse.is_none() {
        return Err(Response::error(
            400,
            "give \"forward\", \"reverse\" or both",
        ));
    }
    let parse = |text: &Option<String>, which: &str| {
        text.as_deref()
            .map(|t| crate::load_spec_in(t, traces))
            .transpose()
            .map_err(|e| {
                Response::error(
                    if e.is_forbidden() { 403 } else { 400 },
                    &format!("{which}: {e}"),
                )
            })
    };
    let (forward, reverse) = (
        parse(&specs.forward, "forward")?,
        parse(&specs.reverse, "reverse")?,
    );
    let applied = Specs {
        forward: forward.as_ref().map(ToString::to_string),
        reverse: reverse.as_ref().map(ToString::to_string),
    };
    apply(emulator, forward, reverse, &who(request)).map_err(|e| Response::error(400, &e))?;
    Ok(applied)
}

/// `GET .../spec`: both directions' specs, canonical.
fn specs_of(emulator: &EmulatorHandle) -> Response {
    match emulator.stats() {
        Some(stats) => Response::json(
            200,
            &Specs {
                forward: Some(stats.directions[0].spec.clone()),
                reverse: Some(stats.directions[1].spec.clone()),
            },
        ),
        None => Response::error(503, "the emulator has stopped"),
    }
}

/// Who sent a request, for the log.
fn who(request: &Request) -> String {
    request
        .peer
        .as_deref()
        .map_or_else(|| "the API".to_owned(), |peer| format!("http {peer}"))
}

/// Applies a change of spec and logs it on stderr: the one way every control path (the
/// Unix socket of `emulate set`, the HTTP API) changes an emulator.
pub fn apply(
    emulator: &EmulatorHandle,
    forward: Option<pathlab_core::LinkSpec>,
    reverse: Option<pathlab_core::LinkSpec>,
    by: &str,
) -> Result<(), String> {
    let texts = [&forward, &reverse].map(|s| s.as_ref().map(ToString::to_string));
    emulator.set(forward, reverse)?;
    let stats = emulator.stats();
    for (index, text) in texts.iter().enumerate() {
        let Some(text) = text else { continue };
        let (from, to) = stats.as_ref().map_or((String::new(), String::new()), |s| {
            (
                s.directions[index].from.clone(),
                s.directions[index].to.clone(),
            )
        });
        eprintln!(
            "pathlab emulate '{}': {from} -> {to} set to '{text}' by {by}",
            emulator.name()
        );
    }
    Ok(())
}

/// The value of `name` in a query string (`a=1&since=2.5`), undecoded.
fn query_value<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}

/// Stats of an emulator `name` whose directions `a -> b` and `b -> a` each forwarded
/// `forwarded_bytes`, dropped `queue_drops` for a full queue, hold 3 packets queued 2.5 ms
/// and sent 10 packets late (for the tests of the API and the metrics).
#[cfg(test)]
fn example_stats(name: &str, forwarded_bytes: u64, queue_drops: u64) -> EmulatorStats {
    let mut d = crate::emulator::DirectionCounters {
        from: "a".into(),
        to: "b".into(),
        forwarded_bytes,
        forwarded: forwarded_bytes / 1000,
        queue_packets: 3,
        queue_delay_ns: 2_500_000,
        ..Default::default()
    };
    d.link.dropped_packets[DropReason::QueueFull.index()] = queue_drops;
    d.lateness.packets = 10;
    d.lateness.at_most = vec![4, 5, 6, 7, 8, 9, 9, 9, 9, 9, 9, 9, 10];
    d.lateness.sum_ns = 123_000;
    let mut r = d.clone();
    r.from = "b".into();
    r.to = "a".into();
    EmulatorStats {
        name: name.into(),
        uptime_ns: 12_000_000_000,
        directions: vec![d, r],
        failure: None,
        scheduling: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(uptime_s: f64, forwarded_bytes: u64, queue_drops: u64) -> EmulatorStats {
        let mut stats = example_stats("x", forwarded_bytes, queue_drops);
        stats.uptime_ns = (uptime_s * 1e9) as u64;
        stats
    }

    #[test]
    fn history_keeps_one_sample_a_second_with_rates_over_it() {
        let mut history = History::new();
        history.observe(&stats(0.0, 0, 0));
        history.observe(&stats(0.5, 1_000_000, 5)); // under a second: no sample
        history.observe(&stats(2.0, 2_000_000, 10));
        let samples = history.since(f64::NEG_INFINITY);
        assert_eq!(samples.len(), 1);
        let d = &samples[0].directions[0];
        assert_eq!(d.throughput_bps, 2_000_000.0 * 8.0 / 2.0);
        assert_eq!(d.drops_per_s["queue-full"], 5.0);
        assert_eq!(d.queue_delay_ms, 2.5);
        assert!(history.since(2.0).is_empty());
        for second in 3..(HISTORY_SECONDS as u64 + 10) {
            history.observe(&stats(second as f64, 0, 0));
        }
        assert_eq!(history.since(f64::NEG_INFINITY).len(), HISTORY_SECONDS);
    }

    #[test]
    fn queries_give_their_values() {
        assert_eq!(query_value("a=1&since=2.5", "since"), Some("2.5"));
        assert_eq!(query_value("since", "since"), None);
        assert_eq!(query_value("", "since"), None);
    }
}
