//! The reshape tests (one binary): kernel-made reshapes finished by raidkit, every kind of
//! reshape raidkit starts, crashes at random moments, client IO during a reshape, and
//! reverting.

mod built;
mod common;
mod crash;
mod kernel;
mod kinds;
mod online;
mod stale;
