//! Parsing of the parent specification and validation of job names.

use crate::{CgroupError, ParentSpec};

fn component_ok(c: &str) -> Result<(), String> {
    if c.is_empty() {
        return Err("empty path component".into());
    }
    if c == "." || c == ".." {
        return Err(format!("path component {c:?} is not allowed"));
    }
    if let Some(bad) = c
        .chars()
        .find(|ch| !(ch.is_ascii_alphanumeric() || "-_.@+:=".contains(*ch)))
    {
        return Err(format!(
            "character {bad:?} is not allowed (use letters, digits and -_.@+:=)"
        ));
    }
    Ok(())
}

pub(crate) fn parse(text: &str) -> Result<ParentSpec, CgroupError> {
    let bad = |reason: String| CgroupError::BadParent {
        text: text.to_string(),
        reason,
    };
    if text.is_empty() {
        return Err(bad("empty".into()));
    }
    if let Some(rest) = text.strip_prefix('/') {
        if rest.is_empty() {
            return Err(bad("the root cgroup cannot be the parent".into()));
        }
        for c in rest.split('/') {
            component_ok(c).map_err(bad)?;
        }
        return Ok(ParentSpec::Absolute(text.to_string()));
    }
    if text == "self" {
        return Ok(ParentSpec::SelfRelative(None));
    }
    if let Some(sub) = text.strip_prefix("self/") {
        for c in sub.split('/') {
            component_ok(c).map_err(bad)?;
        }
        return Ok(ParentSpec::SelfRelative(Some(sub.to_string())));
    }
    Err(bad("relative path".into()))
}

/// Check a job cgroup name: one path component, not `.`/`..`, no control characters.
pub(crate) fn validate_job_name(name: &str) -> Result<(), CgroupError> {
    let bad = |reason: &str| CgroupError::BadJobName {
        name: name.to_string(),
        reason: reason.to_string(),
    };
    if name.is_empty() {
        return Err(bad("empty"));
    }
    if name == "." || name == ".." {
        return Err(bad("not a directory name"));
    }
    if name.contains('/') {
        return Err(bad("contains '/'"));
    }
    if name.chars().any(|c| c.is_control()) {
        return Err(bad("contains a control character"));
    }
    if name.starts_with("cgroup.") {
        return Err(bad("names starting with \"cgroup.\" are the kernel's"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_good_specs() {
        let cases = [
            ("/pjw", ParentSpec::Absolute("/pjw".into())),
            ("/a/b", ParentSpec::Absolute("/a/b".into())),
            (
                "/system.slice/pjw@1",
                ParentSpec::Absolute("/system.slice/pjw@1".into()),
            ),
            ("self", ParentSpec::SelfRelative(None)),
            ("self/jobs", ParentSpec::SelfRelative(Some("jobs".into()))),
            ("self/a/b-c", ParentSpec::SelfRelative(Some("a/b-c".into()))),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text).unwrap(), want, "{text}");
        }
    }

    #[test]
    fn rejects_bad_specs() {
        for text in [
            "", "/", "pjw", "a/b", "self/", "self//x", "/a/../b", "/a/./b", "/..", "self/..",
            "/a b", "/a\nb", "/a//b", "/a/", "selfish", "self/x;y", "/ümlaut",
        ] {
            let e = parse(text).unwrap_err();
            assert!(
                matches!(e, CgroupError::BadParent { .. }),
                "{text:?} gave {e}"
            );
            assert!(e.to_string().starts_with("invalid cgroup parent"), "{e}");
        }
    }

    #[test]
    fn job_names() {
        for ok in ["job-42", "a.b", "x"] {
            validate_job_name(ok).unwrap();
        }
        for bad in ["", ".", "..", "a/b", "/", "a\nb", "cgroup.procs"] {
            assert!(validate_job_name(bad).is_err(), "{bad:?}");
        }
    }
}
