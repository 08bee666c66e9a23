//! Closing a database, cleanly ([`super::Db::close`]) or as a crash would
//! ([`super::Db::halt`]).

use std::sync::atomic::Ordering;

use super::DbInner;
use crate::error::{Error, Result};

impl DbInner {
    pub(super) fn halt(&self) {
        self.fail(&Error::Closed);
        let _ = self.shutdown();
    }

    pub(super) fn shutdown(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        *self.stop.lock() = true;
        self.wake.notify_all();
        if let Some(handle) = self.background.lock().take() {
            let _ = handle.join();
        }
        // A read-only database writes nothing, at close neither.
        let failed = self.failure.lock().is_some() || self.options.is_read_only();
        let result = if failed {
            // Memory may hold changes the log does not: write nothing more.
            Ok(())
        } else {
            // The last checkpoint starts an empty segment and deletes the
            // others: a closed database keeps no log.
            self.checkpoint()
        };
        self.wal.stop_log_writer();
        if let Some(handle) = self.log_writer.lock().take() {
            let _ = handle.join();
        }
        for tree in self.trees.read().iter() {
            tree.load().cleaner.lock().take();
        }
        // A closed database keeps no zeros past its pages either (the data
        // files hold some ahead of their pages: `barracuda_pool::FileService`).
        let result = if failed {
            result
        } else {
            result.and_then(|()| {
                self.trees
                    .read()
                    .iter()
                    .try_for_each(|tree| tree.load().pool().trim_file().map_err(Error::from))
            })
        };
        self.lock.lock().take();
        result
    }
}
