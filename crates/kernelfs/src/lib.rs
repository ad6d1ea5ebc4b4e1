//! pjw-kernelfs (being written).
