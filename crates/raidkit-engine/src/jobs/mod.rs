//! Work over a whole running array, beyond client IO: redundancy passes, recovery, hot
//! replace, adding or removing the bitmap, member management, removing the bad-block log.

pub mod bbl_removal;
pub(crate) mod copy;
pub mod grow;
pub mod members;
pub mod pieces;
pub(crate) mod pipeline;
pub(crate) mod re_add;
pub mod rebuild;
pub mod replace;
pub mod reshape;
pub(crate) mod returning;
pub(crate) mod stripe_run;
pub mod sync;
