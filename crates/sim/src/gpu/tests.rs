use super::*;

#[test]
fn trace_is_deterministic_and_mixes_gpu_sizes() {
    let a = trace(5, 1000, 32, 8, 0.9);
    assert_eq!(a, trace(5, 1000, 32, 8, 0.9));
    assert_ne!(a, trace(6, 1000, 32, 8, 0.9));
    assert!(a.windows(2).all(|w| w[0].submit <= w[1].submit));
    let count = |g| a.iter().filter(|j| j.gpus == g).count();
    assert!((400..600).contains(&count(0)), "{} cpu-only", count(0));
    assert!(count(1) > count(2) && count(2) > count(4) && count(4) > 30);
    assert!(a
        .iter()
        .all(|j| j.cpus >= 1 && j.cpus <= 32 && (j.gpus == 0 || j.cpus <= 4 * j.gpus)));
    // No GPUs: CPU-only jobs.
    assert!(trace(5, 100, 32, 0, 0.9).iter().all(|j| j.gpus == 0));
    // 4-GPU jobs are clamped to the machine.
    assert!(trace(5, 100, 8, 2, 0.9).iter().all(|j| j.gpus <= 2));
}
