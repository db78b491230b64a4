//! Superblock writes flush every member at once (issue 17): a metadata update waits for
//! one flush's latency, not one per member — and still returns only once every member's
//! flush has completed.

use raidkit_engine::dev::io::{
    set_member_timeout, AsyncDev, AsyncIo, AsyncKind, Started, Submission,
};
use raidkit_engine::{assemble, create, AssembleOptions, BlockDev, FileDev};
use raidkit_layout::Level;
use raidkit_testkit::arrays::{create_options, member_files};
use raidkit_testkit::hooked::{members, Hooked, Hooks};
use raidkit_testkit::tempdir::TempDir;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const MEMBERS: usize = 3;

/// Flushes held back, across the members, while `gate` is on.
#[derive(Default)]
struct Gate {
    on: AtomicBool,
    held: Mutex<Vec<AsyncIo>>,
    /// The most flushes that were in flight at once.
    most: AtomicUsize,
}

/// A member file whose IOs are asynchronous: reads and writes are done at once; while the
/// gate is on, a flush completes only when every member's flush is in flight.
struct Together {
    inner: Arc<dyn BlockDev>,
    gate: Arc<Gate>,
}

impl Hooks for Together {
    fn submission<'a>(&'a self, _inner: &'a dyn BlockDev) -> Submission<'a> {
        Submission::Async(self)
    }
}

impl AsyncDev for Together {
    fn start(&self, io: AsyncIo) -> Started {
        let mut r = Ok(());
        match io.kind {
            AsyncKind::Read(_) => {
                io.with_read_buf(|b| r = self.inner.read_at(b, io.offset));
            }
            AsyncKind::Write(_) => {
                io.with_write_data(|b| r = self.inner.write_at(b, io.offset));
            }
            AsyncKind::Flush => {
                if !self.gate.on.load(Ordering::SeqCst) {
                    return Started::Done(self.inner.flush(), None);
                }
                let mut held = self.gate.held.lock().unwrap();
                held.push(io);
                self.gate.most.fetch_max(held.len(), Ordering::SeqCst);
                if held.len() == MEMBERS {
                    for io in held.drain(..) {
                        io.complete(Ok(()));
                    }
                }
                return Started::Pending;
            }
        }
        Started::Done(r, None)
    }
}

#[test]
fn a_superblock_update_flushes_every_member_at_once() {
    // A flush held back alone would miss this deadline (and its member would be failed).
    set_member_timeout(Some(Duration::from_secs(2)));
    let dir = TempDir::new("rk-sbflush").unwrap();
    let files = member_files(dir.path(), MEMBERS);
    let mut o = create_options(Level::Raid5, &files);
    o.create_size = Some(8 << 20);
    o.assume_clean = true;
    create(&o, &mut |_, _| {}).unwrap().stop().unwrap();
    let gate = Arc::new(Gate::default());
    let devs: Vec<Arc<Hooked<Together>>> = files
        .iter()
        .map(|p| {
            let inner: Arc<dyn BlockDev> = Arc::new(FileDev::open(p, true).unwrap());
            let hooks = Together {
                inner: inner.clone(),
                gate: gate.clone(),
            };
            Arc::new(Hooked::over(inner, hooks))
        })
        .collect();
    let opts = AssembleOptions {
        writable: true,
        ..Default::default()
    };
    let arr = assemble(members(&devs), &opts).unwrap();
    let events = arr.events();
    gate.on.store(true, Ordering::SeqCst);
    // The first write marks the array dirty: a superblock update on every member.
    arr.write(0, &[5; 4096]).unwrap();
    gate.on.store(false, Ordering::SeqCst);
    assert_eq!(gate.most.load(Ordering::SeqCst), MEMBERS);
    assert_eq!(arr.events(), events + 1);
    let states: Vec<String> = arr.members().into_iter().map(|m| m.state).collect();
    assert_eq!(states, vec!["in_sync"; MEMBERS]);
    let mut back = vec![0u8; 4096];
    arr.read(0, &mut back).unwrap();
    assert_eq!(back, vec![5; 4096]);
    arr.stop().unwrap();
}
