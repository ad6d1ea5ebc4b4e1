//! `memory.stat` (v1 and v2): `key value` lines, values in bytes or counts.

use std::collections::BTreeMap;

use crate::error::{bad_line, bad_value, ParseError};

const FORMAT: &str = "memory.stat";

/// All keys of a `memory.stat` file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryStat {
    /// Every `key value` line, by key.
    pub values: BTreeMap<String, u64>,
}

impl MemoryStat {
    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<u64> {
        self.values.get(key).copied()
    }
}

/// Parse the file.
pub fn parse(text: &str) -> Result<MemoryStat, ParseError> {
    let mut values = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(k), Some(v), None) = (words.next(), words.next(), words.next()) else {
            return Err(bad_line(FORMAT, i, line));
        };
        let v: u64 = v.parse().map_err(|_| bad_value(FORMAT, k, v))?;
        values.insert(k.to_string(), v);
    }
    Ok(MemoryStat { values })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_v1_and_v2() {
        let v1 =
            parse("cache 4096\nrss 8192\nhierarchical_memory_limit 9223372036854771712\n").unwrap();
        assert_eq!(v1.get("rss"), Some(8192));
        assert_eq!(
            v1.get("hierarchical_memory_limit"),
            Some(9223372036854771712)
        );
        let v2 = parse("anon 1\nfile 2\nworkingset_refault_anon 0\n").unwrap();
        assert_eq!(v2.get("file"), Some(2));
        assert_eq!(v2.get("nope"), None);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse("rss\n").is_err());
        assert!(parse("rss 1 2\n").is_err());
        let e = parse("rss -5\n").unwrap_err();
        assert!(e.to_string().contains("-5"), "{e}");
    }
}
