//! NBD server: arbitrary bytes as a client's side of the conversation (handshake, then
//! transmission) never panic, hang or allocate beyond the limits; the server always
//! opens with its greeting.
//!
//! The first byte chooses the setting: bit 0 a read-only export, bit 1 four workers
//! (else one), bit 2 prepends a valid handshake (client flags, STRUCTURED_REPLY when
//! bit 3 is set, GO "disk") so that the rest of the input is transmission requests.
#![no_main]

use libfuzzer_sys::fuzz_target;
use raidkit_nbd::{fuzzing, proto, Backend, Export, MemBackend, ServerConfig};
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    let (&setting, rest) = data.split_first().unwrap_or((&0, &[]));
    let mem: Arc<dyn Backend> =
        Arc::new(MemBackend::new(1 << 20, setting & 1 != 0).with_block_sizes(512, 4096, 1 << 20));
    let mut cfg = ServerConfig::new(vec![Export {
        name: "disk".into(),
        description: "fuzz".into(),
        backend: mem,
    }]);
    cfg.workers = if setting & 2 != 0 { 4 } else { 1 };
    let mut input = Vec::with_capacity(rest.len() + 64);
    if setting & 4 != 0 {
        input.extend_from_slice(&3u32.to_be_bytes());
        if setting & 8 != 0 {
            input.extend(proto::option_request(proto::OPT_STRUCTURED_REPLY, &[]));
        }
        input.extend(proto::option_request(
            proto::OPT_GO,
            &proto::go_data(b"disk", &[proto::INFO_BLOCK_SIZE]),
        ));
    }
    input.extend_from_slice(rest);
    let out = fuzzing::serve_bytes(cfg, &input);
    assert_eq!(&out[..16], b"NBDMAGICIHAVEOPT");
});
