//! The job files and sizes the managers write and users partly control: Grid Engine's
//! `config`/`environment` and sizes (`h_vmem`), PBS sizes (`Resource_List.mem`), HTCondor
//! ClassAds.
//!
//! Input: one text, given to each parser whole and line by line.
//!
//! Properties: nothing panics (overflow checks on); and
//! - `sge_size`: `Ok(Some(b))` only with `b ≥ 1`; `Ok(None)` only for empty, `infinity`,
//!   `undefined`;
//! - `pbs_size`: `Ok(b)` equals the number times its unit, computed without overflow;
//! - `parse_class_ad`: every name is non-empty lower-case `[a-z0-9_]`, every value trimmed;
//! - `env_from_lines`: every key is non-empty, trimmed, does not start with `#`, and no key or
//!   value holds a newline (one line cannot forge another variable).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pjw_wlm::{env_from_lines, parse_class_ad, pbs_size, sge_size};

fn sizes(t: &str) {
    match sge_size(t) {
        Ok(Some(b)) => assert!(b >= 1, "sge_size({t:?}) = {b}"),
        Ok(None) => {
            let t = t.trim();
            assert!(
                t.is_empty()
                    || t.eq_ignore_ascii_case("infinity")
                    || t.eq_ignore_ascii_case("undefined"),
                "sge_size({t:?}) = None"
            );
        }
        Err(_) => {}
    }
    if let Ok(b) = pbs_size(t) {
        let t = t.trim().to_ascii_lowercase();
        let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let n: u128 = t[..digits].parse().expect("pbs_size accepted a non-number");
        let unit: u128 = match &t[digits..] {
            "" | "b" => 1,
            "w" => 8,
            "k" | "kb" => 1 << 10,
            "kw" => 8 << 10,
            "m" | "mb" => 1 << 20,
            "mw" => 8 << 20,
            "g" | "gb" => 1 << 30,
            "gw" => 8 << 30,
            "t" | "tb" => 1 << 40,
            "tw" => 8 << 40,
            u => panic!("pbs_size accepted unit {u:?}"),
        };
        assert_eq!(b as u128, n * unit, "pbs_size({t:?})");
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    sizes(&text);
    for line in text.lines() {
        sizes(line);
        if let Some((_, v)) = line.split_once('=') {
            sizes(v);
        }
    }

    for (k, v) in parse_class_ad(&text) {
        assert!(!k.is_empty());
        assert!(k
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'));
        assert_eq!(v.trim(), v);
    }

    for (k, v) in env_from_lines(&text) {
        assert!(!k.is_empty(), "empty key");
        assert_eq!(k.trim(), k);
        assert!(!k.starts_with('#'), "comment taken for {k:?}");
        assert!(!k.contains('\n') && !v.contains('\n'));
    }
});
