//! pjw-proto: the messages between `pjw daemon` and its clients, and how they travel.
//!
//! Transport: a Unix stream socket. Each message is a frame: a 4-byte big-endian length, then
//! that many bytes of JSON. Frames are at most [`MAX_FRAME`] bytes; a longer announced length is
//! refused before anything is read. Every request is wrapped in [`RequestFrame`] with the
//! protocol [`VERSION`]; the daemon answers a frame it cannot decode with
//! [`Response::Error`] and closes the connection.
//!
//! A `run` conversation: the client sends [`Request::Run`]; the daemon answers
//! [`Response::Queued`] zero or more times (once when the job has to wait), then
//! [`Response::Started`] after it has moved the client's own process (identified by
//! `SO_PEERCRED`, never by a pid the client claims) into the job's cgroups. The client then execs
//! the command; its exit closes the connection.
//!
//! ```
//! use pjw_proto::{Request, RequestFrame, VERSION};
//! let f = RequestFrame { v: VERSION, req: Request::Status };
//! let text = serde_json::to_string(&f).unwrap();
//! assert_eq!(text, r#"{"v":1,"req":{"type":"status"}}"#);
//! ```

pub use pjw_core::job_state::{EndClass, SampleState, StateFilter};
pub use pjw_core::thread_bind::BindMode;

pub mod login;
pub mod report;
mod request;
mod response;
pub mod slurm_task;
pub mod stats;
mod status;
pub mod step;
mod transport;
pub use login::{LoginPhase, LoginRequest};
pub use report::{
    collect_report, JobReport, ProcessRow, ReportQuery, ReportState, SeriesPoint, ThreadRow, TopBy,
    SERIES_CHUNK,
};
pub use request::{JobOutcome, Placement, RegisterRequest, Request, RequestFrame, RunRequest};
pub use response::{ErrorCode, JobTmp, Response};
pub use slurm_task::SlurmTaskRequest;
pub use stats::{LeaseInfo, StartStats, StartWindow};
pub use status::{JobInfo, JobState, MemoryStatus, StatusCut, StatusReport};
pub use step::{StepInfo, StepReport};
pub use transport::{
    decode_request, decode_response, encode_request, encode_response, read_frame, socket_path,
    write_frame, Client, ProtoError,
};

/// Protocol version spoken by this build.
pub const VERSION: u32 = 1;
/// Largest frame accepted in either direction (1 MiB).
pub const MAX_FRAME: usize = 1 << 20;
/// Longest argv accepted in a run request (count of arguments).
pub const MAX_ARGS: usize = 4096;
/// Where clients look for the daemon unless `PJW_SOCKET` says otherwise.
pub const DEFAULT_SOCKET: &str = "/run/pjw/pjw.sock";

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use pjw_core::{CpuSet, GpuSet};

    #[test]
    fn frames_round_trip_and_limits_hold() {
        let mut buf = Vec::new();
        write_frame(&mut buf, b"{}").unwrap();
        assert_eq!(&buf[..4], &[0, 0, 0, 2]);
        let mut r = &buf[..];
        assert_eq!(read_frame(&mut r).unwrap().unwrap(), b"{}");
        assert!(read_frame(&mut r).unwrap().is_none());
        // An announced length over the limit is refused before reading the body.
        let huge = ((MAX_FRAME + 1) as u32).to_be_bytes();
        assert!(matches!(
            read_frame(&mut &huge[..]),
            Err(ProtoError::TooLarge(_))
        ));
        // A truncated frame is an error, not a hang or a panic.
        let trunc = [0u8, 0, 0, 9, b'{'];
        assert!(matches!(
            read_frame(&mut &trunc[..]),
            Err(ProtoError::Closed)
        ));
    }

    #[test]
    fn requests_decode_strictly() {
        let run = Request::Run(RunRequest {
            gpus: 2,
            bind: None,
            tasks: None,
            time_limit_s: None,
            priority: Some(12),
            placement: Placement::BackfillOnly,
            exclusive: false,
            cpus: 2,
            mem: Some(1 << 30),
            job_id: Some("42".into()),
            name: None,
            argv: vec!["sleep".into(), "1".into()],
            user: Some("alice".into()),
            wlm: Some("pbs:1234.pbs01".into()),
            tmp: Some(0),
            io_weight: Some(500),
            io_max: vec!["254:0 rbps=10M".into()],
        });
        assert_eq!(decode_request(&encode_request(&run)).unwrap(), run);
        let bad = [
            &br#"{"v":1,"req":{"type":"launch_missiles"}}"#[..],
            br#"{"v":2,"req":{"type":"status"}}"#,
            br#"{"v":1,"req":{"type":"run","cpus":-1}}"#,
            br#"{"v":1,"req":{"type":"status"},"extra":1}"#,
            b"not json",
            b"",
        ];
        for b in bad {
            assert!(
                decode_request(b).is_err(),
                "{:?} accepted",
                String::from_utf8_lossy(b)
            );
        }
    }

    #[test]
    fn register_and_end_round_trip() {
        let reg = Request::Register(RegisterRequest {
            job: "4242".into(),
            wlm: "slurm".into(),
            user: "alice".into(),
            cpus: 2,
            mem: Some(1 << 30),
            name: None,
            attach: false,
            gpus: None,
        });
        let text = String::from_utf8(encode_request(&reg)).unwrap();
        assert!(text.contains(r#""type":"register""#), "{text}");
        assert_eq!(decode_request(text.as_bytes()).unwrap(), reg);
        let end = Request::End { job: "4242".into() };
        assert_eq!(decode_request(&encode_request(&end)).unwrap(), end);
        assert!(decode_request(br#"{"v":1,"req":{"type":"register","job":"1"}}"#).is_err());
    }

    #[test]
    fn login_round_trips_and_names_no_pid() {
        let req = Request::Login(LoginRequest {
            user: "alice".into(),
            phase: LoginPhase::Session,
        });
        let text = String::from_utf8(encode_request(&req)).unwrap();
        assert_eq!(
            text,
            r#"{"v":1,"req":{"type":"login","user":"alice","phase":"session"}}"#
        );
        assert_eq!(decode_request(text.as_bytes()).unwrap(), req);
        // The process to move is never the request's to say.
        assert!(decode_request(
            br#"{"v":1,"req":{"type":"login","user":"alice","phase":"session","pid":1}}"#
        )
        .is_err());
    }

    #[test]
    fn status_json_has_the_documented_shape() {
        let s = Response::Status(StatusReport {
            node: "n1".into(),
            total_cpus: 2,
            cpus: CpuSet::parse_list("0-1").unwrap(),
            free_cpus: CpuSet::parse_list("1").unwrap(),
            vcpus: 2,
            jobs: vec![],
            gpus: GpuSet::parse_list("0-3").unwrap(),
            free_gpus: GpuSet::parse_list("1,3").unwrap(),
            cgroup: "hybrid".into(),
            version: "0.1.0".into(),
            starts: None,
            memory: None,
            cut: None,
        });
        let v: serde_json::Value = serde_json::from_slice(&encode_response(&s)).unwrap();
        assert_eq!(v["free_cpus"], "1");
        assert_eq!(v["total_cpus"], 2);
        // GPUs are lists like CPUs.
        assert_eq!(
            (&v["gpus"], &v["free_gpus"]),
            (&"0-3".into(), &"1,3".into())
        );
    }

    #[test]
    fn job_usage_fields_are_optional_both_ways() {
        // A job entry from a daemon without usage fields still decodes.
        let old = r#"{"id":"1","name":"x","user":"u","uid":0,"cpus":"0","mems":"0","ncpus":1,
            "mem":null,"procs":1,"threads":1,"state":"running","age_secs":3,"pid":9}"#;
        let j: JobInfo = serde_json::from_str(old).unwrap();
        assert_eq!((j.cpu_usec, j.mem_bytes, j.sampled_ms), (None, None, None));
        assert_eq!((j.ngpus, j.gpus), (0, GpuSet::new()));
        let gpu = JobInfo {
            ngpus: 2,
            gpus: GpuSet::parse_list("1,3").unwrap(),
            ..j.clone()
        };
        let text = serde_json::to_string(&gpu).unwrap();
        assert!(text.contains(r#""ngpus":2,"gpus":"1,3""#), "{text}");
        assert_eq!(serde_json::from_str::<JobInfo>(&text).unwrap(), gpu);
        // With them, they round-trip; without them, they are left out of the JSON.
        let with = JobInfo {
            cpu_usec: Some(1_500_000),
            mem_bytes: Some(4096),
            sampled_ms: Some(1_700_000_000_000),
            ..j.clone()
        };
        let text = serde_json::to_string(&with).unwrap();
        assert_eq!(serde_json::from_str::<JobInfo>(&text).unwrap(), with);
        let bare = serde_json::to_string(&j).unwrap();
        assert!(
            !bare.contains("cpu_usec") && !bare.contains("sampled_ms") && !bare.contains("gpu"),
            "{bare}"
        );
        let nvml = JobInfo {
            gpu_util: Some(62.5),
            gpu_mem: Some(1 << 30),
            ..gpu
        };
        let text = serde_json::to_string(&nvml).unwrap();
        assert!(
            text.contains(r#""gpu_util":62.5,"gpu_mem":1073741824"#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<JobInfo>(&text).unwrap(), nvml);
        // OOM kills show only once there are some.
        assert!(!text.contains("oom_kills"), "{text}");
        let oom = JobInfo {
            oom_kills: 3,
            ..nvml
        };
        let text = serde_json::to_string(&oom).unwrap();
        assert!(text.contains(r#""oom_kills":3"#), "{text}");
        assert_eq!(serde_json::from_str::<JobInfo>(&text).unwrap(), oom);
    }

    /// Review F2: a status answer too big for a frame is cut — every step list first, then
    /// jobs from the end (the queue's tail) — as little as fits, saying what it left out.
    #[test]
    fn a_status_answer_is_cut_to_fit_steps_first_then_the_queues_tail() {
        let old = r#"{"id":"1","name":"x","user":"u","uid":0,"cpus":"0","mems":"0","ncpus":1,
            "mem":null,"procs":1,"threads":1,"state":"running","age_secs":3,"pid":9}"#;
        let base: JobInfo = serde_json::from_str(old).unwrap();
        let step = |n| crate::StepInfo {
            step: n,
            pid: 100 + n,
            uid: 1000,
            name: "s".repeat(64),
            cpus: CpuSet::parse_list("0").unwrap(),
            age_secs: 1,
        };
        let jobs: Vec<JobInfo> = (0..40)
            .map(|i| JobInfo {
                id: format!("j{i}"),
                steps: if i < 10 {
                    (0..20).map(step).collect()
                } else {
                    vec![]
                },
                ..base.clone()
            })
            .collect();
        let report = StatusReport {
            node: "n1".into(),
            total_cpus: 2,
            cpus: CpuSet::parse_list("0-1").unwrap(),
            free_cpus: CpuSet::new(),
            vcpus: 2,
            jobs,
            gpus: GpuSet::new(),
            free_gpus: GpuSet::new(),
            cgroup: "hybrid".into(),
            version: "0.1.0".into(),
            starts: None,
            memory: None,
            cut: None,
        };
        let size = |s: &StatusReport| encode_response(&Response::Status(s.clone())).len();
        let whole = size(&report);
        // Fits: unchanged.
        let mut s = report.clone();
        s.cut_to_fit(|x| size(x) <= whole);
        assert_eq!(s, report);
        // Without the steps it fits: every step list goes, the jobs stay.
        let no_steps = size(&StatusReport {
            jobs: report
                .jobs
                .iter()
                .map(|j| JobInfo {
                    steps: vec![],
                    ..j.clone()
                })
                .collect(),
            cut: Some(StatusCut {
                steps: 200,
                jobs: 0,
            }),
            ..report.clone()
        });
        let mut s = report.clone();
        s.cut_to_fit(|x| size(x) <= no_steps);
        assert_eq!(
            s.cut,
            Some(StatusCut {
                steps: 200,
                jobs: 0
            })
        );
        assert_eq!(s.jobs.len(), 40);
        assert!(s.jobs.iter().all(|j| j.steps.is_empty()));
        // Half that room: jobs go from the end, as few as fit.
        let room = no_steps / 2;
        let mut s = report.clone();
        s.cut_to_fit(|x| size(x) <= room);
        let kept = s.jobs.len();
        assert!(size(&s) <= room && kept > 0 && kept < 40, "{kept}");
        assert_eq!(
            s.cut,
            Some(StatusCut {
                steps: 200,
                jobs: 40 - kept as u32
            })
        );
        assert_eq!(
            s.jobs.last().map(|j| j.id.clone()),
            Some(format!("j{}", kept - 1))
        );
        let mut one_more = s.clone();
        one_more.jobs.push(report.jobs[kept].clone());
        one_more.jobs[kept].steps.clear();
        one_more.cut = Some(StatusCut {
            steps: 200,
            jobs: 39 - kept as u32,
        });
        assert!(size(&one_more) > room, "as few jobs as fit were left out");
        // The decoded answer says what it left out.
        let back: Response =
            decode_response(&encode_response(&Response::Status(s.clone()))).unwrap();
        assert_eq!(back, Response::Status(s));
    }
}
