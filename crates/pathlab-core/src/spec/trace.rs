//! mahimahi trace files (`trace FILE`): one delivery opportunity per line, in whole
//! milliseconds. The rate model that serves them is [`crate::stage::rate`].

use crate::time::Duration;

/// A mahimahi trace: delivery opportunities (ms offsets), looping with the last as period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// Opportunity times within one period, in non-decreasing order.
    pub opportunities: Vec<Duration>,
    /// Length of one period (the last line's time).
    pub period: Duration,
}

/// Why a trace file was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    /// The file has no opportunities.
    #[error("trace is empty: expected one delivery time in milliseconds per line")]
    Empty,
    /// A line is not a non-negative integer number of milliseconds.
    #[error("trace line {line}: '{text}' is not a whole number of milliseconds")]
    NotANumber {
        /// 1-based line number.
        line: usize,
        /// The offending text.
        text: String,
    },
    /// A timestamp too large to represent in nanoseconds.
    #[error("trace line {line}: '{text}' ms is too large (at most 18446744073709 ms)")]
    TooLarge {
        /// 1-based line number.
        line: usize,
        /// The offending text.
        text: String,
    },
    /// A timestamp earlier than the one before it.
    #[error(
        "trace line {line}: {value_ms} ms comes after {previous_ms} ms; timestamps must not decrease"
    )]
    Decreasing {
        /// 1-based line number.
        line: usize,
        /// The timestamp on that line.
        value_ms: u64,
        /// The previous timestamp.
        previous_ms: u64,
    },
    /// The last timestamp is 0, so the trace would loop in zero time.
    #[error("trace line {line}: the last timestamp is 0 ms; a trace must last more than 0 ms")]
    ZeroPeriod {
        /// 1-based line number of the last timestamp.
        line: usize,
    },
}

impl TraceError {
    /// The error without anything the file holds: the line and what is wrong with it, for
    /// a reader who may not read the file (a client of the HTTP API naming a trace), so a
    /// refusal never shows a line of a file.
    pub fn without_contents(&self) -> String {
        match self {
            TraceError::Empty | TraceError::ZeroPeriod { .. } => self.to_string(),
            TraceError::NotANumber { line, .. } => {
                format!("trace line {line} is not a whole number of milliseconds")
            }
            TraceError::TooLarge { line, .. } => {
                format!("trace line {line} is too large (at most 18446744073709 ms)")
            }
            TraceError::Decreasing { line, .. } => format!(
                "trace line {line} is earlier than the line before it; timestamps must not \
                 decrease"
            ),
        }
    }
}

impl Trace {
    /// Parses a mahimahi trace (one integer millisecond timestamp per line; blank lines
    /// and `#` comments are ignored).
    pub fn parse(text: &str) -> Result<Trace, TraceError> {
        let mut opportunities = Vec::new();
        let mut previous_ms = 0u64;
        let mut last_line = 0;
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let content = raw.split('#').next().unwrap_or("").trim();
            if content.is_empty() {
                continue;
            }
            if !content.bytes().all(|b| b.is_ascii_digit()) {
                return Err(TraceError::NotANumber {
                    line,
                    text: content.to_owned(),
                });
            }
            let value_ms: u64 = content.parse().map_err(|_| TraceError::TooLarge {
                line,
                text: content.to_owned(),
            })?;
            let nanos = value_ms
                .checked_mul(1_000_000)
                .ok_or_else(|| TraceError::TooLarge {
                    line,
                    text: content.to_owned(),
                })?;
            if value_ms < previous_ms {
                return Err(TraceError::Decreasing {
                    line,
                    value_ms,
                    previous_ms,
                });
            }
            previous_ms = value_ms;
            last_line = line;
            opportunities.push(Duration::from_nanos(nanos));
        }
        let Some(&period) = opportunities.last() else {
            return Err(TraceError::Empty);
        };
        if period.is_zero() {
            return Err(TraceError::ZeroPeriod { line: last_line });
        }
        Ok(Trace {
            opportunities,
            period,
        })
    }
}
