//! The node queue on a node with GPUs: 2 NUMA nodes of 4 CPUs (0-3, 4-7), GPUs 0 and 1 local to
//! node 0, GPUs 2 and 3 to node 1.

use pjw_core::alloc::{Allocator, Scratch};
use pjw_core::gpu_alloc::{GpuPolicy, Locality};
use pjw_core::sched::{
    plan_gpus, Action, GpuNode, JobView, Phase, Placement, QueueOrder, QueuePolicy, Request,
};
use pjw_core::{synthetic, CpuSet, Gpu, GpuId, GpuSet, GpuVendor, Gpus};

fn gpus(local: &[(u32, &str)]) -> Gpus {
    Gpus {
        gpus: local
            .iter()
            .enumerate()
            .map(|(i, (n, c))| Gpu {
                id: GpuId(i as u32),
                vendor: GpuVendor::Nvidia,
                pci: None,
                switch: None,
                numa: Some(*n),
                cpus: CpuSet::parse_list(c).unwrap(),
                devices: vec![],
            })
            .collect(),
        shared: vec![],
    }
}

fn two_by_two() -> Gpus {
    gpus(&[(0, "0-3"), (0, "0-3"), (1, "4-7"), (1, "4-7")])
}

fn job(
    key: i64,
    ncpus: usize,
    ngpus: usize,
    prio: u8,
    phase: Phase,
    cpus: &str,
    g: &str,
) -> JobView {
    JobView {
        key,
        req: Request {
            ncpus,
            ngpus,
            pinned: GpuSet::new(),
            priority: prio,
            placement: Placement::Any,
            exclusive: false,
            submitted_ms: key,
            time_limit: None,
        },
        phase,
        cpus: CpuSet::parse_list(cpus).unwrap(),
        gpus: GpuSet::parse_list(g).unwrap(),
    }
}

fn policy() -> QueuePolicy {
    QueuePolicy {
        vcpus: 8,
        backfill: true,
        hard_preemption: true,
        preempt_min_priority: 1,
        queue_ttl_ms: None,
        order: QueueOrder::Submission,
    }
}

fn run(g: &Gpus, jobs: &[JobView]) -> Vec<Action> {
    run_with(g, jobs, GpuPolicy::default(), "0-7")
}

/// [`run`] with a GPU policy and the CPUs jobs may use.
fn run_with(g: &Gpus, jobs: &[JobView], gpu_policy: GpuPolicy, pool: &str) -> Vec<Action> {
    let topo = synthetic::parse("numa:2 core:4").unwrap();
    let alloc = Allocator::new(&topo);
    let node = GpuNode {
        gpus: g,
        policy: gpu_policy,
        busy: GpuSet::new(),
    };
    plan_gpus(
        &policy(),
        &alloc,
        &mut Scratch::new(),
        &cs(pool),
        jobs,
        100,
        &node,
    )
}

#[test]
fn under_require_a_gpu_job_waits_for_local_cpus_unless_it_could_never_have_them() {
    let require = GpuPolicy {
        locality: Locality::Require,
        ..GpuPolicy::default()
    };
    // CPU 0 and node 1's GPUs (with CPUs 4-5) are taken: node 0 has 3 free CPUs for a job of
    // 1 GPU and 4 CPUs.
    let jobs = [
        job(1, 1, 0, 10, Phase::Primary, "0", ""),
        job(2, 2, 2, 10, Phase::Primary, "4-5", "2-3"),
        job(3, 4, 1, 10, Phase::Queued, "", ""),
    ];
    let started = |acts: &[Action]| {
        acts.iter()
            .any(|a| matches!(a, Action::StartPrimary { key: 3, .. }))
    };
    assert!(started(&run(&two_by_two(), &jobs)), "prefer: far cpus");
    assert_eq!(run_with(&two_by_two(), &jobs, require, "0-7"), vec![]);
    // A bound on the wait (`require_wait_secs`): job 3, queued at 3 ms, has waited 97 ms at the
    // plan (100 ms). Under a 1 s bound it still waits; under 50 ms it starts with far CPUs.
    let bounded = |ms| GpuPolicy {
        require_wait_ms: Some(ms),
        ..require
    };
    assert_eq!(run_with(&two_by_two(), &jobs, bounded(1000), "0-7"), vec![]);
    assert!(
        started(&run_with(&two_by_two(), &jobs, bounded(50), "0-7")),
        "waited out: as under prefer"
    );
    // Without CPUs 0 and 4 in the pool, no GPU can ever have 4 local CPUs: as under prefer.
    let busy = job(2, 2, 2, 10, Phase::Primary, "5-6", "2-3");
    let acts = run_with(&two_by_two(), &[busy, jobs[2]], require, "1-3,5-7");
    assert_eq!(
        acts,
        vec![
            Action::GrantGpus {
                key: 3,
                gpus: gs("0")
            },
            Action::StartPrimary {
                key: 3,
                cpus: cs("1-3,7")
            },
        ]
    );
    // A job pinned to GPU 0 by a workload manager, with CPUs 0 busy: GPU 0 could have 4 local
    // CPUs, so it waits; asking 5 it never could, and starts.
    let mut pinned = job(3, 4, 1, 10, Phase::Queued, "", "");
    pinned.req.pinned = gs("0");
    let jobs = [jobs[0], pinned];
    assert_eq!(run_with(&two_by_two(), &jobs, require, "0-7"), vec![]);
    let mut five = pinned;
    five.req.ncpus = 5;
    let acts = run_with(&two_by_two(), &[jobs[0], five], require, "0-7");
    assert!(
        acts.contains(&Action::GrantGpus {
            key: 3,
            gpus: gs("0")
        }),
        "{acts:?}"
    );
}

fn cs(s: &str) -> CpuSet {
    CpuSet::parse_list(s).unwrap()
}

fn gs(s: &str) -> GpuSet {
    GpuSet::parse_list(s).unwrap()
}

#[test]
fn four_one_gpu_jobs_get_four_gpus_and_a_fifth_waits_with_the_queue_behind_it() {
    let q = Phase::Queued;
    let jobs: Vec<JobView> = (1..=5)
        .map(|k| job(k, 1, 1, 10, q, "", ""))
        .chain([job(6, 1, 0, 10, q, "", "")])
        .collect();
    let acts = run(&two_by_two(), &jobs);
    let mut want = Vec::new();
    for (k, g, c) in [(1, "0", "0"), (2, "1", "1"), (3, "2", "4"), (4, "3", "5")] {
        want.push(Action::GrantGpus {
            key: k,
            gpus: gs(g),
        });
        want.push(Action::StartPrimary {
            key: k,
            cpus: cs(c),
        });
    }
    assert_eq!(acts, want);
}

#[test]
fn a_gpu_job_gets_cpus_local_to_its_gpu() {
    let acts = run(&two_by_two(), &[job(1, 4, 1, 10, Phase::Queued, "", "")]);
    assert_eq!(
        acts,
        vec![
            Action::GrantGpus {
                key: 1,
                gpus: gs("0")
            },
            Action::StartPrimary {
                key: 1,
                cpus: cs("0-3")
            },
        ]
    );
}

#[test]
fn a_gpu_job_neither_preempts_nor_backfills() {
    // Low-priority primaries hold every CPU; a priority-16 GPU job waits.
    let jobs = [
        job(1, 4, 0, 1, Phase::Primary, "0-3", ""),
        job(2, 4, 0, 1, Phase::Primary, "4-7", ""),
        job(3, 1, 1, 16, Phase::Queued, "", ""),
    ];
    assert_eq!(run(&two_by_two(), &jobs), vec![]);
}

#[test]
fn a_gpu_holder_is_never_preempted() {
    // A GPU job holds node 0 with its GPU, a CPU job node 1; a high-priority CPU job takes
    // the CPU job's place (frozen: no slots to backfill), not the GPU job's.
    let jobs = [
        job(1, 4, 1, 1, Phase::Primary, "0-3", "0"),
        job(2, 4, 0, 2, Phase::Primary, "4-7", ""),
        job(3, 4, 0, 16, Phase::Queued, "", ""),
    ];
    let acts = run(&two_by_two(), &jobs);
    assert_eq!(
        acts,
        vec![
            Action::Preempt {
                key: 2,
                by: 3,
                to_backfill: false
            },
            Action::StartPrimary {
                key: 3,
                cpus: cs("4-7")
            },
        ]
    );
}

#[test]
fn a_cpu_only_job_avoids_the_cpus_of_free_gpus() {
    // GPUs only on node 0: a CPU-only job goes to node 1 even though node 0 comes first.
    let g = gpus(&[(0, "0-3"), (0, "0-3")]);
    let acts = run(&g, &[job(1, 2, 0, 10, Phase::Queued, "", "")]);
    assert_eq!(
        acts,
        vec![Action::StartPrimary {
            key: 1,
            cpus: cs("4-5")
        }]
    );
}

#[test]
fn an_exclusive_job_gets_every_gpu() {
    let mut j = job(1, 1, 0, 10, Phase::Queued, "", "");
    j.req.exclusive = true;
    assert_eq!(
        run(&two_by_two(), &[j]),
        vec![
            Action::GrantGpus {
                key: 1,
                gpus: gs("0-3")
            },
            Action::StartPrimary {
                key: 1,
                cpus: cs("0-7")
            },
        ]
    );
}

#[test]
fn a_suspended_gpu_job_keeps_its_gpu_and_resumes_beside_it() {
    // Job 1 is suspended holding GPU 2; a queued 2-GPU job cannot have node 1's pair.
    let jobs = [
        job(1, 2, 1, 10, Phase::Suspended, "", "2"),
        job(2, 2, 2, 10, Phase::Queued, "", ""),
    ];
    assert_eq!(
        run(&two_by_two(), &jobs),
        vec![
            Action::GrantGpus {
                key: 2,
                gpus: gs("0-1")
            },
            Action::StartPrimary {
                key: 2,
                cpus: cs("0-1")
            },
        ]
    );
    // Resumed (preempted phase), it gets CPUs local to GPU 2 again, and no new GPU.
    let jobs = [job(1, 2, 1, 10, Phase::Preempted, "", "2")];
    assert_eq!(
        run(&two_by_two(), &jobs),
        vec![
            Action::GrantGpus {
                key: 1,
                gpus: gs("2")
            },
            Action::Resume {
                key: 1,
                cpus: cs("4-5")
            },
        ]
    );
}

/// A queued job pinned to `g` (the GPUs a workload manager chose).
fn pinned(key: i64, ncpus: usize, g: &str) -> JobView {
    let mut j = job(key, ncpus, 0, 16, Phase::Queued, "", "");
    j.req.pinned = gs(g);
    j.req.ngpus = j.req.pinned.len();
    j
}

#[test]
fn a_job_pinned_by_its_manager_gets_exactly_those_gpus_and_cpus_local_to_them() {
    // Slurm chose GPU 3 (node 1): not GPU 0, which pjw would have picked first.
    let acts = run(&two_by_two(), &[pinned(1, 2, "3")]);
    assert_eq!(
        acts,
        vec![
            Action::GrantGpus {
                key: 1,
                gpus: gs("3")
            },
            Action::StartPrimary {
                key: 1,
                cpus: cs("4-5")
            },
        ]
    );
    // Two GPUs on different nodes: both, and CPUs local to them.
    let acts = run(&two_by_two(), &[pinned(1, 2, "1,2")]);
    assert_eq!(
        acts[0],
        Action::GrantGpus {
            key: 1,
            gpus: gs("1-2")
        }
    );
    let Action::StartPrimary { cpus, .. } = acts[1] else {
        panic!("{acts:?}")
    };
    assert_eq!(cpus.len(), 2);
}

#[test]
fn a_pinned_job_waits_while_one_of_its_gpus_is_held_and_takes_no_other() {
    // GPU 2 is held by a running job; the job pinned to 2 waits though GPUs 0, 1 and 3 are free.
    let jobs = [
        job(1, 1, 1, 10, Phase::Primary, "4", "2"),
        pinned(2, 1, "2"),
    ];
    assert_eq!(run(&two_by_two(), &jobs), vec![]);
    // Pinned to 2 and 3 while 2 is held: none of them is taken.
    let jobs = [
        job(1, 1, 1, 10, Phase::Primary, "4", "2"),
        pinned(2, 1, "2-3"),
    ];
    assert_eq!(run(&two_by_two(), &jobs), vec![]);
}

#[test]
fn an_unpinned_gpu_job_leaves_the_pinned_ones_alone_once_they_run() {
    // The pinned job (priority 16) goes first and takes GPU 0; the other gets GPU 1 beside it.
    let jobs = [job(2, 1, 1, 10, Phase::Queued, "", ""), pinned(1, 1, "0")];
    let acts = run(&two_by_two(), &jobs);
    assert_eq!(
        acts,
        vec![
            Action::GrantGpus {
                key: 1,
                gpus: gs("0")
            },
            Action::StartPrimary {
                key: 1,
                cpus: cs("0")
            },
            Action::GrantGpus {
                key: 2,
                gpus: gs("1")
            },
            Action::StartPrimary {
                key: 2,
                cpus: cs("1")
            },
        ]
    );
}
