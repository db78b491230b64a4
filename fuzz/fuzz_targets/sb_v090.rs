//! 0.90 superblock: parsing never panics; whatever parses round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use raidkit_format::v090::SuperblockV090;

fuzz_target!(|data: &[u8]| {
    let strict = SuperblockV090::parse(data);
    let _ = SuperblockV090::checksum(data);
    if let Ok((sb, ok)) = SuperblockV090::parse_lenient(data) {
        assert_eq!(strict.is_ok(), ok);
        let back = SuperblockV090::parse(&sb.encode()).expect("re-encoded superblock must parse");
        assert_eq!(back, sb);
        let mut u = sb.clone();
        u.set_uuid(sb.uuid());
        assert_eq!(u, sb);
        u.set_uuid_mdadm(sb.uuid_mdadm());
        assert_eq!(u, sb);
        let _ = sb.resync_offset();
    } else {
        assert!(strict.is_err());
    }
});
