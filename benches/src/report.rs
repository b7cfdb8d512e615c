//! The one JSON line each process prints, peak RSS and latency statistics.

use std::fmt::Write as _;

/// A JSON value of the small kinds the report needs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    /// A string.
    Str(String),
    /// An unsigned integer.
    Int(u64),
    /// A float (non-finite values print as `null`).
    Float(f64),
    /// A boolean.
    Bool(bool),
}

/// An ordered JSON object, printed on one line.
#[derive(Debug, Default, Clone)]
pub(crate) struct Report {
    fields: Vec<(&'static str, Value)>,
}

impl Report {
    /// Adds a string field.
    pub(crate) fn str(&mut self, key: &'static str, v: impl Into<String>) -> &mut Self {
        self.fields.push((key, Value::Str(v.into())));
        self
    }

    /// Adds an integer field.
    pub(crate) fn int(&mut self, key: &'static str, v: u64) -> &mut Self {
        self.fields.push((key, Value::Int(v)));
        self
    }

    /// Adds a float field.
    pub(crate) fn float(&mut self, key: &'static str, v: f64) -> &mut Self {
        self.fields.push((key, Value::Float(v)));
        self
    }

    /// Adds a boolean field.
    pub(crate) fn bool(&mut self, key: &'static str, v: bool) -> &mut Self {
        self.fields.push((key, Value::Bool(v)));
        self
    }

    /// Appends all fields of `other`.
    pub(crate) fn extend(&mut self, other: Report) {
        self.fields.extend(other.fields);
    }

    /// Renders the object as one line of JSON.
    pub(crate) fn to_json(&self) -> String {
        let mut out = String::from("{");
        for (i, (key, value)) in self.fields.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            push_json_str(&mut out, key);
            out.push(':');
            match value {
                Value::Str(s) => push_json_str(&mut out, s),
                Value::Int(n) => {
                    let _ = write!(out, "{n}");
                }
                Value::Float(f) if f.is_finite() => {
                    let _ = write!(out, "{f}");
                }
                Value::Float(_) => out.push_str("null"),
                Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            }
        }
        out.push('}');
        out
    }
}

fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Peak resident set size of this process in KiB (`VmHWM` of `/proc/self/status`),
/// or `None` where that file is missing (non-Linux).
pub(crate) fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_status_kib(&status, "VmHWM:")
}

/// Current resident set size of this process in KiB (`VmRSS`).
pub(crate) fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_status_kib(&status, "VmRSS:")
}

fn parse_status_kib(status: &str, field: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(field))?;
    let mut parts = line.split_whitespace().skip(1);
    let value: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") | None => Some(value),
        Some(_) => None,
    }
}

/// CPU time (user + system, all threads, exited ones included) this process has used so far,
/// in seconds, from `/proc/self/stat`; `None` where that file is missing (non-Linux).
///
/// The kernel reports it in clock ticks of `USER_HZ`, which is 100 on every Linux ABI, so the
/// resolution is 10 ms: under 1% of a benchmark run of a second or more.
pub(crate) fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    parse_cpu_ticks(&stat).map(|ticks| ticks as f64 / USER_HZ)
}

/// Clock ticks per second in `/proc` (`USER_HZ`).
const USER_HZ: f64 = 100.0;

fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    // The command name (field 2) may contain spaces and parentheses; fields after the last
    // ')' are plain numbers, starting with field 3 (state). utime and stime are fields 14, 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Latency summary of a set of round trips, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Latency {
    /// Median (nearest rank).
    pub(crate) p50_us: f64,
    /// 99th percentile (nearest rank).
    pub(crate) p99_us: f64,
    /// Arithmetic mean.
    pub(crate) mean_us: f64,
    /// Fastest round trip.
    pub(crate) min_us: f64,
    /// Slowest round trip.
    pub(crate) max_us: f64,
}

/// Nearest-rank percentile of an ascending slice; `None` when empty.
pub(crate) fn percentile(sorted: &[u64], pct: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((pct / 100.0) * sorted.len() as f64).ceil() as usize;
    let idx = rank.clamp(1, sorted.len()) - 1;
    sorted.get(idx).copied()
}

/// Summarises round-trip samples given in nanoseconds (sorts them in place).
pub(crate) fn summarize(samples_ns: &mut [u64]) -> Option<Latency> {
    samples_ns.sort_unstable();
    let us = |ns: u64| ns as f64 / 1000.0;
    let sum: u128 = samples_ns.iter().map(|&n| u128::from(n)).sum();
    Some(Latency {
        p50_us: us(percentile(samples_ns, 50.0)?),
        p99_us: us(percentile(samples_ns, 99.0)?),
        mean_us: sum as f64 / samples_ns.len() as f64 / 1000.0,
        min_us: us(*samples_ns.first()?),
        max_us: us(*samples_ns.last()?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_line_escapes_and_orders_fields() {
        let mut r = Report::default();
        r.str("side", "pull")
            .int("count", 3)
            .float("rate", 1.5)
            .float("bad", f64::NAN)
            .bool("ok", true)
            .str("error", "a\"b\\c\nd\u{1}");
        assert_eq!(
            r.to_json(),
            r#"{"side":"pull","count":3,"rate":1.5,"bad":null,"ok":true,"error":"a\"b\\c\nd\u0001"}"#
        );
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 100.0), Some(100));
        assert_eq!(percentile(&[7], 99.0), Some(7));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn summary_in_microseconds() {
        let mut v = vec![3000, 1000, 2000];
        let s = summarize(&mut v).unwrap();
        assert_eq!(s.p50_us, 2.0);
        assert_eq!(s.min_us, 1.0);
        assert_eq!(s.max_us, 3.0);
        assert_eq!(s.mean_us, 2.0);
        assert!(summarize(&mut []).is_none());
    }

    #[test]
    fn parses_cpu_ticks_after_the_command_name() {
        let stat = "42 (a b) c) S 1 2 3 4 5 6 7 8 9 10 250 30 0 0 20 0 1 0";
        assert_eq!(parse_cpu_ticks(stat), Some(280));
        assert_eq!(parse_cpu_ticks("42 (x) S 1 2"), None);
        assert!(cpu_seconds().is_some_and(|s| s >= 0.0));
    }

    #[test]
    fn parses_vmhwm() {
        let status = "Name:\tx\nVmPeak:\t  100 kB\nVmHWM:\t    2048 kB\nVmRSS:\t 1 kB\n";
        assert_eq!(parse_status_kib(status, "VmHWM:"), Some(2048));
        assert_eq!(parse_status_kib(status, "VmRSS:"), Some(1));
        assert_eq!(parse_status_kib("Name: x\n", "VmHWM:"), None);
        assert!(peak_rss_kib().is_some_and(|k| k > 0));
        assert!(rss_kib().is_some_and(|k| k > 0));
    }
}
