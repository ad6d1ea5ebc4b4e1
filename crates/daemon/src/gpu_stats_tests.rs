//! The fold of GPU readings into jobs' figures, with the recording fake, and the real adapter on
//! a machine without NVML.

use super::*;
use pjw_core::{CpuSet, DeviceNode, Gpu};

const GIB: u64 = 1 << 30;

fn gpu(i: u32, vendor: GpuVendor, pci: Option<&str>) -> Gpu {
    Gpu {
        id: GpuId(i),
        vendor,
        pci: pci.map(str::to_string),
        switch: None,
        numa: None,
        cpus: CpuSet::new(),
        devices: vec![DeviceNode {
            path: format!("/dev/nvidia{i}"),
            major: 195,
            minor: i,
        }],
    }
}

/// Three NVIDIA GPUs; the fake has readings for the first and third only.
fn three_gpus() -> (Gpus, FakeGpuStats) {
    let gpus = Gpus {
        gpus: vec![
            gpu(0, GpuVendor::Nvidia, Some("0000:01:00.0")),
            gpu(1, GpuVendor::Nvidia, Some("0000:41:00.0")),
            gpu(2, GpuVendor::Nvidia, Some("0000:81:00.0")),
        ],
        shared: vec![],
    };
    let mut fake = FakeGpuStats::default();
    fake.readings.insert("0000:01:00.0".into(), (90, 10 * GIB));
    fake.readings.insert("0000:81:00.0".into(), (30, 2 * GIB));
    (gpus, fake)
}

fn gs(s: &str) -> GpuSet {
    GpuSet::parse_list(s).unwrap()
}

#[test]
fn two_jobs_three_gpus_one_without_a_reading() {
    let (gpus, mut fake) = three_gpus();
    let readable = readable(&gpus);
    let latest = read_all(&mut fake, &readable);
    // Every GPU was asked for by its PCI address, in pjw's order.
    assert_eq!(
        *fake.asked.lock().unwrap(),
        ["0000:01:00.0", "0000:41:00.0", "0000:81:00.0"]
    );
    assert_eq!(latest.len(), 2);
    // (the job's GPUs, its utilisation, its memory)
    let table = [
        // Job A holds GPUs 0 and 1; 1 has no reading: A's figures are GPU 0's alone.
        ("0-1", Some(90.0), Some(10 * GIB)),
        // Job B holds GPU 2 alone.
        ("2", Some(30.0), Some(2 * GIB)),
        // Both read GPUs: the mean of the utilisations, the sum of the memory.
        ("0,2", Some(60.0), Some(12 * GIB)),
        // Only the GPU without a reading: nothing, not zero.
        ("1", None, None),
        // No GPUs.
        ("", None, None),
    ];
    for (held, util, mem) in table {
        assert_eq!(fold(&gs(held), &latest), (util, mem), "gpus {held:?}");
    }
}

#[test]
fn nvml_absent_fills_nothing() {
    let (gpus, _) = three_gpus();
    // No readings at all (NVML absent or its thread ended): every job's figures are None.
    let none = BTreeMap::new();
    for held in ["0-1", "2", "0-2"] {
        assert_eq!(fold(&gs(held), &none), (None, None), "gpus {held:?}");
    }
    // A sampler whose port would not open never has a reading to give.
    let s = GpuSampler::spawn(
        || Err("libnvidia-ml.so.1: not found".into()),
        readable(&gpus),
    )
    .unwrap();
    s.poke();
    assert!(s
        .latest(Instant::now(), Duration::from_secs(3600))
        .is_empty());
}

#[test]
fn only_nvidia_gpus_with_a_pci_address_are_read() {
    let gpus = Gpus {
        gpus: vec![
            gpu(0, GpuVendor::Nvidia, Some("0000:01:00.0")),
            gpu(1, GpuVendor::Nvidia, None),
            gpu(2, GpuVendor::Amd, Some("0000:c1:00.0")),
        ],
        shared: vec![],
    };
    assert_eq!(readable(&gpus), [(GpuId(0), "0000:01:00.0".to_string())]);
}

#[test]
fn a_stale_reading_is_dropped() {
    let s = sampler_with(&[(0, 50, GIB)]);
    let now = Instant::now();
    let fresh = s.latest(now, Duration::from_secs(10));
    assert_eq!(fold(&gs("0"), &fresh), (Some(50.0), Some(GIB)));
    // The same reading seen from a minute later, with a 10 s limit: gone.
    let later = now + Duration::from_secs(60);
    assert!(s.latest(later, Duration::from_secs(10)).is_empty());
}

#[test]
fn the_thread_reads_when_poked() {
    let (gpus, fake) = three_gpus();
    let asked = fake.asked.clone();
    let s = GpuSampler::spawn(
        move || Ok(Box::new(fake) as Box<dyn GpuStats>),
        readable(&gpus),
    )
    .unwrap();
    s.poke();
    // Wait for the pass (no time limit asserted: the readings are what is checked).
    let latest = loop {
        let l = s.latest(Instant::now(), Duration::from_secs(3600));
        if l.len() == 2 {
            break l;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(fold(&gs("0-2"), &latest), (Some(60.0), Some(12 * GIB)));
    assert!(asked.lock().unwrap().len() >= 3);
}

/// A sampler holding fixed readings (no thread pass needed).
pub(crate) fn sampler_with(readings: &[(u32, u32, u64)]) -> GpuSampler {
    let (poke, _) = sync_channel(1);
    let at = Instant::now();
    let map = readings
        .iter()
        .map(|&(id, util_percent, mem_used)| {
            (
                GpuId(id),
                GpuReading {
                    util_percent,
                    mem_used,
                    at,
                },
            )
        })
        .collect();
    GpuSampler {
        latest: Arc::new(Mutex::new(map)),
        poke,
    }
}

/// The real adapter on a machine without an NVIDIA driver: init reports NVML absent, as an
/// error value (the daemon logs it once and samples no GPU), never a panic.
#[test]
fn real_nvml_init_reports_absent_here() {
    let has_lib = ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"]
        .iter()
        .any(|d| std::path::Path::new(d).join("libnvidia-ml.so.1").exists());
    if has_lib {
        pjw_testkit::skip!("libnvidia-ml.so.1 is installed here: the absent path cannot be tested");
    }
    match Nvml::init() {
        Ok(_) => panic!("NVML initialised without libnvidia-ml.so.1"),
        Err(e) => assert!(!e.is_empty()),
    }
}
