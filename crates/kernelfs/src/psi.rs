//! Pressure stall information (`/proc/pressure/*`, `cpu.pressure`, `memory.pressure`, …).
//!
//! ```text
//! some avg10=0.12 avg60=0.05 avg300=0.01 total=123456
//! full avg10=0.00 avg60=0.00 avg300=0.00 total=0
//! ```
//! `total` is in microseconds. The `full` line is absent in old kernels' cpu.pressure.

use crate::error::{bad_line, bad_value, ParseError};

const FORMAT: &str = "pressure";

/// One line of a PSI file.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct PsiLine {
    /// Percent of time stalled over the last 10 s, 60 s, 300 s.
    pub avg10: f64,
    /// Over the last 60 s.
    pub avg60: f64,
    /// Over the last 300 s.
    pub avg300: f64,
    /// Total stall time in microseconds.
    pub total_us: u64,
}

/// A whole PSI file.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct Psi {
    /// Some task stalled.
    pub some: PsiLine,
    /// Every task stalled (absent from the CPU file of older kernels).
    pub full: Option<PsiLine>,
}

fn parse_line(i: usize, line: &str) -> Result<(String, PsiLine), ParseError> {
    let mut words = line.split_whitespace();
    let kind = words.next().ok_or_else(|| bad_line(FORMAT, i, line))?;
    let mut out = PsiLine::default();
    let mut seen = 0;
    for w in words {
        let (k, v) = w.split_once('=').ok_or_else(|| bad_line(FORMAT, i, line))?;
        let f = || v.parse::<f64>().map_err(|_| bad_value(FORMAT, k, v));
        match k {
            "avg10" => out.avg10 = f()?,
            "avg60" => out.avg60 = f()?,
            "avg300" => out.avg300 = f()?,
            "total" => out.total_us = v.parse().map_err(|_| bad_value(FORMAT, k, v))?,
            _ => continue,
        }
        seen += 1;
    }
    if seen != 4 {
        return Err(bad_line(FORMAT, i, line));
    }
    Ok((kind.to_string(), out))
}

/// Parse a PSI file.
pub fn parse(text: &str) -> Result<Psi, ParseError> {
    let mut some = None;
    let mut full = None;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let (kind, l) = parse_line(i, line)?;
        match kind.as_str() {
            "some" => some = Some(l),
            "full" => full = Some(l),
            _ => return Err(bad_line(FORMAT, i, line)),
        }
    }
    Ok(Psi {
        some: some.ok_or(ParseError::MissingField {
            format: FORMAT,
            field: "some",
        })?,
        full,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_some_and_full() {
        let p = parse(
            "some avg10=1.50 avg60=0.25 avg300=0.00 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n",
        )
        .unwrap();
        assert_eq!(p.some.avg10, 1.5);
        assert_eq!(p.some.avg60, 0.25);
        assert_eq!(p.some.total_us, 123456);
        assert_eq!(p.full.unwrap().total_us, 7);
    }

    #[test]
    fn full_is_optional() {
        let p = parse("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").unwrap();
        assert_eq!(p.full, None);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse("").is_err());
        assert!(parse("some avg10=x avg60=0 avg300=0 total=0\n").is_err());
        assert!(parse("some avg10=0 avg60=0 total=0\n").is_err());
        assert!(parse("half avg10=0 avg60=0 avg300=0 total=0\n").is_err());
        let e = parse("some avg10=0 avg60=0 avg300=0 total=-1\n").unwrap_err();
        assert!(e.to_string().contains("-1"), "{e}");
    }
}
