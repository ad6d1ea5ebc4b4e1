//! Shared by the targets (included with `#[path]`, not a crate of its own).

/// Split a fuzz input into at most `n` parts at the ASCII record separator 0x1E: one input
/// carries several texts (an environment, a job file, a host name). Missing parts are `None`.
#[allow(dead_code)]
pub fn parts(data: &[u8], n: usize) -> Vec<Option<String>> {
    let mut out: Vec<Option<String>> = data
        .splitn(n, |b| *b == 0x1e)
        .map(|p| Some(String::from_utf8_lossy(p).into_owned()))
        .collect();
    out.resize(n, None);
    out
}
