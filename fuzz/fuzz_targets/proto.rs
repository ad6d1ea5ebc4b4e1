//! The daemon's socket protocol, fed what any local user can send (and what a fake daemon
//! could answer). Input: raw bytes, used three ways.
//!
//! Properties:
//! 1. `read_frame` over the bytes (as one stream, and again one byte per read) never panics and
//!    never allocates more than `MAX_FRAME` bytes at once, whatever length the first 4 bytes
//!    announce (a frame announcing 4 GB is refused before anything is read); a frame it returns
//!    is exactly the announced length, at most `MAX_FRAME`. The daemon's async `read_frame`
//!    (crates/daemon/src/server.rs) is the same algorithm over tokio.
//! 2. `decode_request` never panics; a request it accepts re-encodes (`encode_request`) to a
//!    payload that decodes to an equal request.
//! 3. `decode_response` never panics; a response it accepts re-encodes to a payload that
//!    decodes again (equality is not required: `f64` text may move by one ulp).
#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Cursor, Read};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use libfuzzer_sys::fuzz_target;
use pjw_proto::{
    decode_request, decode_response, encode_request, encode_response, read_frame, MAX_FRAME,
};

/// The system allocator, recording the largest single allocation while `WATCH` is on.
struct Watch;
static WATCH: AtomicBool = AtomicBool::new(false);
static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to `System`; only two atomics are touched besides.
unsafe impl GlobalAlloc for Watch {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if WATCH.load(Ordering::Relaxed) {
            LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        }
        // SAFETY: the caller's contract for `alloc` is passed on as it is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if WATCH.load(Ordering::Relaxed) {
            LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        }
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if WATCH.load(Ordering::Relaxed) {
            LARGEST.fetch_max(new_size, Ordering::Relaxed);
        }
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Watch = Watch;

/// A reader that hands out one byte per call (a slow or hostile peer).
struct Trickle<'a>(&'a [u8]);
impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match (self.0.split_first(), buf.is_empty()) {
            (Some((b, rest)), false) => {
                buf[0] = *b;
                self.0 = rest;
                Ok(1)
            }
            _ => Ok(0),
        }
    }
}

fn frames<R: Read>(mut r: R, data: &[u8]) {
    let announced = data
        .get(..4)
        .map(|l| u32::from_be_bytes([l[0], l[1], l[2], l[3]]) as usize);
    LARGEST.store(0, Ordering::Relaxed);
    WATCH.store(true, Ordering::Relaxed);
    let got = read_frame(&mut r);
    WATCH.store(false, Ordering::Relaxed);
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(
        largest <= MAX_FRAME,
        "read_frame allocated {largest} bytes at once (limit {MAX_FRAME})"
    );
    if let Ok(Some(frame)) = got {
        assert!(frame.len() <= MAX_FRAME);
        assert_eq!(
            Some(frame.len()),
            announced,
            "frame length is not the announced one"
        );
        assert_eq!(&frame[..], &data[4..4 + frame.len()]);
    }
}

fuzz_target!(|data: &[u8]| {
    frames(Cursor::new(data), data);
    frames(Trickle(data), data);

    if let Ok(req) = decode_request(data) {
        let again = encode_request(&req);
        match decode_request(&again) {
            Ok(back) => assert_eq!(back, req, "request changed on a round trip"),
            Err(e) => panic!("re-encoded request does not decode: {e}"),
        }
    }
    if let Ok(resp) = decode_response(data) {
        let again = encode_response(&resp);
        if let Err(e) = decode_response(&again) {
            panic!("re-encoded response does not decode: {e}");
        }
    }
});
