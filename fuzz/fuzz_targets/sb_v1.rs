//! v1.x superblock: parsing never panics; whatever parses round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use raidkit_format::v1::SuperblockV1;

fuzz_target!(|data: &[u8]| {
    let strict = SuperblockV1::parse(data);
    let _ = SuperblockV1::checksum(data);
    if let Ok((sb, ok)) = SuperblockV1::parse_lenient(data) {
        assert_eq!(strict.is_ok(), ok);
        let enc = sb.encode();
        assert_eq!(enc.len(), 4096);
        let back = SuperblockV1::parse(&enc).expect("re-encoded superblock must parse");
        assert_eq!(back, sb);
        let _ = (sb.own_role(), sb.minor(), sb.name(), sb.write_len());
        if ok {
            // A valid input re-encodes to the same checksummed bytes.
            let n = 256 + 2 * sb.max_dev as usize;
            assert_eq!(&enc[..n], &data[..n]);
        }
    } else {
        assert!(strict.is_err());
    }
});
