//! The catalog: which trees exist, their ids, files and page formats.
//!
//! A small JSON file, `CATALOG`, replaced atomically (written to
//! `CATALOG.tmp`, synced, renamed, directory synced) when a tree is
//! created. Tree creation is rare, so the catalog is not in the log: it is
//! durable before `create_tree` starts formatting the tree, and a tree whose
//! file is still empty at open is formatted then (see `Db::open`).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use barracuda_btree::SplitPolicy;
use barracuda_codec::BlockSize;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::options::{Compression, TreeOptions};

/// The catalog file's name in the database directory.
pub const CATALOG_FILE_NAME: &str = "CATALOG";

/// Version of the catalog format; a different one is refused.
const CATALOG_FORMAT_VERSION: u32 = 1;

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
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Catalog {
    format_version: u32,
    pub trees: Vec<TreeEntry>,
}

impl Catalog {
    /// Reads the catalog of `dir`; an absent file is an empty catalog.
    pub(crate) fn load(dir: &Path) -> Result<Catalog> {
        let path = dir.join(CATALOG_FILE_NAME);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Catalog {
                    format_version: CATALOG_FORMAT_VERSION,
                    trees: Vec::new(),
                });
            }
            Err(e) => {
                return Err(directory_error(
                    dir,
                    format!("cannot read {CATALOG_FILE_NAME}: {e}"),
                ));
            }
        };
        let catalog: Catalog = serde_json::from_slice(&bytes)
            .map_err(|e| directory_error(dir, format!("{CATALOG_FILE_NAME} is damaged: {e}")))?;
        if catalog.format_version != CATALOG_FORMAT_VERSION {
            return Err(directory_error(
                dir,
                format!(
                    "{CATALOG_FILE_NAME} has format version {}, this build reads {CATALOG_FORMAT_VERSION}",
                    catalog.format_version
                ),
            ));
        }
        Ok(catalog)
    }

    /// Writes the catalog atomically and durably.
    pub(crate) fn store(&self, dir: &Path) -> Result<()> {
        let tmp = dir.join(format!("{CATALOG_FILE_NAME}.tmp"));
        let path = dir.join(CATALOG_FILE_NAME);
        let io = |what: &str, path: &PathBuf, e: std::io::Error| {
            directory_error(dir, format!("{what} {}: {e}", path.display()))
        };
        let mut catalog = self.clone();
        catalog.format_version = CATALOG_FORMAT_VERSION;
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
            .map_err(|e| io("cannot sync", &dir.to_path_buf(), e))
    }

    /// The next free tree id.
    pub(crate) fn next_id(&self) -> Result<u16> {
        let max = self.trees.iter().map(|t| t.id).max().unwrap_or(0);
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
