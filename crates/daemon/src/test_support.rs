//! Test support: recording fakes of the job store ([`FakeStore`], fails like a full disk on
//! request), the cgroup driver ([`FakeCgroups`]) and the clock ([`FakeClock`]), and an engine
//! built on them or on a fake cgroup tree ([`TestEngine`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use pjw_cgroup::fake_tree::{FakeMachine, FakeSpec};
use pjw_cgroup::{Backend, Driver, Mode, ParentSpec};
use pjw_core::alloc::Allocator;
use pjw_core::{CpuSet, JobId};
use pjw_store::{
    JobRecord, JobSummary, StartRecord, StarterRecord, StoreError, StoredRole, StoredState,
    SubmitRecord,
};
use tokio::sync::mpsc;

mod cgroups;
use crate::clock::Clock;
use crate::config::{Config, Overrides};
use crate::engine::{Cred, Engine, Event, Who};
use crate::store_port::{StoreDetailWriter, StoreReader, StoreWriter};
pub use cgroups::{FakeCgroups, Gate, OpenOnDrop};
use pjw_proto::{Placement, RunRequest};

/// What the fake store holds and what it was asked.
#[derive(Debug, Default)]
pub struct FakeState {
    /// Every call, as `op seq` (`set_role 3 suspended`), in order; failed ones end in ` !`.
    /// A transaction of several parts is recorded as its parts, under the names of the
    /// single writes they stand for (`insert_job`, `set_starter`, `set_gpus`, ...).
    pub calls: Vec<String>,
    /// Write transactions committed (a call or a transaction of several parts is one).
    pub transactions: usize,
    /// Rows by seq.
    pub rows: BTreeMap<i64, JobRecord>,
    /// GPU rows by seq: GPUs asked for and held.
    pub gpus: BTreeMap<i64, (u32, pjw_core::GpuSet)>,
    /// Starter rows by seq (owner vs client, manager's id, /tmp).
    pub starters: BTreeMap<i64, StarterRecord>,
    /// I/O rows by seq.
    pub io: BTreeMap<i64, pjw_core::io_limits::JobIo>,
    /// Bind rows by seq.
    pub bind: BTreeMap<i64, pjw_core::thread_bind::BindMode>,
    pub time_limit: BTreeMap<i64, pjw_store::StoredTimeLimit>,
    /// Step rows by seq.
    pub steps: BTreeMap<i64, Vec<pjw_store::StepRecord>>,
    /// Fail every write until cleared (a full disk).
    pub full: bool,
    /// Fail the next this many write transactions (every part of one fails together).
    pub fail_next: usize,
    next_seq: i64,
    next_number: u64,
}

/// A job store in memory that records its calls and fails on request.
#[derive(Clone, Debug, Default)]
pub struct FakeStore {
    state: Arc<Mutex<FakeState>>,
    path: PathBuf,
}

impl FakeStore {
    pub fn new() -> FakeStore {
        FakeStore {
            state: Arc::default(),
            path: PathBuf::from("/nonexistent/fake-pjw.db"),
        }
    }

    /// What it holds and was asked (the engine keeps its own handle).
    pub fn state(&self) -> MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes fail from now on (like ENOSPC), or work again.
    pub fn set_full(&self, full: bool) {
        self.state().full = full;
    }

    /// The calls made to `op`, as recorded.
    pub fn calls_to(&self, op: &str) -> Vec<String> {
        self.state()
            .calls
            .iter()
            .filter(|c| c.split(' ').next() == Some(op))
            .cloned()
            .collect()
    }

    fn write<T>(
        &self,
        call: String,
        apply: impl FnOnce(&mut FakeState) -> T,
    ) -> Result<T, StoreError> {
        let mut st = self.state();
        if st.full || st.fail_next > 0 {
            st.fail_next = st.fail_next.saturating_sub(1);
            st.calls.push(format!("{call} !"));
            return Err(disk_full(&self.path));
        }
        st.calls.push(call);
        st.transactions += 1;
        Ok(apply(&mut st))
    }

    /// One transaction of several parts: all recorded and applied, or (failing) all recorded
    /// as failed and none applied.
    fn txn<T>(
        &self,
        parts: Vec<String>,
        apply: impl FnOnce(&mut FakeState) -> T,
    ) -> Result<T, StoreError> {
        let mut st = self.state();
        if st.full || st.fail_next > 0 {
            st.fail_next = st.fail_next.saturating_sub(1);
            st.calls.extend(parts.into_iter().map(|c| format!("{c} !")));
            return Err(disk_full(&self.path));
        }
        st.calls.extend(parts);
        st.transactions += 1;
        Ok(apply(&mut st))
    }

    /// Write transactions committed so far.
    pub fn transactions(&self) -> usize {
        self.state().transactions
    }
}

/// The error SQLite gives when the disk is full.
pub fn disk_full(path: &Path) -> StoreError {
    StoreError::Sqlite {
        path: path.to_path_buf(),
        source: rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
            Some("database or disk is full".into()),
        ),
    }
}

impl StoreReader for FakeStore {
    fn path(&self) -> &Path {
        &self.path
    }
    fn job_number(&self) -> Result<u64, StoreError> {
        Ok(self.state().next_number + 1)
    }
    fn live_jobs(&self) -> Result<Vec<JobRecord>, StoreError> {
        Ok(self
            .state()
            .rows
            .values()
            .filter(|r| r.state != StoredState::Ended)
            .cloned()
            .collect())
    }
    fn starter(&self, seq: i64) -> Result<Option<StarterRecord>, StoreError> {
        Ok(self.state().starters.get(&seq).cloned())
    }
    fn gpus(&self, seq: i64) -> Result<Option<(u32, pjw_core::GpuSet)>, StoreError> {
        Ok(self.state().gpus.get(&seq).copied())
    }
    fn io(&self, seq: i64) -> Result<Option<pjw_core::io_limits::JobIo>, StoreError> {
        Ok(self.state().io.get(&seq).cloned())
    }
    fn bind(&self, seq: i64) -> Result<Option<pjw_core::thread_bind::BindMode>, StoreError> {
        Ok(self.state().bind.get(&seq).copied())
    }
    fn time_limit(&self, seq: i64) -> Result<Option<pjw_store::StoredTimeLimit>, StoreError> {
        Ok(self.state().time_limit.get(&seq).copied())
    }
}

impl StoreWriter for FakeStore {
    fn submit_job(&mut self, r: &SubmitRecord) -> Result<i64, StoreError> {
        let mut parts = Vec::new();
        if let Some(n) = r.number {
            parts.push(format!("take_job_number {n}"));
        }
        // Its seq is known only inside; the parts name the seq it will get.
        let seq = self.state().next_seq + 1;
        parts.push(format!("insert_job {}", r.job.job_id));
        if r.starter.is_some() {
            parts.push(format!("set_starter {seq}"));
        }
        if let Some((n, gpus)) = &r.gpus {
            parts.push(format!("set_gpus {seq} {n} {gpus}"));
        }
        if let Some(io) = &r.io {
            parts.push(format!("set_io {seq} {}", io.summary()));
        }
        if let Some(mode) = r.bind {
            parts.push(format!("set_bind {seq} {}", mode.name()));
        }
        if let Some((limit, source)) = r.time_limit {
            parts.push(format!(
                "set_time_limit {seq} {} {}",
                limit.secs(),
                source.as_str()
            ));
        }
        self.txn(parts, |st| {
            if let Some(n) = r.number {
                st.next_number = st.next_number.max(n);
            }
            st.next_seq += 1;
            let seq = st.next_seq;
            st.rows.insert(
                seq,
                JobRecord {
                    seq,
                    ..r.job.clone()
                },
            );
            if let Some(s) = &r.starter {
                st.starters.insert(seq, s.clone());
            }
            if let Some(g) = r.gpus {
                st.gpus.insert(seq, g);
            }
            if let Some(io) = &r.io {
                st.io.insert(seq, io.clone());
            }
            if let Some(mode) = r.bind {
                st.bind.insert(seq, mode);
            }
            if let Some((limit, source)) = r.time_limit {
                st.time_limit.insert(
                    seq,
                    pjw_store::StoredTimeLimit {
                        limit,
                        source,
                        ran_ms: 0,
                    },
                );
            }
            seq
        })
    }
    fn insert_job(&mut self, j: &JobRecord) -> Result<i64, StoreError> {
        self.write(format!("insert_job {}", j.job_id), |st| {
            st.next_seq += 1;
            let seq = st.next_seq;
            st.rows.insert(seq, JobRecord { seq, ..j.clone() });
            seq
        })
    }
    fn start_job(&mut self, r: &StartRecord) -> Result<(), StoreError> {
        let seq = r.seq;
        let mut parts = Vec::new();
        if let Some((n, gpus)) = &r.gpus {
            parts.push(format!("set_gpus {seq} {n} {gpus}"));
        }
        parts.push(format!("set_starting {seq} {} {}", r.role.as_str(), r.cpus));
        if r.running {
            parts.push(format!("set_running {seq}"));
        }
        self.txn(parts, |st| {
            if let Some(g) = r.gpus {
                st.gpus.insert(seq, g);
            }
            if let Some(row) = st.rows.get_mut(&seq) {
                row.state = if r.running {
                    StoredState::Running
                } else {
                    StoredState::Starting
                };
                row.cpus = r.cpus;
                row.mems = r.mems;
                row.role = r.role;
                row.started_ms = Some(r.started_ms);
            }
        })
    }
    fn set_role(
        &mut self,
        seq: i64,
        role: StoredRole,
        cpus: &CpuSet,
        mems: &CpuSet,
    ) -> Result<(), StoreError> {
        self.write(format!("set_role {seq} {} {cpus}", role.as_str()), |st| {
            if let Some(r) = st.rows.get_mut(&seq) {
                r.role = role;
                r.cpus = *cpus;
                r.mems = *mems;
            }
        })
    }
    fn set_priority(&mut self, seq: i64, priority: u8) -> Result<(), StoreError> {
        self.write(format!("set_priority {seq} {priority}"), |st| {
            if let Some(r) = st.rows.get_mut(&seq) {
                r.priority = priority;
            }
        })
    }
    fn set_running(&mut self, seq: i64) -> Result<(), StoreError> {
        self.write(format!("set_running {seq}"), |st| {
            if let Some(r) = st.rows.get_mut(&seq) {
                r.state = StoredState::Running;
            }
        })
    }
    fn set_ended(&mut self, seq: i64, ended_ms: i64, reason: &str) -> Result<(), StoreError> {
        self.write(format!("set_ended {seq} {reason}"), |st| {
            if let Some(r) = st.rows.get_mut(&seq) {
                r.state = StoredState::Ended;
                r.ended_ms = Some(ended_ms);
                r.end_reason = Some(reason.into());
            }
        })
    }
    fn finish_job(
        &mut self,
        ended_ms: i64,
        reason: &str,
        summary: &JobSummary,
    ) -> Result<(), StoreError> {
        let seq = summary.seq;
        self.write(format!("finish_job {seq} {reason}"), |st| {
            if let Some(r) = st.rows.get_mut(&seq) {
                r.state = StoredState::Ended;
                r.ended_ms = Some(ended_ms);
                r.end_reason = Some(reason.into());
            }
        })
    }
    fn set_exit_status(&mut self, seq: i64, status: i32) -> Result<(), StoreError> {
        self.write(format!("set_exit_status {seq} {status}"), |_| ())
    }
}

impl StoreDetailWriter for FakeStore {
    fn set_starter(&mut self, seq: i64, s: &StarterRecord) -> Result<(), StoreError> {
        self.write(format!("set_starter {seq}"), |st| {
            st.starters.insert(seq, s.clone());
        })
    }
    fn set_gpus(
        &mut self,
        seq: i64,
        ngpus: u32,
        gpus: &pjw_core::GpuSet,
    ) -> Result<(), StoreError> {
        self.write(format!("set_gpus {seq} {ngpus} {gpus}"), |st| {
            st.gpus.insert(seq, (ngpus, *gpus));
        })
    }
    fn set_io(&mut self, seq: i64, io: &pjw_core::io_limits::JobIo) -> Result<(), StoreError> {
        self.write(format!("set_io {seq} {}", io.summary()), |st| {
            st.io.insert(seq, io.clone());
        })
    }
    fn set_bind(
        &mut self,
        seq: i64,
        mode: pjw_core::thread_bind::BindMode,
    ) -> Result<(), StoreError> {
        self.write(format!("set_bind {seq} {}", mode.name()), |st| {
            st.bind.insert(seq, mode);
        })
    }
    fn set_times_ran(&mut self, times: &[(i64, u64)]) -> Result<(), StoreError> {
        let listed: Vec<String> = times.iter().map(|(s, ms)| format!("{s}:{ms}")).collect();
        self.write(format!("set_times_ran {}", listed.join(" ")), |st| {
            for &(seq, ran_ms) in times {
                if let Some(t) = st.time_limit.get_mut(&seq) {
                    t.ran_ms = ran_ms;
                }
            }
        })
    }
    fn record_steps(
        &mut self,
        seq: i64,
        steps: &[pjw_store::StepRecord],
    ) -> Result<(), StoreError> {
        self.write(format!("record_steps {seq} {}", steps.len()), |st| {
            st.steps.entry(seq).or_default().extend_from_slice(steps);
        })
    }
}

/// A wall clock that moves only when told (shared by its clones).
#[derive(Clone, Debug)]
pub struct FakeClock(Arc<std::sync::atomic::AtomicI64>);

impl FakeClock {
    pub fn at(ms: i64) -> FakeClock {
        FakeClock(Arc::new(std::sync::atomic::AtomicI64::new(ms)))
    }
    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn now_ms(&self) -> i64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// An engine on a fake cgroup v2 tree (in a temp dir) with a [`FakeStore`]: 4 CPUs, no
/// inotify, no governor, no profiles.
pub struct TestEngine {
    pub engine: Engine,
    pub store: FakeStore,
    pub clock: FakeClock,
    /// What the engine sends itself (timers, watchers); kept open so sends succeed.
    pub _events: mpsc::UnboundedReceiver<Event>,
    _machine: FakeMachine,
    _dir: tempfile::TempDir,
    /// How it was built, for [`TestEngine::restart`]: top-level config keys, the fake, the
    /// governor, `[memory]` keys.
    spec: (String, Option<FakeCgroups>, bool, String),
}

impl TestEngine {
    /// The store sequence of the job `id` (panics naming it when there is none).
    pub fn seq_of(&self, id: &str) -> i64 {
        self.engine
            .seq_of(id)
            .unwrap_or_else(|| panic!("no job {id}"))
    }

    /// Submit `req` on connection `conn` from process `pid` of user `uid`; its first answer and
    /// its channel.
    pub async fn submit(
        &mut self,
        conn: u64,
        pid: u32,
        uid: u32,
        req: RunRequest,
    ) -> (
        pjw_proto::Response,
        mpsc::UnboundedReceiver<pjw_proto::Response>,
    ) {
        self.fake_process(pid, uid);
        let (reply, mut rx) = mpsc::unbounded_channel();
        self.engine.handle(Event::Submit {
            conn,
            cred: Cred { pid, ..client(uid) },
            who: who(),
            req,
            reply,
        });
        let first = rx.recv().await.expect("an answer");
        (first, rx)
    }

    pub fn new() -> TestEngine {
        TestEngine::with_config("")
    }

    /// Hand the engine the reports of the signal passes and kill rounds under way (the events
    /// it sent itself meanwhile go back to it in order afterwards).
    pub async fn signals_done(&mut self) {
        self.reports_done(Engine::signals_under_way, "a signal pass", |ev| {
            matches!(ev, Event::Signalled { .. } | Event::Killed { .. })
        })
        .await
    }

    /// Hand the engine the reports of its cgroup removals (blocking threads) until none is
    /// under way; what else it sent itself meanwhile is sent again, in order.
    pub async fn removals_done(&mut self) {
        self.reports_done(Engine::removals_under_way, "a removal", |ev| {
            matches!(ev, Event::CgroupsRemoved { .. })
        })
        .await
    }

    /// Hand the engine the events `report` picks until `under_way` counts none; the others it
    /// sent itself meanwhile go back to it, in order.
    async fn reports_done(
        &mut self,
        under_way: fn(&Engine) -> usize,
        what: &str,
        report: fn(&Event) -> bool,
    ) {
        let mut other = Vec::new();
        while under_way(&self.engine) > 0 {
            let ev = tokio::time::timeout(std::time::Duration::from_secs(10), self._events.recv())
                .await
                .unwrap_or_else(|_| panic!("{what} reported within 10 s"))
                .expect("the engine's channel is open");
            match report(&ev) {
                true => self.engine.handle(ev),
                false => other.push(ev),
            }
        }
        for ev in other {
            self.engine.send_self(ev);
        }
    }

    /// With top-level config keys `extra` (`"queue_ttl = 10\n"`), and `[job]` keys after a
    /// `[job]` line at its end.
    pub fn with_config(extra: &str) -> TestEngine {
        TestEngine::build(extra, None, false)
    }

    /// On the recording fake [`FakeCgroups`] instead of a fake tree.
    pub fn recording(cgroups: FakeCgroups) -> TestEngine {
        TestEngine::build("", Some(cgroups), false)
    }

    /// On the recording fake, with top-level config keys `extra`.
    pub fn recording_with_config(cgroups: FakeCgroups, extra: &str) -> TestEngine {
        TestEngine::build(extra, Some(cgroups), false)
    }

    /// On the recording fake, with the memory governor on (its defaults, the partition limit
    /// 1 GiB).
    pub fn governed(cgroups: FakeCgroups) -> TestEngine {
        TestEngine::build("", Some(cgroups), true)
    }

    /// [`TestEngine::governed`] with `[memory]` keys `memory` (`"frozen_max = 5\n"`).
    pub fn governed_with(cgroups: FakeCgroups, memory: &str) -> TestEngine {
        TestEngine::build_with("", Some(cgroups), true, memory)
    }

    fn build(extra: &str, cgroups: Option<FakeCgroups>, governor: bool) -> TestEngine {
        TestEngine::build_with(extra, cgroups, governor, "")
    }

    fn build_with(
        extra: &str,
        cgroups: Option<FakeCgroups>,
        governor: bool,
        memory: &str,
    ) -> TestEngine {
        let dir = tempfile::tempdir().expect("temp dir");
        let machine = FakeSpec::new(Mode::Unified)
            .build(dir.path())
            .expect("fake cgroup tree");
        let store = FakeStore::new();
        let clock = FakeClock::at(1_700_000_000_000);
        let spec = (extra.to_string(), cgroups, governor, memory.to_string());
        let (engine, events) = Self::engine_on(&machine, dir.path(), &spec, &store, &clock);
        TestEngine {
            engine,
            store,
            clock,
            _events: events,
            _machine: machine,
            _dir: dir,
            spec,
        }
    }

    /// A new engine on the same store, cgroups and clock: the daemon after a restart (the
    /// caller runs `recover`, as the daemon does).
    pub fn restart(self) -> TestEngine {
        let TestEngine {
            engine,
            store,
            clock,
            _machine,
            _dir,
            spec,
            ..
        } = self;
        drop(engine);
        let (engine, events) = Self::engine_on(&_machine, _dir.path(), &spec, &store, &clock);
        TestEngine {
            engine,
            store,
            clock,
            _events: events,
            _machine,
            _dir,
            spec,
        }
    }

    fn engine_on(
        machine: &FakeMachine,
        dir: &Path,
        (extra, cgroups, governor, memory): &(String, Option<FakeCgroups>, bool, String),
        store: &FakeStore,
        clock: &FakeClock,
    ) -> (Engine, mpsc::UnboundedReceiver<Event>) {
        let driver = Driver::detect_with(
            &machine.proc_root,
            &ParentSpec::parse("/pjw").expect("parent"),
            Backend::FakeTree,
        )
        .expect("driver on the fake tree");
        driver
            .prepare_parent()
            .expect("parent cgroups on the fake tree");
        // A `[job]` part at the end of `extra` joins the engine's own `[job]` section.
        let (extra, job) = match extra.split_once("[job]\n") {
            Some((top, job)) => (top, job),
            None => (extra.as_str(), ""),
        };
        let text = format!(
            "{extra}[paths]\nproc = {:?}\ndev = {:?}\n[memory]\ngovernor = {governor}\n{memory}[profile]\nenabled = false\n[job]\ntmp_root = {:?}\n{job}",
            machine.proc_root,
            dir.join("dev"),
            dir.join("tmp")
        );
        let cfg = Config::parse("test", &text, &Overrides::default()).expect("config");
        let topo = pjw_core::synthetic::parse("package:1 core:4 pu:1").expect("topology");
        let pool = CpuSet::parse_list("0-3").expect("cpus");
        let alloc = Allocator::new(&topo);
        let (tx, events) = mpsc::unbounded_channel();
        let engine = match cgroups {
            Some(fake) => Engine::new(
                cfg,
                fake.clone(),
                store.clone(),
                alloc,
                pool,
                4,
                1 << 30,
                None,
                tx,
            ),
            None => Engine::new(
                cfg,
                driver,
                store.clone(),
                alloc,
                pool,
                4,
                1 << 30,
                None,
                tx,
            ),
        }
        .with_clock(clock.clone());
        (engine, events)
    }

    /// The fake `/proc`.
    pub fn proc_root(&self) -> PathBuf {
        self._machine.proc_root.clone()
    }

    /// Make process `pid` of user `uid` known in the fake `/proc` (its `status`).
    pub fn fake_process(&self, pid: u32, uid: u32) {
        let dir = self._machine.proc_root.join(pid.to_string());
        std::fs::create_dir_all(&dir).expect("fake /proc/PID");
        std::fs::write(
            dir.join("status"),
            format!("Name:\tpjw\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\nThreads:\t1\nCpus_allowed_list:\t0-3\n"),
        )
        .expect("fake /proc/PID/status");
        // What a process inherits (engine/oom_order.rs writes it for a job with --mem).
        let adj = dir.join("oom_score_adj");
        if !adj.exists() {
            std::fs::write(adj, "0\n").expect("fake /proc/PID/oom_score_adj");
        }
        // Outside every job unless a test put it in one (`in_cgroup`).
        let cg = dir.join("cgroup");
        if !cg.exists() {
            std::fs::write(cg, "0::/\n").expect("fake /proc/PID/cgroup");
        }
    }

    /// Process `pid`'s `oom_score_adj` in the fake `/proc` (made by [`TestEngine::fake_process`]).
    pub fn oom_score_adj(&self, pid: u32) -> String {
        std::fs::read_to_string(self.oom_score_adj_path(pid)).expect("fake oom_score_adj")
    }

    /// Give process `pid` of the fake `/proc` the `oom_score_adj` `value` (one it inherited).
    pub fn set_oom_score_adj(&self, pid: u32, value: &str) {
        std::fs::write(self.oom_score_adj_path(pid), value).expect("fake oom_score_adj");
    }

    fn oom_score_adj_path(&self, pid: u32) -> PathBuf {
        self._machine
            .proc_root
            .join(pid.to_string())
            .join("oom_score_adj")
    }

    /// Put process `pid` of the fake `/proc` in the cgroup2 `path` (`/pjw/job-a`).
    pub fn in_cgroup(&self, pid: u32, path: &str) {
        let dir = self._machine.proc_root.join(pid.to_string());
        std::fs::create_dir_all(&dir).expect("fake /proc/PID");
        std::fs::write(dir.join("cgroup"), format!("0::{path}\n")).expect("fake /proc/PID/cgroup");
    }

    /// What file `file` of job cgroup `cg` holds in each fake hierarchy that has it.
    pub fn job_files(&self, cg: &str, file: &str) -> Vec<String> {
        fn walk(dir: &std::path::Path, cg: &str, file: &str, out: &mut Vec<String>) {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            for e in entries.flatten() {
                let p = e.path();
                if !p.is_dir() {
                    continue;
                }
                if p.file_name().is_some_and(|n| n == cg) {
                    if let Ok(t) = std::fs::read_to_string(p.join(file)) {
                        out.push(t.trim().to_string());
                    }
                }
                walk(&p, cg, file, out);
            }
        }
        let mut out = Vec::new();
        walk(&self._machine.cgroup_root, cg, file, &mut out);
        out
    }

    /// Give process `pid` a `stat` in the fake `/proc` (it is alive there).
    pub fn fake_stat(&self, pid: u32) {
        let dir = self._machine.proc_root.join(pid.to_string());
        std::fs::create_dir_all(&dir).expect("fake /proc/PID");
        std::fs::write(
            dir.join("stat"),
            format!("{pid} (pjw) S 1 {pid} {pid} 0 -1 4194560 98 0 0 0 3 5 0 0 20 0 1 0 987654 5578752 130 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"),
        )
        .expect("fake /proc/PID/stat");
    }

    /// A job id for tests.
    pub fn id(text: &str) -> JobId {
        JobId::new(text).expect("job id")
    }
}

/// A test client's credentials: this process, as uid and gid `uid`.
pub fn client(uid: u32) -> Cred {
    Cred {
        pid: std::process::id(),
        uid,
        gid: uid,
    }
}

/// What the connection task resolved for uid 1000: `user1000`, no admin.
pub fn who() -> Who {
    Who {
        name: "user1000".into(),
        ..Who::default()
    }
}

/// `pjw run --job-id ID --cpus CPUS -- sleep`, primaries only.
pub fn run_request(id: &str, cpus: u32) -> RunRequest {
    RunRequest {
        gpus: 0,
        bind: None,
        tasks: None,
        time_limit_s: None,
        cpus,
        mem: None,
        job_id: Some(id.into()),
        name: None,
        argv: vec!["sleep".into()],
        priority: None,
        placement: Placement::PrimaryOnly,
        exclusive: false,
        user: None,
        wlm: None,
        tmp: None,
        io_weight: None,
        io_max: vec![],
    }
}

/// Live processes of a test (`sleep 600`) standing for jobs' clients, killed when dropped: the
/// engine watches a job's main process and a step's process with pidfds on the real kernel.
pub struct Live(Vec<std::process::Child>);

impl Live {
    pub fn new(n: usize) -> Live {
        Live(
            (0..n)
                .map(|_| {
                    std::process::Command::new("sleep")
                        .arg("600")
                        .spawn()
                        .expect("spawn sleep")
                })
                .collect(),
        )
    }
    pub fn pid(&self, i: usize) -> u32 {
        self.0[i].id()
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
