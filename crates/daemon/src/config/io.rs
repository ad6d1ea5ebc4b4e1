//! `[job] io_weight` and `[job] io_max`: every job's default block I/O weight and limits.
//!
//! `io_max` entries name a device as `major:minor` or as a path (a directory, a file or the
//! device node itself), resolved here, at load, to the whole disk behind it: the kernel takes
//! limits on disks, not partitions.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use pjw_core::io_limits::{BlockDev, IoMax, IoWeight, JobIo};

use super::{ConfigError, Errs};

/// Validate the two keys; `sys_root` is where `dev/block` lives (`/sys`).
pub(super) fn parse(
    weight: Option<u64>,
    max: &[String],
    sys_root: &Path,
    e: Errs,
) -> Result<JobIo, ConfigError> {
    let weight = weight
        .map(IoWeight::new)
        .transpose()
        .map_err(|x| e.at("job.io_weight", x.to_string()))?;
    let mut limits = Vec::new();
    for entry in max {
        let (dev, rest) = entry.trim().split_once(' ').unwrap_or((entry.trim(), ""));
        let dev = if dev.starts_with('/') {
            resolve_disk(Path::new(dev), sys_root).map_err(|r| e.at("job.io_max", r))?
        } else {
            BlockDev::parse(dev).map_err(|x| e.at("job.io_max", x.to_string()))?
        };
        let m = IoMax::parse(&format!("{dev} {rest}"))
            .map_err(|x| e.at("job.io_max", x.to_string()))?;
        if limits.iter().any(|l: &IoMax| l.dev == m.dev) {
            return Err(e.at("job.io_max", format!("device {dev} given twice")));
        }
        limits.push(m);
    }
    Ok(JobIo {
        weight,
        max: JobIo::merge_max(&[], &limits),
    })
}

/// The whole disk holding `path`: the device node itself, else the device of the filesystem
/// it is on; a partition becomes its disk (`<sys>/dev/block/M:m/partition` exists, the disk is
/// the directory above).
pub fn resolve_disk(path: &Path, sys_root: &Path) -> Result<BlockDev, String> {
    let md = std::fs::metadata(path).map_err(|x| format!("{}: {x}", path.display()))?;
    let dev = if md.file_type().is_block_device() {
        BlockDev::from_dev_t(md.rdev())
    } else {
        BlockDev::from_dev_t(md.dev())
    };
    let node = sys_root.join(format!("dev/block/{dev}"));
    if !node.exists() {
        return Err(format!(
            "{} is on device {dev}, which is not a block device (tmpfs, overlay, NFS?)",
            path.display()
        ));
    }
    if !node.join("partition").exists() {
        return Ok(dev);
    }
    let disk = std::fs::canonicalize(&node)
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("dev")))
        .ok_or_else(|| {
            format!(
                "{}: cannot find the disk of partition {dev}",
                node.display()
            )
        })?;
    let text = std::fs::read_to_string(&disk).map_err(|x| format!("{}: {x}", disk.display()))?;
    BlockDev::parse(text.trim()).map_err(|x| format!("{}: {x}", disk.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e() -> Errs<'static> {
        Errs("pjw.toml")
    }

    #[test]
    fn weight_and_numeric_devices_parse_and_bad_values_name_the_key() {
        let io = parse(Some(300), &["8:0 rbps=1M".into()], Path::new("/sys"), e()).unwrap();
        assert_eq!(io.summary(), "weight=300; 8:0 rbps=1M");
        let err = parse(Some(0), &[], Path::new("/sys"), e())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("job.io_weight") && err.contains("1-10000"),
            "{err}"
        );
        for bad in ["8:0", "8:0 rbps=1M rbps=2M", "sda rbps=1M", "8:0 iops=3"] {
            let err = parse(None, &[bad.into()], Path::new("/sys"), e())
                .unwrap_err()
                .to_string();
            assert!(err.contains("job.io_max"), "{bad}: {err}");
        }
        let twice = ["8:0 rbps=1M".to_string(), "8:0 wbps=1M".to_string()];
        let err = parse(None, &twice, Path::new("/sys"), e())
            .unwrap_err()
            .to_string();
        assert!(err.contains("given twice"), "{err}");
    }

    #[test]
    fn a_path_resolves_to_its_whole_disk_through_sysfs() {
        // A fake sysfs where the temp dir's device is partition 2 of disk 7:0.
        let t = tempfile::tempdir().unwrap();
        let dev = BlockDev::from_dev_t(std::fs::metadata(t.path()).unwrap().dev());
        let sys = t.path().join("sys");
        let disk = sys.join("devices/block/disk0");
        std::fs::create_dir_all(disk.join("disk0p2")).unwrap();
        std::fs::write(disk.join("dev"), "7:0\n").unwrap();
        std::fs::write(disk.join("disk0p2/partition"), "2\n").unwrap();
        std::fs::create_dir_all(sys.join("dev/block")).unwrap();
        std::os::unix::fs::symlink(disk.join("disk0p2"), sys.join(format!("dev/block/{dev}")))
            .unwrap();
        assert_eq!(resolve_disk(t.path(), &sys).unwrap().to_string(), "7:0");
        // Not a partition: the device itself.
        std::fs::remove_file(disk.join("disk0p2/partition")).unwrap();
        assert_eq!(resolve_disk(t.path(), &sys).unwrap(), dev);
        // No such block device.
        let err = resolve_disk(t.path(), &t.path().join("nosys")).unwrap_err();
        assert!(err.contains("not a block device"), "{err}");
        let err = resolve_disk(&t.path().join("missing"), &sys).unwrap_err();
        assert!(err.contains("missing"), "{err}");
    }
}
