//! `stream N MIB PASSES`: N threads, each allocating its own MIB MiB buffer, writing every page
//! of it first (first touch: the kernel puts a page on the NUMA node of the CPU that first
//! writes it), then streaming over it PASSES times (read, modify, write every word). The NUMA
//! bind bench's workload (bench/scenarios/bind-numa.sh).
//!
//! Each thread watches its own placement, cheaply and from the inside: `getcpu` (the node of the
//! CPU it runs on) after every MiB streamed, and `move_pages` with no target nodes (which only
//! reports the node each page is on) over a sample of its pages after the first touch and at
//! the end. Its pages' node is the node most sampled pages are on.
//!
//! Output, stdout, one line: `WALL REMOTE_END CHANGES REMOTE_PCT PAGES_MOVED` — the wall time
//! until the last thread finished (s); how many threads ended on a CPU of another node than
//! their pages; node changes of the threads' CPUs, summed; the share of the samples at which a
//! thread ran on another node than its pages (%); how many threads' pages ended on another node
//! than where the first touch put them (the kernel's NUMA balancing moves pages). Where the
//! kernel cannot say (no NUMA support), the placement fields are `-`. Stderr: one line per
//! thread with the same facts.

use std::hint::black_box;
use std::time::Instant;

/// What one thread saw of its own placement.
struct Placement {
    /// The thread's id (to match the daemon's pins in its log).
    tid: i64,
    /// Node of its CPU when it first touched its pages.
    touch_node: Option<u32>,
    /// Node most of its pages were on after the first touch, and at the end.
    pages_first: Option<u32>,
    pages_end: Option<u32>,
    /// Node of its CPU at the end.
    end_node: Option<u32>,
    /// Samples taken while streaming, those on another node than its pages, node changes.
    samples: u64,
    remote: u64,
    changes: u64,
}

/// The node of the CPU this thread runs on now (getcpu(2)).
fn current_node() -> Option<u32> {
    let (mut cpu, mut node) = (0u32, 0u32);
    // SAFETY: getcpu writes one u32 to each of the two valid pointers; the third argument
    // (a cache, unused since Linux 2.6.24) may be null.
    let r = unsafe {
        libc::syscall(
            libc::SYS_getcpu,
            &mut cpu as *mut u32,
            &mut node as *mut u32,
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    (r == 0).then_some(node)
}

/// The node most of the sampled pages of `buf` are on (move_pages(2) with no target nodes only
/// reports where each page is); None when the kernel cannot say.
fn pages_node(buf: &[u64]) -> Option<u32> {
    const WORDS_PER_PAGE: usize = 4096 / 8;
    let step = (buf.len() / WORDS_PER_PAGE / 512).max(1) * WORDS_PER_PAGE;
    let pages: Vec<*mut libc::c_void> = (0..buf.len())
        .step_by(step)
        .map(|i| buf[i..].as_ptr() as *mut libc::c_void)
        .collect();
    let mut status = vec![0i32; pages.len()];
    // SAFETY: pid 0 is this process; `pages` holds `pages.len()` addresses of this process's
    // own mapped memory; nodes is null (query only), so nothing is moved; `status` has room for
    // one int per page.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0 as libc::c_int,
            pages.len() as libc::c_ulong,
            pages.as_ptr(),
            std::ptr::null::<libc::c_int>(),
            status.as_mut_ptr(),
            0 as libc::c_int,
        )
    };
    if r != 0 {
        return None;
    }
    let mut count: std::collections::BTreeMap<i32, usize> = Default::default();
    for s in status.into_iter().filter(|s| *s >= 0) {
        *count.entry(s).or_default() += 1;
    }
    count
        .into_iter()
        .max_by_key(|(_, c)| *c)
        .map(|(n, _)| n as u32)
}

fn one_thread(mib: usize, passes: u64) -> (u64, Placement) {
    let words = mib << 17;
    let touch_node = current_node();
    // calloc'd: zero pages are mapped on the first write, below, by this thread.
    let mut buf = vec![0u64; words];
    for i in (0..words).step_by(512) {
        buf[i] = i as u64;
    }
    black_box(&mut buf);
    let pages_first = pages_node(&buf);
    // SAFETY: gettid takes no arguments and cannot fail.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) };
    let mut p = Placement {
        tid,
        touch_node,
        pages_first,
        pages_end: None,
        end_node: None,
        samples: 0,
        remote: 0,
        changes: 0,
    };
    let mut last = touch_node;
    let mut sum = 0u64;
    for _ in 0..passes {
        for chunk in buf.chunks_mut(1 << 17) {
            for x in chunk.iter_mut() {
                *x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                sum = sum.wrapping_add(*x);
            }
            black_box(&mut *chunk);
            let node = current_node();
            p.samples += 1;
            if node.is_some() && pages_first.is_some() && node != pages_first {
                p.remote += 1;
            }
            if node != last {
                p.changes += 1;
                last = node;
            }
        }
    }
    p.end_node = current_node();
    p.pages_end = pages_node(&buf);
    (sum, p)
}

fn show(n: Option<u32>) -> String {
    n.map_or("-".to_string(), |n| n.to_string())
}

/// Runs the workload and prints its line (see the module's header).
pub fn run(n: usize, mib: usize, passes: u64) {
    let t = Instant::now();
    let hs: Vec<_> = (0..n)
        .map(|_| std::thread::spawn(move || one_thread(mib, passes)))
        .collect();
    let rs: Vec<(u64, Placement)> = hs.into_iter().filter_map(|h| h.join().ok()).collect();
    let wall = t.elapsed().as_secs_f64();
    let known = rs
        .iter()
        .all(|(_, p)| p.pages_first.is_some() && p.end_node.is_some());
    let (mut remote_end, mut changes, mut samples, mut remote, mut moved) = (0, 0, 0, 0, 0);
    for (i, (_, p)) in rs.iter().enumerate() {
        eprintln!(
            "thread {i} (tid {}): touched on node {}, pages on node {}, ran on another node at {} of {} samples, {} node changes, ended on node {}, pages then on node {}",
            p.tid,
            show(p.touch_node),
            show(p.pages_first),
            p.remote,
            p.samples,
            p.changes,
            show(p.end_node),
            show(p.pages_end)
        );
        remote_end += usize::from(p.end_node != p.pages_end);
        moved += usize::from(p.pages_end != p.pages_first);
        changes += p.changes;
        samples += p.samples;
        remote += p.remote;
    }
    let x = rs.iter().fold(0, |a, (s, _)| a ^ s);
    if known {
        println!(
            "{wall:.4} {remote_end} {changes} {:.1} {moved}",
            remote as f64 * 100.0 / samples.max(1) as f64
        );
    } else {
        println!("{wall:.4} - - - -");
    }
    if x == 42 {
        eprintln!("unlikely");
    }
}
