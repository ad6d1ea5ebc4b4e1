//! pjw-proto (being written).
