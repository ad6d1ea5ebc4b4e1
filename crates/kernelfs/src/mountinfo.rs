//! `/proc/PID/mountinfo`: one mount per line.
//!
//! ```text
//! 34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime shared:9 - cgroup cgroup rw,cpuset
//! (1)(2) (3) (4)        (5)              (6)       (7)   (8)  (9)   (10)    (11)
//! ```
//! (4) is the root of the mount inside its filesystem, (5) the mount point, (7) zero or more
//! optional fields ended by `-`, (9) the filesystem type, (11) the super-block options. For a
//! cgroup v1 mount the super options name the controllers (`cpu,cpuacct`) or a named hierarchy
//! (`name=systemd`). Paths escape space, tab, newline and backslash in octal (`\040`).

use crate::error::{bad_line, bad_value, ParseError};

const FORMAT: &str = "mountinfo";

/// One line of mountinfo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// The mount's id (field 1).
    pub mount_id: u32,
    /// The parent mount's id (field 2).
    pub parent_id: u32,
    /// `major:minor` of the filesystem.
    pub device: String,
    /// Root of the mount inside its filesystem (field 4), unescaped.
    pub root: String,
    /// Where it is mounted (field 5), unescaped.
    pub mount_point: String,
    /// Per-mount options (field 6).
    pub mount_options: Vec<String>,
    /// Optional fields (`shared:9`, `master:1`, …).
    pub optional_fields: Vec<String>,
    /// The filesystem type (`cgroup`, `cgroup2`, `tmpfs`, …).
    pub fs_type: String,
    /// The mount source (`cgroup`, a device, …).
    pub source: String,
    /// Super-block options (field 11).
    pub super_options: Vec<String>,
}

/// What kind of cgroup hierarchy a mount is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CgroupMount {
    /// A cgroup v1 hierarchy with these controllers; named hierarchies appear as `name=NAME`.
    V1 {
        /// The controllers, in the order of the super options.
        controllers: Vec<String>,
    },
    /// The cgroup v2 unified hierarchy.
    V2,
}

/// Super options of cgroup v1 mounts that are not controllers.
const V1_NON_CONTROLLER_OPTIONS: &[&str] = &[
    "rw",
    "ro",
    "xattr",
    "noprefix",
    "clone_children",
    "cpuset_v2_mode",
    "favordynmods",
    "nofavordynmods",
    "none",
    "all",
];

impl Mount {
    /// `Some` for a cgroup (v1) or cgroup2 mount.
    pub fn cgroup(&self) -> Option<CgroupMount> {
        match self.fs_type.as_str() {
            "cgroup2" => Some(CgroupMount::V2),
            "cgroup" => Some(CgroupMount::V1 {
                controllers: self
                    .super_options
                    .iter()
                    .filter(|o| {
                        !V1_NON_CONTROLLER_OPTIONS.contains(&o.as_str())
                            && !o.starts_with("release_agent=")
                    })
                    .cloned()
                    .collect(),
            }),
            _ => None,
        }
    }
}

/// Undo mountinfo's octal escapes (`\040` → space).
pub fn unescape(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = u32::from(b[i + 1] - b'0') * 64
                + u32::from(b[i + 2] - b'0') * 8
                + u32::from(b[i + 3] - b'0');
            if let Ok(byte) = u8::try_from(v) {
                out.push(byte);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn split_opts(s: &str) -> Vec<String> {
    s.split(',')
        .filter(|o| !o.is_empty())
        .map(str::to_string)
        .collect()
}

/// Parse the whole file. Blank lines are skipped.
pub fn parse(text: &str) -> Result<Vec<Mount>, ParseError> {
    let mut mounts = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let sep = fields
            .iter()
            .position(|f| *f == "-")
            .ok_or_else(|| bad_line(FORMAT, i, line))?;
        if sep < 6 || fields.len() < sep + 3 {
            return Err(bad_line(FORMAT, i, line));
        }
        let num = |f: &str, name: &str| -> Result<u32, ParseError> {
            f.parse().map_err(|_| bad_value(FORMAT, name, f))
        };
        mounts.push(Mount {
            mount_id: num(fields[0], "mount id")?,
            parent_id: num(fields[1], "parent id")?,
            device: fields[2].to_string(),
            root: unescape(fields[3]),
            mount_point: unescape(fields[4]),
            mount_options: split_opts(fields[5]),
            optional_fields: fields[6..sep].iter().map(|s| s.to_string()).collect(),
            fs_type: fields[sep + 1].to_string(),
            source: unescape(fields[sep + 2]),
            super_options: fields
                .get(sep + 3)
                .map(|s| split_opts(s))
                .unwrap_or_default(),
        });
    }
    Ok(mounts)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime shared:9 - cgroup cgroup rw,cpuset
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn parses_cgroup_mounts_of_a_hybrid_machine() {
        let m = parse(HYBRID).unwrap();
        assert_eq!(m.len(), 7);
        assert_eq!(m[0].cgroup(), None);
        assert_eq!(m[1].cgroup(), None);
        assert_eq!(
            m[2].cgroup(),
            Some(CgroupMount::V1 {
                controllers: vec!["cpu".into()]
            })
        );
        assert_eq!(m[4].mount_point, "/sys/fs/cgroup/cpuset");
        assert_eq!(m[4].optional_fields, vec!["shared:9".to_string()]);
        assert_eq!(m[4].root, "/");
        assert_eq!(
            m[5].cgroup(),
            Some(CgroupMount::V1 {
                controllers: vec!["name=systemd".into()]
            })
        );
        assert_eq!(m[6].cgroup(), Some(CgroupMount::V2));
        assert_eq!(m[6].fs_type, "cgroup2");
    }

    #[test]
    fn comounted_controllers_and_release_agent() {
        let m = parse(
            "30 25 0:26 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro,nosuid - cgroup cgroup rw,cpu,cpuacct,release_agent=/x\n",
        )
        .unwrap();
        assert_eq!(m[0].root, "/docker/abc");
        assert_eq!(
            m[0].cgroup(),
            Some(CgroupMount::V1 {
                controllers: vec!["cpu".into(), "cpuacct".into()]
            })
        );
        assert_eq!(m[0].mount_options, vec!["ro".to_string(), "nosuid".into()]);
    }

    #[test]
    fn unescapes_paths() {
        let m = parse("1 0 8:1 /a\\040b /mnt/x\\134y rw - ext4 /dev/sda1 rw\n").unwrap();
        assert_eq!(m[0].root, "/a b");
        assert_eq!(m[0].mount_point, "/mnt/x\\y");
        assert_eq!(unescape("plain"), "plain");
        assert_eq!(unescape("tail\\04"), "tail\\04");
    }

    #[test]
    fn rejects_garbage() {
        assert!(matches!(
            parse("1 2 3\n"),
            Err(ParseError::BadLine { line: 1, .. })
        ));
        assert!(matches!(
            parse("x 0 8:1 / / rw - ext4 /dev/sda1 rw\n"),
            Err(ParseError::BadValue { .. })
        ));
        assert!(parse("1 0 8:1 / / rw -\n").is_err());
    }
}
