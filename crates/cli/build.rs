//! Link options (docs/decisions.md (cj)): the launch front, `pjw`, is linked as a
//! position-dependent executable, so the loader applies no relative relocations at its start
//! (each `pjw run` is one). `pjw-full`, which is also the root daemon, stays position-independent
//! (ASLR for the code that serves every local user). A static build (the VM tier's crt-static)
//! is left as rustc makes it.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux");
    let features = std::env::var("CARGO_CFG_TARGET_FEATURE").unwrap_or_default();
    if linux && !features.split(',').any(|f| f == "crt-static") {
        println!("cargo:rustc-link-arg-bin=pjw=-no-pie");
    }
}
