//! Every answer of the dispatcher's HTTP API, as one type each: the dispatcher serializes
//! them and the `diffuse` client commands deserialize the same types, so that a field renamed
//! or dropped on one side is an error on the other, never a silent 0 (issue 38). The types live
//! with their owners; this module only gathers them.
//!
//! | route | answer |
//! |---|---|
//! | `POST /v1/tasks` | [`Submitted`] |
//! | `GET /v1/tasks` | [`TaskPage`] |
//! | `POST /v1/states` | [`TaskStates`] |
//! | `GET /v1/tasks/{id}` | [`TaskView`] (with `attempts`) |
//! | `POST /v1/tasks/{id}/cancel` | [`CancelAnswer`] |
//! | `GET /v1/batches/{batch}` | [`BatchView`] |
//! | `GET /v1/status` | [`Status`] |
//! | `GET`/`DELETE /v1/results` | [`ResultsView`] |
//! | `GET /v1/workers` | [`WorkerPage`] |
//! | `GET /v1/locate` | [`Located`] |
//! | `GET /v1/jobs/{job}` | [`JobView`] |
//! | `POST /v1/jobs/{job}/cancel` | [`JobCancelled`] |
//! | `GET /v1/objects/{uri}` | [`ObjectView`] |
//! | `PUT /v1/objects/{uri}/placement` | [`Placed`] |
//! | `POST /v1/stage` | [`StageStarted`] |
//! | `GET /v1/stage/{id}` | [`StageView`] |
//! | `PUT /v1/blobs/{sha256}` | [`Stored`] |
//! | any error | `{"error": "..."}` ([`super::ApiError`]) |

pub use super::blob_store::Stored;
pub use super::scheduler::batches::StageView;
pub use super::scheduler::jobs::{JobCancelled, JobView};
pub use super::scheduler::objects::ObjectView;
pub use super::scheduler::results::ResultsView;
pub use super::scheduler::views::{
    AttemptView, BatchView, CancelAnswer, Located, Placed, StageStarted, Status, Submitted,
    TaskPage, TaskStates, TaskView, WorkerPage,
};
pub use crate::journal::{OutcomeState, TaskOutcome};
