//! Bringing an array into being: create a new one, or assemble an existing one from its
//! members.

mod agree;
pub mod assemble;
pub mod create;
pub(crate) mod identity;
pub(crate) mod reshaping;
