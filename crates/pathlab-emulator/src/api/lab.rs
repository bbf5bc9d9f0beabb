//! `pathlab lab --control ADDR`: each emulated link of a running lab, read and changed over
//! HTTP as `emulate --control` does for one emulator, and every link's metrics at once.
//!
//! | method and path | what |
//! |---|---|
//! | `GET /api/v1/links` | every link: its name, whether it is emulated, its specs |
//! | `GET /api/v1/links/NAME/stats` | a link's counters, as `emulate stats -J` |
//! | `GET /api/v1/links/NAME/spec` | its specs |
//! | `PUT /api/v1/links/NAME/spec` | `{"forward": SPEC, "reverse": SPEC}`, either or both |
//! | `GET /metrics` | every link, labelled `emulator="NAME"` |

use std::sync::{Arc, Mutex, PoisonError};

use pathlab_http::{Request, Response};

use pathlab_os::files::Dir;

use super::{change_specs, metrics, specs_of, who, Specs};
use crate::emulator::EmulatorHandle;

/// A lab's links, for its control address.
#[derive(Debug)]
pub struct LabControl {
    /// Each link's name and, if it is emulated, its emulator (a plain cable has none).
    links: Vec<(String, Option<Arc<EmulatorHandle>>)>,
    /// The changes made, in order: link index, when, the specs now in force, by whom.
    changes: Mutex<Vec<Change>>,
    /// `--trace-dir`: where a spec's trace file is read from, by name.
    traces: Option<Arc<Dir>>,
}

/// A change made over the control address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The link's index.
    pub link: usize,
    /// When it took effect.
    pub at: std::time::Instant,
    /// The directions it changed, with their new specs (canonical).
    pub specs: Specs,
    /// Who made it.
    pub by: String,
}

impl LabControl {
    /// Serves `links`: each one's name and emulator, if it has one; a spec may name a trace
    /// of `traces` (`--trace-dir`), by file name.
    pub fn new(
        links: Vec<(String, Option<Arc<EmulatorHandle>>)>,
        traces: Option<Arc<Dir>>,
    ) -> LabControl {
        LabControl {
            links,
            changes: Mutex::default(),
            traces,
        }
    }

    /// The changes made so far, in order.
    pub fn changes(&self) -> Vec<Change> {
        self.changes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Answers one request.
    pub fn answer(&self, request: &Request) -> Response {
        let method = request.method.as_str();
        let path = request.path.as_str();
        let render = || {
            let all: Vec<_> = self
                .links
                .iter()
                .filter_map(|(_, emulator)| emulator.as_ref()?.stats())
                .collect();
            Ok(metrics(&all))
        };
        if let Some(response) = pathlab_http::metrics::answer(request, &render) {
            return response;
        }
        if path == "/api/v1/links" {
            if method != "GET" {
                return Response::error(405, "GET only");
            }
            let links: Vec<serde_json::Value> = self
                .links
                .iter()
                .map(|(name, emulator)| {
                    let specs = emulator
                        .as_ref()
                        .and_then(|e| e.stats())
                        .map(|stats| [0, 1].map(|i| stats.directions[i].spec.clone()));
                    serde_json::json!({
                        "name": name,
                        "emulated": emulator.is_some(),
                        "forward": specs.as_ref().map(|s| &s[0]),
                        "reverse": specs.as_ref().map(|s| &s[1]),
                    })
                })
                .collect();
            return Response::json(200, &links);
        }
        let Some(rest) = path.strip_prefix("/api/v1/links/") else {
            return Response::error(404, &format!("nothing at {path}"));
        };
        let Some((name, what)) = rest.split_once('/') else {
            return Response::error(404, &format!("nothing at {path}; try {path}/stats"));
        };
        let Some(index) = self.links.iter().position(|(n, _)| n == name) else {
            let names: Vec<&str> = self.links.iter().map(|(n, _)| n.as_str()).collect();
            return Response::error(
                404,
                &format!("no link '{name}'; the links are {}", names.join(", ")),
            );
        };
        let Some(emulator) = &self.links[index].1 else {
            return Response::error(
                409,
                &format!("link '{name}' is a plain cable, not emulated (its spec is empty)"),
            );
        };
        match (method, what) {
            ("GET", "stats") => match emulator.stats() {
                Some(stats) => Response::json(200, &stats),
                None => Response::error(503, "the emulator has stopped"),
            },
            ("GET", "spec") => specs_of(emulator),
            ("PUT", "spec") => match change_specs(emulator, request, self.traces.as_deref()) {
                Ok(specs) => {
                    self.changes
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(Change {
                            link: index,
                            at: std::time::Instant::now(),
                            specs,
                            by: who(request),
                        });
                    specs_of(emulator)
                }
                Err(refused) => refused,
            },
            (_, "stats" | "spec") => Response::error(405, &format!("{method} is not served here")),
            _ => Response::error(404, &format!("nothing at {path}")),
        }
    }
}
