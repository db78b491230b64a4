//! The raidkit engine (work in progress).
