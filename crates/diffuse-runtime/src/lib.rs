//! # diffuse-runtime: the live dispatcher and workers
//!
//! The live driver of the scheduling core (`diffuse-core`): the same decisions as the simulator,
//! carried out with real processes, files and sockets.
//!
//! | module | what it holds |
//! |---|---|
//! | [`dispatcher`] | `diffuse dispatcher`: the scheduler thread driving the core, the HTTP API, worker sessions, metrics and dashboard |
//! | [`emulator`] | `diffuse emulate`: many workers in one process speaking the real protocol, tasks on timers (for measuring a dispatcher at scale) |
//! | [`worker`] | `diffuse worker`: runs tasks as processes, keeps a cache directory, serves it to peers |
//! | [`reuse`] | results reused by content: a task's identity, kept results, the result index |
//! | [`run`] | `diffuse run`: the embedded default, a dispatcher in-process and local worker processes |
//! | [`run_caches`] | the caches `diffuse run`'s local workers keep between runs, each claimed by `flock` |
//! | [`demo`] | `diffuse demo`: a generated dataset and workload run with FA and with GCC |
//! | [`spec`] | task files (JSON Lines / JSON array): parsing and validation |
//! | [`proto`] | dispatcher <-> worker messages (JSON over WebSocket) |
//! | [`storage`] | persistent storage via `object_store`: file, S3, HTTP; source versions |
//! | [`storage_emulator`] | a throttled stand-in for shared storage: a `file://` tree served at a fixed aggregate bandwidth |
//! | [`journal`] | the dispatcher's durable journal (embedded SQLite) |
//! | [`cache_dir`] | a worker's on-disk cache: quota, eviction, verification |
//! | [`uri`] | input and output URIs: schemes, canonical form, file paths |
//! | [`provisioner`] | the elastic pool: workers from local processes, Slurm or commands |
//! | [`server`], [`tls`] | HTTP serving with connection limits; TLS (rustls) for servers and clients |
//! | [`auth`] | bearer tokens: how every server checks the `Authorization` header |
//! | [`placeholder`] | `{inputs[i]}`/`{outputs[i]}` in commands: checked, expanded, shell-quoted |
//! | [`size`] | byte sizes on the command line (`2GB`, `512MiB`) |

pub mod auth;
pub mod cache_dir;
pub mod demo;
pub mod dispatcher;
pub mod emulator;
pub mod journal;
pub mod placeholder;
pub mod proto;
pub mod provisioner;
pub mod reuse;
pub mod run;
pub mod run_caches;
pub mod server;
pub mod size;
pub mod spec;
pub mod storage;
pub mod storage_emulator;
pub mod tls;
pub mod uri;
pub mod worker;
