//! Prometheus text exposition (format 0.0.4): the writer every long-running command's
//! `/metrics` uses, and a strict reader of the same format that the tests check it with.
//!
//! Conventions kept (prometheus.io "Metric and label naming"): names are
//! `pathlab_<component>_<what>_<unit>`, in base units (seconds, bytes), counters end in
//! `_total`, a histogram has cumulative `_bucket{le=...}` series ending at `+Inf`, then
//! `_sum` and `_count`. Each family is written once, its `# HELP` and `# TYPE` first and
//! its samples together.

use std::fmt::Write as _;

/// The content type of the exposition, for the HTTP response.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The kind of a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (resets when the process restarts).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Cumulative buckets, sum and count.
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }

    fn parse(text: &str) -> Option<Kind> {
        match text {
            "counter" => Some(Kind::Counter),
            "gauge" => Some(Kind::Gauge),
            "histogram" => Some(Kind::Histogram),
            _ => None,
        }
    }
}

/// A family with a sample per item of one kind `T` (a tunnel's line, an emulator's
/// direction, a server's counters): its name, kind and help, and an item's value (`None`:
/// no sample for that item, as a table prints "-"). The one way the long-running commands
/// declare their families: [`Exposition::metrics`] writes them.
#[derive(Debug)]
pub struct Metric<T> {
    /// `pathlab_<component>_<what>_<unit>`.
    pub name: &'static str,
    /// Counter, gauge (a histogram is written with [`Exposition::histogram`]).
    pub kind: Kind,
    /// The `# HELP` text.
    pub help: &'static str,
    /// An item's value.
    pub value: fn(&T) -> Option<f64>,
}

impl<T> Clone for Metric<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Metric<T> {}

impl<T> Metric<T> {
    /// A counter (an item whose value is `None` has no sample).
    pub const fn counter(
        name: &'static str,
        help: &'static str,
        value: fn(&T) -> Option<f64>,
    ) -> Metric<T> {
        Metric {
            name,
            kind: Kind::Counter,
            help,
            value,
        }
    }

    /// A gauge (an item whose value is `None` has no sample).
    pub const fn gauge(
        name: &'static str,
        help: &'static str,
        value: fn(&T) -> Option<f64>,
    ) -> Metric<T> {
        Metric {
            name,
            kind: Kind::Gauge,
            help,
            value,
        }
    }
}

/// An exposition being written: families in order, each with its samples.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
    families: Vec<String>,
}

/// A histogram's data: cumulative counts at each upper bound (seconds, ascending, without
/// `+Inf`), the total count and the sum of the values.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramData {
    /// `(le, values at or under le)`, ascending in both.
    pub buckets: Vec<(f64, u64)>,
    /// Every value (the `+Inf` bucket).
    pub count: u64,
    /// The sum of the values.
    pub sum: f64,
}

impl Exposition {
    /// Nothing yet.
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// Starts family `name` with its help line. Panics on a name outside the format or
    /// against the conventions (a counter without `_total`), or a family started twice:
    /// both are bugs in the caller, caught by its tests.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) -> &mut Self {
        assert!(valid_metric_name(name), "metric name {name:?}");
        assert!(
            (kind == Kind::Counter) == name.ends_with("_total"),
            "{name}: counters and only counters end in _total"
        );
        assert!(
            !self.families.iter().any(|f| f == name),
            "{name} written twice"
        );
        self.families.push(name.to_owned());
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {}", kind.name());
        self
    }

    /// A sample of the family started last (`labels`: name, value).
    pub fn sample(&mut self, labels: &[(&str, &str)], value: f64) -> &mut Self {
        let name = self.families.last().expect("a family first").clone();
        self.line(&name, labels, value);
        self
    }

    /// Each of `metrics` in order, as a family with a sample for each of `items` (its
    /// labels and the item) that has a value.
    pub fn metrics<T, const N: usize>(
        &mut self,
        metrics: &[Metric<T>],
        items: &[([(&str, &str); N], &T)],
    ) -> &mut Self {
        for metric in metrics {
            self.family(metric.name, metric.kind, metric.help);
            for (labels, item) in items {
                if let Some(value) = (metric.value)(item) {
                    self.sample(labels, value);
                }
            }
        }
        self
    }

    /// The samples of a histogram family started last.
    pub fn histogram(&mut self, labels: &[(&str, &str)], data: &HistogramData) -> &mut Self {
        let name = self.families.last().expect("a family first").clone();
        let bucket = format!("{name}_bucket");
        for &(le, count) in &data.buckets {
            let le = number(le);
            let mut with_le = labels.to_vec();
            with_le.push(("le", &le));
            self.line(&bucket, &with_le, count as f64);
        }
        let mut with_le = labels.to_vec();
        with_le.push(("le", "+Inf"));
        self.line(&bucket, &with_le, data.count as f64);
        self.line(&format!("{name}_sum"), labels, data.sum);
        self.line(&format!("{name}_count"), labels, data.count as f64);
        self
    }

    fn line(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (label, value)) in labels.iter().enumerate() {
                assert!(valid_label_name(label), "label name {label:?}");
                if i > 0 {
                    self.text.push(',');
                }
                let value = value
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('\n', "\\n");
                let _ = write!(self.text, "{label}=\"{value}\"");
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {}", number(value));
    }

    /// The text.
    pub fn finish(self) -> String {
        self.text
    }
}

/// A number as the format writes it: integers without a fraction, `+Inf`, `-Inf`, `NaN`.
fn number(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

fn valid_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with("__")
}

/// One sample read back.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The series name (`x_bucket`, `x_sum` for histograms).
    pub name: String,
    /// Labels in the order written.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
}

impl Sample {
    /// The value of label `name`.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A family read back.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: Kind,
    /// Its help text, unescaped.
    pub help: String,
    /// Its samples.
    pub samples: Vec<Sample>,
}

/// The value of series `name` (a family's name, or a histogram's `NAME_bucket`, `_sum`,
/// `_count`) among `families`, in the one sample whose labels include every one of
/// `labels`; `None` when no sample or more than one matches.
pub fn value(families: &[Family], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut matching = families
        .iter()
        .flat_map(|f| &f.samples)
        .filter(|s| s.name == name && labels.iter().all(|(n, v)| s.label(n) == Some(v)));
    let first = matching.next()?;
    matching.next().is_none().then_some(first.value)
}

/// Why an exposition does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {problem}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub problem: String,
}

/// Reads an exposition strictly: every sample belongs to the family declared just before
/// it (by `# TYPE`, with `# HELP`), names and labels are valid, a family appears once, a
/// counter's name ends in `_total` and its values are not negative, a histogram's buckets
/// are cumulative and end with `+Inf` equal to `_count`, and no series repeats.
pub fn parse(text: &str) -> Result<Vec<Family>, ParseError> {
    let mut families: Vec<Family> = Vec::new();
    let mut help: Option<(String, String)> = None;
    let mut seen = std::collections::HashSet::new();
    for (index, line) in text.lines().enumerate() {
        let fail = |problem: String| ParseError {
            line: index + 1,
            problem,
        };
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help = Some((name.to_owned(), unescape(text, false)));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest
                .split_once(' ')
                .ok_or_else(|| fail("TYPE without a kind".into()))?;
            let kind = Kind::parse(kind).ok_or_else(|| fail(format!("unknown type {kind}")))?;
            if !valid_metric_name(name) {
                return Err(fail(format!("bad metric name {name:?}")));
            }
            if families.iter().any(|f| f.name == name) {
                return Err(fail(format!("family {name} declared twice")));
            }
            if (kind == Kind::Counter) != name.ends_with("_total") {
                return Err(fail(format!(
                    "{name}: counters, and only counters, end in _total"
                )));
            }
            let help = match help.take() {
                Some((n, text)) if n == name => text,
                _ => return Err(fail(format!("{name} has no HELP line before its TYPE"))),
            };
            families.push(Family {
                name: name.to_owned(),
                kind,
                help,
                samples: Vec::new(),
            });
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let sample = parse_sample(line).map_err(fail)?;
        let family = families
            .last_mut()
            .ok_or_else(|| fail("a sample before any TYPE".into()))?;
        let belongs = match family.kind {
            Kind::Histogram => ["_bucket", "_sum", "_count"]
                .iter()
                .any(|suffix| sample.name == format!("{}{suffix}", family.name)),
            _ => sample.name == family.name,
        };
        if !belongs {
            return Err(fail(format!(
                "{} is not a series of family {}",
                sample.name, family.name
            )));
        }
        if family.kind == Kind::Counter && (sample.value.is_nan() || sample.value < 0.0) {
            return Err(fail(format!("counter {} is {}", sample.name, sample.value)));
        }
        if !seen.insert(format!("{}{:?}", sample.name, sample.labels)) {
            return Err(fail(format!("series {} repeated", sample.name)));
        }
        family.samples.push(sample);
    }
    for family in &families {
        if family.kind == Kind::Histogram {
            check_histogram(family).map_err(|problem| ParseError { line: 0, problem })?;
        }
    }
    Ok(families)
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line
        .find(['{', ' '])
        .ok_or_else(|| format!("no value in {line:?}"))?;
    let name = &line[..name_end];
    if !valid_metric_name(name) {
        return Err(format!("bad metric name {name:?}"));
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        let mut chars = after.char_indices().peekable();
        loop {
            let (start, c) = chars.next().ok_or("unterminated labels")?;
            if c == '}' {
                rest = &after[start + 1..];
                break;
            }
            let eq = after[start..].find('=').ok_or("label without '='")? + start;
            let label = &after[start..eq];
            if !valid_label_name(label) {
                return Err(format!("bad label name {label:?}"));
            }
            while chars.peek().is_some_and(|&(i, _)| i <= eq) {
                chars.next();
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return Err(format!("label {label} value not quoted"));
            }
            let mut value = String::new();
            loop {
                match chars.next().ok_or("unterminated label value")?.1 {
                    '\\' => match chars.next().ok_or("dangling escape")?.1 {
                        'n' => value.push('\n'),
                        '\\' => value.push('\\'),
                        '"' => value.push('"'),
                        other => return Err(format!("bad escape \\{other}")),
                    },
                    '"' => break,
                    c => value.push(c),
                }
            }
            if labels.iter().any(|(n, _): &(String, String)| n == label) {
                return Err(format!("label {label} repeated"));
            }
            labels.push((label.to_owned(), value));
            match chars.peek() {
                Some(&(_, ',')) => {
                    chars.next();
                }
                Some(&(_, '}')) => {}
                _ => return Err("expected ',' or '}' after a label".into()),
            }
        }
    }
    let mut fields = rest.split_ascii_whitespace();
    let value = fields.next().ok_or("no value")?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        other => other
            .parse::<f64>()
            .map_err(|_| format!("value {other:?} is not a number"))?,
    };
    if let Some(stamp) = fields.next() {
        stamp
            .parse::<i64>()
            .map_err(|_| format!("timestamp {stamp:?} is not an integer"))?;
    }
    if fields.next().is_some() {
        return Err("text after the timestamp".into());
    }
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

fn unescape(text: &str, quotes: bool) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('"') if quotes => out.push('"'),
                Some(other) => out.push(other),
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Each label set of a histogram: buckets ascending and cumulative, `+Inf` last and equal
/// to `_count`, a `_sum`.
fn check_histogram(family: &Family) -> Result<(), String> {
    let base = |s: &Sample| -> Vec<(String, String)> {
        s.labels
            .iter()
            .filter(|(n, _)| n != "le")
            .cloned()
            .collect()
    };
    let mut sets: Vec<Vec<(String, String)>> = Vec::new();
    for sample in &family.samples {
        let labels = base(sample);
        if !sets.contains(&labels) {
            sets.push(labels);
        }
    }
    for labels in &sets {
        let of = |suffix: &str| {
            let name = format!("{}{suffix}", family.name);
            family
                .samples
                .iter()
                .filter(move |s| s.name == name && base(s) == *labels)
        };
        let mut last = (f64::NEG_INFINITY, 0.0);
        for bucket in of("_bucket") {
            let le = match bucket.label("le") {
                Some("+Inf") => f64::INFINITY,
                Some(le) => le
                    .parse::<f64>()
                    .map_err(|_| format!("{}: le {le:?}", family.name))?,
                None => return Err(format!("{}: a bucket without le", family.name)),
            };
            if le <= last.0 || bucket.value < last.1 {
                return Err(format!(
                    "{}: buckets not ascending and cumulative at le {le}",
                    family.name
                ));
            }
            last = (le, bucket.value);
        }
        if last.0 != f64::INFINITY {
            return Err(format!("{}: no +Inf bucket", family.name));
        }
        let count = of("_count").next().map(|s| s.value);
        if count != Some(last.1) {
            return Err(format!(
                "{}: _count {count:?} is not the +Inf bucket {}",
                family.name, last.1
            ));
        }
        if of("_sum").next().is_none() {
            return Err(format!("{}: no _sum", family.name));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> String {
        let mut e = Exposition::new();
        e.family(
            "pathlab_emulator_dropped_packets_total",
            Kind::Counter,
            "Packets dropped, by reason.\nSecond line \\ backslash.",
        )
        .sample(&[("direction", "a -> b"), ("reason", "queue")], 12.0)
        .sample(&[("direction", "say \"hi\"\n"), ("reason", "loss")], 0.0);
        e.family(
            "pathlab_emulator_queue_delay_seconds",
            Kind::Gauge,
            "Queue delay.",
        )
        .sample(&[], 0.0125);
        e.family(
            "pathlab_emulator_lateness_seconds",
            Kind::Histogram,
            "Lateness.",
        )
        .histogram(
            &[("direction", "a -> b")],
            &HistogramData {
                buckets: vec![(1e-5, 3), (0.001, 7)],
                count: 9,
                sum: 0.5,
            },
        );
        e.finish()
    }

    #[test]
    fn what_is_written_reads_back_with_its_labels_values_and_help() {
        let text = example();
        let families = parse(&text).unwrap();
        assert_eq!(families.len(), 3);
        let drops = &families[0];
        assert_eq!(drops.kind, Kind::Counter);
        assert_eq!(
            drops.help,
            "Packets dropped, by reason.\nSecond line \\ backslash."
        );
        assert_eq!(drops.samples[0].label("reason"), Some("queue"));
        let of = |name, labels: &[(&str, &str)]| value(&families, name, labels);
        assert_eq!(
            of(
                "pathlab_emulator_dropped_packets_total",
                &[("reason", "queue")]
            ),
            Some(12.0)
        );
        // Two samples match: no single value.
        assert_eq!(of("pathlab_emulator_dropped_packets_total", &[]), None);
        assert_eq!(
            of(
                "pathlab_emulator_lateness_seconds_bucket",
                &[("le", "0.001")]
            ),
            Some(7.0)
        );
        assert_eq!(of("pathlab_emulator_nothing", &[]), None);
        assert_eq!(drops.samples[0].value, 12.0);
        assert_eq!(drops.samples[1].label("direction"), Some("say \"hi\"\n"));
        assert_eq!(families[1].samples[0].value, 0.0125);
        let histogram = &families[2];
        assert_eq!(histogram.samples.len(), 5);
        assert!(text.contains(
            "pathlab_emulator_lateness_seconds_bucket{direction=\"a -> b\",le=\"0.00001\"} 3"
        ));
        assert!(text.contains(
            "pathlab_emulator_lateness_seconds_bucket{direction=\"a -> b\",le=\"+Inf\"} 9"
        ));
    }

    #[test]
    fn the_reader_refuses_what_the_format_or_its_conventions_forbid() {
        let cases = [
            ("x_total 1\n", "before any TYPE"),
            ("# TYPE x_total counter\nx_total 1\n", "no HELP"),
            ("# HELP x h\n# TYPE x counter\nx 1\n", "end in _total"),
            ("# HELP x h\n# TYPE x gauge\ny 1\n", "not a series"),
            ("# HELP x h\n# TYPE x gauge\nx{a=\"1\"} 1\nx{a=\"1\"} 2\n", "repeated"),
            ("# HELP x h\n# TYPE x gauge\nx{a=1} 1\n", "not quoted"),
            ("# HELP x h\n# TYPE x gauge\nx one\n", "not a number"),
            ("# HELP x_total h\n# TYPE x_total counter\nx_total -1\n", "is -1"),
            (
                "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 5\nh_bucket{le=\"+Inf\"} 4\nh_sum 1\nh_count 4\n",
                "cumulative",
            ),
            (
                "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 5\nh_sum 1\nh_count 5\n",
                "+Inf",
            ),
            (
                "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 5\nh_sum 1\nh_count 4\n",
                "_count",
            ),
        ];
        for (text, problem) in cases {
            let error = parse(text).expect_err(text);
            assert!(error.to_string().contains(problem), "{text}: {error}");
        }
    }

    #[test]
    #[should_panic(expected = "counters and only counters")]
    fn a_counter_without_total_is_a_bug_in_the_writer() {
        Exposition::new().family("pathlab_x_bytes", Kind::Counter, "x");
    }

    #[test]
    fn numbers_are_written_as_the_format_reads_them() {
        assert_eq!(number(3.0), "3");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(number(f64::NAN), "NaN");
        assert_eq!(number(1e-5), "0.00001");
    }
}
