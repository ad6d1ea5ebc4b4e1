//! `/proc/PID/cgroup`: the cgroup a process is in, one line per hierarchy.
//!
//! ```text
//! 4:memory:/process_api/3f11
//! 9:name=systemd:/
//! 0::/
//! ```
//! Fields are `hierarchy-id:controllers:path`; the path may itself contain `:`. The line with
//! id 0 and no controllers is the cgroup v2 hierarchy.

use crate::error::{bad_line, ParseError};

const FORMAT: &str = "/proc/PID/cgroup";

/// One line of `/proc/PID/cgroup`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupLine {
    /// The hierarchy's id (0 for v2).
    pub hierarchy_id: u32,
    /// Controllers of the v1 hierarchy (`name=systemd` for a named one); empty for v2.
    pub controllers: Vec<String>,
    /// Path relative to the hierarchy's root (as the process's cgroup namespace sees it).
    pub path: String,
}

impl CgroupLine {
    /// Whether this is the cgroup v2 line (`0::/path`).
    pub fn is_v2(&self) -> bool {
        self.hierarchy_id == 0 && self.controllers.is_empty()
    }
}

/// Parse the whole file. Blank lines are skipped.
pub fn parse(text: &str) -> Result<Vec<CgroupLine>, ParseError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(ctrl), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad_line(FORMAT, i, line));
        };
        let hierarchy_id = id.parse().map_err(|_| bad_line(FORMAT, i, line))?;
        if !path.starts_with('/') {
            return Err(bad_line(FORMAT, i, line));
        }
        out.push(CgroupLine {
            hierarchy_id,
            controllers: ctrl
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect(),
            path: path.to_string(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hybrid_membership() {
        let l = parse(
            "9:name=systemd:/\n4:memory:/process_api/3f11\n2:cpu,cpuacct:/a:b\n0::/user.slice\n",
        )
        .unwrap();
        assert_eq!(l.len(), 4);
        assert_eq!(l[0].controllers, vec!["name=systemd".to_string()]);
        assert_eq!(l[1].hierarchy_id, 4);
        assert_eq!(l[1].path, "/process_api/3f11");
        assert_eq!(l[2].controllers, vec!["cpu".to_string(), "cpuacct".into()]);
        assert_eq!(l[2].path, "/a:b");
        assert!(l[3].is_v2());
        assert!(!l[1].is_v2());
        assert_eq!(l[3].path, "/user.slice");
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse("4:memory\n").is_err());
        assert!(parse("x:memory:/\n").is_err());
        assert!(parse("4:memory:relative\n").is_err());
    }
}
