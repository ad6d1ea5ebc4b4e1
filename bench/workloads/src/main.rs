//! `pjw-wl`: the project's own workloads.
//!
//! - `spin ITERS` — a CPU-bound integer loop; prints its wall time in seconds.
//! - `calibrate SECONDS` — prints the ITERS that make `spin` take about SECONDS of CPU time
//!   here (measured on the thread's own CPU clock, so a loaded machine does not shrink it).
//! - `burn N` — N busy processes (itself and N-1 children) until killed: a noisy neighbour.
//! - `threads N SECONDS [PIDFILE]` — N threads, half busy and half sleeping, for SECONDS;
//!   writes its pid to PIDFILE first. Thread I is named `busy-I` (even I) or `sleep-I`.
//! - `par N ITERS` — N threads each running `spin ITERS`; prints the wall time until the last
//!   one finished, in seconds (a job with N busy threads, thread balancing bench).
//! - `stream N MIB PASSES` — N threads, each first-touching its own MIB MiB buffer and then
//!   streaming over it PASSES times, each watching which NUMA node it runs on and its pages are
//!   on; prints the wall time and placement counts (stream.rs; NUMA thread balancing bench).
//! - `roles N DIR` — N threads; thread I writes its thread id to DIR/tid-I, then spins while
//!   DIR/busy-I exists and sleeps (20 ms naps) while it does not, until DIR/stop appears. The
//!   test switches a thread's role by creating or removing its busy file (thread balancing).
//! - `spin-forever` — one busy loop until killed (what `burn` starts).
//! - `idle N` — N threads besides the main one, all asleep (1 s naps) until killed: a job of
//!   many threads that costs no CPU (the sampler bench's thread rows).
//! - `touch MIB FILE` — allocates MIB MiB of anonymous memory and writes every page, then
//!   writes "touched" to FILE and sleeps until killed (where a job's memory lands, NUMA tests).
//! - `grow MIB STEPS ROUNDS` — grows to MIB MiB of anonymous memory in STEPS steps (0.2 s
//!   apart), then makes ROUNDS passes writing every page; prints a checksum of what it wrote.
//! - `duty CYCLES ITERS IDLE_MS [STATFILE]` — an I/O-bound job: CYCLES times, ITERS loop
//!   iterations then IDLE_MS asleep; prints its wall time in seconds; writes "CPU WAIT" (seconds
//!   on a CPU, seconds runnable but waiting for one, from its schedstat) to STATFILE.
//! - `check MIB ROUNDS` — the checksum `grow` must print, computed without the memory.
//! - `steps MIB STEPS CHILDREN HOLD_MS` — grows to MIB MiB of anonymous memory in STEPS equal
//!   steps, holding each for HOLD_MS; at each step it starts its share of CHILDREN short-lived
//!   child processes (`pjw-wl noop`, one at a time); no threads. A job of known shape for
//!   profile tests: 1 + CHILDREN processes, a peak of MIB MiB, STEPS plateaus.
//! - `noop` — exits at once.
//! - `flood SOCKET N` — opens up to N connections to the Unix socket SOCKET and holds them (a
//!   hostile user exhausting the daemon's descriptors, for the security tests); prints
//!   "opened O" once it has tried, then, once stdin closes, "alive A" — how many of them the
//!   daemon still held open — and exits. Its open-file limit is raised to the hard limit first.
//!   `tcp:ADDR:PORT` for SOCKET opens TCP connections instead (the metrics endpoint), each
//!   given up after 1 s (a full backlog); ten such in a row, or 10 s, end the flood.
//! - `hold SOCKET N FRAMEFILE` — like `flood`, and writes the bytes of FRAMEFILE (a request
//!   frame) on each connection, then never reads an answer: N requests left unread.
//! - `files DIR N` — creates N empty files in DIR (`f0`, `f1`, …) and prints "made N".
//! - `deep DIR N` — creates a chain of N nested directories `d/d/…` below DIR, prints "made N".

mod stream;

use std::hint::black_box;
use std::io::Write;
use std::time::{Duration, Instant};

fn spin(iters: u64) -> u64 {
    // xorshift: cheap, cannot be folded away, no memory traffic.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..iters {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x = black_box(x);
    }
    x
}

/// Raise the soft open-file limit to the hard one (flood needs thousands of descriptors).
fn raise_nofile() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit get a valid pointer to an rlimit of libc's layout.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

fn usage() -> ! {
    eprintln!("usage: pjw-wl spin ITERS | calibrate SECONDS | burn N | threads N SECONDS [PIDFILE] | idle N | par N ITERS | stream N MIB PASSES | roles N DIR | spin-forever | duty CYCLES ITERS IDLE_MS [STATFILE] | grow MIB STEPS ROUNDS | check MIB ROUNDS | touch MIB FILE | steps MIB STEPS CHILDREN HOLD_MS | noop | flood SOCKET N | hold SOCKET N FRAMEFILE | files DIR N | deep DIR N | mq NAME");
    std::process::exit(2);
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize) -> T {
    args.get(i)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| usage())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("spin") => wl_spin(&args),
        Some("calibrate") => wl_calibrate(&args),
        Some("burn") => wl_burn(&args),
        Some("spin-forever") => loop {
            spin(1 << 30);
        },
        Some("idle") => wl_idle(&args),
        Some("threads") => wl_threads(&args),
        Some("par") => wl_par(&args),
        Some("stream") => stream::run(arg(&args, 2), arg(&args, 3), arg(&args, 4)),
        Some("roles") => wl_roles(&args),
        Some("touch") => wl_touch(&args),
        Some("grow") => wl_grow(&args),
        Some("duty") => wl_duty(&args),
        Some("check") => wl_check(&args),
        Some("steps") => wl_steps(&args),
        Some("noop") => {}
        Some("mq") => wl_mq(&args),
        Some(mode @ ("flood" | "hold")) => wl_flood_or_hold(&args, mode),
        Some("files") => wl_files(&args),
        Some("deep") => wl_deep(&args),
        _ => usage(),
    }
}

/// `spin ITERS`: spin, print the seconds it took.
fn wl_spin(args: &[String]) {
    let iters: u64 = arg(args, 2);
    let t = Instant::now();
    let x = spin(iters);
    println!("{:.4}", t.elapsed().as_secs_f64());
    if x == 42 {
        eprintln!("unlikely");
    }
}

/// `calibrate SECONDS`: the spin iterations that take SECONDS of CPU time.
fn wl_calibrate(args: &[String]) {
    let secs: f64 = arg(args, 2);
    let per = match thread_cpu_ns() {
        // Spin in chunks until 0.2 s of CPU time has been spent.
        Some(c0) => {
            let chunk = 5_000_000u64;
            let mut done = 0u64;
            let mut used = 0u64;
            while used < 200_000_000 {
                black_box(spin(chunk));
                done += chunk;
                used = thread_cpu_ns().unwrap_or(c0).saturating_sub(c0);
            }
            used as f64 / 1e9 / done as f64
        }
        None => {
            let probe = 50_000_000u64;
            let t = Instant::now();
            spin(probe);
            t.elapsed().as_secs_f64() / probe as f64
        }
    };
    println!("{}", (secs / per) as u64);
}

/// `burn N`: keep N CPUs busy (this process and N-1 children).
fn wl_burn(args: &[String]) {
    let n: usize = arg(args, 2);
    let me = std::env::current_exe().unwrap_or_else(|_| usage());
    let mut kids = Vec::new();
    for _ in 1..n {
        match std::process::Command::new(&me).arg("spin-forever").spawn() {
            Ok(c) => kids.push(c),
            Err(e) => eprintln!("pjw-wl: cannot start a busy child: {e}"),
        }
    }
    loop {
        spin(1 << 30);
    }
}

/// `idle N`: N sleeping threads, for ever.
fn wl_idle(args: &[String]) {
    let n: usize = arg(args, 2);
    for _ in 0..n {
        std::thread::spawn(|| loop {
            std::thread::sleep(Duration::from_secs(1));
        });
    }
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// `threads N SECONDS [PIDFILE]`: N threads, busy and sleeping in turn, for SECONDS.
fn wl_threads(args: &[String]) {
    let n: usize = arg(args, 2);
    let secs: f64 = arg(args, 3);
    if let Some(p) = args.get(4) {
        let _ = std::fs::write(p, format!("{}\n", std::process::id()));
    }
    let end = Instant::now() + Duration::from_secs_f64(secs);
    // Named `busy-I` and `sleep-I` (their comm), so a test can tell them apart.
    let hs: Vec<_> = (0..n)
        .map(|i| {
            let name = if i % 2 == 0 { "busy" } else { "sleep" };
            std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || {
                    while Instant::now() < end {
                        if i % 2 == 0 {
                            spin(1_000_000);
                        } else {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                })
                .expect("spawn a thread")
        })
        .collect();
    for h in hs {
        let _ = h.join();
    }
}

/// `par N ITERS`: N threads spinning ITERS each, print the seconds it took.
fn wl_par(args: &[String]) {
    let n: usize = arg(args, 2);
    let iters: u64 = arg(args, 3);
    let t = Instant::now();
    let hs: Vec<_> = (0..n)
        .map(|_| std::thread::spawn(move || spin(iters)))
        .collect();
    let x = hs
        .into_iter()
        .map(|h| h.join().unwrap_or(0))
        .fold(0, |a, b| a ^ b);
    println!("{:.4}", t.elapsed().as_secs_f64());
    if x == 42 {
        eprintln!("unlikely");
    }
}

/// `roles N DIR`: N threads whose files in DIR say whether each is busy, until DIR/stop.
fn wl_roles(args: &[String]) {
    let n: usize = arg(args, 2);
    let dir = std::path::PathBuf::from(args.get(3).unwrap_or_else(|| usage()));
    let hs: Vec<_> = (0..n)
        .map(|i| {
            let dir = dir.clone();
            std::thread::spawn(move || {
                // SAFETY: gettid has no preconditions.
                let tid = unsafe { libc::gettid() };
                let tmp = dir.join(format!(".tid-{i}"));
                let _ = std::fs::write(&tmp, format!("{tid}\n"));
                let _ = std::fs::rename(&tmp, dir.join(format!("tid-{i}")));
                let (busy, stop) = (dir.join(format!("busy-{i}")), dir.join("stop"));
                let mut n = 0u32;
                loop {
                    if busy.exists() {
                        // About 10 ms of spinning between looks at the files.
                        let t = Instant::now();
                        while t.elapsed() < Duration::from_millis(10) {
                            spin(10_000);
                        }
                    } else {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    // Every 8th round, a look at the stop file.
                    n += 1;
                    if n == 8 {
                        n = 0;
                        if stop.exists() {
                            break;
                        }
                    }
                }
            })
        })
        .collect();
    for h in hs {
        let _ = h.join();
    }
}

/// `touch MIB FILE`: touch MIB of memory, say so in FILE, hold it.
fn wl_touch(args: &[String]) {
    let mib: usize = arg(args, 2);
    let file = args.get(3).unwrap_or_else(|| usage());
    let mut mem = vec![0u8; mib << 20];
    for i in (0..mem.len()).step_by(4096) {
        mem[i] = 1;
    }
    black_box(&mut mem);
    if let Err(e) = std::fs::write(file, "touched\n") {
        eprintln!("pjw-wl: cannot write {file}: {e}");
        std::process::exit(1);
    }
    loop {
        std::thread::sleep(Duration::from_secs(3600));
        black_box(&mem);
    }
}

/// `grow MIB STEPS ROUNDS`: grow to MIB in STEPS, then walk it ROUNDS times.
fn wl_grow(args: &[String]) {
    let mib: usize = arg(args, 2);
    let steps: usize = arg(args, 3);
    let rounds: usize = arg(args, 4);
    let total = mib << 20;
    let mut mem: Vec<u8> = Vec::new();
    for s in 1..=steps.max(1) {
        mem.resize(total / steps.max(1) * s, 0);
        for i in (0..mem.len()).step_by(PAGE) {
            mem[i] = 0;
        }
        black_box(&mut mem);
        std::thread::sleep(Duration::from_millis(200));
    }
    mem.resize(total, 0);
    let mut sum: u64 = 0;
    for r in 0..rounds {
        for (p, i) in (0..mem.len()).step_by(PAGE).enumerate() {
            mem[i] = mem[i].wrapping_add((r + p) as u8);
            sum = sum.wrapping_add(mem[i] as u64);
        }
        black_box(&mut mem);
    }
    println!("{sum}");
}

/// `duty CYCLES ITERS IDLE_MS [STATFILE]`: spin and sleep in turn; CPU and wait times to STATFILE.
fn wl_duty(args: &[String]) {
    let cycles: u64 = arg(args, 2);
    let iters: u64 = arg(args, 3);
    let idle: u64 = arg(args, 4);
    let t = Instant::now();
    for _ in 0..cycles {
        black_box(spin(iters));
        std::thread::sleep(Duration::from_millis(idle));
    }
    println!("{:.4}", t.elapsed().as_secs_f64());
    if let Some(f) = args.get(5) {
        let st = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
        let v: Vec<f64> = st
            .split_whitespace()
            .filter_map(|x| x.parse::<f64>().ok())
            .collect();
        let (cpu, wait) = (
            v.first().copied().unwrap_or(0.0),
            v.get(1).copied().unwrap_or(0.0),
        );
        if let Err(e) = std::fs::write(f, format!("{:.4} {:.4}\n", cpu / 1e9, wait / 1e9)) {
            eprintln!("pjw-wl: cannot write {f}: {e}");
        }
    }
}

/// `check MIB ROUNDS`: the sum `grow` prints, computed without the memory.
fn wl_check(args: &[String]) {
    let mib: usize = arg(args, 2);
    let rounds: usize = arg(args, 3);
    let mut sum: u64 = 0;
    for p in 0..(mib << 20) / PAGE {
        let mut v: u8 = 0;
        for r in 0..rounds {
            v = v.wrapping_add((r + p) as u8);
            sum = sum.wrapping_add(v as u64);
        }
    }
    println!("{sum}");
}

/// `steps MIB STEPS CHILDREN HOLD_MS`: memory and children started in steps.
fn wl_steps(args: &[String]) {
    let mib: usize = arg(args, 2);
    let steps: usize = arg::<usize>(args, 3).max(1);
    let children: usize = arg(args, 4);
    let hold: u64 = arg(args, 5);
    let me = std::env::current_exe().unwrap_or_else(|_| usage());
    let mut blocks: Vec<Vec<u8>> = Vec::new();
    let mut started = 0;
    for s in 1..=steps {
        let mut b = vec![0u8; (mib << 20) / steps];
        for i in (0..b.len()).step_by(PAGE) {
            b[i] = 1;
        }
        blocks.push(black_box(b));
        // This step's share of the children, one at a time.
        let upto = children * s / steps;
        while started < upto {
            match std::process::Command::new(&me).arg("noop").status() {
                Ok(st) if st.success() => {}
                Ok(st) => eprintln!("pjw-wl: child failed: {st}"),
                Err(e) => eprintln!("pjw-wl: cannot start a child: {e}"),
            }
            started += 1;
        }
        std::thread::sleep(Duration::from_millis(hold));
    }
    black_box(&blocks);
}

/// `mq NAME`: make the POSIX message queue /NAME and leave it behind (the IPC scrub's tests).
fn wl_mq(args: &[String]) {
    let name: String = arg(args, 2);
    let Ok(c) = std::ffi::CString::new(format!("/{name}")) else {
        usage()
    };
    // SAFETY: a valid C string; O_CREAT takes a mode and a null attribute pointer
    // (the system's defaults).
    let q = unsafe {
        libc::mq_open(
            c.as_ptr(),
            libc::O_CREAT | libc::O_RDWR,
            0o600 as libc::mode_t,
            std::ptr::null_mut::<libc::mq_attr>(),
        )
    };
    if q == -1 {
        eprintln!(
            "pjw-wl: mq_open /{name}: {}",
            std::io::Error::last_os_error()
        );
        std::process::exit(1);
    }
    // SAFETY: q is the descriptor mq_open returned.
    unsafe { libc::mq_close(q) };
}

/// `flood SOCKET N` / `hold SOCKET N FRAMEFILE`: open N connections (sending FRAMEFILE on each with `hold`), then count those still open once stdin closes.
fn wl_flood_or_hold(args: &[String], mode: &str) {
    use std::io::Read;
    let sock: String = arg(args, 2);
    let n: usize = arg(args, 3);
    let frame = match mode {
        "hold" => std::fs::read(arg::<String>(args, 4)).unwrap_or_else(|_| usage()),
        _ => Vec::new(),
    };
    raise_nofile();
    let mut held: Vec<Conn> = Vec::new();
    let mut failed = 0;
    let began = Instant::now();
    for _ in 0..n {
        // A TCP flood stops opening after 10 s: what a capped endpoint takes that
        // slowly, it takes as it should.
        if sock.starts_with("tcp:") && began.elapsed() > Duration::from_secs(10) {
            break;
        }
        // A TCP listener whose backlog is full drops the SYN: give up on it after 1 s
        // instead of the kernel's two minutes of retries.
        let c = match sock.strip_prefix("tcp:") {
            Some(addr) => addr
                .parse::<std::net::SocketAddr>()
                .map_err(std::io::Error::other)
                .and_then(|a| std::net::TcpStream::connect_timeout(&a, Duration::from_secs(1)))
                .map(Conn::Tcp),
            None => std::os::unix::net::UnixStream::connect(&sock).map(Conn::Unix),
        };
        match c {
            Ok(mut c) => {
                if !frame.is_empty() && c.write_all(&frame).is_err() {
                    break;
                }
                failed = 0;
                held.push(c)
            }
            // A TCP connect that timed out may find room in the backlog later: ten
            // in a row end the flood.
            Err(_) if sock.starts_with("tcp:") && failed < 9 => failed += 1,
            Err(_) => break,
        }
    }
    println!("opened {}", held.len());
    let _ = std::io::stdout().flush();
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    // A connection the daemon closed reads EOF (or its one error frame, then EOF);
    // one with an unread answer still open reads data, then would block.
    let alive = held
        .iter_mut()
        .filter_map(|s| {
            s.set_nonblocking();
            let mut b = [0u8; 65536];
            loop {
                match s.read(&mut b) {
                    Ok(0) => return None,
                    Ok(_) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Some(()),
                    Err(_) => return None,
                }
            }
        })
        .count();
    println!("alive {alive}");
}

/// `files DIR N`: make N empty files in DIR.
fn wl_files(args: &[String]) {
    let dir: String = arg(args, 2);
    let n: usize = arg(args, 3);
    let dir = std::path::Path::new(&dir);
    let mut made = 0;
    for i in 0..n {
        if std::fs::File::create(dir.join(format!("f{i}"))).is_err() {
            break;
        }
        made += 1;
    }
    println!("made {made}");
}

/// `deep DIR N`: a chain of N nested directories below DIR.
fn wl_deep(args: &[String]) {
    // A chain of N nested directories `d/d/d/…` below DIR, made by relative steps (no
    // path grows past PATH_MAX): a tree no recursive walk survives.
    let dir: String = arg(args, 2);
    let n: usize = arg(args, 3);
    if std::env::set_current_dir(&dir).is_err() {
        eprintln!("pjw-wl deep: cannot enter {dir}");
        std::process::exit(1);
    }
    let mut made = 0;
    for _ in 0..n {
        if std::fs::create_dir("d").is_err() || std::env::set_current_dir("d").is_err() {
            break;
        }
        made += 1;
    }
    println!("made {made}");
}

/// A connection `flood` and `hold` keep open: to a Unix socket or a TCP port.
enum Conn {
    Unix(std::os::unix::net::UnixStream),
    Tcp(std::net::TcpStream),
}

impl Conn {
    fn set_nonblocking(&self) {
        let _ = match self {
            Conn::Unix(s) => s.set_nonblocking(true),
            Conn::Tcp(s) => s.set_nonblocking(true),
        };
    }
}

impl std::io::Read for Conn {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Unix(s) => s.read(b),
            Conn::Tcp(s) => s.read(b),
        }
    }
}

impl std::io::Write for Conn {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Unix(s) => s.write(b),
            Conn::Tcp(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// CPU time this thread has run, in ns (`/proc/thread-self/schedstat`, first field).
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Bytes between two writes that touch a new page.
const PAGE: usize = 4096;
