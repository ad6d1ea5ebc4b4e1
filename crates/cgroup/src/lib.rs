//! pjw-cgroup (being written).
