//! Property tests of the thread-balancing policy: random machines, random job sets inside them,
//! random previous pins (some outside the set), random threads in their pass of grace and random
//! run times.

use std::collections::{BTreeMap, BTreeSet};

use pjw_core::thread_bind::{plan, ThreadSample};
use pjw_core::{synthetic, CpuSet, Tid};
use proptest::prelude::*;

const SEC: u64 = 1_000_000_000;

fn machine() -> impl Strategy<Value = String> {
    (1u32..=2, prop::option::of(1u32..=2), 1u32..=4, 1u32..=2).prop_map(
        |(p, numa, c, u)| match numa {
            Some(n) => format!("package:{p} numa:{n} core:{c} pu:{u}"),
            None => format!("package:{p} core:{c} pu:{u}"),
        },
    )
}

proptest! {
    #[test]
    fn pins_stay_inside_spread_evenly_and_skip_sleepers(
        desc in machine(),
        job_bits in prop_oneof![Just(u64::MAX), any::<u64>()],
        threads in prop::collection::vec((1u32..60, prop_oneof![Just(SEC), 0u64..=SEC], prop::option::of(0u32..20), any::<bool>()), 0..40),
        busy_percent in 1u32..=100,
    ) {
        let topo = synthetic::parse(&desc).unwrap();
        let online = topo.online();
        let mut job: CpuSet = online.iter().filter(|c| job_bits & (1 << (c % 64)) != 0).collect();
        if job.is_empty() {
            job = online;
        }
        let mut samples = Vec::new();
        let mut previous = BTreeMap::new();
        let mut grace = BTreeSet::new();
        let mut seen = BTreeSet::new();
        for (t, run_ns, prev, in_grace) in threads {
            if !seen.insert(t) {
                continue;
            }
            samples.push(ThreadSample { tid: Tid(t), run_ns });
            if let Some(cpu) = prev {
                previous.insert(Tid(t), cpu);
                if in_grace {
                    grace.insert(Tid(t));
                }
            }
        }
        let busy = |s: &ThreadSample| s.run_ns * 100 >= u64::from(busy_percent) * SEC;
        // A sleeper pinned before and not yet in its pass of grace keeps its pin this pass.
        let graced = |s: &ThreadSample| !busy(s) && previous.contains_key(&s.tid) && !grace.contains(&s.tid);
        let p = plan(&topo, &job, &previous, &grace, &samples, SEC, busy_percent);

        // Every pin is inside the set; busy threads are all pinned, and of the sleepers only
        // those starting their pass of grace (and listed as such).
        for s in &samples {
            match p.pins.get(&s.tid) {
                Some(cpu) => {
                    prop_assert!(busy(s) || graced(s), "sleeper {} pinned", s.tid);
                    prop_assert!(job.contains(*cpu), "pin {} outside {}", cpu, job);
                }
                None => prop_assert!(!busy(s) && !graced(s), "busy {} not pinned", s.tid),
            }
            prop_assert_eq!(p.grace.contains(&s.tid), graced(s));
        }
        // Per-CPU counts (over the whole set) differ by at most one.
        let mut count: BTreeMap<u32, usize> = job.iter().map(|c| (c, 0)).collect();
        for cpu in p.pins.values() {
            *count.get_mut(cpu).unwrap() += 1;
        }
        let lo = count.values().min().copied().unwrap_or(0);
        let hi = count.values().max().copied().unwrap_or(0);
        prop_assert!(hi - lo <= 1, "uneven counts {:?}", count);
        // Unpinned: exactly the sampled sleepers that were pinned before.
        for t in &p.unpin {
            prop_assert!(previous.contains_key(t));
            prop_assert!(!p.pins.contains_key(t));
        }
        let want_unpin = samples.iter().filter(|s| !busy(s) && grace.contains(&s.tid)).count();
        prop_assert_eq!(p.unpin.len(), want_unpin);
        // Stability: with nobody in a pass of grace (whose end changes the count), running
        // again with this plan as previous changes nothing.
        if p.grace.is_empty() {
            let again = plan(&topo, &job, &p.pins, &BTreeSet::new(), &samples, SEC, busy_percent);
            prop_assert_eq!(again.pins, p.pins);
        }
    }
}
