//! Following a log file incrementally.
