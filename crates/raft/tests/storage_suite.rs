//! openraft's storage test suite against the Barracuda storage.

use barracuda_raft::{LogStore, NodeId, StateMachine, TypeConfig};
use openraft::StorageError;
use openraft::testing::{StoreBuilder, Suite};

/// Each test gets a fresh database in its own temporary directory, removed
/// when the test drops the guard.
struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError<NodeId>> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (log, sm) = barracuda_raft::open(dir.path()).expect("open the storage");
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite() {
    Suite::test_all(Builder).expect("the storage suite passes");
}
