//! The daemon's log lines: RFC 3339 timestamps with the local offset on a terminal or in a
//! file; under systemd (stderr is the journal, or `--log-format journal`) no timestamp, since
//! journald stamps every line itself, and the sd-daemon(3) priority prefix (`<3>` error, `<4>`
//! warning, `<6>` info, `<7>` debug and trace) so `journalctl -p warning` filters pjw's lines.
//! Structured fields stay as `key=value` on the line either way, every value (and the message)
//! through the one escaping function for user text (`pjw_core::text::printable`,
//! [`escaped_fields`]): a field holding what a client sent can neither forge a line nor move
//! the terminal of whoever reads the log. (The JSON format escapes as JSON does.)

use std::fmt::Write as _;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// How the daemon writes its log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One line per event, RFC 3339 timestamp, `key=value` fields.
    Text,
    /// One JSON object per line.
    Json,
    /// For journald: `<N>` priority prefix, no timestamp.
    Journal,
}

/// The syslog priority of a level, as sd-daemon(3) prefixes take it.
pub fn priority(level: Level) -> u8 {
    match level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

/// Whether `JOURNAL_STREAM` (`DEV:INODE`, set by systemd) names this stderr: only then does
/// stderr go to the journal (a child of the service may have it redirected elsewhere).
pub fn journal_stream_is(value: &str, dev: u64, ino: u64) -> bool {
    let Some((d, i)) = value.trim().split_once(':') else {
        return false;
    };
    d.parse::<u64>().ok() == Some(dev) && i.parse::<u64>().ok() == Some(ino)
}

/// Whether stderr is the journal, by `JOURNAL_STREAM`.
pub fn stderr_is_journal() -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some(v) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Ok(md) = std::fs::metadata("/proc/self/fd/2") else {
        return false;
    };
    journal_stream_is(&v.to_string_lossy(), md.dev(), md.ino())
}

/// The journal's line format: `<P>LEVEL target: span{fields}: message key=value`, one line.
#[derive(Clone, Copy, Debug, Default)]
pub struct JournalFormat;

impl<S, N> FormatEvent<S, N> for JournalFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let meta = event.metadata();
        let mut line = String::new();
        write!(line, "{} {}: ", meta.level(), meta.target())?;
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                line.push_str(span.name());
                if let Some(fields) = span.extensions().get::<FormattedFields<N>>() {
                    if !fields.is_empty() {
                        write!(line, "{{{fields}}}")?;
                    }
                }
                line.push_str(": ");
            }
        }
        ctx.field_format()
            .format_fields(Writer::new(&mut line), event)?;
        // journald splits on newlines: a message of several lines would lose its priority
        // after the first.
        let line = line.replace('\n', " ");
        writeln!(writer, "<{}>{line}", priority(*meta.level()))
    }
}

/// Longest field value in a log line; longer ones are cut with `…`.
const MAX_FIELD: usize = 4096;

/// Fields as `key=value` (the message bare), separated by spaces, each value's text through
/// [`pjw_core::text::printable`].
pub fn escaped_fields() -> impl for<'w> FormatFields<'w> + 'static {
    use tracing_subscriber::field::MakeExt;
    tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
        let text = format!("{value:?}");
        let text = pjw_core::text::printable(&text, MAX_FIELD);
        if field.name() == "message" {
            write!(w, "{text}")
        } else {
            write!(w, "{field}={text}")
        }
    })
    .delimited(" ")
}

/// A writer of tracing's JSON lines that passes each through [`pjw_core::text::json`]: every
/// unsafe character of a field as a JSON escape (the same text to a parser). tracing formats
/// an event whole and writes it in one call.
pub struct JsonSafe<W>(pub W);

impl<W: std::io::Write> std::io::Write for JsonSafe<W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(b);
        self.0.write_all(pjw_core::text::json(&text).as_bytes())?;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// tracing to stderr in `format`, filtered by `PJW_LOG` or else `level`.
pub fn init(level: &str, format: LogFormat) {
    use tracing_subscriber::fmt::time::ChronoLocal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("PJW_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Journal => b
            .with_ansi(false)
            .fmt_fields(escaped_fields())
            .event_format(JournalFormat)
            .init(),
        // Each event's line through `text::json`: tracing's JSON writes DEL, C1 and format
        // characters (a bidi override) of a field as themselves (issue 25, N8).
        LogFormat::Json => b
            .with_writer(|| JsonSafe(std::io::stderr()))
            .with_timer(rfc3339())
            .json()
            .init(),
        LogFormat::Text => b
            .with_timer(rfc3339())
            .with_ansi(false)
            .fmt_fields(escaped_fields())
            .init(),
    }
    fn rfc3339() -> ChronoLocal {
        ChronoLocal::new("%Y-%m-%dT%H:%M:%S%.6f%:z".to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn capture(journal: bool, f: impl FnOnce()) -> String {
        let buf = Buf::default();
        let w = buf.clone();
        let b = tracing_subscriber::fmt()
            .with_max_level(Level::TRACE)
            .with_ansi(false)
            .fmt_fields(escaped_fields())
            .with_writer(move || w.clone());
        if journal {
            tracing::subscriber::with_default(b.event_format(JournalFormat).finish(), f);
        } else {
            let timer = tracing_subscriber::fmt::time::ChronoLocal::new(
                "%Y-%m-%dT%H:%M:%S%.6f%:z".to_string(),
            );
            tracing::subscriber::with_default(b.with_timer(timer).finish(), f);
        }
        let out = buf.0.lock().unwrap().clone();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn journal_lines_carry_the_priority_and_fields_and_no_timestamp() {
        let out = capture(true, || {
            tracing::error!(job = "42", "job failed");
            tracing::warn!(cpus = %"0-3", "pool shrank");
            let span = tracing::info_span!("tick", n = 7);
            let _g = span.enter();
            tracing::info!(user = "ann", "started");
            tracing::debug!("two\nlines");
            tracing::trace!("fine");
        });
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 5, "{out}");
        assert_eq!(
            lines[0],
            format!("<3>ERROR {}: job failed job=\"42\"", module_path!())
        );
        assert_eq!(
            lines[1],
            format!("<4>WARN {}: pool shrank cpus=0-3", module_path!())
        );
        assert_eq!(
            lines[2],
            format!(
                "<6>INFO {}: tick{{n=7}}: started user=\"ann\"",
                module_path!()
            )
        );
        // A newline in a message is escaped like any control character (one line, no forged
        // second one).
        assert_eq!(
            lines[3],
            format!("<7>DEBUG {}: tick{{n=7}}: two\\u{{a}}lines", module_path!())
        );
        assert!(lines[4].starts_with("<7>TRACE "), "{}", lines[4]);
    }

    #[test]
    fn text_lines_start_with_an_rfc3339_time_with_offset() {
        let out = capture(false, || tracing::info!(job = "1", "hello"));
        // 2026-11-25T10:20:17.123456+00:00  INFO pjw::logging::tests: hello job="1"
        let (ts, rest) = out.split_once(' ').unwrap();
        assert_eq!(ts.len(), "2026-11-25T10:20:17.123456+00:00".len(), "{out}");
        assert!(chrono::DateTime::parse_from_rfc3339(ts).is_ok(), "{ts}");
        assert!(
            rest.contains("INFO") && rest.contains("hello job=\"1\""),
            "{out}"
        );
        assert!(!out.starts_with('<'));
    }

    /// Issue 25, item 10: a value a client chose, logged with `%` (as it is) or `?`, reaches
    /// the log with no control character: no forged line, no terminal escape.
    #[test]
    fn user_text_in_fields_is_escaped_in_both_formats() {
        for journal in [true, false] {
            let out = capture(journal, || {
                let name = "x\u{1b}[2J\u{9b}31m\nFORGED line";
                tracing::warn!(name = %name, also = ?name, "job {name}");
            });
            assert_eq!(out.lines().count(), 1, "{out}");
            assert!(
                !out.trim_end().chars().any(pjw_core::text::is_unsafe),
                "{out:?}"
            );
            assert!(!out.lines().any(|l| l.starts_with("FORGED")), "{out}");
            assert!(
                out.contains("name=x\\u{1b}[2J\\u{9b}31m\\u{a}FORGED line"),
                "{out}"
            );
        }
    }

    #[test]
    fn journal_stream_must_name_this_stderr() {
        assert!(journal_stream_is("8:12345", 8, 12345));
        assert!(!journal_stream_is("8:12345", 8, 1));
        assert!(!journal_stream_is("garbage", 8, 12345));
        assert_eq!(priority(Level::ERROR), 3);
        assert_eq!(priority(Level::WARN), 4);
        assert_eq!(priority(Level::INFO), 6);
        assert_eq!(priority(Level::DEBUG), 7);
    }
    /// Issue 25, N8: the JSON log format escapes what tracing's JSON leaves raw (DEL, C1, a
    /// bidi override), and stays JSON with the same text.
    #[test]
    fn json_log_lines_carry_no_raw_control_or_format_character() {
        let buf = Buf::default();
        let out = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_writer(move || JsonSafe(out.clone()))
            .json()
            .finish();
        let name = "x\u{7f}\u{9b}31m\u{202E}resu";
        tracing::subscriber::with_default(sub, || tracing::info!(job = name, "job started"));
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert!(!text.contains(['\u{7f}', '\u{9b}', '\u{202E}']), "{text:?}");
        let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(v["fields"]["job"], name, "{v}");
    }
}
