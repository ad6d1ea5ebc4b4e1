//! Text that users control — job names, ids, workload-manager labels, command lines, process
//! names — shown to other users (status, top, report in every view and format, plots) and
//! written to logs: bounded, and with control characters neutralised, so it can neither flood
//! a frame or a line nor move another user's terminal cursor or forge a log line.
//!
//! One definition says which characters are unsafe ([`is_unsafe`]: C0, DEL and C1 controls).
//! Text bound for a terminal, a table cell, a CSV field or a plot goes through [`printable`]
//! (each unsafe character as a visible `\u{…}` escape), at the sink that writes the cell, so no
//! field is forgotten; JSON output goes through [`json`], which writes the same characters as
//! JSON escapes (lossless: a parser reads the original text back).

use std::borrow::Cow;

/// Longest workload-manager label (`manager:id`, e.g. `pbs:1234.pbs01`).
pub const MAX_LABEL_LEN: usize = 128;

/// Whether `c` may never reach a terminal or a log line as itself: a control character (C0 —
/// newline, carriage return, ESC among them —, DEL, or C1 — CSI U+009B among them), a format
/// character (Unicode's Cf: bidirectional overrides and isolates such as U+202E and
/// U+2066–U+2069, which reorder the columns of a table around them on screen — a job name
/// could make `pjw status` show another user or state —, zero-width characters, the soft
/// hyphen, tags), or a line or paragraph separator (U+2028, U+2029) (issue 25, N8).
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c as u32,
            0x00AD
                | 0x0600..=0x0605
                | 0x061C
                | 0x06DD
                | 0x070F
                | 0x0890..=0x0891
                | 0x08E2
                | 0x180E
                | 0x200B..=0x200F
                | 0x2028..=0x202E
                | 0x2060..=0x2064
                | 0x2066..=0x206F
                | 0xFEFF
                | 0xFFF9..=0xFFFB
                | 0x110BD
                | 0x110CD
                | 0x13430..=0x1343F
                | 0x1BCA0..=0x1BCA3
                | 0x1D173..=0x1D17A
                | 0xE0001
                | 0xE0020..=0xE007F
        )
}

/// Longest cell of a table view: longer user text is cut with `…`.
pub const MAX_CELL: usize = 256;

/// `text` as one safe line of at most `max` characters: unsafe characters ([`is_unsafe`])
/// become `\u{…}` escapes, and a longer text is cut with `…`. Borrowed when nothing needed
/// changing.
pub fn printable(text: &str, max: usize) -> Cow<'_, str> {
    let clean = text.chars().all(|c| !is_unsafe(c)) && text.chars().count() <= max;
    if clean {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len().min(max.saturating_mul(2)));
    for (n, c) in text.chars().enumerate() {
        if n >= max {
            out.push('…');
            break;
        }
        if is_unsafe(c) {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// The bytes of a job's command line the daemon keeps (its record, `status`, `report`): the
/// client execs its own whole command line; what is kept is for showing, so a command line of
/// megabytes (4,096 arguments of up to 128 KiB each) cannot fill the store or the daemon.
pub const ARGV_KEPT_BYTES: usize = 4096;

/// `argv` as kept: whole arguments while they fit in `max` bytes, the first one that does not
/// cut at a character boundary, then one last element saying what was left out (`[… N more
/// bytes in M more arguments]`). Unchanged when it fits.
pub fn kept_argv(argv: &[String], max: usize) -> Vec<String> {
    let total: usize = argv.iter().map(String::len).sum();
    if total <= max {
        return argv.to_vec();
    }
    let mut kept = Vec::new();
    let mut room = max;
    for a in argv {
        if a.len() <= room {
            room -= a.len();
            kept.push(a.clone());
            continue;
        }
        let mut cut = room;
        while !a.is_char_boundary(cut) {
            cut -= 1;
        }
        if cut > 0 {
            kept.push(a[..cut].to_string());
        }
        break;
    }
    let kept_bytes: usize = kept.iter().map(String::len).sum();
    let whole = kept.iter().zip(argv).take_while(|(k, a)| k == a).count();
    kept.push(format!(
        "[… {} more bytes in {} more arguments]",
        total - kept_bytes,
        argv.len() - whole
    ));
    kept
}

/// Serialised JSON (`serde_json`'s output) with every unsafe character ([`is_unsafe`]) as a
/// JSON escape. `serde_json` escapes C0 but writes DEL and C1 as themselves, and a terminal
/// may act on a C1 CSI; outside strings JSON holds none, so each one found is in a string and
/// becomes `\u00XX` there: the same text to a parser, nothing to a terminal.
pub fn json(serialized: &str) -> Cow<'_, str> {
    if !serialized.chars().any(is_unsafe) {
        return Cow::Borrowed(serialized);
    }
    let mut out = String::with_capacity(serialized.len() + 16);
    for c in serialized.chars() {
        match c {
            // serde_json's own whitespace between tokens (pretty printing) stays.
            '\n' | '\t' | '\r' => out.push(c),
            // Beyond U+FFFF as its UTF-16 surrogate pair, as JSON writes such a character.
            c if is_unsafe(c) => {
                for unit in c.encode_utf16(&mut [0u16; 2]) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Check a label a client sends (`wlm`): 1 to [`MAX_LABEL_LEN`] bytes of printable ASCII
/// without spaces. The reason when it is not.
pub fn check_label(text: &str) -> Result<(), String> {
    if text.is_empty() {
        return Err("is empty".into());
    }
    if text.len() > MAX_LABEL_LEN {
        return Err(format!("is longer than {MAX_LABEL_LEN} bytes"));
    }
    if let Some(c) = text.chars().find(|c| !c.is_ascii_graphic()) {
        return Err(format!(
            "holds {:?}: only printable ASCII without spaces is allowed",
            c
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_long_command_line_is_kept_to_its_first_bytes_saying_what_was_left_out() {
        let short = vec!["sleep".to_string(), "1".to_string()];
        assert_eq!(kept_argv(&short, 16), short);
        let argv = vec!["ab".to_string(), "cdé".to_string(), "xyz".to_string()];
        // 2 + 4 + 3 = 9 bytes; 5 kept: "ab", then "cd" ("é" is two bytes and does not fit whole).
        assert_eq!(
            kept_argv(&argv, 5),
            ["ab", "cd", "[… 5 more bytes in 2 more arguments]"]
        );
        assert_eq!(
            kept_argv(&argv, 6),
            ["ab", "cdé", "[… 3 more bytes in 1 more arguments]"]
        );
        let huge = vec!["x".repeat(1 << 20), "y".into()];
        let kept = kept_argv(&huge, ARGV_KEPT_BYTES);
        assert!(kept.iter().map(String::len).sum::<usize>() < ARGV_KEPT_BYTES + 64);
        assert_eq!(kept[0].len(), ARGV_KEPT_BYTES);
        assert_eq!(
            kept[1],
            format!(
                "[… {} more bytes in 2 more arguments]",
                (1 << 20) - ARGV_KEPT_BYTES + 1
            )
        );
    }
    use super::*;

    /// Issue 25, N8: a right-to-left override in a job name reversed the rest of its `pjw
    /// status` line on screen (the user and state columns among it); format characters and
    /// separators are escaped like controls, in cells and in JSON (which reads back the same).
    #[test]
    fn bidi_overrides_and_other_format_characters_are_escaped() {
        for c in [
            '\u{202E}',
            '\u{2066}',
            '\u{2069}',
            '\u{200B}',
            '\u{2028}',
            '\u{2029}',
            '\u{FEFF}',
            '\u{E0041}',
            '\u{AD}',
        ] {
            assert!(is_unsafe(c), "{:?}", c);
            let name = format!("job{c}x");
            assert_eq!(printable(&name, 64), format!("job{}x", c.escape_unicode()));
            let raw = serde_json::to_string(&serde_json::json!({ "name": name })).unwrap();
            let safe = json(&raw);
            assert!(!safe.contains(c), "{safe}");
            let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
            assert_eq!(back["name"], name.as_str());
        }
        for c in ['é', 'ß', '中', '😀', '\u{5D0}'] {
            assert!(!is_unsafe(c), "{:?}", c);
        }
    }

    #[test]
    fn control_characters_are_escaped_and_long_text_cut() {
        assert!(matches!(printable("solver-1", 64), Cow::Borrowed(_)));
        assert_eq!(printable("a\x1b[2Jb", 64), "a\\u{1b}[2Jb");
        assert_eq!(printable("x\ny", 64), "x\\u{a}y");
        assert_eq!(printable("abcdef", 3), "abc…");
        assert_eq!(printable("\u{9b}31m", 64), "\\u{9b}31m");
    }

    /// JSON keeps the text (a parser reads the original back) and no raw control character
    /// reaches a terminal: serde escapes C0, this escapes DEL and C1.
    #[test]
    fn json_escapes_what_serde_leaves_and_stays_the_same_json() {
        let name = "x\u{1b}[2J\u{9b}31m\u{7f}\nforged";
        let raw = serde_json::to_string_pretty(&serde_json::json!({"name": name})).unwrap();
        assert!(
            raw.contains('\u{9b}') && raw.contains('\u{7f}'),
            "serde escapes C1 now?"
        );
        let safe = json(&raw);
        assert!(!safe.chars().any(|c| is_unsafe(c) && c != '\n'), "{safe:?}");
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back["name"], name);
        assert!(matches!(json("{\"a\": 1}"), Cow::Borrowed(_)));
    }

    #[test]
    fn labels_are_bounded_printable_ascii() {
        assert!(check_label("slurm:42").is_ok());
        assert!(check_label("pbs:1234.pbs01").is_ok());
        assert!(check_label("").is_err());
        assert!(check_label("a b").is_err());
        assert!(check_label("x\ny").is_err());
        assert!(check_label(&"x".repeat(129)).is_err());
        assert!(check_label(&"x".repeat(128)).is_ok());
    }
}
