//! pjw-store (being written).
