//! Text that users control — job names, ids, workload-manager labels, command lines — shown to
//! other users (status, top, report, metrics) and written to logs: bounded, and with control
//! characters neutralised, so it can neither flood a frame or a line nor move another user's
//! terminal cursor or forge a log line.

use std::borrow::Cow;

/// Longest workload-manager label (`manager:id`, e.g. `pbs:1234.pbs01`).
pub const MAX_LABEL_LEN: usize = 128;

/// `text` as one safe line of at most `max` characters: control characters (C0, DEL, C1 — ESC,
/// newline, carriage return among them) become `\u{…}` escapes, and a longer text is cut with
/// `…`. Borrowed when nothing needed changing.
pub fn printable(text: &str, max: usize) -> Cow<'_, str> {
    let clean = text.chars().all(|c| !c.is_control()) && text.chars().count() <= max;
    if clean {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len().min(max * 2));
    for (n, c) in text.chars().enumerate() {
        if n >= max {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
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
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_long_text_cut() {
        assert!(matches!(printable("solver-1", 64), Cow::Borrowed(_)));
        assert_eq!(printable("a\x1b[2Jb", 64), "a\\u{1b}[2Jb");
        assert_eq!(printable("x\ny", 64), "x\\u{a}y");
        assert_eq!(printable("abcdef", 3), "abc…");
        assert_eq!(printable("\u{9b}31m", 64), "\\u{9b}31m");
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
