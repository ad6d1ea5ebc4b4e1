//! `pjw-wl`: the project's own workloads.
//!
//! - `spin ITERS` — a CPU-bound integer loop; prints its wall time in seconds.
//! - `calibrate SECONDS` — prints the ITERS that make `spin` take about SECONDS here.
//! - `burn N` — N busy processes (itself and N-1 children) until killed: a noisy neighbour.
//! - `threads N SECONDS [PIDFILE]` — N threads, half busy and half sleeping, for SECONDS;
//!   writes its pid to PIDFILE first.
//! - `spin-forever` — one busy loop until killed (what `burn` starts).

use std::hint::black_box;
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

fn usage() -> ! {
    eprintln!("usage: pjw-wl spin ITERS | calibrate SECONDS | burn N | threads N SECONDS [PIDFILE] | spin-forever");
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
        Some("spin") => {
            let iters: u64 = arg(&args, 2);
            let t = Instant::now();
            let x = spin(iters);
            println!("{:.4}", t.elapsed().as_secs_f64());
            if x == 42 {
                eprintln!("unlikely");
            }
        }
        Some("calibrate") => {
            let secs: f64 = arg(&args, 2);
            let probe = 50_000_000u64;
            let t = Instant::now();
            spin(probe);
            let per = t.elapsed().as_secs_f64() / probe as f64;
            println!("{}", (secs / per) as u64);
        }
        Some("burn") => {
            let n: usize = arg(&args, 2);
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
        Some("spin-forever") => loop {
            spin(1 << 30);
        },
        Some("threads") => {
            let n: usize = arg(&args, 2);
            let secs: f64 = arg(&args, 3);
            if let Some(p) = args.get(4) {
                let _ = std::fs::write(p, format!("{}\n", std::process::id()));
            }
            let end = Instant::now() + Duration::from_secs_f64(secs);
            let hs: Vec<_> = (0..n)
                .map(|i| {
                    std::thread::spawn(move || {
                        while Instant::now() < end {
                            if i % 2 == 0 {
                                spin(1_000_000);
                            } else {
                                std::thread::sleep(Duration::from_millis(20));
                            }
                        }
                    })
                })
                .collect();
            for h in hs {
                let _ = h.join();
            }
        }
        _ => usage(),
    }
}
