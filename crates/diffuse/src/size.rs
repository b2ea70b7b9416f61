//! Byte sizes on the command line (the runtime's parser, which task files use too).

pub use diffuse_runtime::size::{format_size, parse_size};
