//! `cgroup.events` (cgroup v2): `populated 0|1` and, below the root, `frozen 0|1`.

use crate::error::{bad_line, bad_value, ParseError};

const FORMAT: &str = "cgroup.events";

/// The contents of `cgroup.events`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgroupEvents {
    /// Whether the cgroup or a descendant has a live process.
    pub populated: bool,
    /// Whether the cgroup is frozen (absent in the root cgroup and before Linux 5.2).
    pub frozen: Option<bool>,
}

fn flag(key: &str, v: &str) -> Result<bool, ParseError> {
    match v {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(bad_value(FORMAT, key, v)),
    }
}

/// Parse the file. Unknown keys are ignored.
pub fn parse(text: &str) -> Result<CgroupEvents, ParseError> {
    let mut populated = None;
    let mut frozen = None;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let (k, v) = line
            .split_once(' ')
            .ok_or_else(|| bad_line(FORMAT, i, line))?;
        match k {
            "populated" => populated = Some(flag(k, v.trim())?),
            "frozen" => frozen = Some(flag(k, v.trim())?),
            _ => {}
        }
    }
    Ok(CgroupEvents {
        populated: populated.ok_or(ParseError::MissingField {
            format: FORMAT,
            field: "populated",
        })?,
        frozen,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_events() {
        assert_eq!(
            parse("populated 1\nfrozen 0\n").unwrap(),
            CgroupEvents {
                populated: true,
                frozen: Some(false)
            }
        );
        assert_eq!(
            parse("populated 0\n").unwrap(),
            CgroupEvents {
                populated: false,
                frozen: None
            }
        );
        assert_eq!(
            parse("frozen 1\npopulated 0\nfuture 7\n").unwrap().frozen,
            Some(true)
        );
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse("").is_err());
        assert!(parse("populated yes\n").is_err());
        assert!(parse("populated\n").is_err());
    }
}
