//! The CPU allocator: placeholder, being written.
