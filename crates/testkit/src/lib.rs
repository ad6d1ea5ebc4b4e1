//! pjw-testkit (being written).
