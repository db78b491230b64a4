//! The NBD client.
