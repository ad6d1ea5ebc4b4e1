//! The socket layer's tests: limits, report turns, frames.

use super::*;

/// Issue 25, N7: a user holding cluster-store reports open (a frame read every 29 s)
/// holds one slot at most; other users still get the rest, and root its own.
#[tokio::test(flavor = "current_thread")]
async fn one_users_central_reports_leave_slots_for_others_and_root() {
    let slots = ReportSlots::default();
    let held = slots.central(1000).await;
    assert_eq!(held.len(), 2);
    // The same user's second waits; another user's and root's go at once.
    let again = tokio::time::timeout(Duration::from_millis(50), slots.central(1000)).await;
    assert!(
        again.is_err(),
        "a second central report of the same user got a slot"
    );
    let other = tokio::time::timeout(Duration::from_millis(50), slots.central(1001)).await;
    assert!(other.is_ok_and(|p| p.len() == 2));
    let mut users = Vec::new();
    for uid in [1002, 1003] {
        users.push(slots.central(uid).await);
    }
    let root = tokio::time::timeout(Duration::from_millis(50), slots.central(0)).await;
    assert!(root.is_ok_and(|p| p.len() == 1), "root waited behind users");
    drop(held);
    let again = tokio::time::timeout(Duration::from_millis(50), slots.central(1000)).await;
    assert!(again.is_ok(), "the user's slot did not come back");
}

#[test]
fn a_user_over_the_limit_is_refused_root_never_and_slots_come_back() {
    let open = Arc::new(Mutex::new(Open::default()));
    let limits = ConnLimits {
        per_user: 2,
        non_root_total: 3,
    };
    let a1 = take_slot(&open, 1000, limits).unwrap();
    let a2 = take_slot(&open, 1000, limits).unwrap();
    assert!(take_slot(&open, 1000, limits)
        .unwrap_err()
        .contains("max_connections_per_user"));
    let b1 = take_slot(&open, 1001, limits).unwrap();
    // All users together are at their total: another user is refused too.
    assert!(take_slot(&open, 1002, limits)
        .unwrap_err()
        .contains("no connection left"));
    // Root is never counted nor refused.
    for _ in 0..10 {
        assert!(take_slot(&open, 0, limits).unwrap().is_none());
    }
    drop(a1);
    let a3 = take_slot(&open, 1000, limits).unwrap();
    drop((a2, a3, b1));
    let o = open.lock().unwrap();
    assert!(o.by_uid.is_empty() && o.total == 0, "{o:?}");
}

#[test]
fn limits_leave_most_descriptors_to_the_daemon() {
    let l = ConnLimits::new(256, 1 << 20);
    assert_eq!(l.non_root_total, 1 << 18);
    assert_eq!(ConnLimits::new(256, 1024).non_root_total, 256);
}
