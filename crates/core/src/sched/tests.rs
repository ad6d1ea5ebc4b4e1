use super::*;
use crate::synthetic;
use crate::time_limit::TimeLimit;

fn req(ncpus: usize, priority: u8, at: i64) -> Request {
    Request {
        ncpus,
        ngpus: 0,
        pinned: GpuSet::new(),
        priority,
        placement: Placement::Any,
        exclusive: false,
        submitted_ms: at,
        time_limit: None,
    }
}

fn job(key: JobKey, r: Request, phase: Phase, cpus: &str) -> JobView {
    JobView {
        key,
        req: r,
        phase,
        cpus: CpuSet::parse_list(cpus).unwrap(),
        gpus: GpuSet::new(),
    }
}

fn policy(vcpus: usize) -> QueuePolicy {
    QueuePolicy {
        vcpus,
        backfill: true,
        hard_preemption: true,
        preempt_min_priority: 1,
        queue_ttl_ms: None,
        order: QueueOrder::Submission,
    }
}

fn cs(s: &str) -> CpuSet {
    CpuSet::parse_list(s).unwrap()
}

struct Case {
    what: &'static str,
    policy: QueuePolicy,
    jobs: Vec<JobView>,
    now: i64,
    want: Vec<Action>,
}

#[test]
fn transitions() {
    let q = Phase::Queued;
    let p = Phase::Primary;
    let b = Phase::Backfill;
    let cases = vec![
        Case {
            what: "queued job starts as primary on free cpus",
            policy: policy(2),
            jobs: vec![job(1, req(1, 10, 0), q, "")],
            now: 0,
            want: vec![Action::StartPrimary {
                key: 1,
                cpus: cs("0"),
            }],
        },
        Case {
            what: "two jobs, FIFO, disjoint cpus",
            policy: policy(2),
            jobs: vec![job(1, req(1, 10, 0), q, ""), job(2, req(1, 10, 1), q, "")],
            now: 0,
            want: vec![
                Action::StartPrimary {
                    key: 1,
                    cpus: cs("0"),
                },
                Action::StartPrimary {
                    key: 2,
                    cpus: cs("1"),
                },
            ],
        },
        Case {
            what: "no free cpus and no spare slots: waits, and blocks the job behind it",
            policy: policy(2),
            jobs: vec![
                job(1, req(2, 10, 0), p, "0-1"),
                job(2, req(2, 10, 1), q, ""),
                job(3, req(1, 10, 2), q, ""),
            ],
            now: 0,
            want: vec![],
        },
        Case {
            what: "spare slots: a job that cannot get exclusive cpus backfills",
            policy: policy(4),
            jobs: vec![
                job(1, req(2, 10, 0), p, "0-1"),
                job(2, req(1, 10, 1), q, ""),
            ],
            now: 0,
            want: vec![Action::StartBackfill {
                key: 2,
                cpus: cs("0"),
            }],
        },
        Case {
            what: "primary-only jobs do not backfill",
            policy: policy(4),
            jobs: vec![
                job(1, req(2, 10, 0), p, "0-1"),
                job(
                    2,
                    Request {
                        placement: Placement::PrimaryOnly,
                        ..req(1, 10, 1)
                    },
                    q,
                    "",
                ),
            ],
            now: 0,
            want: vec![],
        },
        Case {
            what: "backfill-only jobs backfill even when cpus are free",
            policy: policy(4),
            jobs: vec![
                job(1, req(1, 10, 0), p, "0"),
                job(
                    2,
                    Request {
                        placement: Placement::BackfillOnly,
                        ..req(1, 10, 1)
                    },
                    q,
                    "",
                ),
            ],
            now: 0,
            want: vec![Action::StartBackfill {
                key: 2,
                cpus: cs("0"),
            }],
        },
        Case {
            what: "a backfiller is promoted when cpus free up",
            policy: policy(4),
            jobs: vec![job(2, req(1, 10, 1), b, "0")],
            now: 0,
            want: vec![Action::Promote {
                key: 2,
                cpus: cs("0"),
            }],
        },
        Case {
            what: "higher priority preempts the youngest lowest-priority primary, which backfills",
            policy: policy(4),
            jobs: vec![
                job(1, req(1, 5, 0), p, "0"),
                job(2, req(1, 5, 1), p, "1"),
                job(3, req(1, 16, 2), q, ""),
            ],
            now: 0,
            want: vec![
                Action::Preempt {
                    key: 2,
                    by: 3,
                    to_backfill: true,
                },
                Action::StartPrimary {
                    key: 3,
                    cpus: cs("1"),
                },
            ],
        },
        Case {
            what: "without spare slots the victim is frozen",
            policy: policy(2),
            jobs: vec![
                job(1, req(1, 5, 0), p, "0"),
                job(2, req(1, 8, 1), p, "1"),
                job(3, req(1, 16, 2), q, ""),
            ],
            now: 0,
            want: vec![
                Action::Preempt {
                    key: 1,
                    by: 3,
                    to_backfill: false,
                },
                Action::StartPrimary {
                    key: 3,
                    cpus: cs("0"),
                },
            ],
        },
        Case {
            what: "equal priority does not preempt",
            policy: QueuePolicy {
                backfill: false,
                ..policy(2)
            },
            jobs: vec![
                job(1, req(2, 10, 0), p, "0-1"),
                job(2, req(1, 10, 1), q, ""),
            ],
            now: 0,
            want: vec![],
        },
        Case {
            what: "below the preemption threshold a higher priority waits",
            policy: QueuePolicy {
                backfill: false,
                preempt_min_priority: 13,
                ..policy(2)
            },
            jobs: vec![
                job(1, req(2, 10, 0), p, "0-1"),
                job(2, req(1, 12, 1), q, ""),
            ],
            now: 0,
            want: vec![],
        },
        Case {
            what: "at the preemption threshold it preempts",
            policy: QueuePolicy {
                backfill: false,
                preempt_min_priority: 13,
                ..policy(2)
            },
            jobs: vec![
                job(1, req(2, 10, 0), p, "0-1"),
                job(2, req(1, 13, 1), q, ""),
            ],
            now: 0,
            want: vec![
                Action::Preempt {
                    key: 1,
                    by: 2,
                    to_backfill: false,
                },
                Action::StartPrimary {
                    key: 2,
                    cpus: cs("0"),
                },
            ],
        },
        Case {
            what: "preemption off: waits",
            policy: QueuePolicy {
                hard_preemption: false,
                backfill: false,
                ..policy(2)
            },
            jobs: vec![job(1, req(2, 1, 0), p, "0-1"), job(2, req(1, 16, 1), q, "")],
            now: 0,
            want: vec![],
        },
        Case {
            what: "a preempted job resumes when cpus free up",
            policy: policy(2),
            jobs: vec![job(1, req(1, 5, 0), Phase::Preempted, "")],
            now: 0,
            want: vec![Action::Resume {
                key: 1,
                cpus: cs("0"),
            }],
        },
        Case {
            // Found by the chaos test: it had no way back and stayed frozen for good.
            what: "a backfill-only job suspended and resumed is thawed as a backfiller",
            policy: policy(2),
            jobs: vec![job(
                1,
                Request {
                    placement: Placement::BackfillOnly,
                    ..req(2, 10, 0)
                },
                Phase::Preempted,
                "",
            )],
            now: 0,
            want: vec![Action::ResumeBackfill {
                key: 1,
                cpus: cs("0-1"),
            }],
        },
        Case {
            what: "a preempted job waits while every slot is used",
            policy: policy(2),
            jobs: vec![
                job(1, req(1, 12, 0), p, "0"),
                job(2, req(1, 12, 1), p, "1"),
                job(3, req(1, 5, 2), Phase::Preempted, ""),
            ],
            now: 0,
            want: vec![],
        },
        Case {
            what: "priority order beats arrival order",
            policy: policy(1),
            jobs: vec![job(1, req(1, 10, 0), q, ""), job(2, req(1, 12, 5), q, "")],
            now: 0,
            want: vec![Action::StartPrimary {
                key: 2,
                cpus: cs("0"),
            }],
        },
        Case {
            what: "exclusive job takes the whole node, displacing lower priorities",
            policy: QueuePolicy {
                backfill: false,
                ..policy(2)
            },
            jobs: vec![
                job(1, req(1, 5, 0), p, "0"),
                job(
                    3,
                    Request {
                        exclusive: true,
                        ..req(1, 12, 1)
                    },
                    q,
                    "",
                ),
            ],
            now: 0,
            want: vec![
                Action::Preempt {
                    key: 1,
                    by: 3,
                    to_backfill: false,
                },
                Action::StartPrimary {
                    key: 3,
                    cpus: cs("0-1"),
                },
            ],
        },
        Case {
            what: "nothing starts beside an exclusive job, not even a backfiller",
            policy: policy(4),
            jobs: vec![
                job(
                    1,
                    Request {
                        exclusive: true,
                        ..req(1, 10, 0)
                    },
                    p,
                    "0-1",
                ),
                job(2, req(1, 10, 1), q, ""),
            ],
            now: 0,
            want: vec![],
        },
        Case {
            what: "queue ttl expires old queued jobs only",
            policy: QueuePolicy {
                queue_ttl_ms: Some(1000),
                ..policy(2)
            },
            jobs: vec![
                job(1, req(2, 10, 0), p, "0-1"),
                job(2, req(1, 10, 0), q, ""),
                job(3, req(1, 10, 1500), q, ""),
            ],
            now: 2000,
            want: vec![Action::Expire { key: 2 }],
        },
        Case {
            what: "a job past the queue ttl whose cpus are free starts instead of expiring",
            policy: QueuePolicy {
                queue_ttl_ms: Some(1000),
                ..policy(2)
            },
            jobs: vec![job(1, req(1, 10, 0), q, ""), job(2, req(2, 10, 0), q, "")],
            now: 2000,
            want: vec![
                Action::StartPrimary {
                    key: 1,
                    cpus: cs("0"),
                },
                Action::Expire { key: 2 },
            ],
        },
        Case {
            what: "suspended jobs are left alone and hold no cpus",
            policy: policy(2),
            jobs: vec![
                job(1, req(2, 10, 0), Phase::Suspended, ""),
                job(2, req(2, 10, 1), q, ""),
            ],
            now: 0,
            want: vec![Action::StartPrimary {
                key: 2,
                cpus: cs("0-1"),
            }],
        },
    ];
    let topo = synthetic::parse("core:2 pu:1").unwrap();
    let alloc = Allocator::new(&topo);
    let mut scratch = Scratch::new();
    for c in cases {
        let got = plan(
            &c.policy,
            &alloc,
            &mut scratch,
            &topo.online(),
            &c.jobs,
            c.now,
        );
        assert_eq!(got, c.want, "{}", c.what);
    }
}

#[test]
fn eight_jobs_on_two_cpus_with_four_slots_run_two_by_two() {
    // The turnaround scenario: two primaries, two backfillers, the rest queued.
    let topo = synthetic::parse("core:2 pu:1").unwrap();
    let alloc = Allocator::new(&topo);
    let mut scratch = Scratch::new();
    let mut jobs: Vec<JobView> = (1..=8)
        .map(|k| job(k, req(1, 10, k), Phase::Queued, ""))
        .collect();
    let acts = plan(&policy(4), &alloc, &mut scratch, &topo.online(), &jobs, 0);
    let starts: Vec<_> = acts
        .iter()
        .map(|a| match a {
            Action::StartPrimary { key, .. } => (*key, "primary"),
            Action::StartBackfill { key, .. } => (*key, "backfill"),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        starts,
        vec![
            (1, "primary"),
            (2, "primary"),
            (3, "backfill"),
            (4, "backfill")
        ]
    );
    // The two backfillers share a CPU each with one primary, not both with the first.
    let cpus_of_start = |acts: &[Action], k: JobKey| {
        acts.iter()
            .find_map(|a| match *a {
                Action::StartPrimary { key, cpus } | Action::StartBackfill { key, cpus }
                    if key == k =>
                {
                    Some(cpus)
                }
                _ => None,
            })
            .unwrap()
    };
    assert_ne!(cpus_of_start(&acts, 3), cpus_of_start(&acts, 4), "{acts:?}");
    // Job 1 ends: the oldest backfiller is promoted onto its CPU; job 5 backfills.
    for a in &acts {
        if let Action::StartPrimary { key, cpus } | Action::StartBackfill { key, cpus } = *a {
            let j = jobs.iter_mut().find(|j| j.key == key).unwrap();
            j.cpus = cpus;
            j.phase = if matches!(a, Action::StartPrimary { .. }) {
                Phase::Primary
            } else {
                Phase::Backfill
            };
        }
    }
    jobs.retain(|j| j.key != 1);
    let acts = plan(&policy(4), &alloc, &mut scratch, &topo.online(), &jobs, 0);
    assert!(
        matches!(acts[0], Action::Promote { key: 3, .. }),
        "{acts:?}"
    );
    assert!(
        matches!(acts[1], Action::StartBackfill { key: 5, .. }),
        "{acts:?}"
    );
    assert_eq!(acts.len(), 2);
    // Job 5 joins the CPU that lost its backfiller (job 3's, promoted), not job 4's.
    let Action::Promote { cpus: promoted, .. } = acts[0] else {
        unreachable!()
    };
    let four = jobs.iter().find(|j| j.key == 4).unwrap().cpus;
    assert_eq!(cpus_of_start(&acts, 5), promoted, "{acts:?}");
    assert_ne!(cpus_of_start(&acts, 5), four, "{acts:?}");
}

#[test]
fn wait_reasons_name_the_head_of_the_queue() {
    let jobs = vec![
        job(1, req(1, 10, 5), Phase::Queued, ""),
        job(2, req(1, 12, 9), Phase::Queued, ""),
    ];
    assert_eq!(
        wait_reasons(&jobs, QueueOrder::Submission, 0),
        vec![(2, WaitReason::Cpus), (1, WaitReason::Behind(2))]
    );
}

/// The turnaround scenario's mixed batch (lengths 3 1 4 1 2 4 2 3, submitted in that order)
/// with time limits: shortest-first starts the two shortest, backfills the next two, and keeps
/// the rest in order of length; submission order starts the first four as they came.
#[test]
fn shortest_time_limit_first_within_a_priority() {
    let topo = synthetic::parse("core:2 pu:1").unwrap();
    let alloc = Allocator::new(&topo);
    let lengths = [3u64, 1, 4, 1, 2, 4, 2, 3];
    let jobs: Vec<JobView> = (1..=8)
        .map(|k| {
            let r = Request {
                time_limit: TimeLimit::from_secs(lengths[k as usize - 1] * 60),
                ..req(1, 10, k)
            };
            job(k, r, Phase::Queued, "")
        })
        .collect();
    let started = |order| {
        let pol = QueuePolicy { order, ..policy(4) };
        plan(
            &pol,
            &alloc,
            &mut Scratch::new(),
            &topo.online(),
            &jobs,
            100,
        )
        .iter()
        .map(|a| match a {
            Action::StartPrimary { key, .. } => (*key, "primary"),
            Action::StartBackfill { key, .. } => (*key, "backfill"),
            other => panic!("unexpected {other:?}"),
        })
        .collect::<Vec<_>>()
    };
    let sjf = QueueOrder::ShortestFirst {
        max_wait_ms: 3_600_000,
    };
    assert_eq!(
        started(sjf),
        vec![
            (2, "primary"),
            (4, "primary"),
            (5, "backfill"),
            (7, "backfill")
        ]
    );
    assert_eq!(
        started(QueueOrder::Submission),
        vec![
            (1, "primary"),
            (2, "primary"),
            (3, "backfill"),
            (4, "backfill")
        ]
    );
    // Why the rest wait: behind the shortest waiting job under shortest-first.
    let mut after = jobs.clone();
    for k in [2, 4, 5, 7] {
        after.iter_mut().find(|j| j.key == k).unwrap().phase = Phase::Primary;
    }
    assert_eq!(wait_reasons(&after, sjf, 100)[0], (1, WaitReason::Cpus));
}

/// A long job overtaken by shorter ones goes first once it has waited `max_wait_ms`; a job
/// without a limit comes after every job with one until then.
#[test]
fn shortest_first_ages_and_puts_unlimited_jobs_last() {
    let topo = synthetic::parse("core:1 pu:1").unwrap();
    let alloc = Allocator::new(&topo);
    let long = Request {
        time_limit: TimeLimit::from_secs(7200),
        ..req(1, 10, 0)
    };
    let unlimited = req(1, 10, 500);
    let short = Request {
        time_limit: TimeLimit::from_secs(60),
        ..req(1, 10, 1000)
    };
    let jobs = vec![
        job(1, long, Phase::Queued, ""),
        job(2, unlimited, Phase::Queued, ""),
        job(3, short, Phase::Queued, ""),
    ];
    let pol = QueuePolicy {
        order: QueueOrder::ShortestFirst {
            max_wait_ms: 10_000,
        },
        backfill: false,
        ..policy(1)
    };
    let first = |now| {
        plan(
            &pol,
            &alloc,
            &mut Scratch::new(),
            &topo.online(),
            &jobs,
            now,
        )
        .first()
        .copied()
    };
    let start = |key| Some(Action::StartPrimary { key, cpus: cs("0") });
    assert_eq!(first(5_000), start(3), "the shortest limit first");
    assert_eq!(
        first(10_000),
        start(1),
        "the long job waited 10 s: it goes first"
    );
    assert_eq!(first(10_600), start(1), "both waited out: submission order");
    let without_short: Vec<_> = jobs.iter().filter(|j| j.key != 3).copied().collect();
    let first_of = |now| {
        plan(
            &pol,
            &alloc,
            &mut Scratch::new(),
            &topo.online(),
            &without_short,
            now,
        )
        .first()
        .copied()
    };
    assert_eq!(first_of(5_000), start(1), "a limit goes ahead of none");
}
