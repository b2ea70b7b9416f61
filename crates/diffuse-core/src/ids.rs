//! Identifier newtypes. Drivers map user-facing names (task ids, URIs, host names) to these.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id {
    ($(#[$doc:meta])* $name:ident($inner:ty), $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub struct $name(pub $inner);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

id!(
    /// A task, unique for the life of a dispatcher (or a simulation).
    TaskId(u64), "t"
);
id!(
    /// A compute node: one cache (the paper's *store*) and some slots (the paper's *executors*).
    NodeId(u32), "n"
);
id!(
    /// A data object: one file or S3 object of persistent storage, or an intermediate object.
    ObjectId(u64), "o"
);
id!(
    /// A name the driver gives nodes (a worker's name, interned): placement hints name one.
    /// Several nodes may carry the same name; a node may carry none.
    NodeName(u32), "name"
);
id!(
    /// A rack: nodes behind one switch (MixApart's rack-local tier). The driver interns names.
    RackId(u32), "rack"
);
id!(
    /// A job: a group of tasks submitted together (the unit of FIFO/Fair sharing).
    JobId(u32), "j"
);
