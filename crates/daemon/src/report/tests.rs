//! Report access, filters and the paged local report.

use super::*;
use crate::engine::Cred;

#[test]
fn validation() {
    assert!(validate(&ReportQuery::default()).is_ok());
    for s in pjw_proto::StateFilter::ALL {
        let q = ReportQuery {
            state: Some(s),
            ..Default::default()
        };
        assert!(validate(&q).is_ok(), "{s}");
    }
    // An unknown state cannot be built: the request carrying one is refused as it is decoded.
    let e = pjw_proto::decode_request(br#"{"v":1,"req":{"type":"report","state":"done"}}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown state \"done\""), "{e}");
    let q = ReportQuery {
        limit: Some(0),
        ..Default::default()
    };
    assert!(validate(&q).is_err());
}

#[test]
fn root_sees_all_others_only_their_own() {
    let root = Cred {
        pid: 1,
        uid: 0,
        gid: 0,
    };
    let user = Cred {
        pid: 1,
        uid: 4242,
        gid: 4242,
    };
    let q = ReportQuery::default();
    assert_eq!(access(&root, false, None, None, &q), Ok(Access::All));
    assert_eq!(access(&user, false, None, None, &q), Ok(Access::Uid(4242)));
    // In the admin group (resolved before, see crate::users).
    assert_eq!(access(&user, true, Some("4242"), None, &q), Ok(Access::All));
    assert_eq!(
        access(&user, false, Some("4243"), None, &q),
        Ok(Access::Uid(4242))
    );
    let other = ReportQuery {
        user: Some("root".into()),
        ..Default::default()
    };
    let e = access(&user, false, Some("4243"), Some(0), &other)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("only your own") && e.contains("group 4243"),
        "{e}"
    );
    let own = ReportQuery {
        user: Some("4242".into()),
        ..Default::default()
    };
    assert_eq!(
        access(&user, false, None, None, &own),
        Ok(Access::Uid(4242))
    );
}
