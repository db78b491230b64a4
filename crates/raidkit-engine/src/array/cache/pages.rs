//! The stripe cache's page memory: 4 KiB pages carved from 2 MiB anonymous mappings
//! (slabs) and recycled through a bounded free list.
//!
//! One `calloc` per page from a thread's malloc arena cost a `mprotect` (the arena grows
//! its heap a page at a time: 65,689 of them in a 307,200-write run) besides the page's
//! first-touch fault, while the cache grows over its working set. A slab costs one `mmap`.
//!
//! A recycled page keeps the bytes of its last use: the cache reads a page's bytes only
//! where its `valid` bits say (a new page starts with none), so no zeroing is needed.

use crate::locks::lock;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Bytes per page.
const PAGE: usize = super::PAGE;
/// Bytes per slab: one transparent huge page.
const SLAB_BYTES: usize = 2 << 20;
/// Pages per slab.
const SLAB_PAGES: usize = SLAB_BYTES / PAGE;
/// Free pages kept at least, whatever the bound the cache passes.
const MIN_KEPT: usize = 256;

/// One mapping of [`SLAB_BYTES`]; unmapped when its last page is dropped.
struct Slab {
    base: NonNull<u8>,
}

// SAFETY: the mapping is plain memory owned by the slab; the pages carved from it are
// disjoint and each is owned by one `PageBuf`.
unsafe impl Send for Slab {}
// SAFETY: as above; `Slab` itself gives no access to the bytes.
unsafe impl Sync for Slab {}

/// How a slab's memory is faulted in (`RAIDKIT_CACHE_SLAB`, read once; for benchmarks).
/// The three measured alike (BENCHMARKS.md, session 11 `sw3`); 4 KiB pages faulted in
/// when first written are the default: a huge page can make the writer that faults it
/// wait for the kernel to compact memory (`defrag` = `madvise`, the usual setting).
#[derive(Clone, Copy, PartialEq, Eq)]
enum SlabMode {
    /// `thp`: asked for as a transparent huge page (`MADV_HUGEPAGE`): one fault per slab.
    Huge,
    /// `populate`: 4 KiB pages, all faulted in by the `mmap` (`MAP_POPULATE`).
    Populate,
    /// 4 KiB pages, each faulted in when first written.
    Lazy,
}

fn slab_mode() -> SlabMode {
    static MODE: std::sync::OnceLock<SlabMode> = std::sync::OnceLock::new();
    *MODE.get_or_init(|| match std::env::var("RAIDKIT_CACHE_SLAB").as_deref() {
        Ok("populate") => SlabMode::Populate,
        Ok("thp") => SlabMode::Huge,
        _ => SlabMode::Lazy,
    })
}

impl Slab {
    fn map() -> Option<Slab> {
        let mode = slab_mode();
        let populate = if mode == SlabMode::Populate {
            libc::MAP_POPULATE
        } else {
            0
        };
        // SAFETY: an anonymous private mapping at an address the kernel chooses; the
        // result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                SLAB_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | populate,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        if mode == SlabMode::Huge {
            // SAFETY: advice on the mapping just made; failure (no THP) is harmless.
            unsafe { libc::madvise(p, SLAB_BYTES, libc::MADV_HUGEPAGE) };
        }
        NonNull::new(p.cast::<u8>()).map(|base| Slab { base })
    }
}

impl Drop for Slab {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`; no page of it is left (each holds the `Arc`).
        unsafe { libc::munmap(self.base.as_ptr().cast(), SLAB_BYTES) };
    }
}

/// A 4 KiB page of a slab (or, if mapping failed, of the heap), owned alone.
pub(crate) struct PageBuf {
    ptr: NonNull<u8>,
    /// Keeps the mapping alive (None: the page is a heap allocation, freed on drop).
    _slab: Option<Arc<Slab>>,
    /// `ptr` came from `Box::<[u8; PAGE]>::into_raw`.
    heap: bool,
}

// SAFETY: a `PageBuf` is the only owner of its 4 KiB (slab pages are handed out once and
// come back only by moving the `PageBuf`), so it moves and shares like a `Box<[u8]>`.
unsafe impl Send for PageBuf {}
// SAFETY: shared access only reads, through `&self`.
unsafe impl Sync for PageBuf {}

impl PageBuf {
    fn from_heap() -> PageBuf {
        let b: Box<[u8; PAGE]> = Box::new([0u8; PAGE]);
        // A pointer with the whole allocation's provenance, owned by this `PageBuf` until
        // its `Drop` turns it back into the box.
        let ptr = NonNull::from(Box::leak(b)).cast::<u8>();
        PageBuf {
            ptr,
            _slab: None,
            heap: true,
        }
    }

    /// Hand the page's memory back to the kernel (it reads as zeros when touched again).
    fn release_memory(&self) {
        if !self.heap {
            // SAFETY: this page's own 4 KiB of a live mapping (the `Arc` holds it).
            unsafe { libc::madvise(self.ptr.as_ptr().cast(), PAGE, libc::MADV_DONTNEED) };
        }
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        if self.heap {
            // SAFETY: `ptr` is the `Box<[u8; PAGE]>` leaked in `from_heap`, owned by this
            // `PageBuf` alone and freed only here.
            drop(unsafe { Box::from_raw(self.ptr.as_ptr().cast::<[u8; PAGE]>()) });
        }
    }
}

impl std::ops::Deref for PageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: 4 KiB owned by this `PageBuf`, alive while it is (slab `Arc` or box).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), PAGE) }
    }
}

impl std::ops::DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), PAGE) }
    }
}

/// Where pages come from and go back to.
#[derive(Default)]
pub(crate) struct PagePool {
    inner: Mutex<PoolInner>,
    /// Slabs mapped (for tests and reports).
    slabs: AtomicU64,
    /// Pages handed out again from the free list.
    reused: AtomicU64,
}

#[derive(Default)]
struct PoolInner {
    /// Free pages with their memory (at most the bound `put` is given).
    free: Vec<PageBuf>,
    /// Free slab pages whose memory went back to the kernel past that bound: their place
    /// is handed out again before a new slab is carved, so the mappings stay within the
    /// most pages ever out at once (a dropped page would keep its slab mapped for the
    /// slab's other pages and could not be handed out again).
    released: Vec<PageBuf>,
    /// The slab being carved and its next unused page.
    carving: Option<(Arc<Slab>, usize)>,
}

impl PagePool {
    /// A page, its bytes unspecified (a recycled page keeps its last contents).
    pub fn take(&self) -> PageBuf {
        let mut g = lock(&self.inner);
        if let Some(p) = g.free.pop().or_else(|| g.released.pop()) {
            self.reused.fetch_add(1, Ordering::Relaxed);
            return p;
        }
        if g.carving
            .as_ref()
            .is_none_or(|(_, next)| *next == SLAB_PAGES)
        {
            g.carving = Slab::map().map(|s| (Arc::new(s), 0));
            if g.carving.is_some() {
                self.slabs.fetch_add(1, Ordering::Relaxed);
            }
        }
        let Some((slab, next)) = &mut g.carving else {
            return PageBuf::from_heap();
        };
        // SAFETY: page `next` < SLAB_PAGES of the mapping: inside it, and never handed
        // out before (`next` only grows for this slab).
        let ptr = unsafe { NonNull::new_unchecked(slab.base.as_ptr().add(*next * PAGE)) };
        *next += 1;
        PageBuf {
            ptr,
            _slab: Some(Arc::clone(slab)),
            heap: false,
        }
    }

    /// Give pages back; past `keep` free pages (at least [`MIN_KEPT`]) their memory goes
    /// back to the kernel (a slab page's place is kept for reuse, a heap page is freed).
    pub fn put(&self, pages: impl IntoIterator<Item = PageBuf>, keep: usize) {
        let keep = keep.max(MIN_KEPT);
        let mut past: Vec<PageBuf> = Vec::new();
        {
            let mut g = lock(&self.inner);
            for p in pages {
                if g.free.len() < keep {
                    g.free.push(p);
                } else {
                    past.push(p);
                }
            }
        }
        if past.is_empty() {
            return;
        }
        // Outside the lock: `madvise` per page.
        past.retain(|p| !p.heap);
        for p in &past {
            p.release_memory();
        }
        lock(&self.inner).released.extend(past);
    }

    /// Free pages held with their memory.
    #[cfg(test)]
    pub fn free_pages(&self) -> usize {
        lock(&self.inner).free.len()
    }

    /// Free slab pages whose memory went back to the kernel.
    #[cfg(test)]
    pub fn released_pages(&self) -> usize {
        lock(&self.inner).released.len()
    }

    /// Slabs mapped so far.
    #[cfg(test)]
    pub fn slabs(&self) -> u64 {
        self.slabs.load(Ordering::Relaxed)
    }

    /// Pages handed out again so far.
    #[cfg(test)]
    pub fn reused(&self) -> u64 {
        self.reused.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fallback when a slab cannot be mapped: a heap page of 4 KiB, zeroed, all of
    /// it usable, freed when dropped (run under Miri, this checks the pointer's use).
    #[test]
    fn a_heap_page_is_a_whole_zeroed_page() {
        let mut p = PageBuf::from_heap();
        assert_eq!(p.len(), PAGE);
        assert!(p.iter().all(|&b| b == 0));
        p.fill(0x5a);
        p[PAGE - 1] = 1;
        assert!(p[..PAGE - 1].iter().all(|&b| b == 0x5a) && p[PAGE - 1] == 1);
        p.release_memory();
        assert_eq!(
            p[0], 0x5a,
            "a heap page keeps its bytes: only slab pages are given back"
        );
    }

    /// Pages given back are handed out again (no new memory) until the free list is
    /// empty; a slab serves 512 pages.
    #[test]
    fn freed_pages_are_reused_before_new_memory() {
        let pool = PagePool::default();
        let mut a: Vec<PageBuf> = (0..600).map(|_| pool.take()).collect();
        assert_eq!(pool.slabs(), 2);
        for (i, p) in a.iter_mut().enumerate() {
            p.fill(i as u8);
        }
        let addrs: Vec<usize> = a[..10].iter().map(|p| p.as_ptr() as usize).collect();
        pool.put(a.drain(..10), 1000);
        assert_eq!(pool.free_pages(), 10);
        let again: Vec<PageBuf> = (0..10).map(|_| pool.take()).collect();
        let mut got: Vec<usize> = again.iter().map(|p| p.as_ptr() as usize).collect();
        let mut want = addrs;
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want);
        assert_eq!(pool.reused(), 10);
        assert_eq!(pool.slabs(), 2);
        // The other pages kept their bytes: pages do not overlap.
        for (i, p) in a.iter().enumerate() {
            assert!(p.iter().all(|&b| b == (i + 10) as u8), "page {i}");
        }
    }

    /// Past the bound, pages given back keep no memory (it goes back to the kernel), but
    /// their places are handed out again before a new slab is mapped.
    #[test]
    fn the_free_list_is_bounded() {
        let pool = PagePool::default();
        // One slab's pages, all out: any page not from the pool's lists needs a new slab.
        let mut a: Vec<PageBuf> = (0..SLAB_PAGES - 1).map(|_| pool.take()).collect();
        for p in &mut a {
            p.fill(0xaa);
        }
        let keep_alive = pool.take();
        assert_eq!(pool.slabs(), 1);
        pool.put(a, 0);
        assert_eq!(pool.free_pages(), MIN_KEPT);
        let past = SLAB_PAGES - 1 - MIN_KEPT;
        assert_eq!(pool.released_pages(), past);
        let again: Vec<PageBuf> = (0..SLAB_PAGES - 1).map(|_| pool.take()).collect();
        assert_eq!(pool.slabs(), 1, "a new slab while free pages were left");
        let zeroed = again.iter().filter(|p| p.iter().all(|&b| b == 0)).count();
        assert_eq!(
            zeroed, past,
            "the released pages' memory went back to the kernel"
        );
        drop(keep_alive);
    }

    /// Pages freed by eviction are reused, and their old bytes never reach a read: sector
    /// writes to stripes never written before land in recycled pages full of another
    /// stripe's data, and every byte read back is what was written or zero.
    #[test]
    fn a_recycled_page_never_shows_its_old_bytes() {
        let (_dir, arr) =
            crate::array::test_arrays::raid5("rk-recycle", 4, 16 << 20, Some(64 << 10));
        arr.force_stripe_cache_bypass(Some(false));
        arr.configure_stripe_cache(None, Some(32)).unwrap();
        let cache = arr.cache.as_ref().unwrap();
        let half = arr.size_bytes() / 2;
        // Whole 4 KiB pages of 0xee over the first half: the cache fills and evicts.
        for page in 0..half / 4096 {
            if page.is_multiple_of(3) {
                arr.write(page * 4096, &[0xee; 4096]).unwrap();
            }
        }
        let reused_before = cache.pool.reused();
        // One sector in the middle of pages of the second half (zeros on the members).
        for page in (half / 4096..2 * half / 4096).step_by(5) {
            arr.write(page * 4096 + 1536, &[page as u8 | 1; 512])
                .unwrap();
        }
        assert!(
            cache.pool.reused() > reused_before + 100,
            "{} pages reused",
            cache.pool.reused() - reused_before
        );
        let mut buf = vec![0u8; 4096];
        for page in half / 4096..2 * half / 4096 {
            arr.read(page * 4096, &mut buf).unwrap();
            let mut want = [0u8; 4096];
            if (page - half / 4096).is_multiple_of(5) {
                want[1536..2048].fill(page as u8 | 1);
            }
            assert!(buf == want, "page {page}");
        }
    }
}
