//! The device fence: which character devices a job may not open — the v1 `devices` controller,
//! or on cgroup v2 a `BPF_CGROUP_DEVICE` program ([`crate::device_prog`]) of the same meaning.
//!
//! A job cgroup starts with its parent's rules (on a default machine: every device allowed).
//! pjw adds one `devices.deny` exception per device node the job must not open — the GPUs it was
//! not given — and leaves everything else (its own GPUs, the shared control nodes, `/dev/null`,
//! ttys) as it was. Exact `major:minor` entries, never a wildcard: in a default-allow cgroup a
//! later `devices.allow` removes only an exception that matches exactly, so `c 195:* rwm` could
//! not be opened up again for the job's own GPU.
//!
//! ```
//! assert_eq!(pjw_cgroup::devices::deny_lines(&[(195, 1), (226, 129)]),
//!            ["c 195:1 rwm", "c 226:129 rwm"]);
//! ```

use std::path::Path;

use crate::device_prog;
use crate::error::CgroupError;
use crate::fs::{Backend, Fs};
use crate::Driver;

/// How jobs are fenced off devices ([`crate::Driver::fence_devices`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fence {
    /// The v1 `devices` controller: each job also gets a cgroup there, with `devices.deny`.
    V1Controller,
    /// A `BPF_CGROUP_DEVICE` program attached to the job's cgroup2 directory.
    BpfProgram,
}

impl Fence {
    /// `v1 devices controller`, `cgroup v2 device program` (for logs).
    pub fn as_str(self) -> &'static str {
        match self {
            Fence::V1Controller => "v1 devices controller",
            Fence::BpfProgram => "cgroup v2 device program",
        }
    }
}

/// The file a fake tree's job directory gets for each device program "attached" to it (the
/// kernel has none): the program's meaning as v1 deny lines, one program per line, so tests
/// see what was attached, and how often.
pub const FAKE_BPF_FILE: &str = "pjw.fake-device-program";

/// The `devices.deny` lines for character devices `devs` (major, minor).
pub fn deny_lines(devs: &[(u32, u32)]) -> Vec<String> {
    devs.iter()
        .map(|(major, minor)| format!("c {major}:{minor} rwm"))
        .collect()
}

/// Deny `devs` in the v1 devices cgroup `dir`, one write per device (the kernel takes one rule
/// per write).
pub(crate) fn deny_v1(fs: &Fs, dir: &Path, devs: &[(u32, u32)]) -> Result<(), CgroupError> {
    let file = dir.join("devices.deny");
    for line in deny_lines(devs) {
        fs.write(&file, &line)?;
    }
    Ok(())
}

/// Deny `devs` to the cgroup2 directory `dir` with a device program (attached beside any
/// others; on a fake tree, one line in [`FAKE_BPF_FILE`]).
pub(crate) fn deny_v2(fs: &Fs, dir: &Path, devs: &[(u32, u32)]) -> Result<(), CgroupError> {
    let prog = device_prog::deny_program(devs).map_err(|e| CgroupError::BadDeviceList {
        path: dir.to_path_buf(),
        reason: e.to_string(),
    })?;
    match fs.backend {
        Backend::Kernel => crate::bpf::attach(dir, &prog),
        Backend::FakeTree => {
            if !fs.exists(dir) {
                return Err(CgroupError::DeviceProgram {
                    path: dir.to_path_buf(),
                    step: "open",
                    source: std::io::Error::from_raw_os_error(libc::ENOENT),
                    detail: String::new(),
                });
            }
            let path = dir.join(FAKE_BPF_FILE);
            let mut text = std::fs::read_to_string(&path).unwrap_or_default();
            text.push_str(&deny_lines(devs).join(","));
            text.push('\n');
            std::fs::write(&path, &text).map_err(|source| CgroupError::Write {
                path,
                value: text,
                source,
            })
        }
    }
}

impl Driver {
    /// Fence every job from now on off the devices [`Driver::deny_devices`] names, and say how:
    /// the v1 `devices` controller where it is mounted (every job then also gets a cgroup
    /// there; call before [`Driver::prepare_parent`]), else a `BPF_CGROUP_DEVICE` program on
    /// the job's cgroup2 directory (pure v2, or hybrid without the v1 controller). `None` (and
    /// nothing changes) on a v1-only machine without the devices controller.
    pub fn fence_devices(&mut self) -> Option<Fence> {
        self.fence = if self.devices.is_some() {
            Some(Fence::V1Controller)
        } else if self.v2().is_some() {
            Some(Fence::BpfProgram)
        } else {
            None
        };
        self.fence
    }

    /// [`Driver::fence_devices`] with a chosen fence (tests: the device program on a hybrid
    /// machine that has the v1 controller too). False (and nothing changes) when this machine
    /// lacks it.
    pub fn fence_devices_by(&mut self, fence: Fence) -> bool {
        let there = match fence {
            Fence::V1Controller => self.devices.is_some(),
            Fence::BpfProgram => self.v2().is_some(),
        };
        if there {
            self.fence = Some(fence);
        }
        there
    }

    /// How jobs are fenced off devices ([`Driver::fence_devices`]), if they are.
    pub fn fences_devices(&self) -> Option<Fence> {
        self.fence
    }

    /// Keep job `name` from opening the character devices `devs` (major, minor), before its
    /// first process joins. An error when devices are not fenced (a fence that is not there
    /// must not look as if it were), and when the kernel refuses the v1 rule or the device
    /// program (the job must not start unfenced).
    pub fn deny_devices(&self, name: &str, devs: &[(u32, u32)]) -> Result<(), CgroupError> {
        crate::parent::validate_job_name(name)?;
        match (self.fence, self.devices.as_ref(), self.v2()) {
            (Some(Fence::V1Controller), Some(h), _) => deny_v1(&self.fs, &h.job(name), devs),
            (Some(Fence::BpfProgram), _, Some(v2)) => deny_v2(&self.fs, &v2.job(name), devs),
            _ => Err(CgroupError::MissingController {
                controller: "devices".into(),
                where_: None,
            }),
        }
    }
}
