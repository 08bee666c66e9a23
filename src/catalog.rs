//! The catalog: which trees exist, their ids, files and page formats.
//!
//! A small JSON file, `CATALOG`, replaced atomically (written to
//! `CATALOG.tmp`, synced, renamed, directory synced) when a tree is
//! created or a compaction starts or swaps a tree. Tree creation is rare,
//! so the catalog is not in the log: it is durable before `create_tree`
//! starts formatting the tree, and a tree whose file is still empty at open
//! is formatted then (see `Db::open`), if no checkpoint since its creation
//! says that its file held pages.
//!
//! Since format version 2 the catalog carries a CRC32C of its contents (a
//! damaged catalog is refused, never read as other trees), a generation
//! that grows with every rewrite (each checkpoint records the one it saw,
//! so an older copy of the file is refused), and the ids of the trees
//! whose files the store may delete at open (`pending`: those of a
//! compaction that did not finish). A tree file the catalog neither names
//! nor lists there is never deleted: `Db::open` refuses the directory.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use barracuda_base::BlockSize;
use barracuda_btree::SplitPolicy;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::options::{Compression, TreeOptions};

/// The catalog file's name in the database directory.
pub const CATALOG_FILE_NAME: &str = "CATALOG";

/// Version of the catalog format: 2 adds `checksum`, `generation` and
/// `pending`. Version 1 (no checksum) is still read; others are refused.
const CATALOG_FORMAT_VERSION: u32 = 2;

/// The version without a checksum, still read.
const CATALOG_FORMAT_V1: u32 = 1;

/// One tree.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct TreeEntry {
    /// Its id: the high bits of its page ids in the log.
    pub id: u16,
    /// Its name.
    pub name: String,
    pub page_size_bytes: usize,
    pub compression: Compression,
    pub block_size: BlockSize,
    pub split_policy: SplitPolicy,
}

impl TreeEntry {
    pub(crate) fn options(&self) -> TreeOptions {
        TreeOptions::default()
            .page_size_bytes(self.page_size_bytes)
            .compression(self.compression)
            .block_size(self.block_size)
            .split_policy(self.split_policy)
    }

    /// The tree's data file name.
    pub(crate) fn file_name(&self) -> String {
        format!("tree-{:05}.bdb", self.id)
    }

    /// The tree's doublewrite file name (see `barracuda_pool::FileService`).
    pub(crate) fn doublewrite_file_name(&self) -> String {
        format!("tree-{:05}.dbw", self.id)
    }
}

/// The contents of `CATALOG`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Catalog {
    format_version: u32,
    /// CRC32C of the JSON encoding of the catalog with this field zero.
    #[serde(default)]
    checksum: u32,
    /// Grows by one with every rewrite of the file.
    #[serde(default)]
    pub generation: u64,
    pub trees: Vec<TreeEntry>,
    /// Ids of trees that are not (or no longer) in `trees` and whose files
    /// the store may delete: the new tree of a compaction that may not
    /// have finished, the old tree of one that swapped it out.
    #[serde(default)]
    pub pending: Vec<u16>,
}

impl Default for Catalog {
    fn default() -> Self {
        Catalog {
            format_version: CATALOG_FORMAT_VERSION,
            checksum: 0,
            generation: 0,
            trees: Vec::new(),
            pending: Vec::new(),
        }
    }
}

impl Catalog {
    /// Reads the catalog of `dir`: `None` if the file does not exist, an
    /// error if it cannot be read or is damaged.
    pub(crate) fn load(dir: &Path) -> Result<Option<Catalog>> {
        let path = dir.join(CATALOG_FILE_NAME);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(directory_error(
                    dir,
                    format!("cannot read {CATALOG_FILE_NAME}: {e}"),
                ));
            }
        };
        let damaged = |reason: String| {
            directory_error(
                dir,
                format!("{CATALOG_FILE_NAME} is damaged ({reason}); restore it from a backup"),
            )
        };
        let mut catalog: Catalog =
            serde_json::from_slice(&bytes).map_err(|e| damaged(e.to_string()))?;
        match catalog.format_version {
            CATALOG_FORMAT_V1 => {}
            CATALOG_FORMAT_VERSION => {
                let stored = catalog.checksum;
                let computed = catalog.compute_checksum(dir)?;
                if stored != computed {
                    return Err(damaged(format!(
                        "checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
                    )));
                }
            }
            other => {
                return Err(directory_error(
                    dir,
                    format!(
                        "{CATALOG_FILE_NAME} has format version {other}, this build reads \
                         {CATALOG_FORMAT_V1} and {CATALOG_FORMAT_VERSION}"
                    ),
                ));
            }
        }
        catalog.check_invariants().map_err(damaged)?;
        Ok(Some(catalog))
    }

    /// Whether no tree was ever created in the database: no tree, none
    /// pending, and not rewritten since it was first written.
    pub(crate) fn never_held_a_tree(&self) -> bool {
        self.trees.is_empty() && self.pending.is_empty() && self.generation <= 1
    }

    /// The CRC32C of the catalog's encoding with its checksum zero.
    fn compute_checksum(&mut self, dir: &Path) -> Result<u32> {
        let stored = std::mem::take(&mut self.checksum);
        let bytes = serde_json::to_vec_pretty(&*self)
            .map_err(|e| directory_error(dir, format!("cannot encode the catalog: {e}")));
        self.checksum = stored;
        Ok(crc32c::crc32c(&bytes?))
    }

    /// Ids and names are unique, and no pending id is a tree's.
    pub(crate) fn check_invariants(&self) -> std::result::Result<(), String> {
        let mut ids = std::collections::HashSet::new();
        let mut names = std::collections::HashSet::new();
        for tree in &self.trees {
            if tree.id == 0 || !ids.insert(tree.id) {
                return Err(format!("tree id {} is zero or named twice", tree.id));
            }
            if !names.insert(tree.name.as_str()) {
                return Err(format!("tree name {:?} is named twice", tree.name));
            }
        }
        if let Some(id) = self.pending.iter().find(|id| ids.contains(id)) {
            return Err(format!("tree id {id} is both live and pending deletion"));
        }
        Ok(())
    }

    /// Writes the catalog atomically and durably, as the next generation
    /// (`self.generation` is advanced).
    pub(crate) fn store(&mut self, dir: &Path) -> Result<()> {
        let tmp = dir.join(format!("{CATALOG_FILE_NAME}.tmp"));
        let path = dir.join(CATALOG_FILE_NAME);
        let io = |what: &str, path: &PathBuf, e: std::io::Error| {
            directory_error(dir, format!("{what} {}: {e}", path.display()))
        };
        if let Err(reason) = self.check_invariants() {
            unreachable!("a catalog about to be stored is inconsistent: {reason}");
        }
        let mut catalog = self.clone();
        catalog.format_version = CATALOG_FORMAT_VERSION;
        catalog.generation += 1;
        catalog.checksum = catalog.compute_checksum(dir)?;
        let bytes = serde_json::to_vec_pretty(&catalog)
            .map_err(|e| directory_error(dir, format!("cannot encode the catalog: {e}")))?;
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(|e| io("cannot create", &tmp, e))?;
        file.write_all(&bytes)
            .and_then(|()| file.sync_all())
            .map_err(|e| io("cannot write", &tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| io("cannot rename to", &path, e))?;
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io("cannot sync", &dir.to_path_buf(), e))?;
        *self = catalog;
        Ok(())
    }

    /// The next free tree id (past the pending ones too, whose files may
    /// still exist).
    pub(crate) fn next_id(&self) -> Result<u16> {
        let max = self
            .trees
            .iter()
            .map(|t| t.id)
            .chain(self.pending.iter().copied())
            .max()
            .unwrap_or(0);
        max.checked_add(1).ok_or_else(|| Error::InvalidOptions {
            reason: "no tree ids left (65,535 trees)".into(),
        })
    }
}

pub(crate) fn directory_error(dir: &Path, reason: String) -> Error {
    Error::Directory {
        path: dir.to_path_buf(),
        reason,
    }
}
