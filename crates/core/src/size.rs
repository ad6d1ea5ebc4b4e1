//! Byte sizes as people write them: `512M`, `4G`, `1.5GiB`, `100000`.
//!
//! Suffixes are binary (K = KiB = 1024), as `--mem` is in Slurm and as memory limits are
//! usually meant; `B` alone means bytes.

use crate::CoreError;

/// Parse a size into bytes.
pub fn parse_size(text: &str) -> Result<u64, CoreError> {
    let bad = || CoreError::BadSize {
        text: text.to_string(),
    };
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(bad());
    }
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        "p" | "pb" | "pib" => 1 << 50,
        _ => return Err(bad()),
    };
    if num.contains('.') {
        let v: f64 = num.parse().map_err(|_| bad())?;
        let bytes = v * mult as f64;
        if !bytes.is_finite() || bytes >= u64::MAX as f64 {
            return Err(bad());
        }
        Ok(bytes.round() as u64)
    } else {
        let v: u64 = num.parse().map_err(|_| bad())?;
        v.checked_mul(mult).ok_or_else(bad)
    }
}

/// Format bytes compactly with a binary suffix ("512M", "1.5G", "1023").
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 5] = [
        ("P", 1 << 50),
        ("T", 1 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ];
    for (u, m) in UNITS {
        if bytes >= m {
            let v = bytes as f64 / m as f64;
            return if bytes.is_multiple_of(m) {
                format!("{}{u}", bytes / m)
            } else {
                format!("{v:.1}{u}")
            };
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        let ok = [
            ("0", 0),
            ("100000", 100000),
            ("1K", 1024),
            ("512M", 512 << 20),
            ("512m", 512 << 20),
            ("4G", 4 << 30),
            ("4GiB", 4 << 30),
            ("1.5G", 3 << 29),
            ("2T", 2 << 40),
            ("64B", 64),
        ];
        for (t, want) in ok {
            assert_eq!(parse_size(t).unwrap(), want, "{t}");
        }
        for bad in ["", "G", "12Q", "-1", "1..5G", "99999999999999999999", "1 2"] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn formats() {
        assert_eq!(format_size(512 << 20), "512M");
        assert_eq!(format_size(3 << 29), "1.5G");
        assert_eq!(format_size(1000), "1000");
    }
}
