//! What a job did, checked: every test that runs a job (`pjw run`, a child it waits for) asserts
//! the job's exit status, and a failure shows the command, its status, its stdout and its stderr
//! — a job that "printed nothing" then says why.

use std::ffi::OsStr;
use std::ops::Deref;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Output, Stdio};

/// A finished command: what it printed, how it ended, and what it was.
#[derive(Debug)]
pub struct JobOutput {
    /// The command line (or what the caller called it).
    pub what: String,
    /// Its status and captured output.
    pub out: Output,
}

impl Deref for JobOutput {
    type Target = Output;
    fn deref(&self) -> &Output {
        &self.out
    }
}

impl JobOutput {
    /// Its stdout, as text.
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }

    /// Its stderr, as text.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }

    /// Everything about it, for an assertion message.
    pub fn describe(&self) -> String {
        describe(&self.what, &self.out)
    }

    /// Assert it exited 0; then hand it back.
    #[track_caller]
    pub fn ok(self) -> JobOutput {
        check(&self.what, &self.out, Some(0));
        self
    }

    /// Assert it exited with `code`; then hand it back.
    #[track_caller]
    pub fn code(self, code: i32) -> JobOutput {
        check(&self.what, &self.out, Some(code));
        self
    }

    /// Assert it was killed by signal `sig` (a job the test killed); then hand it back.
    #[track_caller]
    pub fn signal(self, sig: i32) -> JobOutput {
        if self.out.status.signal() != Some(sig) {
            panic!(
                "expected the end by signal {sig} of:\n{}",
                describe(&self.what, &self.out)
            );
        }
        self
    }

    /// Assert it was SIGKILLed: killed by signal 9 itself, or a shell whose command was
    /// (`exit 137`, 128 + 9: shells that fork their last command, such as dash, report it so).
    #[track_caller]
    pub fn killed(self) -> JobOutput {
        let st = self.out.status;
        if st.signal() != Some(libc::SIGKILL) && st.code() != Some(128 + libc::SIGKILL) {
            panic!(
                "expected the end by SIGKILL (or a shell's exit 137) of:\n{}",
                describe(&self.what, &self.out)
            );
        }
        self
    }

    /// Assert it failed (exited, not 0); then hand it back.
    #[track_caller]
    pub fn failed(self) -> JobOutput {
        check(&self.what, &self.out, None);
        self
    }
}

/// `prog arg arg…` of a command, for messages.
pub fn command_line(cmd: &Command) -> String {
    let quote = |s: &OsStr| {
        let s = s.to_string_lossy();
        if !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=:,%+@".contains(c))
        {
            s.into_owned()
        } else {
            format!("'{}'", s.replace('\'', "'\\''"))
        }
    };
    std::iter::once(quote(cmd.get_program()))
        .chain(cmd.get_args().map(quote))
        .collect::<Vec<_>>()
        .join(" ")
}

/// How a process ended, in words: `exit 0`, `exit 125`, `killed by signal 9`.
pub fn status_text(st: ExitStatus) -> String {
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => format!("{st}"),
    }
}

/// The command, its status, stdout and stderr, for an assertion message.
pub fn describe(what: &str, out: &Output) -> String {
    let block = |b: &[u8]| {
        let t = String::from_utf8_lossy(b);
        if t.trim().is_empty() {
            "    (nothing)".to_string()
        } else {
            t.lines()
                .map(|l| format!("    {l}"))
                .collect::<Vec<_>>()
                .join("\n")
        }
    };
    format!(
        "{what}\n  status: {}\n  stdout:\n{}\n  stderr:\n{}",
        status_text(out.status),
        block(&out.stdout),
        block(&out.stderr)
    )
}

#[track_caller]
fn check(what: &str, out: &Output, want: Option<i32>) {
    let good = match want {
        Some(code) => out.status.code() == Some(code),
        None => out.status.code().is_some_and(|c| c != 0),
    };
    if !good {
        let want = match want {
            Some(c) => format!("exit {c}"),
            None => "a non-zero exit".to_string(),
        };
        panic!("expected {want} from:\n{}", describe(what, out));
    }
}

/// Run `cmd` to its end, stdin from /dev/null, stdout and stderr captured. The status is not
/// checked yet: follow with [`JobOutput::ok`] or [`JobOutput::code`].
pub fn run(cmd: &mut Command) -> JobOutput {
    let what = command_line(cmd);
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    JobOutput { what, out }
}

/// Run `cmd` to its end and assert it exited 0.
#[track_caller]
pub fn run_ok(cmd: &mut Command) -> JobOutput {
    run(cmd).ok()
}

/// Wait for a started child and collect what is left of its output (pipes the test took
/// already are simply empty here).
pub fn wait(child: Child, what: impl Into<String>) -> JobOutput {
    let what = what.into();
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("cannot wait for {what}: {e}"));
    JobOutput { what, out }
}

/// Wait for a started child and assert it exited 0.
#[track_caller]
pub fn wait_ok(child: Child, what: impl Into<String>) -> JobOutput {
    wait(child, what).ok()
}

/// Assert that a job's output says it exited 0, showing everything when it did not.
#[track_caller]
pub fn assert_job_ok(out: &Output) {
    check("the job", out, Some(0));
}

/// Assert that a job exited with `code`, showing everything when it did not.
#[track_caller]
pub fn expect_exit(out: &Output, code: i32) {
    check("the job", out, Some(code));
}

/// A process the test started outside every job (an "outsider" for adoption), killed and reaped
/// when dropped — also when the test fails, so it never outlives the test (nor holds the
/// test's output open: cargo's output pipe then stays open as long as it lives).
#[derive(Debug)]
pub struct KillOnDrop(Option<Child>);

impl KillOnDrop {
    /// Take charge of `child`.
    pub fn new(child: Child) -> KillOnDrop {
        KillOnDrop(Some(child))
    }

    /// Its pid.
    pub fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }

    /// The child itself, to wait for it (it is then no longer killed on drop).
    pub fn into_inner(mut self) -> Child {
        self.0.take().expect("child present")
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            // Our own unreaped child: its pid cannot have been reused.
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
