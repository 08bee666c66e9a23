//! The crate's error type.

use openraft::{AnyError, ErrorSubject, ErrorVerb, StorageError, StorageIOError};

use crate::NodeId;

/// A result of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong in the storage or the service.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database refused or failed an operation.
    #[error("{context}: {source}")]
    Store {
        /// What the storage was doing.
        context: String,
        /// The database's error.
        #[source]
        source: barracuda::Error,
    },
    /// A stored record could not be decoded or encoded.
    #[error("{context}: {source}")]
    Codec {
        /// Which record.
        context: String,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// A stored record is not what it must be.
    #[error("corrupted storage: {reason}")]
    Corrupted {
        /// What is wrong.
        reason: String,
    },
    /// A file outside the database could not be written.
    #[error("{context}: {source}")]
    Io {
        /// Which file.
        context: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// A blocking storage task panicked or was cancelled.
    #[error("storage task failed: {reason}")]
    Task {
        /// The join error.
        reason: String,
    },
}

impl Error {
    pub(crate) fn store(context: impl Into<String>) -> impl FnOnce(barracuda::Error) -> Error {
        let context = context.into();
        move |source| Error::Store { context, source }
    }

    pub(crate) fn codec(context: impl Into<String>) -> impl FnOnce(serde_json::Error) -> Error {
        let context = context.into();
        move |source| Error::Codec { context, source }
    }

    /// This error as openraft's storage error about `subject`.
    pub(crate) fn into_storage(
        self,
        subject: ErrorSubject<NodeId>,
        verb: ErrorVerb,
    ) -> StorageError<NodeId> {
        StorageError::IO {
            source: StorageIOError::new(subject, verb, AnyError::new(&self)),
        }
    }
}
