//! The error type of pjw-core.

/// Everything pjw-core can refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    /// A CPU or node number past what a [`crate::CpuSet`] holds.
    #[error("cpu {cpu} is out of range (pjw handles cpus 0-{max})", max = crate::cpuset::MAX_CPUS - 1)]
    CpuOutOfRange { cpu: u64 },
    /// Text that is not a kernel cpu list or mask.
    #[error("invalid cpu list {text:?} (expected e.g. \"0-3,8\")")]
    BadCpuList { text: String },
    /// A size that does not parse.
    #[error("invalid size {text:?} (expected e.g. 512M, 4G, 1.5GiB or a byte count)")]
    BadSize { text: String },
    /// A synthetic topology description that does not parse.
    #[error("invalid synthetic topology {text:?}: {reason}")]
    BadSynthetic { text: String, reason: String },
    /// A job id that cannot be used.
    #[error("invalid job id {text:?}: {reason}")]
    BadJobId { text: String, reason: String },
    /// A topology that is inconsistent.
    #[error("invalid topology: {reason}")]
    BadTopology { reason: String },
    /// A GPU, GPU list or GPU declaration that cannot be used.
    #[error("invalid gpu {text:?}: {reason}")]
    BadGpu { text: String, reason: String },
    /// An I/O weight, device or limit that cannot be used.
    #[error("invalid I/O setting {text:?}: {reason}")]
    BadIo { text: String, reason: String },
    /// A job time limit that cannot be used.
    #[error("invalid time limit {text:?}: {reason}")]
    BadTimeLimit { text: String, reason: String },
    /// A word that names none of a type's values (a state, an end class).
    #[error("unknown {what} {text:?} (one of {valid})")]
    UnknownWord {
        what: &'static str,
        text: String,
        valid: String,
    },
}
