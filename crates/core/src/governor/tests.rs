//! Tables of the governor's rule: who grows into the shared memory is throttled, then frozen;
//! a job's stall inside its own limit and pressure from outside pjw's jobs move nobody.

use super::*;

const MIB: u64 = 1 << 20;

#[test]
fn growth_is_half_the_old_average_and_half_the_new_rate() {
    // (previous growth, previous need, need, seconds apart, expected)
    let table = [
        (0.0, 100, 300, 2.0, 50.0),
        (100.0, 100, 300, 2.0, 100.0),
        (100.0, 300, 100, 1.0, -50.0),
        (80.0, 100, 900, 0.0, 80.0),
        (80.0, 100, 900, -1.0, 80.0),
    ];
    for (g, before, now, dt, want) in table {
        assert_eq!(
            smoothed_growth(g, before, now, dt),
            want,
            "{g} {before} {now} {dt}"
        );
    }
}

#[test]
fn footprint_is_forgotten_after_five_cooldowns_and_is_the_need_not_a_prediction() {
    assert!(!footprint_expired(0, 2000));
    assert!(!footprint_expired(10_000, 2000));
    assert!(footprint_expired(10_001, 2000));
    assert_eq!(frozen_footprint(1000, 0), 1000);
    assert_eq!(frozen_footprint(1000, 4000), 4000);
}

fn cfg() -> GovernorConfig {
    GovernorConfig {
        limit: 1024 * MIB,
        prediction_secs: 2.0,
        frozen_max_ms: None,
        ..GovernorConfig::default()
    }
}

fn throttling() -> GovernorConfig {
    GovernorConfig {
        throttle: true,
        ..cfg()
    }
}

/// A running job: its need (= usage) in MiB and growth in MiB/s.
fn j(key: i64, need_mib: u64, growth_mib_s: f64) -> MemJob {
    MemJob {
        key,
        priority: 10,
        usage: need_mib * MIB,
        need: need_mib * MIB,
        growth: growth_mib_s * MIB as f64,
        own_limit: None,
        stall: Some(Stall::default()),
        frozen: false,
        frozen_since_ms: None,
        throttled: false,
        footprint: 0,
    }
}

/// A job frozen at `since` ms with `need_mib` MiB.
fn frozen(key: i64, need_mib: u64, since: i64) -> MemJob {
    MemJob {
        frozen: true,
        frozen_since_ms: Some(since),
        footprint: need_mib * MIB,
        growth: 0.0,
        ..j(key, need_mib, 0.0)
    }
}

fn limited(job: MemJob, limit_mib: u64) -> MemJob {
    MemJob {
        own_limit: Some(limit_mib * MIB),
        ..job
    }
}

fn stalling(job: MemJob, some: f64) -> MemJob {
    MemJob {
        stall: Some(Stall { some, full: 0.0 }),
        ..job
    }
}

/// With page cache: `usage_mib` charged, its need unchanged.
fn cached(job: MemJob, usage_mib: u64) -> MemJob {
    MemJob {
        usage: usage_mib * MIB,
        ..job
    }
}

fn throttled(job: MemJob) -> MemJob {
    MemJob {
        throttled: true,
        ..job
    }
}

fn snap(jobs: Vec<MemJob>) -> MemSnapshot {
    MemSnapshot {
        now_ms: 100_000,
        node: Some(Stall::default()),
        partition: Some(Stall::default()),
        available: None,
        swap_in_rate: 0.0,
        last_thaw_ms: None,
        thawing: 0,
        jobs,
    }
}

#[test]
fn decisions() {
    use MemAction::*;
    let thrasher = stalling(limited(j(1, 64, 0.0), 64), 85.0);
    let cases: Vec<(&str, GovernorConfig, MemSnapshot, Vec<MemAction>)> = vec![
        (
            "room to spare: nothing",
            cfg(),
            snap(vec![j(1, 200, 0.0), j(2, 200, 0.0)]),
            vec![],
        ),
        (
            "growth predicted over the line: the grower is frozen, the idle job runs on",
            cfg(),
            snap(vec![j(1, 300, 0.0), j(2, 500, 100.0)]),
            vec![Freeze { key: 2 }],
        ),
        (
            "not by age: the older job is the grower, so it is the one frozen",
            cfg(),
            snap(vec![j(1, 500, 100.0), j(2, 300, 0.0)]),
            vec![Freeze { key: 1 }],
        ),
        (
            "with throttling: the grower is throttled at its usage first",
            throttling(),
            snap(vec![j(1, 300, 0.0), j(2, 500, 100.0)]),
            vec![Throttle {
                key: 2,
                high: 500 * MIB,
            }],
        ),
        (
            "a throttled grower that keeps growing under pressure is frozen",
            throttling(),
            snap(vec![j(1, 300, 0.0), throttled(j(2, 500, 100.0))]),
            vec![Freeze { key: 2 }],
        ),
        (
            "four growers: the fastest first, until the rest fits",
            cfg(),
            snap(vec![
                j(1, 150, 100.0),
                j(2, 150, 130.0),
                j(3, 150, 120.0),
                j(4, 150, 110.0),
            ]),
            vec![Freeze { key: 2 }, Freeze { key: 3 }],
        ),
        (
            "the last running job is never frozen",
            cfg(),
            snap(vec![j(1, 1000, 50.0), frozen(2, 100, 0)]),
            vec![],
        ),
        (
            "a job thrashing inside its own limit moves nobody, and is no grower",
            cfg(),
            snap(vec![thrasher, j(2, 1, 0.0)]),
            vec![],
        ),
        (
            "its stalls next to a big idle job whose cache fills the partition: nobody is frozen",
            cfg(),
            snap(vec![
                thrasher,
                MemJob {
                    usage: 880 * MIB,
                    ..j(2, 700, 0.0)
                },
            ]),
            vec![],
        ),
        (
            "a job at its own limit grows only into its own swap: not a grower",
            cfg(),
            snap(vec![limited(j(1, 480, 300.0), 512), j(2, 400, 0.0)]),
            vec![],
        ),
        (
            // The acceptance run's `-m 2800M` stress-ng beside a 150M job on 3G, scaled: it
            // was frozen for growing into what it had been promised.
            "a job growing inside its own --mem past high next to a small job: nobody is frozen",
            cfg(),
            snap(vec![limited(j(1, 700, 300.0), 950), j(2, 50, 0.0)]),
            vec![],
        ),
        (
            // Its -m 1800M job holding 1.7G of 3G beside a grower whose growth no sample had
            // shown yet: the job inside its reservation was frozen as the largest.
            "nothing seen growing: the largest job without a reservation, not the one inside its own",
            cfg(),
            snap(vec![limited(j(1, 560, 0.0), 600), j(2, 450, 0.0)]),
            vec![Freeze { key: 2 }],
        ),
        (
            "nothing growing and the job without a reservation within what the reservations leave: nobody",
            cfg(),
            snap(vec![limited(j(1, 560, 0.0), 600), j(2, 400, 0.0)]),
            vec![],
        ),
        (
            "a grower with a reservation beside one without: the one without is frozen",
            cfg(),
            snap(vec![limited(j(1, 500, 200.0), 700), j(2, 300, 50.0)]),
            vec![Freeze { key: 2 }],
        ),
        (
            "pressure from outside pjw's jobs moves nobody",
            cfg(),
            MemSnapshot {
                node: Some(Stall {
                    some: 70.0,
                    full: 30.0,
                }),
                available: Some(10 * MIB),
                ..snap(vec![j(1, 100, 0.0), j(2, 100, 0.0)])
            },
            vec![],
        ),
        (
            "a job below its limit stalling in a nearly full partition: the grower is frozen",
            cfg(),
            snap(vec![
                cached(stalling(j(1, 300, 0.0), 60.0), 400),
                cached(j(2, 300, 20.0), 500),
                j(3, 40, 0.0),
            ]),
            vec![Freeze { key: 2 }],
        ),
        (
            "the same with nothing growing: the job holding most above its share, not the small one",
            cfg(),
            snap(vec![
                cached(stalling(j(1, 200, 0.0), 60.0), 300),
                cached(j(2, 500, 0.0), 600),
                j(3, 40, 0.0),
            ]),
            vec![Freeze { key: 2 }],
        ),
        (
            "stalls while a thawed job swaps its pages back in are expected",
            cfg(),
            MemSnapshot {
                thawing: 1,
                ..snap(vec![
                    cached(stalling(j(1, 300, 0.0), 60.0), 400),
                    cached(j(2, 400, 0.0), 600),
                ])
            },
            vec![],
        ),
        (
            "fast swap-in in a nearly full partition: one step, on the job above its share",
            cfg(),
            MemSnapshot {
                swap_in_rate: 50_000.0,
                ..snap(vec![cached(j(1, 300, 0.0), 400), cached(j(2, 600, 0.0), 620)])
            },
            vec![Freeze { key: 2 }],
        ),
        (
            "fast swap-in with room in the partition is not pjw's to answer",
            cfg(),
            MemSnapshot {
                swap_in_rate: 50_000.0,
                ..snap(vec![j(1, 100, 0.0), j(2, 100, 0.0)])
            },
            vec![],
        ),
        (
            "no pressure: a throttled job with room is let go",
            throttling(),
            snap(vec![throttled(j(2, 300, 0.0)), j(1, 100, 0.0)]),
            vec![Unthrottle { key: 2 }],
        ),
        (
            "no room to let it go, and it stalls against its throttle: frozen",
            throttling(),
            snap(vec![stalling(throttled(j(2, 500, 0.0)), 70.0), j(1, 300, 0.0)]),
            vec![Freeze { key: 2 }],
        ),
        (
            "no room to let it go, but quiet: it stays throttled",
            throttling(),
            snap(vec![throttled(j(2, 500, 0.0)), j(1, 300, 0.0)]),
            vec![],
        ),
        (
            "room again: the longest frozen of the highest priority is thawed",
            cfg(),
            snap(vec![j(1, 100, 0.0), frozen(2, 300, 5_000), frozen(3, 300, 1_000)]),
            vec![Thaw { key: 3 }],
        ),
        (
            "not enough room for what it needs: it stays frozen",
            cfg(),
            snap(vec![j(1, 400, 0.0), frozen(2, 500, 0)]),
            vec![],
        ),
        (
            "a job stalling inside its own limit does not hold a thaw back",
            cfg(),
            snap(vec![thrasher, frozen(2, 300, 0)]),
            vec![Thaw { key: 2 }],
        ),
        (
            "a job stalling on shared memory holds a thaw back",
            cfg(),
            snap(vec![stalling(j(1, 100, 0.0), 30.0), frozen(2, 300, 0)]),
            vec![],
        ),
        (
            "nothing running: the frozen job is thawed whatever its size",
            cfg(),
            snap(vec![frozen(2, 2000, 0)]),
            vec![Thaw { key: 2 }],
        ),
        (
            "within the cooldown of the last thaw: wait",
            cfg(),
            MemSnapshot {
                last_thaw_ms: Some(99_000),
                ..snap(vec![frozen(2, 100, 0)])
            },
            vec![],
        ),
        (
            "a just-thawed job counts with its footprint, so the next one waits",
            cfg(),
            snap(vec![
                MemJob {
                    footprint: 600 * MIB,
                    ..j(1, 50, 0.0)
                },
                frozen(2, 300, 0),
            ]),
            vec![],
        ),
        (
            "two swap slots: two thaws",
            GovernorConfig {
                swap_slots: 2,
                ..cfg()
            },
            snap(vec![frozen(2, 100, 0), frozen(3, 100, 1)]),
            vec![Thaw { key: 2 }, Thaw { key: 3 }],
        ),
        (
            "frozen past frozen_max, no room: the last step",
            GovernorConfig {
                frozen_max_ms: Some(60_000),
                ..cfg()
            },
            snap(vec![j(1, 800, 0.0), frozen(2, 300, 50_000), frozen(3, 300, 30_000)]),
            vec![LastStep { key: 3 }],
        ),
        (
            "frozen past frozen_max but thawed this tick: no last step",
            GovernorConfig {
                frozen_max_ms: Some(60_000),
                ..cfg()
            },
            snap(vec![j(1, 100, 0.0), frozen(3, 300, 30_000)]),
            vec![Thaw { key: 3 }],
        ),
    ];
    for (what, c, s, want) in cases {
        assert_eq!(govern(&c, &s).actions, want, "{what}");
    }
}

#[test]
fn assessment_says_whose_pressure_it_is() {
    let thrasher = stalling(limited(j(1, 64, 0.0), 64), 85.0);
    let node = |some| Some(Stall { some, full: 0.0 });
    // (what, snapshot, shared, outside, self-stalled)
    type Case = (
        &'static str,
        MemSnapshot,
        Option<Shared>,
        Option<Outside>,
        Vec<i64>,
    );
    let cases: Vec<Case> = vec![
        ("calm", snap(vec![j(1, 100, 0.0)]), None, None, vec![]),
        (
            "a thrasher in its own limit: its own business, the node's PSI is the partition's",
            MemSnapshot {
                node: node(60.0),
                partition: node(58.0),
                ..snap(vec![thrasher, j(2, 1, 0.0)])
            },
            None,
            None,
            vec![1],
        ),
        (
            "the node stalls beyond the partition: outside",
            MemSnapshot {
                node: node(60.0),
                partition: node(5.0),
                ..snap(vec![j(1, 100, 0.0)])
            },
            None,
            Some(Outside::Stall {
                stall: Stall {
                    some: 55.0,
                    full: 0.0,
                },
                attributed: true,
            }),
            vec![],
        ),
        (
            "no partition PSI (cgroup v1): the node's, not attributed",
            MemSnapshot {
                node: node(60.0),
                partition: None,
                ..snap(vec![j(1, 100, 0.0)])
            },
            None,
            Some(Outside::Stall {
                stall: Stall {
                    some: 60.0,
                    full: 0.0,
                },
                attributed: false,
            }),
            vec![],
        ),
        (
            "little available while the partition has room: outside",
            MemSnapshot {
                available: Some(10 * MIB),
                ..snap(vec![j(1, 100, 0.0)])
            },
            None,
            Some(Outside::LowAvailable {
                available: 10 * MIB,
            }),
            vec![],
        ),
        (
            "little available with the partition full: not called outside",
            MemSnapshot {
                available: Some(10 * MIB),
                ..snap(vec![j(1, 500, 0.0), j(2, 500, 0.0)])
            },
            Some(Shared::Demand),
            None,
            vec![],
        ),
        (
            "a stall below its own limit in a nearly full partition: shared",
            snap(vec![stalling(j(1, 500, 0.0), 50.0), j(2, 450, 0.0)]),
            Some(Shared::Demand),
            None,
            vec![],
        ),
        (
            "the same under `high` by demand: shared because of the stall",
            snap(vec![
                MemJob {
                    usage: 500 * MIB,
                    need: 300 * MIB,
                    ..stalling(j(1, 0, 0.0), 50.0)
                },
                MemJob {
                    usage: 450 * MIB,
                    need: 300 * MIB,
                    ..j(2, 0, 0.0)
                },
            ]),
            Some(Shared::Stalls),
            None,
            vec![],
        ),
    ];
    for (what, s, shared, outside, selfs) in cases {
        let a = assess(&cfg(), &s);
        assert_eq!(a.shared, shared, "{what}");
        assert_eq!(a.outside, outside, "{what}");
        assert_eq!(a.self_stalled, selfs, "{what}");
    }
}

#[test]
fn demand_is_need_plus_predicted_growth_at_most_the_own_limit() {
    let c = cfg();
    let a = assess(&c, &snap(vec![j(1, 100, 10.0)]));
    assert_eq!(a.demand, 120 * MIB, "100 MiB + 10 MiB/s × 2 s");
    let a = assess(&c, &snap(vec![limited(j(1, 50, 100.0), 100)]));
    assert_eq!(a.demand, 100 * MIB, "capped at its 100 MiB limit");
    let a = assess(&c, &snap(vec![j(1, 100, 0.5)]));
    assert_eq!(a.demand, 100 * MIB, "growth under 1 MiB/s is noise");
    assert!(a.growers.is_empty());
    let a = assess(
        &c,
        &snap(vec![j(1, 10, 5.0), j(2, 10, 9.0), frozen(3, 70, 0)]),
    );
    assert_eq!(a.growers, vec![2, 1], "fastest first");
    assert_eq!(a.held, 70 * MIB);
}

#[test]
fn admission_while_jobs_are_frozen_or_memory_is_short() {
    let c = cfg();
    let calm = assess(&c, &snap(vec![j(1, 100, 0.0)]));
    let with_frozen = assess(&c, &snap(vec![j(1, 300, 0.0), frozen(2, 200, 0)]));
    let short = assess(&c, &snap(vec![j(1, 500, 0.0), j(2, 450, 0.0)]));
    // (what, assessment, frozen jobs, --mem, expected)
    let cases = [
        ("calm: any job", &calm, 0, None, Admission::Start),
        (
            "calm: a big --mem too (the promises decide)",
            &calm,
            0,
            Some(4096 * MIB),
            Admission::Start,
        ),
        (
            "jobs frozen: one of unknown size waits",
            &with_frozen,
            1,
            None,
            Admission::Wait {
                left: ((0.9 * 1024.0 - 500.0) * MIB as f64) as u64,
            },
        ),
        (
            "jobs frozen: one that fits what is left starts",
            &with_frozen,
            1,
            Some(400 * MIB),
            Admission::Start,
        ),
        (
            "jobs frozen: one that does not fit waits",
            &with_frozen,
            1,
            Some(500 * MIB),
            Admission::Wait {
                left: ((0.9 * 1024.0 - 500.0) * MIB as f64) as u64,
            },
        ),
        (
            "shared pressure, nothing frozen yet: unknown size waits",
            &short,
            0,
            None,
            Admission::Wait { left: 0 },
        ),
    ];
    for (what, a, n, want, expect) in cases {
        assert_eq!(admits(&c, a, n, want), expect, "{what}");
    }
}
