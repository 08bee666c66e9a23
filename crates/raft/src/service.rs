//! The replicated key-value service.
