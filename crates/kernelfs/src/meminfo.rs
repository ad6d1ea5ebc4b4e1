//! `/proc/meminfo` and `/sys/devices/system/node/nodeN/meminfo`: `Key: value unit` lines (the
//! node's prefixed with `Node N`).
//!
//! ```
//! let text = "Node 0 MemTotal:        4417748 kB\nNode 0 MemFree: 1 kB\n";
//! assert_eq!(pjw_kernelfs::meminfo::parse_total(text), Some(4417748 * 1024));
//! ```

/// `MemTotal` in bytes from a `/proc/meminfo` or `/sys/devices/system/node/nodeN/meminfo` text
/// (`"Node 0 MemTotal:  16311180 kB"`). `None` when there is no such line or it does not parse.
pub fn parse_total(text: &str) -> Option<u64> {
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        if key.split_whitespace().last() != Some("MemTotal") {
            continue;
        }
        let mut parts = value.split_whitespace();
        let n: u64 = parts.next()?.parse().ok()?;
        let mult = match parts.next().map(|u| u.to_ascii_lowercase()) {
            None => 1,
            Some(u) if u == "b" => 1,
            Some(u) if u == "kb" => 1024,
            Some(u) if u == "mb" => 1024 * 1024,
            Some(u) if u == "gb" => 1024 * 1024 * 1024,
            Some(_) => return None,
        };
        return n.checked_mul(mult);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_totals_in_bytes() {
        assert_eq!(
            parse_total("Node 0 MemTotal:        4417748 kB\nNode 0 MemFree: 1 kB\n"),
            Some(4417748 * 1024)
        );
        assert_eq!(
            parse_total("MemTotal:       16311180 kB\n"),
            Some(16311180 * 1024)
        );
        assert_eq!(parse_total("MemFree: 1 kB\n"), None);
        assert_eq!(parse_total("MemTotal: lots\n"), None);
    }
}
