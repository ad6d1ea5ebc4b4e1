//! The one error type of pjw-kernelfs.

/// Text that does not have the expected kernel format. Every variant names the format and
/// carries the offending text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A line that does not have the expected shape.
    #[error("malformed {format} line {line}: {text:?}")]
    BadLine {
        /// The format (`cgroup.events`, `/proc/PID/stat`, …).
        format: &'static str,
        /// 1-based line number.
        line: usize,
        /// The line.
        text: String,
    },
    /// A field that does not parse.
    #[error("invalid {format} field {field}: {text:?}")]
    BadValue {
        /// The format.
        format: &'static str,
        /// The field's name.
        field: String,
        /// The value that does not parse.
        text: String,
    },
    /// A required field that is absent.
    #[error("{format} has no {field} field")]
    MissingField {
        /// The format.
        format: &'static str,
        /// The field's name.
        field: &'static str,
    },
}

pub(crate) fn bad_value(format: &'static str, field: &str, text: &str) -> ParseError {
    ParseError::BadValue {
        format,
        field: field.to_string(),
        text: text.to_string(),
    }
}

pub(crate) fn bad_line(format: &'static str, index: usize, text: &str) -> ParseError {
    ParseError::BadLine {
        format,
        line: index + 1,
        text: text.to_string(),
    }
}
