//! pjw-daemon (being written).
