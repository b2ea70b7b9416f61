//! Numbers on the command line that must be positive: a plain one, and a duration in seconds
//! (shared by `sim` and the DAD options).

/// A finite number greater than zero.
pub fn positive_f64(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("'{s}' is not a number"))?;
    if !v.is_finite() {
        Err(format!("'{s}' must be a finite number"))
    } else if v > 0.0 {
        Ok(v)
    } else {
        Err(format!("'{s}' must be greater than zero"))
    }
}

/// A duration in seconds: positive and at most 10^9 s (about 31 years).
pub fn positive_seconds(s: &str) -> Result<f64, String> {
    let v = positive_f64(s)?;
    if v <= 1e9 {
        Ok(v)
    } else {
        Err(format!("'{s}' seconds is more than 1e9 (about 31 years)"))
    }
}
