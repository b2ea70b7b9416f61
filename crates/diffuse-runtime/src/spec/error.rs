//! What is wrong with a task file: [`SpecError`] names the line, the field and the fault.

use std::fmt;

/// A malformed task: where, which field, what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    /// 1-based line (JSON Lines) or element (array) number; 0 when the error is about the whole
    /// text (an empty file).
    pub line: usize,
    /// The field, as a path (`inputs[0]`), or `.` for the whole object.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            return write!(f, "{}", self.message);
        }
        write!(
            f,
            "line {}: field '{}': {}",
            self.line, self.field, self.message
        )
    }
}

impl std::error::Error for SpecError {}
