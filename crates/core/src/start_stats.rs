//! Start-time statistics (docs/decisions.md (cd)): jobs started and ended per second, the time
//! from submission to start (mean and percentiles), queue length and freezes — since the daemon
//! started and over a recent window (HTCondor's "cumulative and recent" daemon statistics).
//!
//! Pure and bounded: the caller passes the time in; the window is kept as [`SLOTS`] slots of
//! `window / SLOTS` each, every slot a few counters and a log-scaled histogram of waits
//! ([`BUCKETS`] buckets, each ~19 % wider than the last), so memory and the cost of an event
//! stay constant however many jobs start. Percentiles are read from the histogram: within one
//! bucket (under 10 %) of the exact value; the mean and the maximum are exact.
//!
//! ```
//! use pjw_core::start_stats::StartStats;
//! let mut s = StartStats::new(300_000, 0);
//! s.queue(0, 1);
//! s.started(1_000, 400);
//! s.queue(1_000, 0);
//! let f = s.recent(2_000);
//! assert_eq!((f.started, f.wait_max_ms), (1, Some(400)));
//! ```

/// Slots the window is cut into.
pub const SLOTS: usize = 60;
/// Histogram buckets: bucket `i > 0` holds waits below `2^(i/4)` ms; the last, everything
/// longer (~ 2^35 ms, a year).
pub const BUCKETS: usize = 140;

/// The histogram bucket of a wait of `ms` milliseconds (pure).
pub fn bucket(ms: u64) -> usize {
    if ms == 0 {
        return 0;
    }
    // 4 buckets per doubling: bucket i holds [2^((i-1)/4), 2^(i/4)).
    let b = ((ms as f64).log2() * 4.0).floor() as usize + 1;
    b.min(BUCKETS - 1)
}

/// The upper bound (ms) of bucket `i`.
fn bucket_top(i: usize) -> f64 {
    if i == 0 {
        0.0
    } else {
        2f64.powf(i as f64 / 4.0)
    }
}

/// Counters over one stretch of time.
#[derive(Clone, Debug, PartialEq)]
struct Tally {
    started: u64,
    ended: u64,
    freezes: u64,
    wait_sum_ms: u128,
    wait_max_ms: Option<u64>,
    hist: Vec<u32>,
    /// Queue length × ms, and its most.
    queue_area: u128,
    queue_max: u32,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            started: 0,
            ended: 0,
            freezes: 0,
            wait_sum_ms: 0,
            wait_max_ms: None,
            hist: vec![0; BUCKETS],
            queue_area: 0,
            queue_max: 0,
        }
    }

    fn add(&mut self, o: &Tally) {
        self.started += o.started;
        self.ended += o.ended;
        self.freezes += o.freezes;
        self.wait_sum_ms += o.wait_sum_ms;
        self.wait_max_ms = self.wait_max_ms.max(o.wait_max_ms);
        for (a, b) in self.hist.iter_mut().zip(&o.hist) {
            *a = a.saturating_add(*b);
        }
        self.queue_area += o.queue_area;
        self.queue_max = self.queue_max.max(o.queue_max);
    }
}

/// Figures over a stretch of time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Figures {
    /// The time covered (ms): the window, or less when the statistics are younger.
    pub covered_ms: i64,
    pub started: u64,
    pub ended: u64,
    pub freezes: u64,
    pub started_per_sec: f64,
    pub ended_per_sec: f64,
    pub wait_mean_ms: Option<f64>,
    pub wait_p50_ms: Option<f64>,
    pub wait_p90_ms: Option<f64>,
    pub wait_p99_ms: Option<f64>,
    pub wait_max_ms: Option<u64>,
    pub queue_mean: f64,
    pub queue_max: u32,
}

/// The statistics: since `born_ms`, and per slot over the last window.
#[derive(Clone, Debug)]
pub struct StartStats {
    window_ms: i64,
    born_ms: i64,
    total: Tally,
    /// Ring of slots; `slot_start[i]` is the start of the slot's stretch (ms).
    slots: Vec<Tally>,
    slot_start: Vec<i64>,
    /// The queue length since `queue_since`.
    queue_len: u32,
    queue_since: i64,
}

impl StartStats {
    /// Statistics with a window of `window_ms`, starting at `now_ms`.
    pub fn new(window_ms: u64, now_ms: i64) -> StartStats {
        let window_ms = (window_ms.max(SLOTS as u64)).min(i64::MAX as u64 / 2) as i64;
        StartStats {
            window_ms,
            born_ms: now_ms,
            total: Tally::new(),
            // One more than the window's slots: the current slot fills while the oldest of the
            // window is still whole.
            slots: vec![Tally::new(); SLOTS + 1],
            slot_start: vec![i64::MIN; SLOTS + 1],
            queue_len: 0,
            queue_since: now_ms,
        }
    }

    /// The window (ms).
    pub fn window_ms(&self) -> i64 {
        self.window_ms
    }

    fn slot_ms(&self) -> i64 {
        (self.window_ms / SLOTS as i64).max(1)
    }

    /// The slot of `now_ms`, emptied when it last held an older stretch.
    fn slot(&mut self, now_ms: i64) -> &mut Tally {
        let w = self.slot_ms();
        let start = now_ms.div_euclid(w) * w;
        let i = (now_ms.div_euclid(w)).rem_euclid(SLOTS as i64 + 1) as usize;
        if self.slot_start[i] != start {
            self.slot_start[i] = start;
            self.slots[i] = Tally::new();
        }
        &mut self.slots[i]
    }

    /// A job started at `now_ms`, `wait_ms` after its submission.
    pub fn started(&mut self, now_ms: i64, wait_ms: u64) {
        self.settle_queue(now_ms);
        fn add(t: &mut Tally, wait_ms: u64) {
            t.started += 1;
            t.wait_sum_ms += u128::from(wait_ms);
            t.wait_max_ms = t.wait_max_ms.max(Some(wait_ms));
            t.hist[bucket(wait_ms)] += 1;
        }
        add(&mut self.total, wait_ms);
        add(self.slot(now_ms), wait_ms);
    }

    /// A started job ended at `now_ms`.
    pub fn ended(&mut self, now_ms: i64) {
        self.settle_queue(now_ms);
        self.total.ended += 1;
        self.slot(now_ms).ended += 1;
    }

    /// A job was frozen at `now_ms`.
    pub fn froze(&mut self, now_ms: i64) {
        self.settle_queue(now_ms);
        self.total.freezes += 1;
        self.slot(now_ms).freezes += 1;
    }

    /// The queue is `len` long from `now_ms` on.
    pub fn queue(&mut self, now_ms: i64, len: u32) {
        self.settle_queue(now_ms);
        self.queue_len = len;
        self.total.queue_max = self.total.queue_max.max(len);
        let s = self.slot(now_ms);
        s.queue_max = s.queue_max.max(len);
    }

    /// Book the queue length held since the last change up to `now_ms`, slot by slot.
    fn settle_queue(&mut self, now_ms: i64) {
        let mut from = self.queue_since.max(now_ms - self.window_ms);
        let len = u128::from(self.queue_len);
        if now_ms > self.queue_since {
            self.total.queue_area += len * (now_ms - self.queue_since) as u128;
        }
        let w = self.slot_ms();
        while from < now_ms {
            let end = ((from.div_euclid(w) + 1) * w).min(now_ms);
            let s = self.slot(from);
            s.queue_area += len * (end - from) as u128;
            s.queue_max = s.queue_max.max(len as u32);
            from = end;
        }
        self.queue_since = self.queue_since.max(now_ms);
    }

    /// The queue length now.
    pub fn queue_len(&self) -> u32 {
        self.queue_len
    }

    /// The figures over the last window and since the start, as of `now_ms`, leaving the
    /// statistics as they are (a copy is brought up to `now_ms`).
    pub fn figures(&self, now_ms: i64) -> (Figures, Figures) {
        let mut c = self.clone();
        (c.recent(now_ms), c.total(now_ms))
    }

    /// Since the statistics started.
    pub fn total(&mut self, now_ms: i64) -> Figures {
        self.settle_queue(now_ms);
        let covered = (now_ms - self.born_ms).max(0);
        figures(&self.total, covered, self.queue_len)
    }

    /// Over the last window.
    pub fn recent(&mut self, now_ms: i64) -> Figures {
        self.settle_queue(now_ms);
        let w = self.slot_ms();
        let oldest = now_ms.div_euclid(w) * w - SLOTS as i64 * w;
        let mut t = Tally::new();
        for (s, start) in self.slots.iter().zip(&self.slot_start) {
            if *start >= oldest && *start <= now_ms {
                t.add(s);
            }
        }
        let covered = (now_ms - oldest.max(self.born_ms)).max(0);
        figures(&t, covered, self.queue_len)
    }
}

/// The figures of a tally covering `covered_ms` (pure).
fn figures(t: &Tally, covered_ms: i64, queue_now: u32) -> Figures {
    let secs = covered_ms as f64 / 1000.0;
    let rate = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
    let n = t.started;
    let pct = |p: f64| -> Option<f64> {
        if n == 0 {
            return None;
        }
        // The rank of the percentile, then the bucket that holds it, read at its top, no
        // higher than the largest wait seen.
        let rank = ((p * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0u64;
        for (i, c) in t.hist.iter().enumerate() {
            seen += u64::from(*c);
            if seen >= rank {
                let top = bucket_top(i);
                return Some(top.min(t.wait_max_ms.unwrap_or(0) as f64));
            }
        }
        t.wait_max_ms.map(|m| m as f64)
    };
    Figures {
        covered_ms,
        started: n,
        ended: t.ended,
        freezes: t.freezes,
        started_per_sec: rate(n),
        ended_per_sec: rate(t.ended),
        wait_mean_ms: (n > 0).then(|| t.wait_sum_ms as f64 / n as f64),
        wait_p50_ms: pct(0.5),
        wait_p90_ms: pct(0.9),
        wait_p99_ms: pct(0.99),
        wait_max_ms: t.wait_max_ms,
        queue_mean: if covered_ms > 0 {
            t.queue_area as f64 / covered_ms as f64
        } else {
            f64::from(queue_now)
        },
        queue_max: t.queue_max.max(queue_now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotone_and_tight() {
        let mut last = 0;
        for ms in [
            0u64,
            1,
            2,
            3,
            10,
            100,
            999,
            1000,
            60_000,
            86_400_000,
            u64::MAX,
        ] {
            let b = bucket(ms);
            assert!(b >= last, "{ms}");
            last = b;
            if ms > 0 && b < BUCKETS - 1 {
                assert!(
                    (ms as f64) < bucket_top(b) && bucket_top(b) <= ms as f64 * 1.19 + 1.0,
                    "{ms}"
                );
            }
        }
    }

    #[test]
    fn rates_waits_and_percentiles_over_the_window_and_since_start() {
        // A 60 s window (1 s slots).
        let mut s = StartStats::new(60_000, 0);
        // 100 jobs in the first 10 s, waiting 1..=100 ms.
        for i in 0..100u64 {
            s.started(i as i64 * 100, i + 1);
        }
        s.ended(5_000);
        s.froze(6_000);
        let f = s.recent(10_000);
        assert_eq!((f.started, f.ended, f.freezes), (100, 1, 1));
        assert!((f.started_per_sec - 10.0).abs() < 1e-9, "{f:?}");
        assert_eq!(f.wait_mean_ms, Some(50.5));
        assert_eq!(f.wait_max_ms, Some(100));
        let p50 = f.wait_p50_ms.unwrap();
        assert!((50.0..=60.0).contains(&p50), "{f:?}");
        let p99 = f.wait_p99_ms.unwrap();
        assert!((99.0..=100.0).contains(&p99), "{f:?}");
        // 100 s later the window holds one new start; the total keeps all.
        s.started(110_000, 5_000);
        let r = s.recent(110_000);
        assert_eq!(
            (r.started, r.wait_max_ms, r.covered_ms),
            (1, Some(5_000), 60_000)
        );
        assert!((r.started_per_sec - 1.0 / 60.0).abs() < 1e-9);
        let t = s.total(110_000);
        assert_eq!(
            (t.started, t.ended, t.freezes, t.covered_ms),
            (101, 1, 1, 110_000)
        );
        assert!(s.recent(110_000).wait_p50_ms.unwrap() <= 5_000.0);
    }

    #[test]
    fn queue_length_is_a_time_weighted_mean() {
        let mut s = StartStats::new(60_000, 0);
        s.queue(0, 4); // 4 waiting for 10 s
        s.queue(10_000, 0); // then none for 10 s
        let f = s.recent(20_000);
        assert!((f.queue_mean - 2.0).abs() < 1e-9, "{f:?}");
        assert_eq!(f.queue_max, 4);
        assert_eq!(s.queue_len(), 0);
        // Long after, the window forgets the burst; the total remembers it.
        let f = s.recent(200_000);
        assert_eq!((f.queue_mean, f.queue_max), (0.0, 0));
        assert!((s.total(200_000).queue_mean - 0.2).abs() < 1e-9);
        // Nothing started: no wait figures.
        assert_eq!(StartStats::new(60_000, 0).recent(1).wait_p50_ms, None);
    }
}
