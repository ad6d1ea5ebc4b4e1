//! pjw-topology (being written).
