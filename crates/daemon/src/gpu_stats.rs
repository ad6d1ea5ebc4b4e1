//! GPU utilisation and memory of the jobs' GPUs, through NVML (`[gpus] nvml`).
//!
//! The port is [`GpuStats`]: one reading of one GPU, found by the PCI address discovery recorded
//! for it (never by NVML's index, which need not follow pjw's ids or the driver's minor
//! numbers). The adapter, [`Nvml`], loads `libnvidia-ml.so.1` at run time (the `nvml-wrapper`
//! crate, through `libloading`): pjw is built and runs without it, and where it is absent or
//! `nvmlInit` fails nothing is sampled and one info line says so.
//!
//! NVML calls may take milliseconds, and a wedged driver can hang them, so they never run on
//! the engine's thread: [`GpuSampler::spawn`] starts a small thread that loads NVML and, each
//! time the engine pokes it (once per sampler tick), reads every GPU and replaces the latest
//! readings. The engine copies the latest readings under a lock the thread holds only to swap
//! in a finished map, and folds them into each GPU job's sample ([`fold`]). A reading lags the
//! sample by at most one interval; one older than [`GpuSampler::latest`]'s `max_age` (the
//! thread is stuck) is dropped rather than repeated.

use std::collections::BTreeMap;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pjw_core::{GpuId, GpuSet, GpuVendor, Gpus};
use tracing::{debug, info};

/// One GPU at one moment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GpuReading {
    /// Percent of the last sample period in which a kernel ran (NVML's `gpu` rate).
    pub util_percent: u32,
    /// Device memory used, bytes.
    pub mem_used: u64,
    /// When it was read.
    pub at: Instant,
}

/// Reads one GPU. `None`: no reading (NVML does not know the address, or the call failed).
pub trait GpuStats: Send {
    fn read(&mut self, pci: &str) -> Option<(u32, u64)>;
}

/// The NVML adapter: the library loaded and initialised.
pub struct Nvml(nvml_wrapper::Nvml);

impl std::fmt::Debug for Nvml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Nvml")
    }
}

impl Nvml {
    /// Load `libnvidia-ml.so.1` and call `nvmlInit`. Err: the library is absent or would not
    /// initialise (no driver, no GPU) — an ordinary state, not a fault.
    pub fn init() -> Result<Nvml, String> {
        nvml_wrapper::Nvml::init()
            .map(Nvml)
            .map_err(|e| e.to_string())
    }
}

impl GpuStats for Nvml {
    fn read(&mut self, pci: &str) -> Option<(u32, u64)> {
        let r = self.0.device_by_pci_bus_id(pci).and_then(|d| {
            let u = d.utilization_rates()?;
            let m = d.memory_info()?;
            Ok((u.gpu, m.used))
        });
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                debug!(pci, error = %e, "nvml: no reading");
                None
            }
        }
    }
}

/// The GPUs NVML can read: NVIDIA ones with a known PCI address, as (pjw's id, address).
pub fn readable(gpus: &Gpus) -> Vec<(GpuId, String)> {
    gpus.gpus
        .iter()
        .filter(|g| g.vendor == GpuVendor::Nvidia)
        .filter_map(|g| Some((g.id, g.pci.clone()?)))
        .collect()
}

type Latest = Arc<Mutex<BTreeMap<GpuId, GpuReading>>>;

/// The engine's handle on the NVML thread: the latest readings, and a way to ask for new ones.
#[derive(Clone, Debug)]
pub struct GpuSampler {
    latest: Latest,
    poke: SyncSender<()>,
}

impl GpuSampler {
    /// Start the thread: it opens its port with `open` (NVML's init may itself be slow) and
    /// reads `gpus` each time it is poked. When `open` fails it logs one info line and ends;
    /// the engine then finds no readings, ever.
    pub fn spawn<F>(open: F, gpus: Vec<(GpuId, String)>) -> std::io::Result<GpuSampler>
    where
        F: FnOnce() -> Result<Box<dyn GpuStats>, String> + Send + 'static,
    {
        let latest: Latest = Arc::default();
        // One poke waits at most: a stuck thread does not pile them up.
        let (poke, pokes) = sync_channel::<()>(1);
        let out = latest.clone();
        std::thread::Builder::new()
            .name("pjw-nvml".into())
            .spawn(move || {
                let mut stats = match open() {
                    Ok(s) => s,
                    Err(e) => {
                        info!(error = %e, "NVML not available: no GPU utilisation or memory samples");
                        return;
                    }
                };
                info!(gpus = gpus.len(), "NVML loaded: sampling GPU utilisation and memory");
                while pokes.recv().is_ok() {
                    let map = read_all(stats.as_mut(), &gpus);
                    *out.lock().unwrap_or_else(|p| p.into_inner()) = map;
                }
            })?;
        Ok(GpuSampler { latest, poke })
    }

    /// Ask for a new reading of every GPU (never blocks).
    pub fn poke(&self) {
        // Full: a pass is already asked for. Disconnected: NVML is absent, the thread ended.
        let _: Result<(), TrySendError<()>> = self.poke.try_send(());
    }

    /// The latest readings no older than `max_age` at `now`.
    pub fn latest(&self, now: Instant, max_age: Duration) -> BTreeMap<GpuId, GpuReading> {
        let map = self.latest.lock().unwrap_or_else(|p| p.into_inner());
        map.iter()
            .filter(|(_, r)| now.saturating_duration_since(r.at) <= max_age)
            .map(|(k, v)| (*k, *v))
            .collect()
    }
}

/// One pass over `gpus`: the readings that came back, each stamped now.
pub fn read_all(stats: &mut dyn GpuStats, gpus: &[(GpuId, String)]) -> BTreeMap<GpuId, GpuReading> {
    gpus.iter()
        .filter_map(|(id, pci)| {
            let (util_percent, mem_used) = stats.read(pci)?;
            Some((
                *id,
                GpuReading {
                    util_percent,
                    mem_used,
                    at: Instant::now(),
                },
            ))
        })
        .collect()
}

/// A job's GPU figures from the latest readings (pure): the mean utilisation of its GPUs that
/// have a reading and the sum of their used memory; `(None, None)` when none has.
pub fn fold(held: &GpuSet, latest: &BTreeMap<GpuId, GpuReading>) -> (Option<f64>, Option<u64>) {
    let got: Vec<&GpuReading> = held.iter().filter_map(|g| latest.get(&g)).collect();
    if got.is_empty() {
        return (None, None);
    }
    let util = got.iter().map(|r| r.util_percent as f64).sum::<f64>() / got.len() as f64;
    let mem = got.iter().map(|r| r.mem_used).sum();
    (Some(util), Some(mem))
}

/// A recording fake: fixed readings by PCI address, and every address asked for.
#[cfg(test)]
#[derive(Clone, Debug, Default)]
pub struct FakeGpuStats {
    pub readings: BTreeMap<String, (u32, u64)>,
    pub asked: Arc<Mutex<Vec<String>>>,
}

#[cfg(test)]
impl GpuStats for FakeGpuStats {
    fn read(&mut self, pci: &str) -> Option<(u32, u64)> {
        self.asked.lock().unwrap().push(pci.to_string());
        self.readings.get(pci).copied()
    }
}

#[cfg(test)]
#[path = "gpu_stats_tests.rs"]
pub(crate) mod tests;
