//! Who may read which report, and what a query may ask: refused before anything is read.

use pjw_proto::{ErrorCode, ReportQuery};

use crate::engine::Cred;

/// Which jobs the caller may see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Root or the admin group.
    All,
    /// Only this uid's jobs.
    Uid(u32),
}

/// Why a report is refused before anything is read (one line each).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReportRefusal {
    /// A caller who is not an admin asked for another user's jobs.
    #[error("you may read only your own jobs' reports; other users' ({user}) need root{}", group.as_ref().map(|g| format!(" or group {g}")).unwrap_or_default())]
    OtherUsers { user: String, group: Option<String> },
    #[error("limit must be at least 1")]
    ZeroLimit,
    #[error("--node, --until and --top ask the central store: add --central")]
    CentralOnly,
    #[error(
        "--limit for --central is at most {max} jobs per report (ask with --since for older ones)"
    )]
    CentralLimit { max: u32 },
    #[error("the central store holds finished jobs only; ask without --central for live ones")]
    LiveFromCentral,
    #[error("--until must be later than --since")]
    UntilBeforeSince,
}

impl ReportRefusal {
    /// The protocol's error code for it.
    pub fn code(&self) -> ErrorCode {
        match self {
            ReportRefusal::OtherUsers { .. } => ErrorCode::Denied,
            _ => ErrorCode::Invalid,
        }
    }
}

/// Decide what the caller may see, or refuse.
/// `admin` says whether the caller is in `admin_group` and `named_uid` who the query's user
/// name is, both resolved before (off the engine thread, see [`crate::users`]).
pub fn access(
    cred: &Cred,
    admin: bool,
    admin_group: Option<&str>,
    named_uid: Option<u32>,
    q: &ReportQuery,
) -> Result<Access, ReportRefusal> {
    if cred.uid == 0 || admin {
        return Ok(Access::All);
    }
    if let Some(u) = &q.user {
        let uid = u.parse::<u32>().ok().or(named_uid);
        if uid != Some(cred.uid) {
            return Err(ReportRefusal::OtherUsers {
                user: u.clone(),
                group: admin_group.map(str::to_string),
            });
        }
    }
    Ok(Access::Uid(cred.uid))
}

/// Check the query's values (pure). Its state is typed: an unknown one was refused when the
/// request was decoded.
pub fn validate(q: &ReportQuery) -> Result<(), ReportRefusal> {
    if q.limit == Some(0) {
        return Err(ReportRefusal::ZeroLimit);
    }
    if !q.central && (q.node.is_some() || q.until_ms.is_some() || q.top.is_some()) {
        return Err(ReportRefusal::CentralOnly);
    }
    Ok(())
}
